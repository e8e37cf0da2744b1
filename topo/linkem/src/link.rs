//! One direction of the emulated link as a pure state machine on virtual time (nanoseconds from an origin).
//!
//! A frame goes through, in order: the loss model, the drop-tail queue (with ECN marking above a threshold), the
//! bottleneck server (unlimited, constant rate, or Mahimahi trace) and the propagation delay line (delay plus
//! jitter). The I/O driver feeds arrivals, asks for the next deadline and collects the frames that are due, so the
//! whole model is testable without sockets or clocks.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use rand_chacha::ChaCha8Rng;

use crate::counters::{add, set, DirectionCounters};
use crate::ecn::{mark_congestion_experienced, EcnOutcome};
use crate::loss::LossModel;
use crate::random::{rng, uniform, Stream};
use crate::spec::{LinkSpec, Service};
use crate::trace::TraceCursor;
use crate::units::Amount;

const ETHERNET_HEADER_LEN: u64 = 14;
const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// The bytes a frame is charged for: its IP packet, as Mahimahi counts on its TUN devices.
pub fn ip_bytes(frame: &[u8]) -> u64 {
    (frame.len() as u64).saturating_sub(ETHERNET_HEADER_LEN)
}

struct Queued {
    frame: Vec<u8>,
    arrival_ns: u64,
    bytes: u64,
}

/// A frame past the bottleneck, ordered by release time and then by the order it left the queue.
struct InFlight {
    release_ns: u64,
    sequence: u64,
    frame: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.release_ns, self.sequence) == (other.release_ns, other.sequence)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.release_ns, self.sequence).cmp(&(other.release_ns, other.sequence))
    }
}

enum Server {
    Unlimited,
    Rate { bits_per_second: u64 },
    Trace(TraceCursor),
}

impl Server {
    fn new(service: &Service, now_ns: u64) -> Server {
        match service {
            Service::Unlimited => Server::Unlimited,
            Service::Rate { bits_per_second } => Server::Rate { bits_per_second: *bits_per_second },
            Service::Trace { trace, .. } => Server::Trace(TraceCursor::new(Arc::clone(trace), now_ns)),
        }
    }

    /// When a packet of `bytes` that may start service at `start_ns` leaves the bottleneck.
    fn departure(&mut self, start_ns: u64, bytes: u64) -> u64 {
        match self {
            Server::Unlimited => start_ns,
            Server::Rate { bits_per_second } => {
                let bits = u128::from(bytes) * 8 * NANOS_PER_SECOND;
                let serialization = bits.div_ceil(u128::from(*bits_per_second));
                start_ns.saturating_add(u64::try_from(serialization).unwrap_or(u64::MAX))
            }
            // One opportunity per packet whatever its size, as the brief's Mahimahi semantics require.
            Server::Trace(cursor) => cursor.take_at_or_after(start_ns),
        }
    }
}

fn exceeds(limit: Amount, packets: u64, bytes: u64) -> bool {
    match limit {
        Amount::Packets(limit) => packets > limit,
        Amount::Bytes(limit) => bytes > limit,
    }
}

/// The random streams one direction consumes.
pub struct LinkRandomness {
    pub loss: ChaCha8Rng,
    pub jitter: ChaCha8Rng,
}

/// Which ChaCha streams a direction draws its loss and jitter from, so the same seed gives each direction and purpose
/// its own sequence.
#[derive(Clone, Copy, Debug)]
pub struct RandomStreams {
    loss: Stream,
    jitter: Stream,
}

impl RandomStreams {
    pub const AB: RandomStreams = RandomStreams { loss: Stream::LossAb, jitter: Stream::JitterAb };
    pub const BA: RandomStreams = RandomStreams { loss: Stream::LossBa, jitter: Stream::JitterBa };

    pub fn seeded(self, seed: u64) -> LinkRandomness {
        LinkRandomness { loss: rng(seed, self.loss), jitter: rng(seed, self.jitter) }
    }
}

pub struct Link {
    spec: LinkSpec,
    server: Server,
    loss: LossModel,
    randomness: LinkRandomness,
    queue: VecDeque<Queued>,
    queue_bytes: u64,
    /// Departure time of the queue's head, fixed when it reaches the head.
    head_departure_ns: Option<u64>,
    /// When the bottleneck finished (or will finish) the previous packet.
    server_free_ns: u64,
    delay_line: BinaryHeap<Reverse<InFlight>>,
    latest_release_ns: u64,
    next_sequence: u64,
    counters: Arc<DirectionCounters>,
}

