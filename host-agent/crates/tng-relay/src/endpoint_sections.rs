//! An endpoint's ends of its sections: what lets a tng endpoint send and receive through a relay without the
//! endpoint core knowing (wire-format section 10). Sans-IO, it sits between the endpoint and the sockets.
//!
//! Outgoing, a datagram for a peer reached through a relay is wrapped in a SECTION toward the relay (naming the peer
//! as next hop) and numbered by the section's own [`SectionSender`], whose window it waits for in a bounded queue;
//! a full queue drops it, which the end-to-end layer recovers like any loss. Incoming, a SECTION is unwrapped and
//! its inner packet handed on as if it came straight from the peer, and its section packet number is acknowledged
//! at once (an endpoint's queue is its application, which the end-to-end flow control already bounds).
//!
//! A client learns its relays from [`EndpointSections::route_through`]; a server learns them from the SECTIONs it
//! receives and answers through the relay they came from, without a next hop (the relay knows the client). Every
//! section is keyed by relay and connection id, like the relay keys its own.
//!
//! The section's congestion controller is the flow's (Tng section 4.3): the endpoint's channel through the relay
//! is told how many packets the section has room for ([`Endpoint::set_section_room`]) and sends no more, so its own
//! controller does not probe the same queues a second time and the section's queue stays a few packets long.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use tng_proto::cc::CcConfig;
use tng_proto::qlog::SectionMetrics;
use tng_proto::{CcKind, EcnCodepoint, Endpoint, Time, Transmit};
use tng_wire::{Feedback, FlowHeader, Packet, PacketType, Payload, Section, MAX_SECTION_INNER};

use crate::relay::{append, parse_section_ack, section_len};
use crate::section_receiver::SectionReceiver;
use crate::section_sender::SectionSender;

/// A section that carried nothing either way for this long is forgotten (its connection ended or moved off the
/// relay); longer than any idle timeout a connection keeps.
const SECTION_IDLE: Duration = Duration::from_secs(120);

/// Sections a server opens for SECTIONs from relays at most: any node can send one, before the endpoint has
/// checked anything of the packet inside, so their number is bounded (about a kilobyte each).
const MAX_LEARNED_SECTIONS: usize = 16_384;

/// Packets a section lets its endpoint queue beyond what its window has room for: an acknowledgement that opens
/// the window always finds one to send, and the window, kept full, may grow.
const SECTION_HEADROOM: u64 = 4;

/// What became of a received datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Received<'a> {
    /// Not a section packet: the endpoint's, from `remote`, unchanged.
    Direct(&'a [u8]),
    /// The inner packet of a SECTION, for the endpoint as if from `remote` (the peer a client connected to, or the
    /// relay a server answers through), of the connection `connection_id` (whose datagrams must now fit a SECTION).
    Unwrapped { remote: SocketAddr, connection_id: u64, inner: &'a [u8] },
    /// A SECTION_ACK: the section's business, nothing for the endpoint.
    Consumed,
    /// A section packet that does not belong to a known section or does not parse: dropped.
    Dropped,
}

/// What the endpoint sections counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionStats {
    /// SECTIONs sent toward relays.
    pub sent: u64,
    /// SECTIONs received and unwrapped.
    pub unwrapped: u64,
    /// Datagrams for a relay dropped because the section's queue was full.
    pub queue_full: u64,
    /// Datagrams too large to fit a SECTION (an endpoint behind a relay caps its packets at
    /// [`MAX_SECTION_INNER`]).
    pub too_large: u64,
    /// Section packets dropped: malformed, nested, for no known section, or opening one past the bound.
    pub dropped: u64,
}

/// One of an endpoint's sections as it stands (what bounds a connection through a relay; the endpoint's channel only
/// sees the room it is told): its sending end's flow state as the qlog traces it, and what the trace leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct SectionState {
    /// The relay the section goes through.
    pub relay: SocketAddr,
    pub connection_id: u64,
    /// The section's controller, window, flight, RTT and waiting datagrams (`tng:section_updated`).
    pub flow: SectionMetrics,
    /// The section's smallest RTT sample.
    pub min_rtt: Option<Duration>,
    /// SECTIONs declared lost.
    pub lost: u64,
}

