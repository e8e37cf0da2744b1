//! A real tng connection through a relay, on virtual time: a client endpoint and a server endpoint, each behind its
//! [`EndpointSections`], and a [`Relay`] between two links. The client routes the server through the relay (by its
//! address, or on the path: SECTIONs addressed to the server, which the relay intercepts); the server learns the relay
//! from the SECTIONs it receives. The transfer must arrive whole and intact, and the handshake
//! and every packet after it must cross the relay, even when the relay dies mid-transfer and a fresh one takes its
//! place. Whole and intact is also the proof that no section acknowledged anything end to end: a sender never
//! retransmits what its peer's STREAM_ACKs covered, so a byte acknowledged without having arrived would be missing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tng_proto::cc::CcConfig;
use tng_proto::{
    CcKind, ConnectionHandle, Endpoint, EndpointConfig, Event, ReadOutcome, StaticKeypair, StreamId, Time,
};
use tng_relay::{EndpointSections, Relay, RelayConfig};

const CLIENT: &str = "10.0.1.1:5000";
const RELAY: &str = "10.0.1.2:4477";
const SERVER: &str = "10.0.2.1:4433";

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("address")
}

fn relay_config() -> RelayConfig {
    RelayConfig {
        toward_server: CcKind::Cubic.into(),
        toward_client: CcKind::Vegas.into(),
        cc: CcConfig::default(),
        queue_limit: 64,
        next_relay: None,
    }
}

fn sections() -> EndpointSections {
    EndpointSections::new(CcKind::Cubic, CcConfig::default(), 256)
}

/// Whether `datagram` is section traffic (a SECTION or SECTION_ACK) rather than an endpoint's own packet.
fn is_section(datagram: &[u8]) -> bool {
    matches!(
        tng_wire::Packet::parse(datagram).map(|packet| packet.payload),
        Ok(tng_wire::Payload::Section(_) | tng_wire::Payload::SectionAck(_))
    )
}

/// The bytes of the transfer: position-dependent, so a byte in the wrong place shows.
fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// One host: an endpoint behind its sections.
struct Host {
    address: SocketAddr,
    endpoint: Endpoint,
    sections: EndpointSections,
    /// Datagrams the endpoint sent straight to a peer, not through a section.
    direct: u64,
}

impl Host {
    fn receive(&mut self, now: Time, from: SocketAddr, datagram: &[u8]) {
        self.sections.deliver(&mut self.endpoint, now, (self.address, from), None, datagram);
    }

    fn transmit(&mut self, now: Time) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let mut payload = Vec::new();
            let Some(transmit) = self.sections.poll_transmit(&mut self.endpoint, now, &mut payload) else { break };
            if !is_section(&payload) {
                self.direct += 1;
            }
            out.push((transmit.local, transmit.remote, payload));
        }
        out
    }

    fn next_timeout(&mut self) -> Option<Time> {
        [self.endpoint.poll_timeout(), self.sections.poll_timeout()].into_iter().flatten().min()
    }

    fn handle_timeout(&mut self, now: Time) {
        self.endpoint.handle_timeout(now);
        self.sections.handle_timeout(now);
    }
}

/// Where the relay is and how the client reaches it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RelayAt {
    /// The client addresses its SECTIONs to the relay.
    Address,
    /// The client addresses its SECTIONs to the server and the relay, routing between them, intercepts them.
    OnPath,
    /// The client addresses its SECTIONs to the server and nothing intercepts them.
    Absent,
}

/// A datagram on a link.
struct Flight {
    at: Time,
    order: u64,
    from: SocketAddr,
    to: SocketAddr,
    payload: Vec<u8>,
}

struct Network {
    now: Time,
    relay_at: RelayAt,
    client: Host,
    relay: Relay,
    server: Host,
    flights: Vec<Flight>,
    order: u64,
    /// When each directed hop's bottleneck is free again.
    busy: BTreeMap<(SocketAddr, SocketAddr), Time>,
    client_handle: ConnectionHandle,
    stream: Option<StreamId>,
    to_send: Vec<u8>,
    written: usize,
    received: Vec<u8>,
    finished: bool,
}

