//! The relay: per connection, two directions, each an upstream [`SectionReceiver`], a bounded [`SectionQueue`] and a
//! downstream [`SectionSender`]. Sans-IO: datagrams and time in, datagrams out.
//!
//! Everything here is soft state, learned from the SECTIONs themselves: the connection (by `connection_id`), the
//! upstream peer (the address a SECTION naming a next hop came from), the address it sent them to (which the relay
//! answers from) and the downstream peer (that next hop). A restarted relay learns them again from the next SECTION
//! the client sends.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tng_proto::cc::CcConfig;
use tng_proto::Time;
use tng_wire::{parse_frames, pn, Feedback, Flags, Frame, Packet, Payload, Section, MAX_SECTION_INNER};

use crate::queue::{Queued, SectionQueue};
use crate::section_control::SectionControl;
use crate::section_receiver::SectionReceiver;
use crate::section_sender::SectionSender;

/// A connection that carried nothing either way for this long is forgotten (it ended, or moved off the relay); a
/// SECTION naming a next hop would teach it again.
pub const CONNECTION_IDLE: Duration = Duration::from_secs(120);
/// Connections a relay carries at most: any node can open one with a single SECTION, so their state is bounded
/// (a few kilobytes each, queues aside).
pub const MAX_CONNECTIONS: usize = 16_384;

/// The relay's policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayConfig {
    /// What runs the sections the relay sends toward the server (Tng's DSL example: the core, CUBIC; its inter-site
    /// WAN: a fixed rate).
    pub toward_server: SectionControl,
    /// What runs the sections the relay sends toward the client (the last mile, Vegas).
    pub toward_client: SectionControl,
    /// Tunables of both controllers.
    pub cc: CcConfig,
    /// Packets each direction's queue holds at most.
    pub queue_limit: usize,
    /// The relay to send sections toward servers through, each SECTION naming its server as the next hop (a chain
    /// of relays, each section with its controller: Tng's relays at both ends of a WAN); None: straight to servers.
    pub next_relay: Option<SocketAddr>,
}

/// What the relay counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// SECTIONs forwarded downstream.
    pub forwarded: u64,
    /// SECTIONs dropped because their direction's queue was full (not acknowledged upstream).
    pub queue_full: u64,
    /// Datagrams dropped: malformed, not a section, nested, duplicate, for a connection the relay does not know, or
    /// opening one past [`MAX_CONNECTIONS`].
    pub dropped: u64,
}

/// One direction of a relayed connection as it stands: its queue, its downstream section and its counters (what
/// `tng relay --trace` writes, to tell whether the upstream or the downstream section limits a transfer).
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionState {
    /// Packets waiting for the downstream section.
    pub queued: usize,
    /// How long the packet at the head of the queue has waited (zero when none waits).
    pub head_wait: Duration,
    /// The downstream section's congestion controller.
    pub controller: &'static str,
    /// The downstream section's congestion window, bytes.
    pub window: u64,
    /// Bytes the downstream section has in flight.
    pub in_flight: u64,
    /// The downstream section's smoothed RTT, once sampled.
    pub srtt: Option<Duration>,
    /// The downstream section's smallest RTT sample.
    pub min_rtt: Option<Duration>,
    /// SECTIONs received from upstream, queued or dropped.
    pub received: u64,
    /// SECTIONs dropped because the queue was full.
    pub queue_full: u64,
    /// SECTIONs sent downstream.
    pub forwarded: u64,
    /// Downstream SECTIONs declared lost.
    pub lost: u64,
}

/// A relayed connection as it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionState {
    pub connection_id: u64,
    pub toward_server: DirectionState,
    pub toward_client: DirectionState,
}

#[derive(Debug)]
struct Direction {
    receiver: SectionReceiver,
    queue: SectionQueue,
    sender: SectionSender,
    /// SECTION_ACKs sent upstream: their packet numbers.
    acks_sent: u64,
    received: u64,
    queue_full: u64,
    forwarded: u64,
}

impl Direction {
    fn new(control: SectionControl, config: &RelayConfig, now: Time) -> Self {
        Self {
            receiver: SectionReceiver::default(),
            queue: SectionQueue::new(config.queue_limit),
            sender: SectionSender::new(control, &config.cc, now),
            acks_sent: 0,
            received: 0,
            queue_full: 0,
            forwarded: 0,
        }
    }

    fn head_wait(&self, now: Time) -> Duration {
        self.queue.front().map(|head| now.saturating_since(head.arrived)).unwrap_or_default()
    }

