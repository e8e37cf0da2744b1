//! Round-trip time estimation per channel (RFC 9002 section 5); the relay's sections use it too.

use std::time::Duration;

/// Timer granularity (RFC 9002 `kGranularity`).
pub(crate) const GRANULARITY: Duration = Duration::from_millis(1);

/// Smoothed, variance and minimum RTT from samples and the peer's reported ACK delays. The minimum comes from raw
/// samples and the ACK delay is subtracted only where that keeps a sample above it, so a peer that over-reports its
/// delay (or its clock stamps a packet before it arrived) can never drag the path's minimum below what it is.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    initial: Duration,
    latest: Duration,
    smoothed: Option<Duration>,
    variance: Duration,
    min: Duration,
}

impl RttEstimator {
    pub fn new(initial: Duration) -> RttEstimator {
        RttEstimator { initial, latest: initial, smoothed: None, variance: initial / 2, min: initial }
    }

    /// Feeds one sample: `rtt` measured from the largest newly acknowledged packet, `ack_delay` as reported by the
    /// peer (already capped at its max ack delay by the caller).
    pub fn update(&mut self, rtt: Duration, ack_delay: Duration) {
        self.latest = rtt;
        let Some(smoothed) = self.smoothed else {
            self.min = rtt;
            self.smoothed = Some(rtt);
            self.variance = rtt / 2;
            return;
        };
        self.min = self.min.min(rtt);
        // Subtract the ack delay only when it does not push the sample below the minimum.
        let adjusted = if rtt >= self.min + ack_delay { rtt - ack_delay } else { rtt };
        let deviation = smoothed.abs_diff(adjusted);
        self.variance = (self.variance * 3 + deviation) / 4;
        self.smoothed = Some((smoothed * 7 + adjusted) / 8);
    }

    pub fn has_sample(&self) -> bool {
        self.smoothed.is_some()
    }

    pub fn smoothed(&self) -> Duration {
        self.smoothed.unwrap_or(self.initial)
    }

    pub(crate) fn variance(&self) -> Duration {
        self.variance
    }

    pub fn min(&self) -> Duration {
        self.min
    }

    /// The probe timeout before backoff: `srtt + max(4 rttvar, granularity) + max_ack_delay`.
    pub(crate) fn pto_base(&self, max_ack_delay: Duration) -> Duration {
        self.smoothed() + (self.variance * 4).max(GRANULARITY) + max_ack_delay
    }

    /// The loss-detection time threshold: 9/8 of the larger of the smoothed and latest RTT, at least the granularity.
    pub(crate) fn loss_delay(&self) -> Duration {
        (self.smoothed().max(self.latest) * 9 / 8).max(GRANULARITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_rfc_9002() {
        let mut rtt = RttEstimator::new(Duration::from_millis(333));
        assert!(!rtt.has_sample());
        rtt.update(Duration::from_millis(100), Duration::from_millis(10));
        assert_eq!(rtt.smoothed(), Duration::from_millis(100));
        assert_eq!(rtt.variance(), Duration::from_millis(50));
        rtt.update(Duration::from_millis(120), Duration::from_millis(10));
        // adjusted 110: srtt = (700 + 110) / 8, rttvar = (150 + 10) / 4.
        assert_eq!(rtt.smoothed(), Duration::from_micros(101_250));
        assert_eq!(rtt.variance(), Duration::from_millis(40));
        assert_eq!(rtt.min(), Duration::from_millis(100));
        assert_eq!(rtt.loss_delay(), Duration::from_millis(135));
        rtt.update(Duration::from_millis(105), Duration::from_millis(50));
        // Ack delay not subtracted below min rtt: adjusted 105, srtt = (7 * 101.25 + 105) / 8.
        assert_eq!(rtt.smoothed(), Duration::from_nanos(101_718_750));
    }
}
