//! The relay core on virtual time: source -> relay -> sink over two links, the downstream one slower. The source and
//! the sink are the two ends of the outer sections ([`SectionSender`] and [`SectionReceiver`]); the packets they
//! carry are well-formed end-to-end DATA packets numbered by a sequence the sink checks.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use tng_proto::cc::CcConfig;
use tng_proto::{CcKind, Time};
use tng_relay::{Relay, RelayConfig, SectionReceiver, SectionSender};
use tng_wire::{parse_frames, pn, Feedback, Flags, Frame, Packet, Payload, Section};

const CONNECTION_ID: u64 = 7;
const BODY: usize = 1000;
const QUEUE_LIMIT: usize = 16;

fn source_addr() -> SocketAddr {
    "10.0.0.1:4477".parse().expect("address")
}
fn relay_addr() -> SocketAddr {
    "10.0.0.2:4477".parse().expect("address")
}
fn sink_addr() -> SocketAddr {
    "10.0.0.3:4477".parse().expect("address")
}

/// The end-to-end packet with sequence number `seq`: a DATA packet whose sealed bytes derive from `seq`.
fn inner_packet(seq: u32) -> Vec<u8> {
    let body: Vec<u8> = (0..BODY).map(|i| (seq as usize * 31 + i) as u8).collect();
    let packet = Packet {
        flags: Flags::EMPTY,
        channel_id: 0,
        connection_id: CONNECTION_ID,
        packet_number: seq,
        feedback: Feedback::NEUTRAL,
        payload: Payload::Data(&body),
    };
    let mut out = Vec::new();
    packet.encode(&mut out).expect("valid DATA");
    out
}

fn outer(number: u64, payload: Payload<'_>) -> Vec<u8> {
    let packet = Packet {
        flags: Flags::EMPTY,
        channel_id: 0,
        connection_id: CONNECTION_ID,
        packet_number: pn::truncate(number),
        feedback: Feedback::NEUTRAL,
        payload,
    };
    let mut out = Vec::new();
    packet.encode(&mut out).expect("valid outer packet");
    out
}

/// A one-way link: serialisation at `rate` bytes/s, then `delay`; a tail-drop buffer of `buffer` bytes; every
/// `drop_every`-th packet lost (0: none).
struct Link {
    rate: u64,
    delay: Duration,
    buffer: u64,
    drop_every: u64,
    busy_until: Time,
    sent: u64,
}

impl Link {
    fn new(rate: u64, delay_ms: u64, buffer: u64) -> Self {
        Link { rate, delay: Duration::from_millis(delay_ms), buffer, drop_every: 0, busy_until: Time::ZERO, sent: 0 }
    }

    /// When a packet of `len` bytes entering now arrives, or `None` if the link drops it.
    fn carry(&mut self, now: Time, len: usize) -> Option<Time> {
        self.sent += 1;
        let backlog = self.busy_until.saturating_since(now).as_nanos() as u64 * self.rate / 1_000_000_000;
        if backlog + len as u64 > self.buffer || (self.drop_every > 0 && self.sent.is_multiple_of(self.drop_every)) {
            return None;
        }
        let start = if self.busy_until > now { self.busy_until } else { now };
        self.busy_until = start + Duration::from_nanos(len as u64 * 1_000_000_000 / self.rate);
        Some(self.busy_until + self.delay)
    }
}

struct Delivery {
    at: Time,
    order: u64,
    from: SocketAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
}

