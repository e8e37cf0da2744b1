//! Loss detection per channel (RFC 9002 section 6): what each packet carried, which packets the peer acknowledged,
//! which are lost (packet threshold 3, time threshold 9/8 RTT), and the probe timeout.
//!
//! The flow layer only decides that a packet is gone; what it carried is handed back to its owner (stream chunks
//! to the semantic layer, which retransmits them on whatever channel the scheduler picks next).

use std::collections::BTreeMap;
use std::time::Duration;

use tng_wire::AckFrame;

use crate::cc::{DeliveryMark, DeliveryRateSampler};
use crate::connection::rtt::RttEstimator;
use crate::streams::SentChunk;
use crate::time::Time;

/// A packet is lost when a packet this many numbers later was acknowledged (RFC 9002 `kPacketThreshold`).
pub(super) const PACKET_THRESHOLD: u64 = 3;
/// Persistent congestion: lost packets spanning this many PTOs collapse the window (RFC 9002
/// `kPersistentCongestionThreshold`).
const PERSISTENT_CONGESTION_THRESHOLD: u32 = 3;

/// A frame the connection (not the semantic layer) must repeat if the packet carrying it is lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ControlFrame {
    PathStatus { channel_id: u8, status: tng_wire::PathStatus },
    NewAddress(std::net::SocketAddr),
}

/// A packet about to be recorded by [`LossRecovery::on_sent`].
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) size: u64,
    pub(crate) ack_eliciting: bool,
    pub(crate) chunks: Vec<SentChunk>,
    pub(crate) control: Vec<ControlFrame>,
    pub(crate) acked_up_to: Option<u64>,
    /// The sender had less to send than the window allowed.
    pub(crate) app_limited: bool,
    /// Generation of the key that sealed it (key update waits for an acknowledged packet of the current one).
    pub(crate) key_generation: u64,
}

/// What the flow layer remembers about a sent packet.
#[derive(Debug)]
pub(crate) struct SentPacket {
    pub(crate) packet_number: u64,
    pub(crate) time_sent: Time,
    pub(crate) size: u64,
    pub(crate) ack_eliciting: bool,
    /// Stream data it carried, for the semantic layer.
    pub(crate) chunks: Vec<SentChunk>,
    pub(crate) control: Vec<ControlFrame>,
    /// The largest packet number of the ACK frame it carried: once the peer has this packet, it knows those.
    pub(crate) acked_up_to: Option<u64>,
    /// Delivery-rate sampling state when it left.
    pub(crate) delivery: DeliveryMark,
    pub(crate) app_limited: bool,
    pub(crate) key_generation: u64,
}

impl SentPacket {
    /// Counts towards bytes in flight: ACK-only packets do not (RFC 9002 section 2).
    fn in_flight(&self) -> bool {
        self.ack_eliciting
    }
}

/// The result of processing one ACK frame.
#[derive(Debug, Default)]
pub(crate) struct AckOutcome {
    pub(crate) newly_acked: Vec<SentPacket>,
    pub(crate) lost: Vec<SentPacket>,
    pub(crate) bytes_acked: u64,
    /// Send time of the largest newly acknowledged packet.
    pub(crate) largest_sent_time: Option<Time>,
    pub(crate) rtt_sample: Option<Duration>,
    pub(crate) delivery_rate: Option<u64>,
    pub(crate) app_limited: bool,
    /// The peer counted new ECN-CE marks.
    pub(crate) new_ce: bool,
    pub(crate) persistent_congestion: bool,
}

#[derive(Debug, Default)]
pub(crate) struct LossRecovery {
    sent: BTreeMap<u64, SentPacket>,
    next_packet_number: u64,
    largest_acked: Option<u64>,
    /// Send time of the largest acknowledged packet: what in-network feedback echoes refer to.
    largest_acked_sent_time: Option<Time>,
    bytes_in_flight: u64,
    ack_eliciting_in_flight: u64,
    /// What the probe timeout counts from: when ack-eliciting packets went in flight, or the latest ACK of one. Not
    /// every send, as RFC 9002 restarts it: a channel that keeps sending into a dead path (a receiver's credit
    /// updates and stream acknowledgements, which its window hardly limits) would postpone its timeout for as long
    /// as it sends, and with it the channel's failure. TCP's retransmission timer restarts on progress likewise.
    pto_anchor: Option<Time>,
    /// Earliest time a packet not yet lost by the packet threshold becomes lost by the time threshold.
    loss_time: Option<Time>,
    pto_count: u32,
    delivery_rate: DeliveryRateSampler,
    /// The sender ran out of data while the window had room, and has not filled the window since: ACKs meanwhile
    /// are app-limited, so that a window held back by flow control or the application does not grow without bound
    /// (RFC 9002 section 7.8).
    app_limited: bool,
    ecn_ce_seen: u64,
}

