//! Pacing: a token bucket filled at the congestion controller's pacing rate, so rate-driven controllers (BBR, Copa)
//! get their rate and window-driven ones do not dump a whole window in one burst.

use std::time::Duration;

use crate::time::Time;

/// How many full-size packets may leave back to back when the bucket is full.
const BURST_PACKETS: u64 = 10;

#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    tokens: u64,
    last_refill: Time,
}

impl Pacer {
    pub(crate) fn new(now: Time, max_datagram_size: u64) -> Pacer {
        Pacer { tokens: BURST_PACKETS * max_datagram_size, last_refill: now }
    }

    fn capacity(max_datagram_size: u64) -> u64 {
        BURST_PACKETS * max_datagram_size
    }

    fn refill(&mut self, now: Time, rate: u64, max_datagram_size: u64) {
        let elapsed = now.saturating_since(self.last_refill);
        let added = u64::try_from(u128::from(rate) * elapsed.as_nanos() / 1_000_000_000).unwrap_or(u64::MAX);
        self.tokens = self.tokens.saturating_add(added).min(Self::capacity(max_datagram_size));
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
        for _ in 0..BURST_PACKETS {
            assert_eq!(pacer.delay(Time::ZERO, 1000, 1_000_000, 1000), None);
            pacer.on_sent(1000);
        }
        // 1000 bytes at 1 MB/s: 1 ms.
        assert_eq!(pacer.delay(Time::ZERO, 1000, 1_000_000, 1000), Some(Time::from_millis(1)));
        assert_eq!(pacer.next_release(1000, 1_000_000), Time::from_millis(1));
        assert_eq!(pacer.delay(Time::from_millis(1), 1000, 1_000_000, 1000), None);
    }
}