impl Link {
    pub fn new(spec: LinkSpec, randomness: LinkRandomness, now_ns: u64, counters: Arc<DirectionCounters>) -> Link {
        Link {
            server: Server::new(&spec.service, now_ns),
            loss: LossModel::new(spec.loss.clone()),
            spec,
            randomness,
            queue: VecDeque::new(),
            queue_bytes: 0,
            head_departure_ns: None,
            server_free_ns: now_ns,
            delay_line: BinaryHeap::new(),
            latest_release_ns: now_ns,
            next_sequence: 0,
            counters,
        }
    }

    /// Switches to new settings at `now_ns`. Queued and in-flight packets stay; a new service restarts the
    /// head-of-line packet's service now (a new trace starts at its timestamp 0 now); a new loss model starts fresh.
    pub fn reconfigure(&mut self, spec: LinkSpec, now_ns: u64) {
        self.serve_until(now_ns);
        if spec.service != self.spec.service {
            self.server = Server::new(&spec.service, now_ns);
            self.server_free_ns = now_ns;
            self.schedule_head();
        }
        if &spec.loss != self.loss.spec() {
            self.loss = LossModel::new(spec.loss.clone());
        }
        self.spec = spec;
        self.publish_gauges();
    }

    /// Starts the link over at `origin_ns` as if it had just been created there with `randomness`: a trace starts at
    /// its timestamp 0 at `origin_ns`, the loss model starts fresh (Gilbert-Elliott in the good state) and loss and
    /// jitter draw from the new streams. Queued and in-flight packets stay; the head-of-line packet's service
    /// restarts at `origin_ns`. `now_ns` is when the forwarding thread applies it (at or just after `origin_ns`).
    pub fn reset(&mut self, origin_ns: u64, randomness: LinkRandomness, now_ns: u64) {
        self.serve_until(now_ns);
        self.server = Server::new(&self.spec.service, origin_ns);
        self.server_free_ns = origin_ns;
        self.loss = LossModel::new(self.spec.loss.clone());
        self.randomness = randomness;
        self.schedule_head();
        self.publish_gauges();
    }

    /// Accepts a frame read from the ingress interface at `now_ns`.
    pub fn arrive(&mut self, now_ns: u64, mut frame: Vec<u8>) {
        let bytes = ip_bytes(&frame);
        add(&self.counters.packets_in, 1);
        add(&self.counters.bytes_in, bytes);
        self.serve_until(now_ns);
        if self.loss.drops_next(&mut self.randomness.loss) {
            add(&self.counters.dropped_loss, 1);
            return;
        }
        let packets_after = self.queue.len() as u64 + 1;
        let bytes_after = self.queue_bytes + bytes;
        if exceeds(self.spec.queue_limit, packets_after, bytes_after) {
            add(&self.counters.dropped_queue, 1);
            return;
        }
        if let Some(threshold) = self.spec.ecn_threshold {
            if exceeds(threshold, packets_after, bytes_after)
                && mark_congestion_experienced(&mut frame) == EcnOutcome::Marked
            {
                add(&self.counters.ecn_marked, 1);
            }
        }
        self.queue.push_back(Queued { frame, arrival_ns: now_ns, bytes });
        self.queue_bytes = bytes_after;
        if self.queue.len() == 1 {
            self.schedule_head();
        }
        self.publish_gauges();
    }

    /// The earliest time at which `pop_due` can return something new.
    pub fn next_deadline(&self) -> Option<u64> {
        let release = self.delay_line.peek().map(|Reverse(f)| f.release_ns);
        match (self.head_departure_ns, release) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Returns the next frame whose release time is at or before `now_ns`, in release order.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        self.serve_until(now_ns);
        let due = self.delay_line.peek().is_some_and(|Reverse(f)| f.release_ns <= now_ns);
        let frame = due.then(|| self.delay_line.pop()).flatten().map(|Reverse(f)| f.frame);
        if frame.is_some() {
            self.publish_gauges();
        }
        frame
    }