/// One section of one connection, at this endpoint.
#[derive(Debug)]
struct SectionEnd {
    /// The peer to name as next hop (a client's section), or `None` (a server answers through the relay).
    next_hop: Option<SocketAddr>,
    /// The local address the section's packets leave from: the endpoint's latest choice.
    local: SocketAddr,
    sender: SectionSender,
    receiver: SectionReceiver,
    waiting: VecDeque<Vec<u8>>,
    acks_sent: u64,
    /// When the section last carried a packet either way.
    last_active: Time,
}

impl SectionEnd {
    /// The sending end's flow state, toward where the endpoint's channels send (the next hop a client names, else
    /// `relay`).
    fn flow(&self, relay: SocketAddr) -> SectionMetrics {
        SectionMetrics {
            remote: self.next_hop.unwrap_or(relay),
            controller: self.sender.controller(),
            cwnd: self.sender.window(),
            bytes_in_flight: self.sender.bytes_in_flight(),
            smoothed_rtt: self.sender.srtt(),
            waiting: self.waiting.len() as u64,
        }
    }
}

/// The sections of an endpoint, by relay and connection id.
#[derive(Debug)]
pub struct EndpointSections {
    cc: CcKind,
    cc_config: CcConfig,
    queue_limit: usize,
    /// Client routes: the peer the endpoint addresses, and the relay its packets go through.
    routes: HashMap<SocketAddr, SocketAddr>,
    sections: HashMap<(SocketAddr, u64), SectionEnd>,
    /// Sections whose room changed since their endpoint channel was last told.
    room_changed: HashSet<(SocketAddr, u64)>,
    stats: SectionStats,
}

impl EndpointSections {
    /// No routes and no sections yet; sections run `cc` and hold at most `queue_limit` packets waiting for their
    /// window.
    pub fn new(cc: CcKind, cc_config: CcConfig, queue_limit: usize) -> Self {
        Self {
            cc,
            cc_config,
            queue_limit: queue_limit.max(1),
            routes: HashMap::new(),
            sections: HashMap::new(),
            room_changed: HashSet::new(),
            stats: SectionStats::default(),
        }
    }

    /// Sends everything addressed to `peer` through `relay`.
    pub fn route_through(&mut self, peer: SocketAddr, relay: SocketAddr) {
        self.routes.insert(peer, relay);
    }

    /// The relay packets for `peer` go through, if any.
    pub fn route(&self, peer: SocketAddr) -> Option<SocketAddr> {
        self.routes.get(&peer).copied()
    }

    /// Counters.
    pub fn stats(&self) -> SectionStats {
        self.stats
    }

