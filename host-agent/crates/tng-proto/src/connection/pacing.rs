//! Pacing: a token bucket filled at the congestion controller's pacing rate, so rate-driven controllers (BBR, Copa)
//! get their rate and window-driven ones do not dump a whole window in one burst.

use std::time::Duration;

use crate::time::Time;

/// Full-size packets that may leave back to back when the bucket is full, however slow the rate.
const MIN_BURST_PACKETS: u64 = 10;
/// Full-size packets that may leave back to back, however fast the rate.
const MAX_BURST_PACKETS: u64 = 256;
/// How long a full bucket's burst lasts at the pacing rate, between those bounds. At a few Gbit/s ten packets
/// leave in tens of microseconds, far below what a timer can wait: a bucket of ten woke the sender once per
/// handful of packets and capped its sends (GSO) at ten segments. As quinn and Linux's TCP pacing do, a burst
/// may last a couple of milliseconds instead.
const BURST_INTERVAL: Duration = Duration::from_millis(2);

#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    tokens: u64,
    last_refill: Time,
}

impl Pacer {
    pub(crate) fn new(now: Time, max_datagram_size: u64) -> Pacer {
        Pacer { tokens: MIN_BURST_PACKETS * max_datagram_size, last_refill: now }
    }

    /// Bytes a full bucket holds at `rate` bytes per second.
    fn capacity(rate: u64, max_datagram_size: u64) -> u64 {
        let burst = u128::from(rate) * BURST_INTERVAL.as_nanos() / 1_000_000_000;
        let (least, most) = (MIN_BURST_PACKETS * max_datagram_size, MAX_BURST_PACKETS * max_datagram_size);
        u64::try_from(burst).unwrap_or(u64::MAX).clamp(least, most)
    }

    fn refill(&mut self, now: Time, rate: u64, max_datagram_size: u64) {
        let elapsed = now.saturating_since(self.last_refill);
        let added = u64::try_from(u128::from(rate) * elapsed.as_nanos() / 1_000_000_000).unwrap_or(u64::MAX);
        self.tokens = self.tokens.saturating_add(added).min(Self::capacity(rate, max_datagram_size));
        self.last_refill = now;
    }

    /// When a packet of `bytes` may leave at `rate` bytes per second: `None` if now.
    pub(crate) fn delay(&mut self, now: Time, bytes: u64, rate: u64, max_datagram_size: u64) -> Option<Time> {
        self.refill(now, rate, max_datagram_size);
        if self.tokens >= bytes {
            return None;
        }
        let missing = bytes - self.tokens;
        let rate = rate.max(1);
        let nanos = (u128::from(missing) * 1_000_000_000).div_ceil(u128::from(rate));
        Some(now + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)))
    }

    /// When a packet of `bytes` may leave at `rate`, without changing the bucket.
    pub(crate) fn next_release(&self, bytes: u64, rate: u64) -> Time {
        if self.tokens >= bytes {
            return self.last_refill;
        }
        let nanos = (u128::from(bytes - self.tokens) * 1_000_000_000).div_ceil(u128::from(rate.max(1)));
        self.last_refill + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    pub(crate) fn on_sent(&mut self, bytes: u64) {
        self.tokens = self.tokens.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_a_burst_then_spaces_packets_at_the_rate() {
        let mut pacer = Pacer::new(Time::ZERO, 1000);
        for _ in 0..MIN_BURST_PACKETS {
            assert_eq!(pacer.delay(Time::ZERO, 1000, 1_000_000, 1000), None);
            pacer.on_sent(1000);
        }
        // 1000 bytes at 1 MB/s: 1 ms.
        assert_eq!(pacer.delay(Time::ZERO, 1000, 1_000_000, 1000), Some(Time::from_millis(1)));
        assert_eq!(pacer.next_release(1000, 1_000_000), Time::from_millis(1));
        assert_eq!(pacer.delay(Time::from_millis(1), 1000, 1_000_000, 1000), None);
    }

    /// Drains the bucket at `rate` after a long idle period; the packets that left back to back.
    fn burst_after_idle(rate: u64) -> u64 {
        let mut pacer = Pacer::new(Time::ZERO, 1000);
        let now = Time::from_millis(1000);
        let mut sent = 0;
        while pacer.delay(now, 1000, rate, 1000).is_none() {
            pacer.on_sent(1000);
            sent += 1;
        }
        sent
    }

    #[test]
    fn a_full_bucket_holds_two_milliseconds_at_the_rate_within_bounds() {
        // 1 MB/s: 2 ms is 2 packets, below the floor of ten.
        assert_eq!(burst_after_idle(1_000_000), MIN_BURST_PACKETS);
        // 50 MB/s: 2 ms is 100 packets.
        assert_eq!(burst_after_idle(50_000_000), 100);
        // 1 GB/s: 2 ms is 2000 packets, above the ceiling.
        assert_eq!(burst_after_idle(1_000_000_000), MAX_BURST_PACKETS);
    }
}