impl Network {
    fn new(transfer: usize, relay_at: RelayAt) -> Network {
        let mut client = Host {
            address: addr(CLIENT),
            endpoint: Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(1), 11),
            sections: sections(),
            direct: 0,
        };
        let server = Host {
            address: addr(SERVER),
            endpoint: Endpoint::new(EndpointConfig::server(), StaticKeypair::from_seed(2), 12),
            sections: sections(),
            direct: 0,
        };
        let relay = if relay_at == RelayAt::Address { addr(RELAY) } else { addr(SERVER) };
        client.sections.route_through(addr(SERVER), relay);
        let client_handle =
            client.endpoint.connect(Time::ZERO, &[(addr(CLIENT), addr(SERVER))], None).expect("connect");
        Network {
            now: Time::ZERO,
            relay_at,
            client,
            relay: Relay::new(relay_config()),
            server,
            flights: Vec::new(),
            order: 0,
            busy: BTreeMap::new(),
            client_handle,
            stream: None,
            to_send: content(transfer),
            written: 0,
            received: Vec::new(),
            finished: false,
        }
    }

    /// Client to relay: 20 Mbit/s, 10 ms; relay to server: 8 Mbit/s, 25 ms (the slower section is downstream).
    fn put_on_link(&mut self, from: SocketAddr, to: SocketAddr, payload: Vec<u8>) {
        let last_mile = from == addr(CLIENT) || to == addr(CLIENT);
        let (rate, delay) = if last_mile { (2_500_000, 10) } else { (1_000_000, 25) };
        let busy = self.busy.entry((from, to)).or_insert(self.now);
        let start = (*busy).max(self.now);
        let done = start + Duration::from_nanos(payload.len() as u64 * 1_000_000_000 / rate);
        *busy = done;
        self.order += 1;
        self.flights.push(Flight { at: done + Duration::from_millis(delay), order: self.order, from, to, payload });
    }

    fn play_applications(&mut self) {
        let now = self.now;
        while let Some((handle, event)) = self.client.endpoint.poll_event() {
            if handle == self.client_handle && matches!(event, Event::Connected { .. }) {
                let connection = self.client.endpoint.connection(handle).expect("client connection");
                self.stream = Some(connection.open_stream().expect("a stream"));
            }
        }
        if let Some(stream) = self.stream {
            let connection = self.client.endpoint.connection(self.client_handle).expect("client connection");
            while self.written < self.to_send.len() {
                match connection.write(now, stream, &self.to_send[self.written..]) {
                    Ok(n) if n > 0 => self.written += n,
                    _ => break,
                }
            }
            if self.written == self.to_send.len() {
                let _ = connection.finish(stream);
            }
        }
        while let Some((handle, event)) = self.server.endpoint.poll_event() {
            let (Event::StreamOpened(stream) | Event::StreamReadable(stream)) = event else { continue };
            let connection = self.server.endpoint.connection(handle).expect("server connection");
            let mut buffer = vec![0; 64 * 1024];
            loop {
                match connection.read(stream, &mut buffer) {
                    Ok(ReadOutcome::Data(n)) => self.received.extend_from_slice(&buffer[..n]),
                    Ok(ReadOutcome::Finished) => {
                        self.finished = true;
                        break;
                    }
                    _ => break,
                }
            }
        }
    }

    /// Bytes the client holds as acknowledged end to end.
    fn client_acked(&self) -> u64 {
        self.client.endpoint.connection_stats(self.client_handle).map_or(0, |stats| stats.streams.bytes_acked)
    }

    /// One step: everything sends, time advances to the next arrival or timer, which is handled.
    fn step(&mut self) {
        self.play_applications();
        for (from, to, payload) in self.client.transmit(self.now).into_iter().chain(self.server.transmit(self.now)) {
            self.put_on_link(from, to, payload);
        }
        while let Some(sent) = self.relay.poll_transmit(self.now) {
            self.put_on_link(sent.source.unwrap_or(addr(RELAY)), sent.destination, sent.datagram);
        }
        let timers = [self.client.next_timeout(), self.server.next_timeout(), self.relay.poll_timeout()];
        let arrival = self.flights.iter().map(|flight| flight.at).min();
        let next = timers.into_iter().chain([arrival]).flatten().min().expect("something is always pending");
        self.now = self.now.max(next);
        self.flights.sort_by_key(|flight| (flight.at, flight.order));
        let due = self.flights.iter().take_while(|flight| flight.at <= self.now).count();
        for flight in self.flights.drain(..due).collect::<Vec<_>>() {
            let intercepted = self.relay_at == RelayAt::OnPath && flight.from == addr(CLIENT);
            if flight.to == addr(CLIENT) {
                self.client.receive(self.now, flight.from, &flight.payload);
            } else if flight.to == addr(SERVER) && !intercepted {
                self.server.receive(self.now, flight.from, &flight.payload);
            } else {
                self.relay.handle_datagram(self.now, flight.to, flight.from, &flight.payload);
            }
        }
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.relay.handle_timeout(self.now);
        self.play_applications();
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Network) -> bool) -> bool {
        let deadline = self.now + limit;
        while self.now < deadline && !done(self) {
            self.step();
        }
        done(self)
    }
}

