//! What a channel received: the packet numbers to acknowledge (as ranges), when an ACK is due, the ECN counts to
//! echo and the in-network feedback to echo.

use std::ops::RangeInclusive;
use std::time::Duration;

use tng_wire::{AckFrame, EcnCounts, Feedback};

use crate::time::Time;

/// Ranges kept for ACK frames; older ones are forgotten (their packets were acknowledged many times by then).
const MAX_RANGES: usize = 32;
/// An ACK goes out at once after this many ack-eliciting packets (RFC 9000 section 13.2.2).
const ACK_ELICITING_THRESHOLD: u32 = 2;
/// The same on a channel through a relay's section. Its end-to-end ACKs drive no congestion controller (the
/// section's does that, clocked by the section's own acknowledgements), only loss detection and the release of sent
/// data, and they share a slow uplink with the section's: every other packet filled a 1 Mbit/s DSL uplink under a
/// 20 Mbit/s download. Ten, as Chromium's ACK decimation; `max_ack_delay` still bounds the wait.
const RELAYED_ACK_ELICITING_THRESHOLD: u32 = 10;

/// The ECN codepoint of a received or sent datagram's IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EcnCodepoint {
    Ect0,
    Ect1,
    Ce,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ReceivedPackets {
    /// The channel goes through a relay's section: its ACKs wait for more packets.
    relayed: bool,
    /// Disjoint, ascending, non-adjacent ranges of received packet numbers.
    ranges: Vec<RangeInclusive<u64>>,
    /// Largest packet number received and when.
    largest: Option<(u64, Time)>,
    ack_eliciting_since_ack: u32,
    /// When the first unacknowledged ack-eliciting packet arrived.
    first_unacked_at: Option<Time>,
    /// An out-of-order arrival asks for an immediate ACK (fast loss detection at the sender).
    immediate: bool,
    ecn: EcnCounts,
    feedback: FeedbackTracker,
}

impl ReceivedPackets {
    /// Whether the channel goes through a relay's section.
    pub(crate) fn set_relayed(&mut self, relayed: bool) {
        self.relayed = relayed;
    }

    /// Records an authentic packet.
    pub(crate) fn on_packet(
        &mut self,
        now: Time,
        pn: u64,
        ack_eliciting: bool,
        ecn: Option<EcnCodepoint>,
        feedback: Feedback,
    ) {
        let in_order = self.largest.is_none_or(|(largest, _)| pn == largest + 1);
        if self.largest.is_none_or(|(largest, _)| pn > largest) {
            self.largest = Some((pn, now));
        }
        self.insert(pn);
        if ack_eliciting {
            self.ack_eliciting_since_ack += 1;
            self.first_unacked_at.get_or_insert(now);
            if !in_order {
                self.immediate = true;
            }
        }
        match ecn {
            Some(EcnCodepoint::Ect0) => self.ecn.ect0 += 1,
            Some(EcnCodepoint::Ect1) => self.ecn.ect1 += 1,
            Some(EcnCodepoint::Ce) => {
                self.ecn.ce += 1;
                // CE is a congestion signal the sender should see without delay.
                self.immediate = ack_eliciting;
            }
            None => {}
        }
        self.feedback.observe(feedback);
    }

    fn insert(&mut self, pn: u64) {
        let position = self.ranges.partition_point(|range| *range.end() < pn);
        if let Some(range) = self.ranges.get(position) {
            if range.contains(&pn) {
                return;
            }
        }
        let joins_previous = position > 0 && self.ranges.get(position - 1).is_some_and(|r| *r.end() + 1 == pn);
        let joins_next = self.ranges.get(position).is_some_and(|r| *r.start() == pn + 1);
        match (joins_previous, joins_next) {
            (true, true) => {
                let next_end = *self.ranges.remove(position).end();
                let previous = &mut self.ranges[position - 1];
                *previous = *previous.start()..=next_end;
            }
            (true, false) => {
                let previous = &mut self.ranges[position - 1];
                *previous = *previous.start()..=pn;
            }
            (false, true) => {
                let next = &mut self.ranges[position];
                *next = pn..=*next.end();
            }
            (false, false) => self.ranges.insert(position, pn..=pn),
        }
        if self.ranges.len() > MAX_RANGES {
            self.ranges.remove(0);
        }
    }