    fn state(&self, now: Time) -> DirectionState {
        DirectionState {
            queued: self.queue.len(),
            head_wait: self.head_wait(now),
            controller: self.sender.controller(),
            window: self.sender.window(),
            in_flight: self.sender.bytes_in_flight(),
            srtt: self.sender.srtt(),
            min_rtt: self.sender.min_rtt(),
            received: self.received,
            queue_full: self.queue_full,
            forwarded: self.forwarded,
            lost: self.sender.lost(),
        }
    }

    /// The relay's own feedback, the fields a switch writes: how long the packet at the head of the queue waited.
    fn own_feedback(&self, now: Time) -> Feedback {
        Feedback { queue_level: Feedback::queue_level_for(self.head_wait(now)), rate_hint: Feedback::NEUTRAL.rate_hint }
    }
}

/// A datagram the relay sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayTransmit {
    /// The address to send from: toward a client, the address its SECTIONs were sent to (a relay on the path, whose
    /// socket intercepts SECTIONs addressed to the server, answers as the server); `None` toward a server: the
    /// socket's own address.
    pub source: Option<SocketAddr>,
    pub destination: SocketAddr,
    pub datagram: Vec<u8>,
}

#[derive(Debug)]
struct Relayed {
    client: SocketAddr,
    /// Where the client's SECTIONs arrive: the relay's own address, or, on the path, the server's.
    client_facing: SocketAddr,
    /// The downstream peer: the server, or the next relay toward it.
    server: SocketAddr,
    /// The server, which every SECTION toward it names as next hop: a next relay learns where to go from it, and so
    /// does a relay on the path beyond this one.
    named_server: SocketAddr,
    toward_server: Direction,
    toward_client: Direction,
    /// When a SECTION or SECTION_ACK of the connection last arrived.
    last_active: Time,
}

/// A relay's state: every connection it carries.
#[derive(Debug)]
pub struct Relay {
    config: RelayConfig,
    connections: HashMap<u64, Relayed>,
    stats: RelayStats,
}

impl Relay {
    /// A relay with no state (a fresh start or a restart look the same).
    pub fn new(config: RelayConfig) -> Self {
        Self { config, connections: HashMap::new(), stats: RelayStats::default() }
    }

    /// Counters.
    pub fn stats(&self) -> RelayStats {
        self.stats
    }