    /// Moves every packet whose bottleneck departure is at or before `now_ns` into the delay line.
    fn serve_until(&mut self, now_ns: u64) {
        while let Some(departure) = self.head_departure_ns.filter(|&d| d <= now_ns) {
            let Some(head) = self.queue.pop_front() else {
                break;
            };
            self.queue_bytes -= head.bytes;
            let release_ns = self.release_time(departure);
            self.delay_line.push(Reverse(InFlight { release_ns, sequence: self.next_sequence, frame: head.frame }));
            self.next_sequence += 1;
            self.schedule_head();
        }
    }

    /// Fixes the departure of the packet now at the head of the queue (none if the queue is empty).
    fn schedule_head(&mut self) {
        self.head_departure_ns =
            self.queue.front().map(|head| (head.arrival_ns, head.bytes)).map(|(arrival_ns, bytes)| {
                let departure = self.server.departure(arrival_ns.max(self.server_free_ns), bytes);
                self.server_free_ns = departure;
                departure
            });
    }

    fn release_time(&mut self, departure_ns: u64) -> u64 {
        let delay = self.spec.delay.as_nanos() as f64;
        let jitter = self.spec.jitter.as_nanos() as f64;
        let delay = if jitter > 0.0 {
            (delay + (2.0 * uniform(&mut self.randomness.jitter) - 1.0) * jitter).max(0.0)
        } else {
            delay
        };
        let mut release_ns = departure_ns.saturating_add(delay.round() as u64);
        if !self.spec.reorder {
            release_ns = release_ns.max(self.latest_release_ns);
        }
        self.latest_release_ns = self.latest_release_ns.max(release_ns);
        release_ns
    }