    /// When the next ACK must leave: now if one is due at once, after `max_ack_delay` otherwise, never if nothing
    /// ack-eliciting waits.
    pub(crate) fn ack_deadline(&self, max_ack_delay: Duration) -> Option<Time> {
        let first = self.first_unacked_at?;
        let threshold = if self.relayed { RELAYED_ACK_ELICITING_THRESHOLD } else { ACK_ELICITING_THRESHOLD };
        if self.immediate || self.ack_eliciting_since_ack >= threshold {
            Some(first)
        } else {
            Some(first + max_ack_delay)
        }
    }

    /// Whether an ack-eliciting packet awaits acknowledgement, so that an ACK frame is worth piggybacking on a
    /// packet that leaves anyway. Packets that elicit nothing (the peer's ACK packets) are acknowledged only along
    /// with ones that do (RFC 9000 section 13.2.1): acknowledging them in every DATA packet cost a bulk sender
    /// about 1% of its bytes.
    pub(crate) fn awaits_ack(&self) -> bool {
        self.first_unacked_at.is_some() && !self.ranges.is_empty()
    }

    /// The ACK frame for everything remembered, or `None` when there is nothing to acknowledge.
    pub(crate) fn ack_frame(&self, now: Time) -> Option<AckFrame> {
        let (_, received_at) = self.largest?;
        let largest = *self.ranges.last()?.end();
        let ranges: Vec<RangeInclusive<u64>> = self.ranges.iter().rev().cloned().collect();
        let delay = now.saturating_since(received_at);
        Some(AckFrame {
            largest,
            ack_delay_micros: u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
            ranges,
            ecn: self.ecn,
        })
    }

    /// An ACK frame built from the current state left in a packet.
    pub(crate) fn on_ack_sent(&mut self) {
        self.ack_eliciting_since_ack = 0;
        self.first_unacked_at = None;
        self.immediate = false;
    }

    /// The peer acknowledged a packet of ours that carried an ACK frame up to `largest`: it knows those packet
    /// numbers, so stop repeating them (RFC 9000 section 13.2.4).
    pub(crate) fn forget_up_to(&mut self, largest: u64) {
        self.ranges.retain(|range| *range.end() > largest);
        if let Some(first) = self.ranges.first_mut() {
            if *first.start() <= largest {
                *first = largest + 1..=*first.end();
            }
        }
    }

    pub(crate) fn ecn_counts(&self) -> EcnCounts {
        self.ecn
    }

    /// The largest packet number an ACK frame built now would acknowledge.
    pub(crate) fn largest_acknowledged(&self) -> Option<u64> {
        self.ranges.last().map(|range| *range.end())
    }

    pub(crate) fn feedback(&self) -> &FeedbackTracker {
        &self.feedback
    }

    pub(crate) fn feedback_mut(&mut self) -> &mut FeedbackTracker {
        &mut self.feedback
    }
}

/// The in-network feedback seen on a channel since the last FEEDBACK_ECHO.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FeedbackTracker {
    /// Merge of every packet's feedback since the last echo; `None` if no packet arrived since.
    since_echo: Option<Feedback>,
    /// The last echo sent was not neutral: echo once more when the path turns neutral again, so the sender learns
    /// that the queue drained.
    last_echo_informative: bool,
}

impl FeedbackTracker {
    fn observe(&mut self, feedback: Feedback) {
        self.since_echo = Some(self.since_echo.unwrap_or(Feedback::NEUTRAL).merge(feedback));
    }

    /// The values a FEEDBACK_ECHO frame should carry now, if one should go out.
    pub(crate) fn peek(&self) -> Option<Feedback> {
        self.since_echo.filter(|seen| *seen != Feedback::NEUTRAL || self.last_echo_informative)
    }

