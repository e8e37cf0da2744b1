//! The sending end of a section: numbers SECTIONs, tracks them in flight, runs the section's congestion controller
//! on SECTION_ACKs and their echoed feedback, and declares losses. It never retransmits: a lost SECTION's content is
//! the end-to-end layer's to recover (fate sharing).

use std::collections::BTreeMap;
use std::time::Duration;

use tng_proto::cc::{
    AckSample, CcConfig, CongestionController, DeliveryMark, DeliveryRateSampler, LossEvent, PathFeedback,
};
use tng_proto::connection::RttEstimator;
use tng_proto::Time;
use tng_wire::{AckFrame, Feedback};

use crate::section_control::SectionControl;
use crate::section_receiver::MAX_ACK_DELAY;

/// A SECTION this many packet numbers below the largest acknowledged one is lost (RFC 9002's packet threshold).
const PACKET_THRESHOLD: u64 = 3;
/// Probe timeout before the first RTT sample.
const INITIAL_PTO: Duration = Duration::from_millis(500);
/// Smallest probe timeout.
const MIN_PTO: Duration = Duration::from_millis(10);

#[derive(Debug, Clone, Copy)]
struct Sent {
    time: Time,
    bytes: u64,
    /// Sent with at most half the window in flight: its ACK says nothing about whether a larger window would be
    /// used, so the controller does not grow on it (RFC 7661). A relay's queue that ran dry would otherwise let the
    /// downstream window grow without bound, then pour that window into the next link at once when data came back.
    app_limited: bool,
    delivery: DeliveryMark,
}

/// One direction of a section, at its sender.
#[derive(Debug)]
pub struct SectionSender {
    cc: Box<dyn CongestionController>,
    next_number: u64,
    in_flight: BTreeMap<u64, Sent>,
    bytes_in_flight: u64,
    largest_acked: Option<u64>,
    rtt: RttEstimator,
    /// Rate samples for controllers that model the bottleneck's rate (BBR), as an endpoint's channel takes them.
    delivery_rate: DeliveryRateSampler,
    lost: u64,
}

impl SectionSender {
    /// A section sender run by `control` (the relay's policy picks one per direction).
    pub fn new(control: impl Into<SectionControl>, config: &CcConfig, now: Time) -> Self {
        Self {
            cc: control.into().controller(config, now),
            next_number: 0,
            in_flight: BTreeMap::new(),
            bytes_in_flight: 0,
            largest_acked: None,
            rtt: RttEstimator::new(INITIAL_PTO / 3),
            delivery_rate: DeliveryRateSampler::default(),
            lost: 0,
        }
    }