impl PartialEq for Delivery {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Delivery {}
impl PartialOrd for Delivery {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Delivery {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

struct World {
    now: Time,
    order: u64,
    in_transit: BinaryHeap<Reverse<Delivery>>,
    up: Link,
    up_back: Link,
    down: Link,
    down_back: Link,
    source: SectionSender,
    next_seq: u32,
    relay: Relay,
    relay_config: RelayConfig,
    sink: SectionReceiver,
    sink_acks: u64,
    received: Vec<u32>,
    max_queue: usize,
}

impl World {
    /// Upstream 10 Mbit/s, 5 ms; downstream `down_rate` bytes/s, 20 ms, a 20-packet buffer.
    fn new(down_rate: u64) -> Self {
        let cc = CcConfig::default();
        let relay_config = RelayConfig {
            toward_server: CcKind::Cubic.into(),
            toward_client: CcKind::Vegas.into(),
            cc: cc.clone(),
            queue_limit: QUEUE_LIMIT,
            next_relay: None,
        };
        World {
            now: Time::ZERO,
            order: 0,
            in_transit: BinaryHeap::new(),
            up: Link::new(1_250_000, 5, 1 << 20),
            up_back: Link::new(1_250_000, 5, 1 << 20),
            down: Link::new(down_rate, 20, 20 * 1100),
            down_back: Link::new(down_rate, 20, 1 << 20),
            source: SectionSender::new(CcKind::NewReno, &cc, Time::ZERO),
            next_seq: 0,
            relay: Relay::new(relay_config.clone()),
            relay_config,
            sink: SectionReceiver::default(),
            sink_acks: 0,
            received: Vec::new(),
            max_queue: 0,
        }
    }

    fn transmit(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        let link = match (from == source_addr() || to == source_addr(), from == relay_addr()) {
            (true, false) => &mut self.up,
            (true, true) => &mut self.up_back,
            (false, true) => &mut self.down,
            (false, false) => &mut self.down_back,
        };
        if let Some(at) = link.carry(self.now, bytes.len()) {
            self.order += 1;
            self.in_transit.push(Reverse(Delivery { at, order: self.order, from, to, bytes }));
        }
    }

    /// Everything that can leave now leaves: the source while its window allows, the relay while it has anything.
    fn pump(&mut self) {
        let section_len = (tng_wire::HEADER_LEN + tng_wire::SECTION_PREFIX_LEN + tng_wire::HEADER_LEN + BODY) as u64;
        while self.source.can_send(section_len) {
            let inner = inner_packet(self.next_seq);
            self.next_seq += 1;
            let number = self.source.on_sent(self.now, section_len);
            let datagram = outer(number, Payload::Section(Section::new(Some(sink_addr()), &inner)));
            self.transmit(source_addr(), relay_addr(), datagram);
        }
        while let Some(sent) = self.relay.poll_transmit(self.now) {
            self.transmit(relay_addr(), sent.destination, sent.datagram);
        }
        self.max_queue = self.max_queue.max(self.relay.queued_toward_server(CONNECTION_ID));
    }

    fn deliver(&mut self, delivery: Delivery) {
        if delivery.to == relay_addr() {
            self.relay.handle_datagram(self.now, relay_addr(), delivery.from, &delivery.bytes);
        } else if delivery.to == sink_addr() {
            let packet = Packet::parse(&delivery.bytes).expect("the relay sends well-formed packets");
            let Payload::Section(section) = packet.payload else { panic!("sink got {packet:?}") };
            let Some(number) = self.sink.on_section(packet.packet_number, packet.feedback) else { return };
            let inner = Packet::parse(section.inner).expect("the inner packet arrives well-formed");
            assert_eq!(section.inner, inner_packet(inner.packet_number), "inner packet altered");
            self.received.push(inner.packet_number);
            self.sink.release(self.now, number);
            let frames = self.sink.take_ack(self.now, Feedback::NEUTRAL).expect("an ACK is owed");
            let ack = outer(self.sink_acks, Payload::SectionAck(&frames));
            self.sink_acks += 1;
            self.transmit(sink_addr(), relay_addr(), ack);
        } else {
            let packet = Packet::parse(&delivery.bytes).expect("the relay sends well-formed packets");
            let Payload::SectionAck(frames) = packet.payload else { panic!("source got {packet:?}") };
            let mut echo = Feedback::NEUTRAL;
            let mut ack = None;
            for frame in parse_frames(frames) {
                match frame.expect("well-formed frames") {
                    Frame::Ack(frame) => ack = Some(frame),
                    Frame::FeedbackEcho { max_queue_level, min_rate_hint } => {
                        echo = Feedback { queue_level: max_queue_level, rate_hint: min_rate_hint }
                    }
                    other => panic!("unexpected frame {other:?}"),
                }
            }
            self.source.on_ack(self.now, &ack.expect("an ACK frame"), echo);
        }
    }

