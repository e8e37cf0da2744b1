//! NewReno (RFC 5681, RFC 6582) with QUIC's windows and recovery period (RFC 9002 section 7).

use std::time::Duration;

use super::pacing::{window_pacing_rate, RateCap};
use super::recovery::RecoveryPeriod;
use super::{AckSample, CcConfig, CongestionController, LossEvent, PathFeedback};
use crate::time::Time;

/// RFC 9002 kLossReductionFactor.
const LOSS_REDUCTION_FACTOR: f64 = 0.5;

/// Slow start grows the window by the bytes acknowledged; congestion avoidance by one datagram per window.
#[derive(Clone, Debug)]
pub struct NewReno {
    config: CcConfig,
    window: u64,
    ssthresh: u64,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    bytes_acked: u64,
    recovery: RecoveryPeriod,
    rate_cap: RateCap,
}

impl NewReno {
    pub fn new(config: &CcConfig) -> Self {
        NewReno {
            window: config.initial_window(),
            ssthresh: u64::MAX,
            bytes_acked: 0,
            recovery: RecoveryPeriod::default(),
            rate_cap: RateCap::default(),
            config: config.clone(),
        }
    }

    /// Halves the window once per recovery period: loss, ECN-CE and a shared queue above threshold alike.
    fn congestion_event(&mut self, now: Time, sent_time: Time) {
        if !self.recovery.enter(now, sent_time) {
            return;
        }
        self.ssthresh = ((self.window as f64 * LOSS_REDUCTION_FACTOR) as u64).max(self.config.minimum_window());
        self.window = self.ssthresh;
        self.bytes_acked = 0;
    }
}

impl CongestionController for NewReno {
    fn on_sent(&mut self, _now: Time, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, _now: Time, ack: &AckSample) {
        // RFC 9002 section 7.8: an application-limited sender has not tested the window it would grow.
        if ack.app_limited || self.recovery.covers(ack.sent_time) {
            return;
        }
        if self.window < self.ssthresh {
            self.window = self.window.saturating_add(ack.bytes_acked);
            return;
        }
        self.bytes_acked = self.bytes_acked.saturating_add(ack.bytes_acked);
        if self.bytes_acked >= self.window {
            self.bytes_acked -= self.window;
            self.window = self.window.saturating_add(self.config.datagram_size());
        }
    }

    fn on_loss(&mut self, now: Time, loss: &LossEvent) {
        self.congestion_event(now, loss.largest_lost_sent_time);
        if loss.persistent {
            self.window = self.config.minimum_window();
            self.bytes_acked = 0;
            self.recovery.reset();
        }
    }

    fn on_ecn_ce(&mut self, now: Time, sent_time: Time) {
        self.congestion_event(now, sent_time);
    }

    fn on_feedback(&mut self, now: Time, sent_time: Time, feedback: &PathFeedback) {
        self.rate_cap.update(feedback);
        if self.config.queue_exceeds_threshold(feedback) {
            self.congestion_event(now, sent_time);
        }
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn pacing_rate(&self, srtt: Duration) -> u64 {
        self.rate_cap.apply(window_pacing_rate(self.window, srtt))
    }

    fn name(&self) -> &'static str {
        "newreno"
    }

