//! CUBIC (RFC 9438), without HyStart.

use std::time::Duration;

use super::pacing::{window_pacing_rate, RateCap, FALLBACK_RTT};
use super::recovery::RecoveryPeriod;
use super::{AckSample, CcConfig, CongestionController, LossEvent, PathFeedback};
use crate::time::Time;

/// RFC 9438 C, in segments per second cubed.
const C: f64 = 0.4;
/// RFC 9438 beta_cubic: the window after a congestion event, as a fraction of the window before it.
const BETA: f64 = 0.7;
/// RFC 9438 alpha_cubic: the Reno-friendly estimate's growth per RTT, in segments, while below the prior window;
/// it matches Reno's average rate given CUBIC's gentler decrease.
const RENO_FRIENDLY_ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);
/// Keeps windows finite whatever the input, so the arithmetic never meets infinity or NaN.
const MAX_WINDOW: f64 = u64::MAX as f64;

/// The window follows W(t) = C (t - K)^3 + W_max from the start of each congestion-avoidance epoch, or Reno's
/// average rate when that is faster. Windows are kept in bytes as `f64` so per-ACK increments do not round away.
#[derive(Clone, Debug)]
pub struct Cubic {
    config: CcConfig,
    window: f64,
    ssthresh: f64,
    /// Window just before the last reduction, after fast convergence (bytes).
    w_max: f64,
    /// Window just before the last reduction (bytes): the Reno-friendly estimate grows at Reno's full rate above it.
    prior_window: f64,
    /// Seconds from the epoch start until W(t) reaches `w_max`.
    k: f64,
    /// Reno-friendly window estimate (bytes).
    w_est: f64,
    /// Start of the current congestion-avoidance epoch, set by its first ACK.
    epoch_start: Option<Time>,
    recovery: RecoveryPeriod,
    rate_cap: RateCap,
}

impl Cubic {
    pub fn new(config: &CcConfig) -> Self {
        Cubic {
            window: config.initial_window() as f64,
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            prior_window: 0.0,
            k: 0.0,
            w_est: 0.0,
            epoch_start: None,
            recovery: RecoveryPeriod::default(),
            rate_cap: RateCap::default(),
            config: config.clone(),
        }
    }

    fn mss(&self) -> f64 {
        self.config.datagram_size() as f64
    }

    /// W(t) in bytes, `t` seconds into the epoch.
    fn w_cubic(&self, t: f64) -> f64 {
        (C * (t - self.k).powi(3)) * self.mss() + self.w_max
    }

    fn start_epoch(&mut self, now: Time) -> Time {
        // Entering avoidance above the last W_max (slow start after persistent congestion) starts a new plateau here.
        self.w_max = self.w_max.max(self.window);
        // RFC 9438 equation 2, with cwnd_epoch the window the epoch starts from.
        self.k = ((self.w_max - self.window) / self.mss() / C).cbrt();
        self.w_est = self.window;
        self.epoch_start = Some(now);
        now
    }

    fn congestion_event(&mut self, now: Time, sent_time: Time) {
        if !self.recovery.enter(now, sent_time) {
            return;
        }
        self.prior_window = self.window;
        // Fast convergence: a flow that lost before regaining its last W_max yields bandwidth to newer flows.
        self.w_max = if self.window < self.w_max { self.window * (1.0 + BETA) / 2.0 } else { self.window };
        self.ssthresh = (self.window * BETA).max(self.config.minimum_window() as f64);
        self.window = self.ssthresh;
        self.epoch_start = None;
    }
}

impl CongestionController for Cubic {
    fn on_sent(&mut self, _now: Time, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, now: Time, ack: &AckSample) {
        if ack.app_limited || self.recovery.covers(ack.sent_time) {
            return;
        }
        let acked = ack.bytes_acked as f64;
        if self.window < self.ssthresh {
            self.window = (self.window + acked).min(MAX_WINDOW);
            return;
        }
        let epoch_start = match self.epoch_start {
            Some(start) => start,
            None => self.start_epoch(now),
        };
        let t = (now - epoch_start).as_secs_f64();
        let rtt = [ack.srtt, ack.rtt.unwrap_or_default(), FALLBACK_RTT].into_iter().find(|rtt| !rtt.is_zero());
        let rtt = rtt.unwrap_or(FALLBACK_RTT).as_secs_f64();

        let alpha = if self.w_est >= self.prior_window { 1.0 } else { RENO_FRIENDLY_ALPHA };
        self.w_est = (self.w_est + alpha * acked * self.mss() / self.window).min(MAX_WINDOW);

        if self.w_cubic(t) < self.w_est {
            self.window = self.w_est;
        } else {
            // Aim at where the curve will be one RTT from now, growing at most by half a window per RTT.
            let target = self.w_cubic(t + rtt).min(1.5 * self.window).max(self.window);
            self.window += (target - self.window) * acked / self.window;
        }
        self.window = self.window.min(MAX_WINDOW);
    }