    fn run_until(&mut self, end: Time) {
        self.pump();
        loop {
            let next_delivery = self.in_transit.peek().map(|Reverse(delivery)| delivery.at);
            let next =
                [next_delivery, self.source.next_timeout(), self.relay.poll_timeout()].into_iter().flatten().min();
            let Some(next) = next.filter(|&next| next <= end) else { break };
            self.now = next;
            self.source.on_timeout(self.now);
            self.relay.handle_timeout(self.now);
            while self.in_transit.peek().is_some_and(|Reverse(delivery)| delivery.at <= self.now) {
                let Some(Reverse(delivery)) = self.in_transit.pop() else { break };
                self.deliver(delivery);
            }
            self.pump();
        }
        self.now = end;
    }

    fn packets_per_second(&self, rate: u64) -> u64 {
        rate / (tng_wire::HEADER_LEN * 2 + tng_wire::SECTION_PREFIX_LEN + BODY) as u64
    }
}

fn assert_once_in_order(received: &[u32]) {
    let distinct: HashSet<_> = received.iter().collect();
    assert_eq!(distinct.len(), received.len(), "a packet was delivered twice");
    assert!(received.windows(2).all(|pair| pair[0] < pair[1]), "the relay reordered packets");
}

#[test]
fn backpressure_reaches_the_sender_when_the_downstream_is_slower() {
    let down_rate = 125_000; // 1 Mbit/s behind a 10 Mbit/s upstream section
    let mut world = World::new(down_rate);
    world.run_until(Time::from_millis(10_000));
    let capacity = world.packets_per_second(down_rate) * 10;
    let received = world.received.len() as u64;
    let sent = u64::from(world.next_seq);
    assert!(received * 10 >= capacity * 8, "downstream underused: {received} of {capacity} packets");
    // Without backpressure the source would send at its own section's 10 Mbit/s, ten times what arrives.
    assert!(sent * 10 <= received * 13, "source sent {sent} packets for {received} delivered");
    assert!(world.max_queue <= QUEUE_LIMIT, "queue reached {}", world.max_queue);
    assert_once_in_order(&world.received);
}

#[test]
fn packets_cross_once_and_intact_despite_downstream_loss() {
    let mut world = World::new(250_000);
    world.down.drop_every = 50;
    world.run_until(Time::from_millis(5_000));
    assert!(world.received.len() > 500, "only {} packets arrived", world.received.len());
    assert_once_in_order(&world.received);
    assert!(world.source.lost() > 0 || world.relay.stats().queue_full > 0);
}

#[test]
fn a_restarted_relay_relearns_the_connection_and_the_transfer_goes_on() {
    let mut world = World::new(250_000);
    world.run_until(Time::from_millis(3_000));
    let before = world.received.len();
    let lost_before = world.source.lost();
    assert!(before > 100, "only {before} packets before the restart");
    world.relay = Relay::new(world.relay_config.clone()); // all soft state gone, queued packets with it
    world.run_until(Time::from_millis(8_000));
    let after = world.received.len() - before;
    // The 5 s after the restart carry at least 80% of the rate of the 3 s before it.
    assert!(
        after * 3 * 10 >= before * 5 * 8,
        "{after} packets in the 5 s after the restart, {before} in the 3 s before"
    );
    assert!(world.source.lost() > lost_before, "what the old relay held was never declared lost");
    assert_once_in_order(&world.received);
}
