//! Delivery-rate samples, as BBR takes them (draft-cheng-iccrg-delivery-rate-estimation): the bytes acknowledged
//! between a packet's departure and its acknowledgement, over the longer of the time since it left and the time
//! since the acknowledgement that preceded its departure. One implementation for every sender that feeds a
//! controller's [`AckSample::delivery_rate`](super::AckSample): an endpoint's channels and a relay's sections.

use crate::time::Time;

/// A sender's running count of acknowledged bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeliveryRateSampler {
    delivered: u64,
    delivered_time: Time,
}

/// What a packet keeps of its sender's count when it leaves (its send time it records itself).
#[derive(Debug, Clone, Copy)]
pub struct DeliveryMark {
    delivered: u64,
    delivered_time: Time,
}

impl DeliveryRateSampler {
    /// A packet leaves at `now`. `flight_restarts`: nothing was in flight before it, so its sample measures from now
    /// rather than across the idle time before.
    pub fn on_sent(&mut self, now: Time, flight_restarts: bool) -> DeliveryMark {
        if flight_restarts {
            self.delivered_time = now;
        }
        DeliveryMark { delivered: self.delivered, delivered_time: self.delivered_time }
    }

    /// `bytes` were newly acknowledged at `now`, the most recently sent of them marked `latest` when it left at
    /// `latest_sent`: the delivery rate in bytes per second, or `None` when no time has passed to measure it over.
    pub fn on_acked(&mut self, now: Time, bytes: u64, latest: DeliveryMark, latest_sent: Time) -> Option<u64> {
        self.delivered += bytes;
        self.delivered_time = now;
        let interval = now.saturating_since(latest.delivered_time).max(now.saturating_since(latest_sent));
        if interval.is_zero() {
            return None;
        }
        let rate = u128::from(self.delivered - latest.delivered) * 1_000_000_000 / interval.as_nanos();
        Some(u64::try_from(rate).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_the_bytes_acknowledged_since_the_packet_left_over_that_time() {
        let mut sampler = DeliveryRateSampler::default();
        let first = sampler.on_sent(Time::ZERO, true);
        let second = sampler.on_sent(Time::from_millis(10), false);
        assert_eq!(
            sampler.on_acked(Time::from_millis(100), 1000, first, Time::ZERO),
            Some(10_000),
            "1000 bytes in 100 ms"
        );
        // The second left 10 ms in; by its ACK 2000 bytes were delivered since the flight began 110 ms before.
        assert_eq!(
            sampler.on_acked(Time::from_millis(110), 1000, second, Time::from_millis(10)),
            Some(2000 * 1000 / 110)
        );
    }

    #[test]
    fn a_flight_that_restarts_after_idle_time_is_not_measured_across_it() {
        let mut sampler = DeliveryRateSampler::default();
        let first = sampler.on_sent(Time::ZERO, true);
        sampler.on_acked(Time::from_millis(50), 1000, first, Time::ZERO);
        // Idle for ten seconds, then one packet: measured from when it left, not from the last ACK.
        let after_idle = sampler.on_sent(Time::from_millis(10_000), true);
        assert_eq!(
            sampler.on_acked(Time::from_millis(10_050), 1000, after_idle, Time::from_millis(10_000)),
            Some(20_000)
        );
        // Acknowledged the instant it left: nothing to measure over.
        let instant = sampler.on_sent(Time::from_millis(11_000), true);
        assert_eq!(sampler.on_acked(Time::from_millis(11_000), 1000, instant, Time::from_millis(11_000)), None);
    }
}
