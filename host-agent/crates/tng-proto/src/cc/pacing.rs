//! Pacing-rate arithmetic shared by the controllers, and the in-network rate cap.

use std::time::Duration;

use super::PathFeedback;

/// RTT assumed when the caller has no estimate yet (smoothed RTT zero). Short on purpose: the first flight is then
/// bounded by the window, not held back by a pacer guessing at a path it has not measured.
pub const FALLBACK_RTT: Duration = Duration::from_millis(1);

/// RFC 9002 section 7.7: window-based controllers pace at N = 1.25 times window per RTT, so the pacer spreads
/// bursts without becoming the bottleneck.
const WINDOW_PACING_GAIN: f64 = 1.25;

/// `bytes` per `rtt` as bytes per second: saturating, never zero, [`FALLBACK_RTT`] for a zero RTT.
pub(crate) fn bytes_per_rtt(bytes: f64, rtt: Duration) -> u64 {
    let rtt = if rtt.is_zero() { FALLBACK_RTT } else { rtt };
    // `as` saturates (and maps NaN to 0), so no input can overflow.
    ((bytes / rtt.as_secs_f64()) as u64).max(1)
}

/// Pacing rate of a window-based controller.
pub(crate) fn window_pacing_rate(window: u64, srtt: Duration) -> u64 {
    bytes_per_rtt(WINDOW_PACING_GAIN * window as f64, srtt)
}

/// The smallest rate the switches on the path offered, as last echoed: it caps the pacing rate of every controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RateCap {
    hint: Option<u64>,
}

impl RateCap {
    /// Takes the latest echo as the path's current state: a neutral hint lifts the cap.
    pub(crate) fn update(&mut self, feedback: &PathFeedback) {
        self.hint = feedback.rate_hint;
    }

    pub(crate) fn apply(self, rate: u64) -> u64 {
        self.hint.map_or(rate, |cap| rate.min(cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_pacing_is_five_quarters_of_the_window_per_rtt() {
        assert_eq!(window_pacing_rate(12_000, Duration::from_millis(100)), 150_000);
    }

    #[test]
    fn zero_rtt_uses_the_fallback_and_the_rate_is_never_zero() {
        assert_eq!(window_pacing_rate(1_000, Duration::ZERO), window_pacing_rate(1_000, FALLBACK_RTT));
        assert_eq!(bytes_per_rtt(1.0, Duration::from_secs(100)), 1);
        assert_eq!(bytes_per_rtt(f64::MAX, Duration::from_nanos(1)), u64::MAX);
    }

    #[test]
    fn rate_cap_follows_the_latest_echo() {
        let mut cap = RateCap::default();
        assert_eq!(cap.apply(5_000), 5_000);
        cap.update(&PathFeedback { queue_delay: None, rate_hint: Some(1_000) });
        assert_eq!(cap.apply(5_000), 1_000);
        assert_eq!(cap.apply(500), 500);
        cap.update(&PathFeedback { queue_delay: None, rate_hint: Some(0) });
        assert_eq!(cap.apply(5_000), 0);
        cap.update(&PathFeedback::default());
        assert_eq!(cap.apply(5_000), 5_000);
    }
}