impl LossRecovery {
    pub(crate) fn next_packet_number(&self) -> u64 {
        self.next_packet_number
    }

    pub(crate) fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    pub(crate) fn largest_acked(&self) -> Option<u64> {
        self.largest_acked
    }

    pub(crate) fn pto_count(&self) -> u32 {
        self.pto_count
    }

    pub(crate) fn largest_acked_sent_time(&self) -> Option<Time> {
        self.largest_acked_sent_time
    }

    /// The sender has nothing to send although the window has room.
    pub(crate) fn on_out_of_data(&mut self) {
        self.app_limited = true;
    }

    /// What is in flight fills the window: it limits the sender again.
    pub(crate) fn on_window_full(&mut self) {
        self.app_limited = false;
    }

    pub(crate) fn has_ack_eliciting_in_flight(&self) -> bool {
        self.ack_eliciting_in_flight > 0
    }

    /// Records a packet that just left under the next packet number; returns that number.
    pub(crate) fn on_sent(&mut self, now: Time, outgoing: Outgoing) -> u64 {
        let pn = self.next_packet_number;
        self.next_packet_number += 1;
        if outgoing.ack_eliciting {
            if self.ack_eliciting_in_flight == 0 {
                self.pto_anchor = Some(now);
            }
            self.bytes_in_flight += outgoing.size;
            self.ack_eliciting_in_flight += 1;
        }
        let delivery = self.delivery_rate.on_sent(now, outgoing.ack_eliciting && self.ack_eliciting_in_flight == 1);
        let packet = SentPacket {
            packet_number: pn,
            time_sent: now,
            size: outgoing.size,
            ack_eliciting: outgoing.ack_eliciting,
            chunks: outgoing.chunks,
            control: outgoing.control,
            acked_up_to: outgoing.acked_up_to,
            delivery,
            app_limited: outgoing.app_limited,
            key_generation: outgoing.key_generation,
        };
        self.sent.insert(pn, packet);
        pn
    }

    /// A packet number that was used for an untracked packet (PROBE, CLOSE): numbers stay consecutive.
    pub(crate) fn skip_untracked(&mut self) -> u64 {
        let pn = self.next_packet_number;
        self.next_packet_number += 1;
        pn
    }

    fn remove(&mut self, pn: u64) -> Option<SentPacket> {
        let packet = self.sent.remove(&pn)?;
        if packet.in_flight() {
            self.bytes_in_flight = self.bytes_in_flight.saturating_sub(packet.size);
            self.ack_eliciting_in_flight = self.ack_eliciting_in_flight.saturating_sub(1);
        }
        Some(packet)
    }