/// A 1 MB transfer run to its end, asserted whole and intact.
fn transferred(relay_at: RelayAt) -> Network {
    let mut network = Network::new(1_000_000, relay_at);
    assert!(network.run_until(Duration::from_secs(30), |network| network.finished), "transfer incomplete");
    assert!(network.received == network.to_send, "the server read {} bytes, not the ones sent", network.received.len());
    network
}

#[test]
fn a_transfer_through_a_relay_arrives_whole_and_every_packet_crosses_it() {
    let network = transferred(RelayAt::Address);
    assert_eq!((network.client.direct, network.server.direct), (0, 0), "nothing bypassed the relay");
    let relayed = network.relay.stats();
    assert!(relayed.forwarded > 700, "{relayed:?}");
    let (client, server) = (network.client.sections.stats(), network.server.sections.stats());
    assert_eq!(client.too_large + server.too_large, 0, "the connection capped its datagrams for the relay");
    assert!(client.sent > 700 && server.unwrapped > 700, "{client:?} {server:?}");
    // About 1 MB at 8 Mbit/s downstream: about one second plus the handshake and slow start; far more means the
    // sections stalled.
    assert!(network.now < Time::from_millis(4_000), "took {:?}", network.now);
}

#[test]
fn a_relay_that_dies_mid_transfer_loses_nothing_and_a_fresh_one_carries_the_rest() {
    let mut network = Network::new(1_000_000, RelayAt::Address);
    // A third acknowledged end to end: two thirds of the transfer must still cross a relay (the server's
    // application may read more slowly than its endpoint receives, so what it read says less).
    let a_third = network.to_send.len() as u64 / 3;
    assert!(network.run_until(Duration::from_secs(30), |network| network.client_acked() > a_third));
    // The relay dies: its state and the packets it held are gone, and so is every datagram on its way to it.
    network.relay = Relay::new(relay_config());
    network.flights.retain(|flight| flight.to != addr(RELAY));
    let acked_at_death = network.client_acked();
    assert!(network.run_until(Duration::from_secs(60), |network| network.finished), "transfer incomplete");
    assert!(network.received == network.to_send, "the server read {} bytes, not the ones sent", network.received.len());
    assert!(network.client_acked() > acked_at_death);
    assert!(network.relay.stats().forwarded > 0, "the fresh relay carried the rest");
    assert_eq!((network.client.direct, network.server.direct), (0, 0), "nothing bypassed the relay");
}

#[test]
fn a_relay_on_the_path_intercepts_the_sections_addressed_to_the_server_and_answers_as_the_server() {
    let network = transferred(RelayAt::OnPath);
    assert_eq!((network.client.direct, network.server.direct), (0, 0), "every packet travelled in a SECTION");
    let relayed = network.relay.stats();
    assert!(relayed.forwarded > 700 && relayed.dropped == 0, "{relayed:?}");
    let (client, server) = (network.client.sections.stats(), network.server.sections.stats());
    assert!(
        client.unwrapped > 50 && client.dropped == 0,
        "the client took the relay's SECTIONs as the server's: {client:?}"
    );
    assert!(server.unwrapped > 700, "{server:?}");
    assert!(network.now < Time::from_millis(4_000), "took {:?}", network.now);
}

#[test]
fn without_a_relay_on_the_path_the_server_terminates_the_single_section() {
    let network = transferred(RelayAt::Absent);
    assert_eq!(network.relay.stats().forwarded, 0);
    let (client, server) = (network.client.sections.stats(), network.server.sections.stats());
    assert!(client.sent > 700 && server.unwrapped > 700, "{client:?} {server:?}");
    // Its answers are mostly ACKs, one per ten packets through a section.
    assert!(client.unwrapped > 50 && client.dropped == 0, "the server answered in SECTIONs: {client:?}");
}