    /// Every connection the relay holds, as it stands at `now`, in no particular order.
    pub fn connection_states(&self, now: Time) -> impl Iterator<Item = ConnectionState> + '_ {
        self.connections.iter().map(move |(&connection_id, relayed)| ConnectionState {
            connection_id,
            toward_server: relayed.toward_server.state(now),
            toward_client: relayed.toward_client.state(now),
        })
    }

    /// Packets waiting in the queue toward the server of `connection_id`.
    pub fn queued_toward_server(&self, connection_id: u64) -> usize {
        self.connections.get(&connection_id).map_or(0, |relayed| relayed.toward_server.queue.len())
    }

    /// One datagram arrived from `from`, sent to `local` (the relay's own address, or the server's when the relay
    /// intercepts SECTIONs on the path).
    pub fn handle_datagram(&mut self, now: Time, local: SocketAddr, from: SocketAddr, datagram: &[u8]) {
        if self.dispatch(now, local, from, datagram).is_none() {
            self.stats.dropped += 1;
        }
    }

    fn dispatch(&mut self, now: Time, local: SocketAddr, from: SocketAddr, datagram: &[u8]) -> Option<()> {
        let packet = Packet::parse(datagram).ok()?;
        let id = packet.connection_id;
        match packet.payload {
            Payload::Section(section) => {
                // A section inside a section would let one packet loop through relays; the inner must be end to end.
                if matches!(Packet::parse(section.inner).map(|inner| inner.payload), Ok(Payload::Section(_))) {
                    return None;
                }
                if let Some(server) = section.next_hop() {
                    if !self.connections.contains_key(&id) && self.connections.len() >= MAX_CONNECTIONS {
                        return None;
                    }
                    let config = &self.config;
                    self.connections.entry(id).or_insert_with(|| Relayed {
                        client: from,
                        client_facing: local,
                        server: config.next_relay.unwrap_or(server),
                        named_server: server,
                        toward_server: Direction::new(config.toward_server, config, now),
                        toward_client: Direction::new(config.toward_client, config, now),
                        last_active: now,
                    });
                }
                let relayed = self.connections.get_mut(&id)?;
                relayed.last_active = now;
                let direction = if from == relayed.client {
                    relayed.client_facing = local;
                    &mut relayed.toward_server
                } else if from == relayed.server {
                    &mut relayed.toward_client
                } else {
                    return None;
                };
                let number = direction.receiver.on_section(packet.packet_number, packet.feedback)?;
                direction.received += 1;
                let queued = Queued { upstream_pn: number, arrived: now, inner: section.inner.to_vec() };
                if direction.queue.push(queued).is_err() {
                    direction.queue_full += 1;
                    self.stats.queue_full += 1;
                }
                Some(())
            }
            Payload::SectionAck(frames) => {
                let relayed = self.connections.get_mut(&id)?;
                relayed.last_active = now;
                let direction = if from == relayed.server {
                    &mut relayed.toward_server
                } else if from == relayed.client {
                    relayed.client_facing = local;
                    &mut relayed.toward_client
                } else {
                    return None;
                };
                let (ack, echo) = parse_section_ack(frames)?;
                direction.sender.on_ack(now, &ack, echo);
                Some(())
            }
            _ => None,
        }
    }

    /// The next datagram to send: SECTION_ACKs first (they release the upstream window), then queued packets the
    /// downstream window has room for.
    pub fn poll_transmit(&mut self, now: Time) -> Option<RelayTransmit> {
        for (&id, relayed) in &mut self.connections {
            let Relayed { client, client_facing, server, named_server, toward_server, toward_client, .. } = relayed;
            let (to_client, to_server) = ((Some(*client_facing), *client), (None, *server));
            for (direction, previous, next, named) in [
                (&mut *toward_server, to_client, to_server, Some(*named_server)),
                (toward_client, to_server, to_client, None),
            ] {
                if direction.receiver.ack_due(now) {
                    let own = direction.own_feedback(now);
                    if let Some(frames) = direction.receiver.take_ack(now, own) {
                        let number = direction.acks_sent;
                        direction.acks_sent += 1;
                        let datagram = encode(id, number, Payload::SectionAck(&frames))?;
                        return Some(RelayTransmit { source: previous.0, destination: previous.1, datagram });
                    }
                }
                let fits = direction
                    .queue
                    .front()
                    .is_some_and(|head| direction.sender.can_send(section_len(head.inner.len())));
                if fits {
                    let head = direction.queue.pop()?;
                    let bytes = section_len(head.inner.len());
                    let number = direction.sender.on_sent(now, bytes);
                    direction.receiver.release(now, head.upstream_pn);
                    direction.forwarded += 1;
                    self.stats.forwarded += 1;
                    let datagram = encode(id, number, Payload::Section(Section::new(named, &head.inner)))?;
                    return Some(RelayTransmit { source: next.0, destination: next.1, datagram });
                }
            }
        }
        None
    }

    /// Connections the relay holds.
    pub fn connections(&self) -> usize {
        self.connections.len()
    }

    /// When [`Relay::handle_timeout`] should next run: a SECTION's probe timeout, an idle connection, or a SECTION_ACK
    /// whose delay ran out (the next [`Relay::poll_transmit`] sends it).
    pub fn poll_timeout(&self) -> Option<Time> {
        let sections = self
            .connections
            .values()
            .flat_map(|relayed| [&relayed.toward_server, &relayed.toward_client])
            .flat_map(|direction| [direction.sender.next_timeout(), direction.receiver.ack_deadline()])
            .flatten();
        sections.chain(self.connections.values().map(|relayed| relayed.last_active + CONNECTION_IDLE)).min()
    }

    /// Time passed: forgets idle connections and declares timed-out SECTIONs lost.
    pub fn handle_timeout(&mut self, now: Time) {
        self.connections.retain(|_, relayed| now.saturating_since(relayed.last_active) < CONNECTION_IDLE);
        for relayed in self.connections.values_mut() {
            relayed.toward_server.sender.on_timeout(now);
            relayed.toward_client.sender.on_timeout(now);
        }
    }
}

/// A SECTION's length on the wire for an inner packet of `inner` bytes (what its section's window counts).
pub(crate) fn section_len(inner: usize) -> u64 {
    (tng_wire::HEADER_LEN + tng_wire::SECTION_PREFIX_LEN + inner.min(MAX_SECTION_INNER)) as u64
}

pub(crate) fn encode(connection_id: u64, number: u64, payload: Payload<'_>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    append(&mut out, connection_id, number, payload)?;
    Some(out)
}

/// Appends the relay packet to `out` and returns its length; `None` (nothing appended) if it cannot be encoded.
pub(crate) fn append(out: &mut Vec<u8>, connection_id: u64, number: u64, payload: Payload<'_>) -> Option<usize> {
    let packet = Packet {
        flags: Flags::EMPTY,
        channel_id: 0,
        connection_id,
        packet_number: pn::truncate(number),
        feedback: Feedback::NEUTRAL,
        payload,
    };
    packet.encode(out).ok()?;
    Some(packet.encoded_len())
}