    /// Processes an ACK frame received on this channel. `None` if it acknowledges a packet number never sent
    /// (a protocol violation: the frame is ignored).
    pub(crate) fn on_ack(
        &mut self,
        now: Time,
        frame: &AckFrame,
        rtt: &mut RttEstimator,
        max_ack_delay: Duration,
    ) -> Option<AckOutcome> {
        if frame.largest >= self.next_packet_number {
            return None;
        }
        let mut outcome = AckOutcome::default();
        let mut acked_numbers = Vec::new();
        // The codec only yields ranges with start <= end; checked anyway, since `BTreeMap::range` panics otherwise.
        for range in frame.ranges.iter().filter(|range| range.start() <= range.end()) {
            acked_numbers.extend(self.sent.range(range.clone()).map(|(&pn, _)| pn));
        }
        acked_numbers.sort_unstable();
        let Some(&largest_newly_acked) = acked_numbers.last() else {
            return Some(outcome);
        };
        if self.largest_acked.is_none_or(|largest| frame.largest > largest) {
            self.largest_acked = Some(frame.largest);
        }
        let any_eliciting = acked_numbers.iter().any(|pn| self.sent.get(pn).is_some_and(|p| p.ack_eliciting));
        if any_eliciting {
            self.pto_anchor = Some(now);
        }
        for pn in acked_numbers {
            let Some(packet) = self.remove(pn) else { continue };
            if pn == largest_newly_acked {
                outcome.largest_sent_time = Some(packet.time_sent);
                if self.largest_acked == Some(pn) {
                    self.largest_acked_sent_time = Some(packet.time_sent);
                }
                if pn == frame.largest && any_eliciting {
                    let sample = now.saturating_since(packet.time_sent);
                    let ack_delay = Duration::from_micros(frame.ack_delay_micros).min(max_ack_delay);
                    rtt.update(sample, ack_delay);
                    outcome.rtt_sample = Some(sample);
                }
            }
            if packet.in_flight() {
                outcome.bytes_acked += packet.size;
            }
            outcome.newly_acked.push(packet);
        }
        // The rate sample of the most recently sent newly acknowledged packet that counted in flight (the last in the
        // list); only such packets make up `bytes_acked`.
        if let Some(sampled) = outcome.newly_acked.iter().rev().find(|p| p.in_flight()) {
            outcome.delivery_rate =
                self.delivery_rate.on_acked(now, outcome.bytes_acked, sampled.delivery, sampled.time_sent);
            outcome.app_limited = sampled.app_limited || self.app_limited;
        }
        if frame.ecn.ce > self.ecn_ce_seen {
            self.ecn_ce_seen = frame.ecn.ce;
            outcome.new_ce = true;
        }
        self.pto_count = 0;
        let (lost, persistent) = self.detect_lost(now, rtt, max_ack_delay);
        outcome.lost = lost;
        outcome.persistent_congestion = persistent;
        Some(outcome)
    }

    /// Declares lost what the packet or time threshold condemns; re-arms the loss timer for the rest.
    pub(crate) fn detect_lost(
        &mut self,
        now: Time,
        rtt: &RttEstimator,
        max_ack_delay: Duration,
    ) -> (Vec<SentPacket>, bool) {
        self.loss_time = None;
        let Some(largest_acked) = self.largest_acked else {
            return (Vec::new(), false);
        };
        let loss_delay = rtt.loss_delay();
        let lost_before = now - loss_delay;
        let mut lost_numbers = Vec::new();
        for (&pn, packet) in self.sent.range(..largest_acked) {
            if packet.time_sent <= lost_before || largest_acked >= pn + PACKET_THRESHOLD {
                lost_numbers.push(pn);
            } else {
                let when = packet.time_sent + loss_delay;
                self.loss_time = Some(self.loss_time.map_or(when, |earliest| earliest.min(when)));
            }
        }
        let persistent = self.persistent_congestion(&lost_numbers, rtt, max_ack_delay);
        let lost = lost_numbers.into_iter().filter_map(|pn| self.remove(pn)).collect();
        (lost, persistent)
    }

    /// RFC 9002 section 7.6: ack-eliciting losses spanning more than the persistent-congestion duration with no
    /// packet in between acknowledged (consecutive packet numbers, since acknowledged ones are gone from the map).
    fn persistent_congestion(&self, lost: &[u64], rtt: &RttEstimator, max_ack_delay: Duration) -> bool {
        if !rtt.has_sample() {
            return false;
        }
        let duration = rtt.pto_base(max_ack_delay) * PERSISTENT_CONGESTION_THRESHOLD;
        let mut run_start: Option<Time> = None;
        let mut previous: Option<u64> = None;
        for &pn in lost {
            let Some(packet) = self.sent.get(&pn) else { continue };
            if previous.is_some_and(|p| p + 1 != pn) {
                run_start = None;
            }
            previous = Some(pn);
            if !packet.ack_eliciting {
                continue;
            }
            let start = *run_start.get_or_insert(packet.time_sent);
            if packet.time_sent.saturating_since(start) > duration {
                return true;
            }
        }
        false
    }