    /// The congestion controller's name.
    pub fn controller(&self) -> &'static str {
        self.cc.name()
    }

    /// Bytes sent and neither acknowledged nor declared lost.
    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    /// The congestion window, bytes.
    pub fn window(&self) -> u64 {
        self.cc.window()
    }

    /// The smoothed RTT, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.has_sample().then(|| self.rtt.smoothed())
    }

    /// The smallest RTT sampled, once sampled: what delay-based controllers take for the path's propagation delay.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.rtt.has_sample().then(|| self.rtt.min())
    }

    /// SECTIONs declared lost so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Bytes the congestion window has room for now.
    pub fn room(&self) -> u64 {
        self.cc.window().saturating_sub(self.bytes_in_flight)
    }

    /// Whether the congestion window has room for a SECTION of `bytes`.
    pub fn can_send(&self, bytes: u64) -> bool {
        bytes <= self.room()
    }

    /// A SECTION of `bytes` leaves now: its packet number.
    pub fn on_sent(&mut self, now: Time, bytes: u64) -> u64 {
        let number = self.next_number;
        self.next_number += 1;
        let delivery = self.delivery_rate.on_sent(now, self.in_flight.is_empty());
        self.bytes_in_flight += bytes;
        let app_limited = self.bytes_in_flight.saturating_mul(2) <= self.cc.window();
        self.in_flight.insert(number, Sent { time: now, bytes, app_limited, delivery });
        self.cc.on_sent(now, bytes, self.bytes_in_flight);
        number
    }

    /// A SECTION_ACK arrived: its ACK frame and the feedback it echoed.
    pub fn on_ack(&mut self, now: Time, ack: &AckFrame, echo: Feedback) {
        let mut newly_acked = 0;
        let mut largest_newly: Option<(u64, Sent)> = None;
        for range in &ack.ranges {
            let numbers: Vec<u64> = self.in_flight.range(range.clone()).map(|(&number, _)| number).collect();
            for number in numbers {
                if let Some(sent) = self.in_flight.remove(&number) {
                    newly_acked += sent.bytes;
                    if largest_newly.is_none_or(|(largest, _)| number > largest) {
                        largest_newly = Some((number, sent));
                    }
                }
            }
        }
        let Some((largest, sent)) = largest_newly else { return };
        self.bytes_in_flight -= newly_acked;
        self.largest_acked = Some(self.largest_acked.map_or(largest, |acked| acked.max(largest)));
        // The sample is the raw one, as an endpoint's: the receiver's ACK delay only tempers the smoothed RTT, so
        // an over-reported delay cannot make the path look shorter than it is.
        let rtt = (largest == ack.largest).then(|| now.saturating_since(sent.time).max(Duration::from_micros(1)));
        if let Some(rtt) = rtt {
            self.rtt.update(rtt, Duration::from_micros(ack.ack_delay_micros).min(MAX_ACK_DELAY));
        }
        let sample = AckSample {
            bytes_acked: newly_acked,
            sent_time: sent.time,
            rtt,
            srtt: self.rtt.smoothed(),
            min_rtt: self.rtt.min(),
            // Numbers grow with sending time, so the largest newly acknowledged SECTION is the latest sent.
            delivery_rate: self.delivery_rate.on_acked(now, newly_acked, sent.delivery, sent.time),
            app_limited: sent.app_limited,
            bytes_in_flight: self.bytes_in_flight,
        };
        self.cc.on_ack(now, &sample);
        let feedback = PathFeedback {
            queue_delay: (echo.effective_queue_level() > 0).then(|| echo.queue_delay()),
            rate_hint: echo.rate_hint_kbps().map(|kbps| u64::from(kbps) * 1000 / 8),
        };
        self.cc.on_feedback(now, sent.time, &feedback);
        let threshold = self.largest_acked.unwrap_or(0).saturating_sub(PACKET_THRESHOLD - 1);
        let lost: Vec<u64> = self.in_flight.range(..threshold).map(|(&number, _)| number).collect();
        self.declare_lost(now, &lost);
    }

    /// When the oldest SECTION in flight times out, if any.
    pub fn next_timeout(&self) -> Option<Time> {
        self.in_flight.values().next().map(|sent| sent.time + self.pto())
    }

    /// Declares lost every SECTION whose probe timeout passed (nothing acknowledged it: the relay restarted, or the
    /// whole flight was lost).
    pub fn on_timeout(&mut self, now: Time) {
        let pto = self.pto();
        let lost: Vec<u64> =
            self.in_flight.iter().filter(|(_, sent)| sent.time + pto <= now).map(|(&number, _)| number).collect();
        self.declare_lost(now, &lost);
    }

    fn pto(&self) -> Duration {
        // The receiver may hold its ACK for MAX_ACK_DELAY (RFC 9002 adds max_ack_delay to the PTO likewise).
        self.srtt().map_or(INITIAL_PTO, |srtt| (srtt * 3).max(MIN_PTO) + MAX_ACK_DELAY)
    }

    fn declare_lost(&mut self, now: Time, numbers: &[u64]) {
        let mut bytes_lost = 0;
        let mut largest_lost_sent_time = None;
        for number in numbers {
            if let Some(sent) = self.in_flight.remove(number) {
                bytes_lost += sent.bytes;
                largest_lost_sent_time = Some(sent.time);
                self.lost += 1;
            }
        }
        let Some(largest_lost_sent_time) = largest_lost_sent_time else { return };
        self.bytes_in_flight -= bytes_lost;
        let loss =
            LossEvent { bytes_lost, largest_lost_sent_time, persistent: false, bytes_in_flight: self.bytes_in_flight };
        self.cc.on_loss(now, &loss);
    }
}

#[cfg(test)]
mod tests {
    use tng_proto::CcKind;
    use tng_wire::EcnCounts;

    use super::*;

    fn ack(ranges: &[std::ops::RangeInclusive<u64>]) -> AckFrame {
        AckFrame::from_ranges(ranges.iter().cloned(), 0, EcnCounts::default()).expect("non-empty")
    }