/// The ACK and the echoed feedback of a SECTION_ACK; `None` if it holds another frame, a malformed one, or no ACK.
pub(crate) fn parse_section_ack(frames: &[u8]) -> Option<(tng_wire::AckFrame, Feedback)> {
    let mut ack = None;
    let mut echo = Feedback::NEUTRAL;
    for frame in parse_frames(frames) {
        match frame.ok()? {
            Frame::Ack(frame) => ack = Some(frame),
            Frame::FeedbackEcho { max_queue_level, min_rate_hint } => {
                echo = Feedback { queue_level: max_queue_level, rate_hint: min_rate_hint }
            }
            Frame::Padding(_) => {}
            _ => return None,
        }
    }
    Some((ack?, echo))
}

#[cfg(test)]
mod tests {
    use tng_proto::CcKind;

    use super::*;

    fn config() -> RelayConfig {
        RelayConfig {
            toward_server: CcKind::Cubic.into(),
            toward_client: CcKind::Vegas.into(),
            cc: CcConfig::default(),
            queue_limit: 4,
            next_relay: None,
        }
    }

    /// The relay's own address.
    fn own() -> SocketAddr {
        "10.0.1.254:4477".parse().expect("address")
    }

    /// A client's SECTION of connection `id` naming the server as next hop.
    fn opening(id: u64) -> Vec<u8> {
        numbered(id, 0)
    }

    /// A client's SECTION number `number` of connection `id`, naming the server as next hop.
    fn numbered(id: u64, number: u64) -> Vec<u8> {
        let server: SocketAddr = "10.0.2.1:4433".parse().expect("address");
        let inner = encode(id, number, Payload::Data(&[7; 40])).expect("inner");
        encode(id, number, Payload::Section(Section::new(Some(server), &inner))).expect("section")
    }

    #[test]
    fn connection_states_count_what_each_direction_received_dropped_and_forwarded() {
        let client: SocketAddr = "10.0.1.1:5000".parse().expect("address");
        let mut relay = Relay::new(config());
        for number in 0..6 {
            relay.handle_datagram(Time::ZERO, own(), client, &numbered(9, number));
        }
        let waiting: Vec<ConnectionState> = relay.connection_states(Time::from_millis(3)).collect();
        let [state] = waiting.as_slice() else { panic!("one connection: {waiting:?}") };
        assert_eq!(state.connection_id, 9);
        let toward_server = &state.toward_server;
        assert_eq!((toward_server.received, toward_server.queued, toward_server.queue_full), (6, 4, 2));
        assert_eq!((toward_server.forwarded, toward_server.in_flight), (0, 0));
        assert_eq!(toward_server.head_wait, Duration::from_millis(3));
        assert_eq!(toward_server.controller, "cubic");
        assert_eq!(state.toward_client.controller, "vegas");
        assert_eq!(state.toward_client.received, 0);

        while relay.poll_transmit(Time::from_millis(3)).is_some() {}
        let forwarded = relay.connection_states(Time::from_millis(3)).next().expect("still held").toward_server;
        assert_eq!((forwarded.queued, forwarded.forwarded, forwarded.head_wait), (0, 4, Duration::ZERO));
        let inner_len = encode(9, 0, Payload::Data(&[7; 40])).expect("inner").len();
        assert_eq!(forwarded.in_flight, 4 * section_len(inner_len));
        assert!(forwarded.window >= forwarded.in_flight, "{forwarded:?}");
        assert_eq!((forwarded.srtt, forwarded.min_rtt), (None, None), "nothing acknowledged yet");
    }

    #[test]
    fn an_idle_connection_is_forgotten() {
        let client: SocketAddr = "10.0.1.1:5000".parse().expect("address");
        let mut relay = Relay::new(config());
        relay.handle_datagram(Time::ZERO, own(), client, &opening(1));
        while relay.poll_transmit(Time::ZERO).is_some() {}
        assert_eq!(relay.connections(), 1);
        let deadline = relay.poll_timeout().expect("a timer");
        assert!(deadline <= Time::ZERO + CONNECTION_IDLE, "{deadline:?}");
        relay.handle_timeout(Time::ZERO + CONNECTION_IDLE - Duration::from_secs(1));
        assert_eq!(relay.connections(), 1, "not idle long enough");
        relay.handle_timeout(Time::ZERO + CONNECTION_IDLE);
        assert_eq!(relay.connections(), 0);
        assert_eq!(relay.poll_timeout(), None);
    }