    fn publish_gauges(&self) {
        set(&self.counters.queue_packets, self.queue.len() as u64);
        set(&self.counters.queue_bytes, self.queue_bytes);
        set(&self.counters.delay_line_packets, self.delay_line.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::ipv4_header_checksum;

    const MS: u64 = 1_000_000;

    /// An Ethernet frame with an ECT(0) IPv4 header of `ip_len` bytes in total; the sequence number is in the
    /// IPv4 identification field.
    fn frame(ip_len: u16, sequence: u16) -> Vec<u8> {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        let mut header = vec![0x45, 0x02];
        header.extend_from_slice(&ip_len.to_be_bytes());
        header.extend_from_slice(&sequence.to_be_bytes());
        header.extend_from_slice(&[0, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
        let checksum = ipv4_header_checksum(&header);
        header[10..12].copy_from_slice(&checksum.to_be_bytes());
        frame.extend_from_slice(&header);
        frame.resize(14 + usize::from(ip_len), 0);
        frame
    }

    fn sequence(frame: &[u8]) -> u16 {
        u16::from_be_bytes([frame[18], frame[19]])
    }

    fn new_link(spec: &str) -> (Link, Arc<DirectionCounters>) {
        seeded_link(spec, 9, 0)
    }

    fn seeded_link(spec: &str, seed: u64, origin_ns: u64) -> (Link, Arc<DirectionCounters>) {
        let counters = Arc::new(DirectionCounters::default());
        let randomness = RandomStreams::AB.seeded(seed);
        let link = Link::new(LinkSpec::parse(spec).unwrap(), randomness, origin_ns, Arc::clone(&counters));
        (link, counters)
    }

    /// A file in a fresh temporary directory, removed with it when the guard is dropped.
    struct TempTrace(std::path::PathBuf);

    impl TempTrace {
        fn new(name: &str, text: &str) -> TempTrace {
            let dir = std::env::temp_dir().join(format!("linkem-link-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("t.trace"), text).unwrap();
            TempTrace(dir)
        }

        fn path(&self) -> std::path::PathBuf {
            self.0.join("t.trace")
        }
    }

    impl Drop for TempTrace {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Runs the link to completion, returning (release time, sequence) of every frame in delivery order.
    fn drain(link: &mut Link) -> Vec<(u64, u16)> {
        let mut out = Vec::new();
        while let Some(deadline) = link.next_deadline() {
            while let Some(frame) = link.pop_due(deadline) {
                out.push((deadline, sequence(&frame)));
            }
        }
        out
    }

    #[test]
    fn rate_serialises_ip_bytes_then_delay_adds() {
        // 12 Mbit/s carries one 1500-byte IP packet per millisecond.
        let (mut link, counters) = new_link("rate=12mbit,delay=10ms");
        for seq in 0..3 {
            link.arrive(0, frame(1500, seq));
        }
        assert_eq!(counters.snapshot().queue_packets, 3);
        assert_eq!(drain(&mut link), vec![(11 * MS, 0), (12 * MS, 1), (13 * MS, 2)]);
        assert_eq!(counters.snapshot().queue_packets, 0);
        assert_eq!(counters.snapshot().bytes_in, 4500);
    }

    #[test]
    fn idle_link_serves_a_late_packet_from_its_arrival() {
        let (mut link, _) = new_link("rate=12mbit");
        link.arrive(0, frame(1500, 0));
        link.arrive(50 * MS, frame(750, 1));
        assert_eq!(drain(&mut link), vec![(MS, 0), (50 * MS + MS / 2, 1)]);
    }

    #[test]
    fn unlimited_zero_delay_link_passes_frames_at_once() {
        let (mut link, _) = new_link("");
        link.arrive(5, frame(100, 7));
        assert_eq!(link.next_deadline(), Some(5));
        assert_eq!(link.pop_due(5).map(|f| sequence(&f)), Some(7));
        assert_eq!(link.next_deadline(), None);
    }

    #[test]
    fn drop_tail_queue_in_packets_and_bytes() {
        let (mut link, counters) = new_link("rate=1mbit,queue=2pkt");
        for seq in 0..5 {
            link.arrive(0, frame(1000, seq));
        }
        assert_eq!(counters.snapshot().dropped_queue, 3);
        assert_eq!(drain(&mut link).iter().map(|&(_, s)| s).collect::<Vec<_>>(), vec![0, 1]);

        let (mut link, counters) = new_link("rate=1mbit,queue=2500b");
        for seq in 0..3 {
            link.arrive(0, frame(1000, seq));
        }
        link.arrive(0, frame(400, 3));
        assert_eq!(counters.snapshot().dropped_queue, 1, "third 1000-byte packet exceeds 2500 bytes");
        assert_eq!(counters.snapshot().queue_bytes, 2400);
    }

    #[test]
    fn ecn_marks_above_the_threshold_with_a_valid_checksum() {
        let (mut link, counters) = new_link("rate=1mbit,ecn=1pkt");
        for seq in 0..3 {
            link.arrive(0, frame(1000, seq));
        }
        assert_eq!(counters.snapshot().ecn_marked, 2);
        let mut frames = Vec::new();
        while let Some(deadline) = link.next_deadline() {
            frames.extend(std::iter::from_fn(|| link.pop_due(deadline)));
        }
        let ecn: Vec<u8> = frames.iter().map(|f| f[15] & 0b11).collect();
        assert_eq!(ecn, vec![0b10, 0b11, 0b11], "first packet found the queue at the threshold");
        assert!(frames.iter().all(|f| ipv4_header_checksum(&f[14..34]) == 0));
    }

    #[test]
    fn trace_uses_one_opportunity_per_packet_whatever_its_size() {
        let trace = TempTrace::new("sizes", "1\n1\n3\n");
        let (mut link, _) = new_link(&format!("trace={},delay=1ms", trace.path().display()));
        for seq in 0..4 {
            link.arrive(0, frame(if seq % 2 == 0 { 1500 } else { 60 }, seq));
        }
        // Opportunities at 1, 1, 3, then the loop restarts shifted by 3 ms: 4.
        assert_eq!(drain(&mut link), vec![(2 * MS, 0), (2 * MS, 1), (4 * MS, 2), (5 * MS, 3)]);
    }

    /// Offers 60 packets of 1000 bytes 0.7 ms apart from `start_ns` and returns (release time - start, sequence) of
    /// every delivered one and the number the loss model dropped.
    fn replay(link: &mut Link, counters: &DirectionCounters, start_ns: u64) -> (Vec<(u64, u16)>, u64) {
        let dropped_before = counters.snapshot().dropped_loss;
        for seq in 0..60 {
            link.arrive(start_ns + u64::from(seq) * 7 * MS / 10, frame(1000, seq));
        }
        let delivered = drain(link).into_iter().map(|(t, seq)| (t - start_ns, seq)).collect();
        (delivered, counters.snapshot().dropped_loss - dropped_before)
    }

    #[test]
    fn reset_replays_the_trace_loss_and_jitter_of_a_fresh_link_from_the_reset_instant() {
        // Uneven opportunities (period 10 ms), Gilbert-Elliott loss and jitter: every part that has a phase or a
        // random stream.
        let trace = TempTrace::new("reset", "1\n2\n2\n5\n9\n10\n");
        let spec = format!("trace={},delay=3ms,jitter=1ms,reorder=1,ge=0.2,0.3,0.05,0.6", trace.path().display());
        let (mut fresh, fresh_counters) = seeded_link(&spec, 5, 0);
        let expected = replay(&mut fresh, &fresh_counters, 0);
        assert!(expected.1 > 0 && expected.0.len() > 20, "the pattern should see losses and deliveries: {expected:?}");

        let (mut used, used_counters) = seeded_link(&spec, 9, 0);
        replay(&mut used, &used_counters, 0);
        // 1234.567 ms is 3.4567 ms into the trace's 124th loop: without the reset the pattern meets another phase.
        let origin = 1_234_567_000;
        let mut not_reset = seeded_link(&spec, 9, 0);
        replay(&mut not_reset.0, &not_reset.1, 0);
        assert_ne!(replay(&mut not_reset.0, &not_reset.1, origin), expected);

        used.reset(origin, RandomStreams::AB.seeded(5), origin);
        assert_eq!(replay(&mut used, &used_counters, origin), expected);
    }

    /// Sends 200 packets `spacing` apart and returns (delay, sequence) in delivery order.
    fn jittered(spec: &str, spacing: u64) -> Vec<(i64, u16)> {
        let (mut link, _) = new_link(spec);
        for seq in 0..200 {
            link.arrive(u64::from(seq) * spacing, frame(100, seq));
        }
        drain(&mut link).into_iter().map(|(t, s)| (t as i64 - (u64::from(s) * spacing) as i64, s)).collect()
    }

    #[test]
    fn jitter_spreads_sparse_packets_uniformly() {
        // Packets farther apart than the jitter range never catch up with each other: delays are plain samples.
        let delays: Vec<i64> = jittered("delay=20ms,jitter=5ms", 20 * MS).iter().map(|&(d, _)| d).collect();
        assert!(delays.iter().all(|&d| (15 * MS as i64..=25 * MS as i64).contains(&d)));
        let mean = delays.iter().sum::<i64>() as f64 / delays.len() as f64;
        assert!((mean - 20e6).abs() < 0.5e6, "mean delay {mean} ns");
        assert!(delays.iter().max().unwrap() - delays.iter().min().unwrap() > 8 * MS as i64);
    }

    #[test]
    fn jitter_keeps_dense_packets_in_order_unless_reordering_is_allowed() {
        for (spec, may_reorder) in [("delay=20ms,jitter=5ms", false), ("delay=20ms,jitter=5ms,reorder=1", true)] {
            let out = jittered(spec, MS / 4);
            let in_order = out.windows(2).all(|w| w[0].1 < w[1].1);
            assert_eq!(!in_order, may_reorder, "{spec}");
            assert!(out.iter().all(|&(d, _)| (15 * MS as i64..=25 * MS as i64).contains(&d)));
        }
    }

    #[test]
    fn loss_drops_before_the_queue() {
        let (mut link, counters) = new_link("loss=100%,queue=1pkt");
        for seq in 0..10 {
            link.arrive(0, frame(100, seq));
        }
        let snapshot = counters.snapshot();
        assert_eq!((snapshot.dropped_loss, snapshot.dropped_queue), (10, 0));
        assert_eq!(link.next_deadline(), None);
    }

    #[test]
    fn reconfiguring_the_rate_restarts_the_head_and_keeps_the_queue() {
        let (mut link, _) = new_link("rate=12kbit");
        link.arrive(0, frame(1500, 0));
        link.arrive(0, frame(1500, 1));
        assert_eq!(link.next_deadline(), Some(1000 * MS), "1500 bytes at 12 kbit/s take one second");
        link.reconfigure(LinkSpec::parse("rate=12mbit").unwrap(), 10 * MS);
        assert_eq!(drain(&mut link), vec![(11 * MS, 0), (12 * MS, 1)]);
        link.reconfigure(LinkSpec::parse("rate=12mbit,loss=100%").unwrap(), 20 * MS);
        link.arrive(21 * MS, frame(1500, 2));
        assert_eq!(link.next_deadline(), None, "the new loss model drops everything");
    }
}