    #[test]
    fn acks_free_the_window_and_gaps_of_three_are_losses() {
        let config = CcConfig::default();
        let mut sender = SectionSender::new(CcKind::NewReno, &config, Time::ZERO);
        let numbers: Vec<u64> = (0..6).map(|_| sender.on_sent(Time::ZERO, 1000)).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 4, 5]);
        assert_eq!(sender.bytes_in_flight(), 6000);
        sender.on_ack(Time::from_millis(20), &ack(&[2..=4]), Feedback::NEUTRAL);
        assert_eq!(sender.lost(), 2, "0 and 1 are three below 4");
        assert_eq!(sender.bytes_in_flight(), 1000);
        // Three RTTs, and the receiver's allowance for holding its ACK.
        let pto = Duration::from_millis(60) + MAX_ACK_DELAY;
        assert_eq!(sender.next_timeout(), Some(Time::ZERO + pto));
        sender.on_timeout(Time::ZERO + pto);
        assert_eq!((sender.lost(), sender.bytes_in_flight(), sender.next_timeout()), (3, 0, None));
    }

    #[test]
    fn the_window_grows_only_on_acks_of_sections_sent_with_the_window_used() {
        let config = CcConfig::default();
        let mut sender = SectionSender::new(CcKind::NewReno, &config, Time::ZERO);
        let initial = sender.window();
        // A trickle: one SECTION at a time, each acknowledged before the next.
        for number in 0..20 {
            let sent_at = Time::from_millis(number * 30);
            assert_eq!(sender.on_sent(sent_at, 1200), number);
            sender.on_ack(sent_at + Duration::from_millis(20), &ack(&[0..=number]), Feedback::NEUTRAL);
        }
        assert_eq!(sender.window(), initial, "a sender that never used its window does not grow it");
        // A full window, acknowledged: slow start grows the window by what was acknowledged.
        let start = Time::from_millis(1_000);
        let mut numbers = Vec::new();
        while sender.can_send(1200) {
            numbers.push(sender.on_sent(start, 1200));
        }
        let (first, last) = (numbers[0], *numbers.last().expect("sent"));
        sender.on_ack(start + Duration::from_millis(20), &ack(&[0..=last]), Feedback::NEUTRAL);
        assert!(sender.window() > initial, "{} after a full window of {} from {first}", sender.window(), initial);
    }

    #[test]
    fn an_over_reported_ack_delay_never_lowers_the_minimum_rtt_below_a_raw_sample() {
        let config = CcConfig::default();
        let mut sender = SectionSender::new(CcKind::Vegas, &config, Time::ZERO);
        let delayed = |number: u64, delay_micros: u64| {
            AckFrame::from_ranges([number..=number], delay_micros, EcnCounts::default()).expect("non-empty")
        };
        sender.on_sent(Time::ZERO, 1200);
        sender.on_ack(Time::from_millis(20), &delayed(0, 0), Feedback::NEUTRAL);
        assert_eq!(
            (sender.srtt(), sender.min_rtt()),
            (Some(Duration::from_millis(20)), Some(Duration::from_millis(20)))
        );
        // 21 ms on the wire, of which the receiver claims it held 5: the path did not get shorter.
        sender.on_sent(Time::from_millis(100), 1200);
        sender.on_ack(Time::from_millis(121), &delayed(1, 5_000), Feedback::NEUTRAL);
        assert_eq!(sender.min_rtt(), Some(Duration::from_millis(20)));
        assert!(sender.srtt() > Some(Duration::from_millis(20)), "{:?}", sender.srtt());
        // A delay that keeps the sample above the minimum is subtracted from the smoothed RTT.
        sender.on_sent(Time::from_millis(200), 1200);
        let before = sender.srtt().expect("sampled");
        sender.on_ack(Time::from_millis(230), &delayed(2, 5_000), Feedback::NEUTRAL);
        assert_eq!(sender.srtt(), Some((before * 7 + Duration::from_millis(25)) / 8));
    }

    #[test]
    fn a_bbr_section_sizes_its_window_from_the_rate_its_acks_measure() {
        // A 10 Mbit/s bottleneck with a deep buffer and a 100 ms round trip; the section sends whenever its window
        // has room, and every SECTION is acknowledged alone when it has crossed.
        let config = CcConfig::default();
        let mut sender = SectionSender::new(CcKind::Bbr, &config, Time::ZERO);
        let initial = sender.window();
        let per_section = Duration::from_micros(960); // 1200 bytes at 10 Mbit/s
        let mut link_free = Time::ZERO;
        let mut acks = std::collections::VecDeque::new();
        for millisecond in 0..3_000 {
            let now = Time::from_millis(millisecond);
            while let Some(&(at, number)) = acks.front().filter(|&&(at, _)| at <= now) {
                acks.pop_front();
                sender.on_ack(at, &ack(&[number..=number]), Feedback::NEUTRAL);
            }
            while sender.can_send(1200) {
                let number = sender.on_sent(now, 1200);
                link_free = link_free.max(now) + per_section;
                acks.push_back((link_free + Duration::from_millis(100), number));
            }
        }
        // BBR keeps twice the bandwidth-delay product it measured in flight: 2 x 125 kB here. Without rate samples it
        // never learns the rate and stays at its initial window.
        let window = sender.window();
        assert!((200_000..=400_000).contains(&window), "window {window} after 3 s (initial {initial})");
    }

    #[test]
    fn the_window_limits_what_may_be_sent() {
        let config = CcConfig::default();
        let mut sender = SectionSender::new(CcKind::Vegas, &config, Time::ZERO);
        assert_eq!(sender.controller(), "vegas");
        let mut sent = 0;
        while sender.can_send(1200) {
            sender.on_sent(Time::ZERO, 1200);
            sent += 1;
        }
        assert!(sent > 0 && sent < 1000, "{sent} packets in the initial window");
    }
}