    /// A datagram arrived on `local` from `from`.
    pub fn on_datagram<'a>(
        &mut self,
        now: Time,
        local: SocketAddr,
        from: SocketAddr,
        datagram: &'a [u8],
    ) -> Received<'a> {
        // Only the type byte is looked at here: every other packet is the endpoint's to parse.
        let section_type = [PacketType::Section as u8, PacketType::SectionAck as u8];
        if !datagram.get(1).is_some_and(|kind| section_type.contains(kind)) {
            return Received::Direct(datagram);
        }
        let Ok(packet) = Packet::parse(datagram) else {
            self.stats.dropped += 1;
            return Received::Dropped;
        };
        let received = match packet.payload {
            Payload::Section(section) => self.on_section(now, local, from, &packet, section),
            Payload::SectionAck(frames) => {
                let acked = parse_section_ack(frames).and_then(|(ack, echo)| {
                    let key = (from, packet.connection_id);
                    let end = self.sections.get_mut(&key)?;
                    end.sender.on_ack(now, &ack, echo);
                    end.last_active = now;
                    self.room_changed.insert(key);
                    Some(Received::Consumed)
                });
                acked.unwrap_or(Received::Dropped)
            }
            _ => return Received::Direct(datagram),
        };
        match received {
            Received::Dropped => self.stats.dropped += 1,
            Received::Unwrapped { .. } => self.stats.unwrapped += 1,
            Received::Direct(_) | Received::Consumed => {}
        }
        received
    }

    /// Hands a datagram that arrived on `local` from `from` to `endpoint`: as it is, or unwrapped from its SECTION
    /// as if from the peer, with the connection first capped at what fits a SECTION (what the packet makes it send
    /// must fit). Section traffic of its own stays here.
    pub fn deliver(
        &mut self,
        endpoint: &mut Endpoint,
        now: Time,
        (local, from): (SocketAddr, SocketAddr),
        ecn: Option<EcnCodepoint>,
        datagram: &[u8],
    ) {
        match self.on_datagram(now, local, from, datagram) {
            Received::Direct(datagram) => endpoint.handle_datagram(now, local, from, ecn, datagram),
            Received::Unwrapped { remote, connection_id, inner } => {
                endpoint.limit_datagram_size(connection_id, MAX_SECTION_INNER);
                endpoint.handle_datagram(now, local, remote, ecn, inner);
            }
            Received::Consumed | Received::Dropped => {}
        }
    }

    fn on_section<'a>(
        &mut self,
        now: Time,
        local: SocketAddr,
        from: SocketAddr,
        packet: &Packet<'a>,
        section: Section<'a>,
    ) -> Received<'a> {
        if matches!(Packet::parse(section.inner).map(|inner| inner.payload), Ok(Payload::Section(_))) {
            return Received::Dropped;
        }
        let key = (from, packet.connection_id);
        let remote = match self.sections.get(&key) {
            Some(end) => end.next_hop.unwrap_or(from),
            // A client's sections begin with its own first packet; a SECTION from anywhere else opens a server's.
            None if self.routes.values().any(|relay| *relay == from) => return Received::Dropped,
            None if self.sections.len() >= MAX_LEARNED_SECTIONS => return Received::Dropped,
            None => {
                let end = self.new_end(now, None, local);
                self.sections.insert(key, end);
                self.room_changed.insert(key);
                from
            }
        };
        let Some(end) = self.sections.get_mut(&key) else { return Received::Dropped };
        let Some(number) = end.receiver.on_section(packet.packet_number, packet.feedback) else {
            return Received::Dropped;
        };
        end.receiver.release(now, number);
        end.last_active = now;
        Received::Unwrapped { remote, connection_id: packet.connection_id, inner: section.inner }
    }

    fn new_end(&self, now: Time, next_hop: Option<SocketAddr>, local: SocketAddr) -> SectionEnd {
        SectionEnd {
            next_hop,
            local,
            sender: SectionSender::new(self.cc, &self.cc_config, now),
            receiver: SectionReceiver::default(),
            waiting: VecDeque::new(),
            acks_sent: 0,
            last_active: now,
        }
    }

    /// A datagram the endpoint wrote at the end of `buf`: back unchanged if it goes straight to its peer, else taken
    /// out of `buf` and kept for its section (or dropped and counted when the section's queue is full or it cannot
    /// fit a SECTION).
    pub fn on_transmit(&mut self, now: Time, transmit: Transmit, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.routes.is_empty() && self.sections.is_empty() {
            return Some(transmit);
        }
        let start = buf.len() - transmit.size;
        let Ok(header) = FlowHeader::decode(&buf[start..]) else { return Some(transmit) };
        let key = (transmit.remote, header.connection_id);
        let route = match self.routes.get(&transmit.remote) {
            Some(&relay) => Some(((relay, header.connection_id), Some(transmit.remote))),
            None => self.sections.contains_key(&key).then_some((key, None)),
        };
        let Some((key, next_hop)) = route else { return Some(transmit) };
        let payload = buf.split_off(start);
        if payload.len() > MAX_SECTION_INNER {
            self.stats.too_large += 1;
            return None;
        }
        if !self.sections.contains_key(&key) {
            let end = self.new_end(now, next_hop, transmit.local);
            self.sections.insert(key, end);
            self.room_changed.insert(key);
        }
        let end = self.sections.get_mut(&key)?;
        end.local = transmit.local;
        end.last_active = now;
        if end.waiting.len() >= self.queue_limit {
            self.stats.queue_full += 1;
            return None;
        }
        end.waiting.push_back(payload);
        None
    }

    /// Every section as it stands.
    pub fn section_states(&self) -> impl Iterator<Item = SectionState> + '_ {
        self.sections.iter().map(|(&(relay, connection_id), end)| SectionState {
            relay,
            connection_id,
            flow: end.flow(relay),
            min_rtt: end.sender.min_rtt(),
            lost: end.sender.lost(),
        })
    }

    /// The next datagram for the sockets: section traffic first (SECTION_ACKs and waiting packets their section's
    /// window lets go), then the endpoint's own, each kept for its section if it goes through a relay. Before the
    /// endpoint is asked, every section whose room changed tells its channel how many packets it may hand over.
    /// Like [`Endpoint::poll_transmit`], the datagram is appended to `buf`.
    pub fn poll_transmit(&mut self, endpoint: &mut Endpoint, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        loop {
            if let Some(section) = self.poll_section(now, buf) {
                return Some(section);
            }
            self.tell_room(endpoint, now);
            let transmit = endpoint.poll_transmit(now, buf)?;
            if let Some(direct) = self.on_transmit(now, transmit, buf) {
                return Some(direct);
            }
        }
    }

    /// The next section datagram to send, appended to `buf`, without asking the endpoint: SECTION_ACKs first, then
    /// waiting packets their window has room for.
    pub fn poll_section(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        for (&(relay, connection_id), end) in &mut self.sections {
            if end.receiver.ack_due(now) {
                if let Some(frames) = end.receiver.take_ack(now, Feedback::NEUTRAL) {
                    let number = end.acks_sent;
                    end.acks_sent += 1;
                    let size = append(buf, connection_id, number, Payload::SectionAck(&frames))?;
                    return Some(Transmit { local: end.local, remote: relay, ecn: None, size });
                }
            }
            let fits = end.waiting.front().is_some_and(|inner| end.sender.can_send(section_len(inner.len())));
            if fits {
                let inner = end.waiting.pop_front()?;
                let number = end.sender.on_sent(now, section_len(inner.len()));
                self.stats.sent += 1;
                self.room_changed.insert((relay, connection_id));
                let size = append(buf, connection_id, number, Payload::Section(Section::new(end.next_hop, &inner)))?;
                return Some(Transmit { local: end.local, remote: relay, ecn: None, size });
            }
        }
        None
    }

    /// Tells each channel whose section's room changed how many packets it may now hand over, and its trace what the
    /// section holds.
    fn tell_room(&mut self, endpoint: &mut Endpoint, now: Time) {
        for (relay, connection_id) in self.room_changed.drain() {
            let Some(end) = self.sections.get(&(relay, connection_id)) else { continue };
            let window = end.sender.room() / section_len(MAX_SECTION_INNER);
            let waiting = end.waiting.len() as u64;
            let room = (window + SECTION_HEADROOM)
                .saturating_sub(waiting)
                .min((self.queue_limit as u64).saturating_sub(waiting));
            let flow = end.flow(relay);
            endpoint.set_section_room(connection_id, flow.remote, Some(room));
            endpoint.trace_section(now, connection_id, &flow);
        }
    }

    /// When [`EndpointSections::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Time> {
        let timeouts =
            self.sections.values().flat_map(|end| [end.sender.next_timeout(), end.receiver.ack_deadline()]).flatten();
        timeouts.chain(self.sections.values().map(|end| end.last_active + SECTION_IDLE)).min()
    }

    /// Time passed: declares timed-out SECTIONs lost, which frees their window, and forgets idle sections.
    pub fn handle_timeout(&mut self, now: Time) {
        self.sections.retain(|_, end| now.saturating_since(end.last_active) < SECTION_IDLE);
        for (&key, end) in &mut self.sections {
            let lost = end.sender.lost();
            end.sender.on_timeout(now);
            if end.sender.lost() > lost {
                self.room_changed.insert(key);
            }
        }
    }

    /// Sections held: one per relay and connection.
    pub fn len(&self) -> usize {
        self.sections.len()
    }

    /// Whether no section is held.
    pub fn is_empty(&self) -> bool {
        self.sections.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use tng_wire::{pn, Flags};

    use crate::section_receiver::MAX_ACK_DELAY;

    use super::*;
    use tng_proto::Datagram;

    const ID: u64 = 0x77;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("address")
    }

    fn packet(number: u64, payload: Payload<'_>) -> Vec<u8> {
        let packet = Packet {
            flags: Flags::EMPTY,
            channel_id: 0,
            connection_id: ID,
            packet_number: pn::truncate(number),
            feedback: Feedback::NEUTRAL,
            payload,
        };
        let mut out = Vec::new();
        packet.encode(&mut out).expect("valid packet");
        out
    }

    fn inner(seq: u8) -> Vec<u8> {
        packet(u64::from(seq), Payload::Data(&[seq; 100]))
    }

    /// Hands `payload` to `sections` as the endpoint's latest datagram, written after another one in the buffer;
    /// what comes back for the sockets (None: kept or dropped). The datagram before it always stays.
    fn hand_over(sections: &mut EndpointSections, remote: SocketAddr, payload: Vec<u8>) -> Option<Datagram> {
        let earlier = vec![0xee; 3];
        let mut buf = earlier.clone();
        let written = Datagram { local: addr("10.0.0.1:1000"), remote, ecn: None, payload }.write_to(&mut buf);
        let direct = sections.on_transmit(Time::ZERO, written, &mut buf).map(|t| Datagram::split_from(t, &mut buf));
        assert_eq!(buf, earlier, "only the latest datagram is taken out");
        direct
    }

    fn next_section(sections: &mut EndpointSections, now: Time) -> Option<Datagram> {
        let mut buf = Vec::new();
        let transmit = sections.poll_section(now, &mut buf)?;
        assert_eq!(transmit.size, buf.len());
        Some(Datagram::split_from(transmit, &mut buf))
    }

    fn sections(queue_limit: usize) -> EndpointSections {
        EndpointSections::new(CcKind::NewReno, CcConfig::default(), queue_limit)
    }

    /// The SECTION in `datagram`: its next hop and inner packet.
    fn opened(datagram: &[u8]) -> (Option<SocketAddr>, Vec<u8>) {
        match Packet::parse(datagram).expect("well-formed").payload {
            Payload::Section(section) => (section.next_hop(), section.inner.to_vec()),
            other => panic!("not a SECTION: {other:?}"),
        }
    }

    #[test]
    fn a_client_wraps_what_it_sends_its_peer_and_unwraps_what_comes_back() {
        let (server, relay) = (addr("10.0.2.1:4433"), addr("10.0.1.2:4477"));
        let mut client = sections(8);
        client.route_through(server, relay);
        let other = addr("10.0.3.1:4433");
        assert!(hand_over(&mut client, other, inner(9)).is_some(), "other peers go straight");
        assert_eq!(hand_over(&mut client, server, inner(1)), None);
        let sent = next_section(&mut client, Time::ZERO).expect("a SECTION");
        assert_eq!(sent.remote, relay);
        assert_eq!(opened(&sent.payload), (Some(server), inner(1)));
        let answer = packet(0, Payload::Section(Section::new(None, &inner(2))));
        let expected = inner(2);
        assert_eq!(
            client.on_datagram(Time::ZERO, sent.local, relay, &answer),
            Received::Unwrapped { remote: server, connection_id: ID, inner: &expected }
        );
        assert_eq!(client.on_datagram(Time::ZERO, sent.local, relay, &inner(3)), Received::Direct(&inner(3)[..]));
        let mut unknown = answer.clone();
        unknown[4..12].copy_from_slice(&0x78u64.to_be_bytes());
        assert_eq!(client.on_datagram(Time::ZERO, sent.local, relay, &unknown), Received::Dropped, "no such section");
    }

    #[test]
    fn a_server_answers_through_the_relay_a_section_came_from_and_acknowledges_it() {
        let relay = addr("10.0.1.2:4477");
        let mut server = sections(8);
        let hello = packet(0, Payload::Section(Section::new(Some(addr("10.0.2.1:4433")), &inner(1))));
        let local = addr("10.0.2.1:4433");
        assert!(
            matches!(server.on_datagram(Time::ZERO, local, relay, &hello), Received::Unwrapped { remote, .. } if remote == relay)
        );
        assert_eq!(hand_over(&mut server, relay, inner(2)), None);
        // One SECTION waits up to MAX_ACK_DELAY for a second before it is acknowledged.
        let section = next_section(&mut server, Time::ZERO).expect("the answer");
        assert_eq!(server.poll_timeout(), Some(Time::ZERO + MAX_ACK_DELAY));
        let ack = next_section(&mut server, Time::ZERO + MAX_ACK_DELAY).expect("then the SECTION_ACK");
        assert!(matches!(Packet::parse(&ack.payload).expect("parses").payload, Payload::SectionAck(_)));
        assert_eq!(
            (section.remote, opened(&section.payload)),
            (relay, (None, inner(2))),
            "no next hop: the relay knows"
        );
        assert_eq!(next_section(&mut server, Time::ZERO), None);
    }

    #[test]
    fn nested_sections_and_unknown_acks_are_dropped_and_counted() {
        let relay = addr("10.0.1.2:4477");
        let local = addr("10.0.2.1:4433");
        let mut server = sections(8);
        let nested = packet(
            0,
            Payload::Section(Section::new(None, &packet(0, Payload::Section(Section::new(None, &inner(1)))))),
        );
        assert_eq!(server.on_datagram(Time::ZERO, local, relay, &nested), Received::Dropped);
        let stray_ack = packet(0, Payload::SectionAck(&[0]));
        assert_eq!(server.on_datagram(Time::ZERO, local, relay, &stray_ack), Received::Dropped);
        assert_eq!(server.stats().dropped, 2);
        assert!(server.is_empty());
    }

    #[test]
    fn section_states_show_what_waits_and_what_the_window_holds() {
        let (server, relay) = (addr("10.0.2.1:4433"), addr("10.0.1.2:4477"));
        let mut client = sections(8);
        client.route_through(server, relay);
        assert_eq!(client.section_states().count(), 0, "a route opens no section before a packet goes");
        for seq in 0..3 {
            assert_eq!(hand_over(&mut client, server, inner(seq)), None);
        }
        let waiting: Vec<SectionState> = client.section_states().collect();
        let [state] = waiting.as_slice() else { panic!("one section: {waiting:?}") };
        assert_eq!(
            (state.relay, state.connection_id, state.flow.waiting, state.flow.bytes_in_flight),
            (relay, ID, 3, 0)
        );
        assert_eq!((state.flow.controller, state.flow.smoothed_rtt, state.lost), ("newreno", None, 0));
        let sent = next_section(&mut client, Time::ZERO).expect("a SECTION");
        let state = client.section_states().next().expect("the section");
        assert_eq!((state.flow.waiting, state.flow.bytes_in_flight), (2, sent.payload.len() as u64));
        assert!(state.flow.cwnd >= state.flow.bytes_in_flight, "{state:?}");
    }

    #[test]
    fn a_full_section_queue_drops_and_counts() {
        let (server, relay) = (addr("10.0.2.1:4433"), addr("10.0.1.2:4477"));
        let mut client = sections(2);
        client.route_through(server, relay);
        for seq in 0..3 {
            assert_eq!(hand_over(&mut client, server, inner(seq)), None);
        }
        assert_eq!(client.stats().queue_full, 1);
        let big = packet(5, Payload::Data(&[0; MAX_SECTION_INNER]));
        assert_eq!(hand_over(&mut client, server, big), None);
        assert_eq!(client.stats().too_large, 1);
    }
}