    fn state(&self) -> &'static str {
        if self.window < self.ssthresh {
            "slow_start"
        } else {
            "congestion_avoidance"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::FALLBACK_RTT;

    const MSS: u64 = 1200;
    const RTT: Duration = Duration::from_millis(100);

    fn config() -> CcConfig {
        CcConfig { max_datagram_size: MSS, queue_threshold: Some(Duration::from_millis(5)), ..CcConfig::default() }
    }

    fn ack(bytes: u64, sent_time: Time) -> AckSample {
        AckSample {
            bytes_acked: bytes,
            sent_time,
            rtt: Some(RTT),
            srtt: RTT,
            min_rtt: RTT,
            delivery_rate: None,
            app_limited: false,
            bytes_in_flight: 0,
        }
    }

    fn loss(sent_time: Time) -> LossEvent {
        LossEvent { bytes_lost: MSS, largest_lost_sent_time: sent_time, persistent: false, bytes_in_flight: 0 }
    }

    /// Acknowledges one full window, one datagram per ACK, sent one RTT before `now`.
    fn ack_window(cc: &mut NewReno, now: Time) {
        let sent = now - RTT;
        for _ in 0..cc.window() / MSS {
            cc.on_ack(now, &ack(MSS, sent));
        }
    }

    #[test]
    fn initial_and_minimum_windows_follow_rfc9002() {
        assert_eq!(NewReno::new(&config()).window(), 10 * MSS);
        let jumbo = CcConfig { max_datagram_size: 9000, ..config() };
        assert_eq!(NewReno::new(&jumbo).window(), 18_000);
        let small = CcConfig { max_datagram_size: 1000, ..config() };
        assert_eq!(NewReno::new(&small).window(), 10_000);
        assert_eq!(config().minimum_window(), 2 * MSS);
    }

    #[test]
    fn slow_start_doubles_the_window_every_rtt() {
        let mut cc = NewReno::new(&config());
        let mut now = Time::ZERO;
        for round in 0..5 {
            let before = cc.window();
            now += RTT;
            ack_window(&mut cc, now);
            assert_eq!(cc.window(), 2 * before, "round {round}");
        }
    }

    #[test]
    fn congestion_avoidance_grows_one_datagram_per_window() {
        let mut cc = NewReno::new(&config());
        cc.on_loss(Time::from_millis(60), &loss(Time::from_millis(50)));
        let mut now = Time::from_millis(100);
        for _ in 0..3 {
            let before = cc.window();
            now += RTT;
            // Exactly one window of bytes, in datagrams.
            for _ in 0..before / MSS {
                cc.on_ack(now, &ack(MSS, now - RTT));
            }
            cc.on_ack(now, &ack(before % MSS, now - RTT));
            assert_eq!(cc.window(), before + MSS);
        }
    }

    #[test]
    fn loss_halves_the_window_and_ends_slow_start() {
        let mut cc = NewReno::new(&config());
        cc.on_loss(Time::from_millis(200), &loss(Time::from_millis(100)));
        assert_eq!(cc.window(), 5 * MSS);
        // Back out of recovery, growth is linear: one more window of ACKs adds one datagram, not a window.
        ack_window(&mut cc, Time::from_millis(400));
        assert_eq!(cc.window(), 6 * MSS);
    }

    #[test]
    fn one_reduction_per_recovery_episode() {
        let mut cc = NewReno::new(&config());
        cc.on_loss(Time::from_millis(200), &loss(Time::from_millis(100)));
        assert_eq!(cc.window(), 5 * MSS);
        // More losses, a CE mark and a queue report about packets sent before recovery began: same episode.
        cc.on_loss(Time::from_millis(210), &loss(Time::from_millis(150)));
        cc.on_ecn_ce(Time::from_millis(220), Time::from_millis(200));
        cc.on_feedback(
            Time::from_millis(230),
            Time::from_millis(199),
            &PathFeedback { queue_delay: Some(Duration::from_millis(50)), rate_hint: None },
        );
        assert_eq!(cc.window(), 5 * MSS);
        // ACKs of packets sent during recovery do not grow the window.
        cc.on_ack(Time::from_millis(240), &ack(MSS, Time::from_millis(200)));
        assert_eq!(cc.window(), 5 * MSS);
        // A loss of a packet sent after recovery began is a new episode.
        cc.on_loss(Time::from_millis(300), &loss(Time::from_millis(201)));
        assert_eq!(cc.window(), 5 * MSS / 2);
    }

    #[test]
    fn window_never_falls_below_two_datagrams() {
        let mut cc = NewReno::new(&config());
        for i in 1..20 {
            cc.on_loss(Time::from_millis(i * 100), &loss(Time::from_millis(i * 100 - 1)));
            assert!(cc.window() >= 2 * MSS);
        }
        assert_eq!(cc.window(), 2 * MSS);
    }

    #[test]
    fn persistent_congestion_collapses_to_the_minimum_and_ends_recovery() {
        let mut cc = NewReno::new(&config());
        ack_window(&mut cc, Time::from_millis(100));
        let mut persistent = loss(Time::from_millis(150));
        persistent.persistent = true;
        cc.on_loss(Time::from_millis(2_000), &persistent);
        assert_eq!(cc.window(), 2 * MSS);
        // Slow start resumes up to the halved threshold.
        cc.on_ack(Time::from_millis(2_100), &ack(MSS, Time::from_millis(1_000)));
        assert_eq!(cc.window(), 3 * MSS);
    }

    #[test]
    fn ecn_ce_halves_once_per_episode() {
        let mut cc = NewReno::new(&config());
        cc.on_ecn_ce(Time::from_millis(200), Time::from_millis(100));
        assert_eq!(cc.window(), 5 * MSS);
        cc.on_ecn_ce(Time::from_millis(201), Time::from_millis(150));
        assert_eq!(cc.window(), 5 * MSS);
    }

    #[test]
    fn queue_feedback_above_threshold_reduces_below_does_not() {
        let mut cc = NewReno::new(&config());
        let at = |ms| PathFeedback { queue_delay: Some(Duration::from_millis(ms)), rate_hint: None };
        cc.on_feedback(Time::from_millis(200), Time::from_millis(100), &at(5));
        cc.on_feedback(Time::from_millis(200), Time::from_millis(100), &PathFeedback::default());
        assert_eq!(cc.window(), 10 * MSS);
        cc.on_feedback(Time::from_millis(200), Time::from_millis(100), &at(6));
        assert_eq!(cc.window(), 5 * MSS);

        let mut no_threshold = NewReno::new(&CcConfig { queue_threshold: None, ..config() });
        no_threshold.on_feedback(Time::from_millis(200), Time::from_millis(100), &at(2_000));
        assert_eq!(no_threshold.window(), 10 * MSS);
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut cc = NewReno::new(&config());
        let mut sample = ack(MSS, Time::ZERO);
        sample.app_limited = true;
        cc.on_ack(Time::from_millis(100), &sample);
        assert_eq!(cc.window(), 10 * MSS);
    }

    #[test]
    fn pacing_is_five_quarters_window_per_rtt_capped_by_the_rate_hint() {
        let mut cc = NewReno::new(&config());
        assert_eq!(cc.pacing_rate(RTT), 150_000);
        assert_eq!(cc.pacing_rate(Duration::ZERO), cc.pacing_rate(FALLBACK_RTT));
        let hint = |rate| PathFeedback { queue_delay: None, rate_hint: rate };
        cc.on_feedback(Time::ZERO, Time::ZERO, &hint(Some(40_000)));
        assert_eq!(cc.pacing_rate(RTT), 40_000);
        cc.on_feedback(Time::ZERO, Time::ZERO, &hint(Some(0)));
        assert_eq!(cc.pacing_rate(RTT), 0);
        assert_eq!(cc.window(), 10 * MSS, "a rate hint is not a congestion signal");
        cc.on_feedback(Time::ZERO, Time::ZERO, &hint(None));
        assert_eq!(cc.pacing_rate(RTT), 150_000);
    }
}
