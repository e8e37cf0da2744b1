//! Whatever arrives, from whoever: the relay core and an endpoint's sections never panic, every datagram they send
//! is a well-formed tng packet, SECTIONs stay within the packet size, and their state stays bounded.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use tng_proto::cc::CcConfig;
use tng_proto::{CcKind, Datagram, Time};
use tng_relay::{EndpointSections, Received, Relay, RelayConfig};
use tng_wire::{pn, Feedback, Flags, Packet, Payload, Section, MAX_PACKET};

const PEERS: [&str; 3] = ["10.0.1.1:5000", "10.0.2.1:4433", "10.0.9.9:666"];

fn peer(index: usize) -> SocketAddr {
    PEERS[index % PEERS.len()].parse().expect("address")
}

/// What arrives: raw bytes, or a well-formed SECTION or SECTION_ACK with arbitrary content (so that the parsers are
/// passed and the state machines reached).
#[derive(Debug, Clone)]
enum Input {
    Raw(Vec<u8>),
    Section { id: u64, number: u32, next_hop: Option<usize>, inner: Vec<u8> },
    SectionAck { id: u64, frames: Vec<u8> },
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Input::Raw),
        (0u64..4, any::<u32>(), proptest::option::of(0usize..3), proptest::collection::vec(any::<u8>(), 24..300))
            .prop_map(|(id, number, next_hop, inner)| Input::Section { id, number, next_hop, inner }),
        (0u64..4, proptest::collection::vec(any::<u8>(), 1..60))
            .prop_map(|(id, frames)| Input::SectionAck { id, frames }),
    ]
}

fn encode(input: &Input) -> Vec<u8> {
    let (id, number, payload) = match input {
        Input::Raw(bytes) => return bytes.clone(),
        Input::Section { id, number, next_hop, inner } => {
            (*id, *number, Payload::Section(Section::new(next_hop.map(peer), inner)))
        }
        Input::SectionAck { id, frames } => (*id, 0, Payload::SectionAck(frames)),
    };
    let packet = Packet {
        flags: Flags::EMPTY,
        channel_id: 0,
        connection_id: id,
        packet_number: pn::truncate(u64::from(number)),
        feedback: Feedback::NEUTRAL,
        payload,
    };
    let mut out = Vec::new();
    // Some generated contents cannot be encoded (a SECTION's inner too long): then the raw attempt stands.
    let _ = packet.encode(&mut out);
    out
}

/// An end-to-end DATA packet of connection `id`, as an endpoint would send it.
fn data_packet(id: u64, sealed: &[u8]) -> Vec<u8> {
    let packet = Packet {
        flags: Flags::EMPTY,
        channel_id: 0,
        connection_id: id,
        packet_number: 0,
        feedback: Feedback::NEUTRAL,
        payload: Payload::Data(sealed),
    };
    let mut out = Vec::new();
    packet.encode(&mut out).expect("a DATA packet this short encodes");
    out
}

fn assert_well_formed(datagram: &[u8]) -> Result<(), TestCaseError> {
    prop_assert!(datagram.len() <= MAX_PACKET, "{} bytes", datagram.len());
    let packet = Packet::parse(datagram);
    prop_assert!(packet.is_ok(), "sent a datagram that does not parse: {packet:?}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn hostile_datagrams_never_break_a_relay_or_an_endpoints_sections(
        inputs in proptest::collection::vec((0usize..3, input(), 0u64..300), 1..60),
    ) {
        let config = RelayConfig {
            toward_server: CcKind::Cubic.into(),
            toward_client: CcKind::Vegas.into(),
            cc: CcConfig::default(),
            queue_limit: 8,
            next_relay: None,
        };
        let mut relay = Relay::new(config);
        let mut sections = EndpointSections::new(CcKind::NewReno, CcConfig::default(), 8);
        sections.route_through(peer(1), peer(2));
        let local = peer(0);
        let mut now = Time::ZERO;
        for (from, input, advance_ms) in inputs {
            now += Duration::from_millis(advance_ms);
            let datagram = encode(&input);
            relay.handle_datagram(now, peer(2), peer(from), &datagram);
            match sections.on_datagram(now, local, peer(from), &datagram) {
                Received::Direct(bytes) => prop_assert_eq!(bytes, &datagram[..]),
                Received::Unwrapped { inner, .. } => prop_assert!(inner.len() < datagram.len()),
                Received::Consumed | Received::Dropped => {}
            }
            // The endpoint sends something to its relayed peer now and then, as a real one would.
            if let Input::Section { id, inner, .. } = &input {
                let payload = data_packet(*id, inner);
                let mut buf = Vec::new();
                let transmit = Datagram { local, remote: peer(1), ecn: None, payload }.write_to(&mut buf);
                prop_assert!(sections.on_transmit(now, transmit, &mut buf).is_none(), "a relayed peer's packets are kept");
                prop_assert!(buf.is_empty(), "kept, not left for the sockets");
            }
            relay.handle_timeout(now);
            sections.handle_timeout(now);
            while let Some(sent) = relay.poll_transmit(now) {
                assert_well_formed(&sent.datagram)?;
            }
            let mut buf = Vec::new();
            while let Some(transmit) = sections.poll_section(now, &mut buf) {
                assert_well_formed(&buf[buf.len() - transmit.size..])?;
            }
        }
        prop_assert!(relay.connections() <= 4, "one per connection id at most: {}", relay.connections());
        prop_assert!(sections.len() <= 3 * 4, "one per peer and connection id at most: {}", sections.len());
    }
}