    /// When the loss-detection timer fires: the time threshold if pending, else the probe timeout.
    pub(crate) fn timer(&self, rtt: &RttEstimator, max_ack_delay: Duration) -> Option<Time> {
        self.loss_time.or_else(|| self.pto_deadline(rtt, max_ack_delay))
    }

    /// The probe timeout, backed off by `2^pto_count` (capped so that it stays finite).
    pub(crate) fn pto_deadline(&self, rtt: &RttEstimator, max_ack_delay: Duration) -> Option<Time> {
        if self.ack_eliciting_in_flight == 0 {
            return None;
        }
        let anchor = self.pto_anchor?;
        Some(anchor + rtt.pto_base(max_ack_delay) * (1u32 << self.pto_count.min(16)))
    }

    /// The loss timer expired: either packets are now lost by the time threshold, or a probe is due (the caller
    /// sends it; `pto_count` grows).
    pub(crate) fn on_timeout(&mut self, now: Time, rtt: &RttEstimator, max_ack_delay: Duration) -> TimeoutOutcome {
        if self.loss_time.is_some_and(|when| when <= now) {
            let (lost, persistent) = self.detect_lost(now, rtt, max_ack_delay);
            return TimeoutOutcome::Lost { lost, persistent };
        }
        if self.pto_deadline(rtt, max_ack_delay).is_some_and(|when| when <= now) {
            self.pto_count += 1;
            return TimeoutOutcome::ProbeTimeout;
        }
        TimeoutOutcome::Nothing
    }

    /// The stream chunks of the `packets` newest unacknowledged packets that carried any: what a tail-loss probe
    /// repeats.
    pub(crate) fn newest_unacked_chunks(&self, packets: usize) -> Vec<SentChunk> {
        self.sent
            .values()
            .rev()
            .filter(|packet| packet.ack_eliciting && !packet.chunks.is_empty())
            .take(packets)
            .flat_map(|packet| packet.chunks.iter().cloned())
            .collect()
    }

    /// Everything still tracked, as lost: the channel went down or was removed.
    pub(crate) fn drain_all(&mut self) -> Vec<SentPacket> {
        let lost: Vec<SentPacket> = std::mem::take(&mut self.sent).into_values().collect();
        self.bytes_in_flight = 0;
        self.ack_eliciting_in_flight = 0;
        self.loss_time = None;
        self.pto_count = 0;
        lost
    }
}

/// What a loss-detection timer expiry found.
#[derive(Debug)]
pub(crate) enum TimeoutOutcome {
    Nothing,
    Lost { lost: Vec<SentPacket>, persistent: bool },
    ProbeTimeout,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tng_wire::EcnCounts;

    const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

    fn send(recovery: &mut LossRecovery, now: Time) -> u64 {
        let outgoing = Outgoing {
            size: 1000,
            ack_eliciting: true,
            chunks: Vec::new(),
            control: Vec::new(),
            acked_up_to: None,
            app_limited: false,
            key_generation: 0,
        };
        recovery.on_sent(now, outgoing)
    }

    fn ack(ranges: Vec<std::ops::RangeInclusive<u64>>) -> AckFrame {
        AckFrame::from_ranges(ranges, 0, EcnCounts::default()).expect("non-empty")
    }

    #[test]
    fn packet_threshold_declares_loss_and_time_threshold_arms_a_timer() {
        let mut recovery = LossRecovery::default();
        let mut rtt = RttEstimator::new(Duration::from_millis(100));
        for i in 0..6 {
            send(&mut recovery, Time::from_millis(i));
        }
        assert_eq!(recovery.bytes_in_flight(), 6000);
        // Acknowledge 4 and 5: packets 0 to 2 are at least 3 numbers below the largest acknowledged, 3 is not.
        let outcome =
            recovery.on_ack(Time::from_millis(100), &ack(vec![4..=5]), &mut rtt, MAX_ACK_DELAY).expect("valid");
        assert_eq!(outcome.newly_acked.len(), 2);
        assert_eq!(outcome.lost.len(), 3);
        assert_eq!(outcome.rtt_sample, Some(Duration::from_millis(95)));
        assert_eq!(recovery.bytes_in_flight(), 1000);
        // Packet 3 becomes lost 9/8 RTT after it was sent.
        let timer = recovery.timer(&rtt, MAX_ACK_DELAY).expect("loss timer");
        assert_eq!(timer, Time::from_millis(3) + rtt.loss_delay());
        match recovery.on_timeout(timer, &rtt, MAX_ACK_DELAY) {
            TimeoutOutcome::Lost { lost, persistent } => {
                assert_eq!(lost.len(), 1);
                assert!(!persistent);
            }
            other => panic!("expected losses, got {other:?}"),
        }
        assert_eq!(recovery.bytes_in_flight(), 0);
        assert_eq!(recovery.timer(&rtt, MAX_ACK_DELAY), None);
    }

