//! An administratively fixed rate instead of congestion control, for a section over a link of reserved capacity
//! (Tng section 6.2: the relays around an inter-site WAN). Losses there are not congestion, so nothing backs off:
//! the window is the rate times the section's round trip from its first sample on, with no ramp-up.

use std::time::Duration;

use super::pacing::RateCap;
use super::{AckSample, CcConfig, CongestionController, LossEvent, PathFeedback};
use crate::time::Time;

/// Beyond the round trip, the window covers this much of the rate: the receiver delays its acknowledgements (a
/// section receiver by up to 5 ms), and without the margin each delay would idle the link. The same margin is the most
/// queue the section can build at its bottleneck.
const ACK_DELAY_MARGIN: Duration = Duration::from_millis(10);

/// Sends `rate` bytes per second: a window of the rate times (minimum RTT + [`ACK_DELAY_MARGIN`]), paced at the rate.
/// Loss, ECN and queue feedback change nothing; a switch's rate hint still caps the pacing rate.
#[derive(Clone, Debug)]
pub struct FixedRate {
    rate: u64,
    window: u64,
    rate_cap: RateCap,
}

impl FixedRate {
    /// A controller that sends `bytes_per_second` (at least 1); the initial window until the first RTT sample.
    pub fn new(config: &CcConfig, bytes_per_second: u64) -> Self {
        FixedRate { rate: bytes_per_second.max(1), window: config.initial_window(), rate_cap: RateCap::default() }
    }

    /// The configured rate, bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }
}

impl CongestionController for FixedRate {
    fn on_sent(&mut self, _now: Time, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, _now: Time, ack: &AckSample) {
        let round_trip = (ack.min_rtt + ACK_DELAY_MARGIN).as_secs_f64();
        // `as` saturates: no rate or RTT can overflow the window.
        self.window = ((self.rate as f64 * round_trip) as u64).max(1);
    }

    fn on_loss(&mut self, _now: Time, _loss: &LossEvent) {}

    fn on_ecn_ce(&mut self, _now: Time, _sent_time: Time) {}

    fn on_feedback(&mut self, _now: Time, _sent_time: Time, feedback: &PathFeedback) {
        self.rate_cap.update(feedback);
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn pacing_rate(&self, _srtt: Duration) -> u64 {
        self.rate_cap.apply(self.rate)
    }

    fn name(&self) -> &'static str {
        "fixed"
    }

    fn state(&self) -> &'static str {
        "fixed_rate"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1200;

    fn config() -> CcConfig {
        CcConfig { max_datagram_size: MSS, ..CcConfig::default() }
    }

    fn ack(min_rtt_ms: u64) -> AckSample {
        AckSample {
            bytes_acked: MSS,
            sent_time: Time::ZERO,
            rtt: Some(Duration::from_millis(min_rtt_ms)),
            srtt: Duration::from_millis(min_rtt_ms),
            min_rtt: Duration::from_millis(min_rtt_ms),
            delivery_rate: None,
            app_limited: false,
            bytes_in_flight: 0,
        }
    }

    #[test]
    fn the_window_is_the_rate_times_the_round_trip_from_the_first_sample() {
        let mut fixed = FixedRate::new(&config(), 2_500_000); // 20 Mbit/s
        assert_eq!(fixed.window(), config().initial_window());
        fixed.on_ack(Time::from_millis(100), &ack(100));
        assert_eq!(fixed.window(), 275_000); // 2.5 MB/s x (100 + 10) ms
        assert_eq!(fixed.pacing_rate(Duration::from_millis(100)), 2_500_000);
        assert_eq!(fixed.name(), "fixed");
    }

    #[test]
    fn losses_ecn_and_queue_reports_change_nothing() {
        let mut fixed = FixedRate::new(&config(), 2_500_000);
        fixed.on_ack(Time::from_millis(100), &ack(100));
        let before = fixed.window();
        let loss = LossEvent {
            bytes_lost: 50 * MSS,
            largest_lost_sent_time: Time::from_millis(90),
            persistent: true,
            bytes_in_flight: 0,
        };
        fixed.on_loss(Time::from_millis(110), &loss);
        fixed.on_ecn_ce(Time::from_millis(120), Time::from_millis(100));
        let queue = PathFeedback { queue_delay: Some(Duration::from_secs(1)), rate_hint: None };
        fixed.on_feedback(Time::from_millis(130), Time::from_millis(100), &queue);
        assert_eq!(fixed.window(), before);
        assert_eq!(fixed.pacing_rate(Duration::from_millis(100)), 2_500_000);
    }

    #[test]
    fn a_switch_rate_hint_caps_the_pacing_rate_and_its_end_lifts_the_cap() {
        let mut fixed = FixedRate::new(&config(), 2_500_000);
        let hint = PathFeedback { queue_delay: None, rate_hint: Some(1_000_000) };
        fixed.on_feedback(Time::ZERO, Time::ZERO, &hint);
        assert_eq!(fixed.pacing_rate(Duration::from_millis(50)), 1_000_000);
        fixed.on_feedback(Time::ZERO, Time::ZERO, &PathFeedback::default());
        assert_eq!(fixed.pacing_rate(Duration::from_millis(50)), 2_500_000);
    }

    #[test]
    fn the_window_follows_the_minimum_round_trip() {
        let mut fixed = FixedRate::new(&config(), 2_500_000);
        fixed.on_ack(Time::from_millis(100), &ack(100));
        fixed.on_ack(Time::from_millis(200), &ack(20));
        assert_eq!(fixed.window(), 75_000); // 2.5 MB/s x (20 + 10) ms
    }
}