    /// The values to echo; resets the tracker.
    pub(crate) fn take(&mut self) -> Option<Feedback> {
        let seen = self.peek()?;
        self.since_echo = None;
        self.last_echo_informative = seen != Feedback::NEUTRAL;
        Some(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(received: &mut ReceivedPackets, pns: &[u64]) {
        for &pn in pns {
            received.on_packet(Time::ZERO, pn, true, None, Feedback::NEUTRAL);
        }
    }

    #[test]
    fn ranges_merge_and_come_out_descending() {
        let mut received = ReceivedPackets::default();
        receive(&mut received, &[0, 1, 2, 5, 6, 9, 4, 3]);
        let frame = received.ack_frame(Time::ZERO).expect("frame");
        assert_eq!(frame.largest, 9);
        assert_eq!(frame.ranges, vec![9..=9, 0..=6]);
        received.forget_up_to(5);
        assert_eq!(received.ack_frame(Time::ZERO).map(|f| f.ranges), Some(vec![9..=9, 6..=6]));
    }

    #[test]
    fn out_of_order_asks_for_an_immediate_ack() {
        let delay = Duration::from_millis(25);
        let mut received = ReceivedPackets::default();
        received.on_packet(Time::from_millis(1), 0, true, None, Feedback::NEUTRAL);
        assert_eq!(received.ack_deadline(delay), Some(Time::from_millis(26)));
        received.on_packet(Time::from_millis(2), 2, true, None, Feedback::NEUTRAL);
        assert_eq!(received.ack_deadline(delay), Some(Time::from_millis(1)));
        received.on_ack_sent();
        assert_eq!(received.ack_deadline(delay), None);
        received.on_packet(Time::from_millis(3), 3, false, None, Feedback::NEUTRAL);
        assert_eq!(received.ack_deadline(delay), None, "non-ack-eliciting packets wait");
        assert!(!received.awaits_ack(), "and are not worth an ACK frame of their own");
        received.on_packet(Time::from_millis(4), 4, true, None, Feedback::NEUTRAL);
        assert!(received.awaits_ack());
        assert_eq!(received.ack_frame(Time::from_millis(4)).map(|f| f.ranges), Some(vec![2..=4, 0..=0]));
    }

    #[test]
    fn a_relayed_channel_acknowledges_every_tenth_packet_or_after_the_delay() {
        let delay = Duration::from_millis(25);
        let mut received = ReceivedPackets::default();
        received.set_relayed(true);
        receive(&mut received, &[0, 1]);
        assert_eq!(received.ack_deadline(delay), Some(Time::ZERO + delay), "two packets wait");
        receive(&mut received, &[2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(received.ack_deadline(delay), Some(Time::ZERO + delay), "nine wait");
        receive(&mut received, &[9]);
        assert_eq!(received.ack_deadline(delay), Some(Time::ZERO), "the tenth makes it due");
        received.on_ack_sent();
        receive(&mut received, &[11]);
        assert_eq!(received.ack_deadline(delay), Some(Time::ZERO), "a gap still asks for one at once");
        received.on_ack_sent();
        received.set_relayed(false);
        receive(&mut received, &[12, 13]);
        assert_eq!(received.ack_deadline(delay), Some(Time::ZERO), "every other packet again");
    }

    #[test]
    fn counts_ecn_and_echoes_feedback_until_neutral() {
        let mut received = ReceivedPackets::default();
        let queued = Feedback { queue_level: 100, rate_hint: 5000 };
        received.on_packet(Time::ZERO, 0, true, Some(EcnCodepoint::Ce), queued);
        received.on_packet(
            Time::ZERO,
            1,
            true,
            Some(EcnCodepoint::Ect0),
            Feedback { queue_level: 50, rate_hint: 4000 },
        );
        assert_eq!(received.ecn_counts(), EcnCounts { ect0: 1, ect1: 0, ce: 1 });
        let tracker = received.feedback_mut();
        assert_eq!(tracker.take(), Some(Feedback { queue_level: 100, rate_hint: 4000 }));
        assert_eq!(tracker.take(), None);
        received.on_packet(Time::ZERO, 2, true, None, Feedback::NEUTRAL);
        assert_eq!(received.feedback_mut().take(), Some(Feedback::NEUTRAL), "one neutral echo after a queue");
        received.on_packet(Time::ZERO, 3, true, None, Feedback::NEUTRAL);
        assert_eq!(received.feedback_mut().take(), None);
    }
}