    #[test]
    fn acks_of_unsent_packets_are_refused_and_pto_backs_off() {
        let mut recovery = LossRecovery::default();
        let rtt = RttEstimator::new(Duration::from_millis(100));
        assert!(recovery.on_ack(Time::ZERO, &ack(vec![0..=0]), &mut rtt.clone(), MAX_ACK_DELAY).is_none());
        send(&mut recovery, Time::ZERO);
        let first = recovery.pto_deadline(&rtt, MAX_ACK_DELAY).expect("armed");
        assert!(matches!(recovery.on_timeout(first, &rtt, MAX_ACK_DELAY), TimeoutOutcome::ProbeTimeout));
        let second = recovery.pto_deadline(&rtt, MAX_ACK_DELAY).expect("armed");
        assert_eq!(second - Time::ZERO, (first - Time::ZERO) * 2);
        assert_eq!(recovery.pto_count(), 1);
    }

    #[test]
    fn sending_on_without_an_answer_does_not_postpone_the_probe_timeout() {
        let mut recovery = LossRecovery::default();
        let mut rtt = RttEstimator::new(Duration::from_millis(100));
        send(&mut recovery, Time::ZERO);
        let first = recovery.pto_deadline(&rtt, MAX_ACK_DELAY).expect("armed");
        for i in 1..50 {
            send(&mut recovery, Time::from_millis(i * 10)); // into a dead path: nothing comes back
        }
        assert_eq!(recovery.pto_deadline(&rtt, MAX_ACK_DELAY), Some(first), "the sends did not move it");
        recovery.on_ack(Time::from_millis(600), &ack(vec![0..=3]), &mut rtt, MAX_ACK_DELAY).expect("valid");
        let after_progress = recovery.pto_deadline(&rtt, MAX_ACK_DELAY).expect("still armed");
        assert_eq!(after_progress, Time::from_millis(600) + rtt.pto_base(MAX_ACK_DELAY), "an ACK restarts it");
    }

    #[test]
    fn a_long_run_of_losses_is_persistent_congestion() {
        let mut recovery = LossRecovery::default();
        let mut rtt = RttEstimator::new(Duration::from_millis(10));
        send(&mut recovery, Time::ZERO);
        recovery.on_ack(Time::from_millis(10), &ack(vec![0..=0]), &mut rtt, MAX_ACK_DELAY);
        for i in 0..10 {
            send(&mut recovery, Time::from_millis(20 + 100 * i));
        }
        let outcome =
            recovery.on_ack(Time::from_millis(930), &ack(vec![10..=10]), &mut rtt, MAX_ACK_DELAY).expect("valid");
        assert_eq!(outcome.lost.len(), 9);
        assert!(outcome.persistent_congestion);
    }

    #[test]
    fn newest_unacked_chunks_come_newest_first() {
        let mut recovery = LossRecovery::default();
        for i in 0..3u64 {
            let chunk =
                SentChunk::Stream { id: crate::streams::StreamId::from(0), range: i * 10..i * 10 + 10, fin: false };
            let outgoing = Outgoing {
                size: 100,
                ack_eliciting: true,
                chunks: vec![chunk],
                control: Vec::new(),
                acked_up_to: None,
                app_limited: false,
                key_generation: 0,
            };
            recovery.on_sent(Time::ZERO, outgoing);
        }
        let tail = recovery.newest_unacked_chunks(2);
        assert_eq!(tail.len(), 2);
        assert!(matches!(&tail[0], SentChunk::Stream { range, .. } if range.start == 20));
        assert_eq!(recovery.drain_all().len(), 3);
        assert_eq!(recovery.bytes_in_flight(), 0);
    }
}