    #[test]
    fn connections_past_the_bound_are_refused_and_counted() {
        let client: SocketAddr = "10.0.1.1:5000".parse().expect("address");
        let mut relay = Relay::new(config());
        for id in 0..MAX_CONNECTIONS as u64 {
            relay.handle_datagram(Time::ZERO, own(), client, &opening(id));
        }
        assert_eq!((relay.connections(), relay.stats().dropped), (MAX_CONNECTIONS, 0));
        relay.handle_datagram(Time::ZERO, own(), client, &opening(u64::MAX));
        assert_eq!((relay.connections(), relay.stats().dropped), (MAX_CONNECTIONS, 1));
        relay.handle_datagram(Time::ZERO, own(), client, &opening(3));
        assert_eq!(relay.stats().dropped, 1, "a known connection still passes");
    }

    /// The SECTION in `datagram` (its next hop and inner packet); panics on anything else.
    fn section_of(datagram: &[u8]) -> (Option<SocketAddr>, Vec<u8>) {
        let packet = Packet::parse(datagram).expect("a packet");
        let Payload::Section(section) = packet.payload else { panic!("not a SECTION: {packet:?}") };
        (section.next_hop(), section.inner.to_vec())
    }

    #[test]
    fn with_a_next_relay_sections_toward_the_server_go_through_it_naming_the_server() {
        let client: SocketAddr = "10.0.1.1:5000".parse().expect("address");
        let server: SocketAddr = "10.0.2.1:4433".parse().expect("address");
        let next: SocketAddr = "10.0.3.1:4477".parse().expect("address");
        let mut relay = Relay::new(RelayConfig { next_relay: Some(next), ..config() });
        relay.handle_datagram(Time::ZERO, own(), client, &opening(1));
        let sent = relay.poll_transmit(Time::ZERO).expect("the section goes on");
        assert_eq!((sent.source, sent.destination), (None, next));
        let (next_hop, inner) = section_of(&sent.datagram);
        assert_eq!(next_hop, Some(server), "the next relay learns the server from it");
        assert_eq!(inner, encode(1, 0, Payload::Data(&[7; 40])).expect("inner"));

        // The way back comes from the next relay and goes to the client, naming no next hop.
        let reply = encode(1, 9, Payload::Data(&[8; 40])).expect("inner");
        relay.handle_datagram(
            Time::ZERO,
            own(),
            next,
            &encode(1, 0, Payload::Section(Section::new(None, &reply))).expect("section"),
        );
        let sent: Vec<RelayTransmit> = std::iter::from_fn(|| relay.poll_transmit(Time::from_millis(50))).collect();
        let back = sent.iter().find(|sent| {
            sent.destination == client
                && matches!(Packet::parse(&sent.datagram).map(|p| p.payload), Ok(Payload::Section(_)))
        });
        let back = back.expect("the reply reached the client");
        assert_eq!(back.source, Some(own()), "from the address the client sent to");
        assert_eq!(section_of(&back.datagram), (None, reply));
        assert_eq!(relay.stats().dropped, 0);
    }

    #[test]
    fn on_the_path_the_relay_answers_the_client_as_the_server_and_names_the_server_onward() {
        // The client addresses its SECTIONs to the server itself; the relay on the path intercepts them.
        let client: SocketAddr = "10.0.1.1:5000".parse().expect("address");
        let server: SocketAddr = "10.0.2.1:4433".parse().expect("address");
        let mut relay = Relay::new(config());
        relay.handle_datagram(Time::ZERO, server, client, &opening(1));
        let onward = relay.poll_transmit(Time::ZERO).expect("the section goes on");
        assert_eq!((onward.source, onward.destination), (None, server));
        assert_eq!(section_of(&onward.datagram).0, Some(server), "a relay further on learns the server too");

        let reply = encode(1, 9, Payload::Data(&[8; 40])).expect("inner");
        let from_server = encode(1, 0, Payload::Section(Section::new(None, &reply))).expect("section");
        relay.handle_datagram(Time::ZERO, own(), server, &from_server);
        let sent: Vec<RelayTransmit> = std::iter::from_fn(|| relay.poll_transmit(Time::from_millis(50))).collect();
        let to_client: Vec<&RelayTransmit> = sent.iter().filter(|sent| sent.destination == client).collect();
        assert!(!to_client.is_empty(), "{sent:?}");
        for sent in to_client {
            assert_eq!(sent.source, Some(server), "the client's section peer is the address it sent to");
        }
        assert_eq!(relay.stats().dropped, 0);
    }
}
