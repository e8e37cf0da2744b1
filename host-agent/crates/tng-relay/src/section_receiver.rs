//! The receiving end of a section: expands section packet numbers, drops duplicates, and acknowledges only what its
//! owner released (a relay releases a SECTION when its inner packet leaves downstream: queue sharing).

use std::ops::RangeInclusive;
use std::time::Duration;

use tng_proto::Time;
use tng_wire::{pn, AckFrame, EcnCounts, Feedback, Frame};

/// Ranges an ACK reports at most; older ones are forgotten (the sender has long declared them lost or acked).
const MAX_RANGES: usize = 32;
/// A SECTION_ACK is owed once this many released packets wait for one (RFC 9000's every other packet): a section
/// over an asymmetric last mile (DSL: 10 Mbit/s down, 1 up) would otherwise fill the slow direction with SECTION_ACKs
/// on top of the end-to-end ACKs, which limited a split flow to about 10 Mbit/s on a 20 Mbit/s line.
pub const ACK_EVERY: u32 = 2;
/// ... or once the oldest of them has waited this long (the sender's probe timeout allows for it).
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(5);

/// Disjoint, ascending packet-number ranges, bounded to the newest [`MAX_RANGES`].
#[derive(Debug, Clone, Default)]
struct Ranges(Vec<RangeInclusive<u64>>);

impl Ranges {
    /// Whether `n` was seen or lies below everything remembered (forgotten, so possibly seen).
    fn seen_or_forgotten(&self, n: u64) -> bool {
        self.0.first().is_some_and(|oldest| n < *oldest.start()) || self.0.iter().any(|range| range.contains(&n))
    }

    fn insert(&mut self, n: u64) {
        let at = self.0.partition_point(|range| *range.end() < n);
        if self.0.get(at).is_some_and(|range| range.contains(&n)) {
            return;
        }
        let joins_previous = at > 0 && *self.0[at - 1].end() + 1 == n;
        let joins_next = self.0.get(at).is_some_and(|range| *range.start() == n + 1);
        match (joins_previous, joins_next) {
            (true, true) => {
                let end = *self.0.remove(at).end();
                self.0[at - 1] = *self.0[at - 1].start()..=end;
            }
            (true, false) => self.0[at - 1] = *self.0[at - 1].start()..=n,
            (false, true) => self.0[at] = n..=*self.0[at].end(),
            (false, false) => self.0.insert(at, n..=n),
        }
        if self.0.len() > MAX_RANGES {
            self.0.remove(0);
        }
    }
}

/// One direction of a section, at its receiver.
#[derive(Debug, Clone, Default)]
pub struct SectionReceiver {
    largest: Option<u64>,
    received: Ranges,
    released: Ranges,
    /// Largest released packet number and when it was released, for the ACK's delay; `None` once acknowledged.
    unacked: Option<(u64, Time)>,
    /// Released packets not acknowledged yet, and when the first of them was released.
    waiting: u32,
    waiting_since: Option<Time>,
    /// Feedback of the SECTIONs received since the last echo.
    feedback: Option<Feedback>,
}

impl SectionReceiver {
    /// A SECTION arrived with this truncated packet number and feedback: its full packet number, or `None` for a
    /// number that does not expand (drop it).
    ///
    /// A number already received (or older than every one remembered) means the section's sender restarted with no state (fate sharing: a relay's
    /// restart renumbers its sections from 0) or, rarely, that the network duplicated a packet: either way the
    /// receiver starts the section afresh. A duplicated inner packet is the end-to-end replay window's to drop.
    pub fn on_section(&mut self, truncated: u32, feedback: Feedback) -> Option<u64> {
        let mut number = pn::expand(self.largest, truncated)?;
        if self.received.seen_or_forgotten(number) {
            *self = Self::default();
            number = pn::expand(None, truncated)?;
        }
        self.received.insert(number);
        self.largest = Some(self.largest.map_or(number, |largest| largest.max(number)));
        self.feedback = Some(self.feedback.map_or(feedback, |seen| seen.merge(feedback)));
        Some(number)
    }

    /// The packet `number` may now be acknowledged (a relay: its inner packet left downstream; an endpoint: it
    /// arrived).
    pub fn release(&mut self, now: Time, number: u64) {
        self.released.insert(number);
        if self.unacked.is_none_or(|(largest, _)| number > largest) {
            self.unacked = Some((number, now));
        }
        self.waiting += 1;
        self.waiting_since.get_or_insert(now);
    }

    /// Whether a SECTION_ACK is owed now: [`ACK_EVERY`] released packets wait, or one waited [`MAX_ACK_DELAY`].
    pub fn ack_due(&self, now: Time) -> bool {
        self.unacked.is_some() && (self.waiting >= ACK_EVERY || self.ack_deadline().is_some_and(|due| now >= due))
    }