    fn on_loss(&mut self, now: Time, loss: &LossEvent) {
        self.congestion_event(now, loss.largest_lost_sent_time);
        if loss.persistent {
            self.window = self.config.minimum_window() as f64;
            self.epoch_start = None;
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
        // `as` saturates; the floor keeps every input from shrinking the window below the minimum.
        (self.window as u64).max(self.config.minimum_window())
    }

    fn pacing_rate(&self, srtt: Duration) -> u64 {
        self.rate_cap.apply(window_pacing_rate(self.window(), srtt))
    }

    fn name(&self) -> &'static str {
        "cubic"
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

    const MSS: u64 = 1200;
    const MSS_F: f64 = MSS as f64;

    fn config() -> CcConfig {
        CcConfig { max_datagram_size: MSS, queue_threshold: Some(Duration::from_millis(5)), ..CcConfig::default() }
    }

    fn loss(sent_time: Time) -> LossEvent {
        LossEvent { bytes_lost: MSS, largest_lost_sent_time: sent_time, persistent: false, bytes_in_flight: 0 }
    }

    /// A window-limited sender on a path with a constant `rtt`: one datagram acknowledged every rtt / window, each
    /// sent one RTT earlier. Returns the window after every ACK.
    fn ack_clock(cc: &mut Cubic, from: Time, until: Time, rtt: Duration) -> Vec<(Time, f64)> {
        let mut now = from;
        let mut trace = Vec::new();
        while now < until {
            now += rtt.mul_f64(MSS_F / cc.window() as f64);
            let sample = AckSample {
                bytes_acked: MSS,
                sent_time: now - rtt,
                rtt: Some(rtt),
                srtt: rtt,
                min_rtt: rtt,
                delivery_rate: None,
                app_limited: false,
                bytes_in_flight: cc.window(),
            };
            cc.on_ack(now, &sample);
            trace.push((now, cc.window));
        }
        trace
    }

    /// Grows a fresh controller to `segments` in slow start, then loses a packet at `now`.
    fn after_loss_at(segments: u64, now: Time) -> Cubic {
        let mut cc = Cubic::new(&config());
        cc.window = (segments * MSS) as f64;
        cc.on_loss(now, &loss(now - Duration::from_millis(1)));
        cc
    }

    fn window_at(trace: &[(Time, f64)], at: Time) -> f64 {
        trace.iter().take_while(|(time, _)| *time <= at).last().map_or(0.0, |(_, window)| *window)
    }

    fn rfc_k(w_max_segments: f64, epoch_segments: f64) -> f64 {
        ((w_max_segments - epoch_segments) / C).cbrt()
    }

    #[test]
    fn loss_cuts_to_beta_and_enters_avoidance() {
        let cc = after_loss_at(100, Time::from_millis(1_000));
        assert_eq!(cc.window(), 70 * MSS);
        assert_eq!(cc.w_max, 100.0 * MSS_F);
    }

    #[test]
    fn window_follows_the_cubic_curve_after_a_loss() {
        // A long RTT keeps the Reno-friendly estimate below the curve the whole time.
        let rtt = Duration::from_millis(200);
        let loss_time = Time::from_millis(1_000);
        let mut cc = after_loss_at(100, loss_time);
        let k = rfc_k(100.0, 70.0);
        assert!((k - 75f64.cbrt()).abs() < 1e-12, "K = cbrt(W_max (1 - beta) / C)");
        let trace = ack_clock(&mut cc, loss_time, loss_time + Duration::from_secs(8), rtt);
        // The epoch starts with the first ACK of a packet sent after the loss: one RTT later.
        let epoch = loss_time + rtt;
        let mut worst: f64 = 0.0;
        for t in [0.5, 1.0, 2.0, 3.0, k, k + 0.5, k + 1.0, k + 2.0] {
            let expected = (C * (t - k).powi(3) + 100.0) * MSS_F;
            let window = window_at(&trace, epoch + Duration::from_secs_f64(t));
            assert!((window - expected).abs() <= MSS_F, "t = {t:.2}: window {window:.0}, W(t) {expected:.0}");
            worst = worst.max((window - expected).abs() / MSS_F);
        }
        println!("cubic: K = {k:.3} s, largest distance from W(t) {worst:.2} segments");
    }

    #[test]
    fn window_plateaus_near_w_max() {
        let rtt = Duration::from_millis(200);
        let loss_time = Time::from_millis(1_000);
        let mut cc = after_loss_at(100, loss_time);
        let k = rfc_k(100.0, 70.0);
        let trace = ack_clock(&mut cc, loss_time, loss_time + Duration::from_secs(8), rtt);
        let epoch = loss_time + rtt;
        let at = |t: f64| window_at(&trace, epoch + Duration::from_secs_f64(t)) / MSS_F;
        // Around K the window stays within a segment of W_max for a whole second, gaining under one segment, where
        // it gained over ten in the second from K - 3.5 to K - 2.5.
        for t in [k - 0.5, k - 0.25, k, k + 0.25, k + 0.5] {
            assert!((at(t) - 100.0).abs() <= 1.0, "t = {t:.2}: {:.1} segments", at(t));
        }
        assert!(at(k + 0.5) - at(k - 0.5) < 1.0);
        assert!(at(k - 2.5) - at(k - 3.5) > 10.0);
    }

    #[test]
    fn reno_friendly_region_grows_like_reno_when_faster() {
        // A small window on a short RTT: Reno's one segment per RTT outruns the cubic curve.
        let rtt = Duration::from_millis(10);
        let loss_time = Time::from_millis(1_000);
        let mut cc = after_loss_at(20, loss_time);
        let k = rfc_k(20.0, 14.0);
        let trace = ack_clock(&mut cc, loss_time, loss_time + Duration::from_secs(1), rtt);
        let epoch = loss_time + rtt;
        // W_est: alpha = 3(1-beta)/(1+beta) segments per RTT up to the prior window of 20, then 1 per RTT.
        let rtts_to_prior = 6.0 / RENO_FRIENDLY_ALPHA;
        for t in [0.3, 0.5, 0.8] {
            let rtts = t / rtt.as_secs_f64();
            let reno = 20.0 + (rtts - rtts_to_prior);
            let cubic = C * (t - k).powi(3) + 20.0;
            let window = window_at(&trace, epoch + Duration::from_secs_f64(t)) / MSS_F;
            assert!(reno > cubic + 10.0, "the region applies at t = {t}");
            assert!((window - reno).abs() <= 1.0, "t = {t}: window {window:.1}, Reno-friendly {reno:.1}");
        }
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let rtt = Duration::from_millis(200);
        let first_loss = Time::from_millis(1_000);
        let mut cc = after_loss_at(100, first_loss);
        ack_clock(&mut cc, first_loss, first_loss + Duration::from_secs(1), rtt);
        let before = cc.window;
        assert!(before < 100.0 * MSS_F, "lost again before regaining W_max");
        let second_loss = first_loss + Duration::from_secs(1);
        cc.on_loss(second_loss, &loss(second_loss - Duration::from_millis(1)));
        let w_max = before * (1.0 + BETA) / 2.0;
        assert!((cc.w_max - w_max).abs() < 1e-6);
        assert!((cc.window - before * BETA).abs() < 1e-6);

        // The next plateau is at the lowered W_max, reached K = cbrt((W_max - cwnd_epoch) / C) into the epoch.
        let k = rfc_k(w_max / MSS_F, before * BETA / MSS_F);
        let trace = ack_clock(&mut cc, second_loss, second_loss + Duration::from_secs(6), rtt);
        let plateau = window_at(&trace, second_loss + rtt + Duration::from_secs_f64(k));
        assert!((plateau - w_max).abs() <= MSS_F, "plateau {plateau:.0}, lowered W_max {w_max:.0}");
        assert!(plateau < before - 5.0 * MSS_F);
    }

    #[test]
    fn one_reduction_per_recovery_and_queue_feedback_reduces_above_threshold() {
        let mut cc = after_loss_at(100, Time::from_millis(1_000));
        cc.on_ecn_ce(Time::from_millis(1_010), Time::from_millis(990));
        cc.on_loss(Time::from_millis(1_020), &loss(Time::from_millis(1_000)));
        assert_eq!(cc.window(), 70 * MSS);
        let queue = |ms| PathFeedback { queue_delay: Some(Duration::from_millis(ms)), rate_hint: None };
        cc.on_feedback(Time::from_millis(1_200), Time::from_millis(1_100), &queue(5));
        assert_eq!(cc.window(), 70 * MSS, "at the threshold is not above it");
        cc.on_feedback(Time::from_millis(1_200), Time::from_millis(1_100), &queue(6));
        assert!((cc.window - 0.7 * 0.7 * 100.0 * MSS_F).abs() < 1e-6);
    }

    #[test]
    fn persistent_congestion_collapses_to_the_minimum() {
        let mut cc = after_loss_at(100, Time::from_millis(1_000));
        let mut persistent = loss(Time::from_millis(1_500));
        persistent.persistent = true;
        cc.on_loss(Time::from_millis(3_000), &persistent);
        assert_eq!(cc.window(), 2 * MSS);
    }

    #[test]
    fn pacing_follows_the_window_and_the_rate_hint() {
        let mut cc = Cubic::new(&config());
        assert_eq!(cc.pacing_rate(Duration::from_millis(100)), 150_000);
        cc.on_feedback(Time::ZERO, Time::ZERO, &PathFeedback { queue_delay: None, rate_hint: Some(0) });
        assert_eq!(cc.pacing_rate(Duration::from_millis(100)), 0);
    }
}