    /// When the released packets waiting for a SECTION_ACK get one even if no other arrives.
    pub fn ack_deadline(&self) -> Option<Time> {
        self.waiting_since.map(|since| since + MAX_ACK_DELAY)
    }

    /// The SECTION_ACK payload owed, if any: an ACK of the released packets and a FEEDBACK_ECHO of what the
    /// section's switches wrote merged with `own` (the acknowledging node's queue, the same fields a switch writes).
    pub fn take_ack(&mut self, now: Time, own: Feedback) -> Option<Vec<u8>> {
        let (_, released_at) = self.unacked.take()?;
        self.waiting = 0;
        self.waiting_since = None;
        let delay = now.saturating_since(released_at);
        let ack = AckFrame::from_ranges(self.released.0.iter().cloned(), micros(delay), EcnCounts::default())?;
        let echo = self.feedback.take().unwrap_or(Feedback::NEUTRAL).merge(own);
        let mut frames = Vec::new();
        Frame::Ack(ack).encode(&mut frames);
        Frame::FeedbackEcho { max_queue_level: echo.queue_level, min_rate_hint: echo.rate_hint }.encode(&mut frames);
        Some(frames)
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use tng_wire::parse_frames;

    use super::*;

    fn acked(frames: &[u8]) -> (Vec<u64>, Feedback) {
        let mut numbers = Vec::new();
        let mut echo = Feedback::NEUTRAL;
        for frame in parse_frames(frames) {
            match frame.expect("well-formed frames") {
                Frame::Ack(ack) => numbers.extend(ack.packet_numbers()),
                Frame::FeedbackEcho { max_queue_level, min_rate_hint } => {
                    echo = Feedback { queue_level: max_queue_level, rate_hint: min_rate_hint }
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
        numbers.sort_unstable();
        (numbers, echo)
    }

    #[test]
    fn acknowledges_only_released_packets() {
        let mut receiver = SectionReceiver::default();
        let seen = Feedback { queue_level: 30, rate_hint: 5_000 };
        assert_eq!(receiver.on_section(0, Feedback::NEUTRAL), Some(0));
        assert_eq!(receiver.on_section(1, seen), Some(1));
        assert_eq!(receiver.on_section(3, Feedback::NEUTRAL), Some(3));
        assert!(!receiver.ack_due(Time::ZERO));
        assert_eq!(receiver.take_ack(Time::ZERO, Feedback::NEUTRAL), None);
        receiver.release(Time::ZERO, 0);
        receiver.release(Time::ZERO, 3);
        let own = Feedback { queue_level: 100, rate_hint: u32::MAX };
        let frames = receiver.take_ack(Time::from_millis(2), own).expect("an ACK is owed");
        assert_eq!(acked(&frames), (vec![0, 3], Feedback { queue_level: 100, rate_hint: 5_000 }));
        assert!(!receiver.ack_due(Time::from_millis(2)));
    }

    #[test]
    fn acknowledges_every_other_packet_or_after_the_delay() {
        let mut receiver = SectionReceiver::default();
        for truncated in 0..3 {
            receiver.on_section(truncated, Feedback::NEUTRAL);
        }
        receiver.release(Time::ZERO, 0);
        assert!(!receiver.ack_due(Time::from_millis(1)), "one packet waits for a second");
        receiver.release(Time::from_millis(1), 1);
        assert!(receiver.ack_due(Time::from_millis(1)), "two are owed an ACK at once");
        receiver.take_ack(Time::from_millis(1), Feedback::NEUTRAL).expect("an ACK");
        receiver.release(Time::from_millis(2), 2);
        assert_eq!(receiver.ack_deadline(), Some(Time::from_millis(2) + MAX_ACK_DELAY));
        assert!(!receiver.ack_due(Time::from_millis(6)));
        assert!(receiver.ack_due(Time::from_millis(7)), "a lone packet after the delay");
    }

    #[test]
    fn a_number_seen_before_starts_the_section_afresh() {
        let mut receiver = SectionReceiver::default();
        // Every other number of a long flight: more gaps than an ACK remembers, so the first ones are forgotten.
        for truncated in (0..200).step_by(2) {
            receiver.on_section(truncated, Feedback::NEUTRAL);
            receiver.release(Time::ZERO, u64::from(truncated));
        }
        assert_eq!(receiver.on_section(0, Feedback::NEUTRAL), Some(0), "the sender restarted");
        receiver.release(Time::ZERO, 0);
        let frames = receiver.take_ack(Time::ZERO, Feedback::NEUTRAL).expect("an ACK is owed");
        assert_eq!(acked(&frames).0, [0], "the old incarnation's numbers are forgotten");
    }
}
