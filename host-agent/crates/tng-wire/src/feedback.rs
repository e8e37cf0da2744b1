//! The in-network feedback fields (`queue_level`, `rate_hint`): the only header bytes a switch may rewrite.

use std::time::Duration;

/// Queue and rate feedback as carried in header bytes 18-23 (raw values, so a packet re-encodes byte-exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Feedback {
    /// Largest queueing delay seen on the path, in units of [`Feedback::QUEUE_LEVEL_UNIT`]; `0xFFFF` reads as
    /// [`Feedback::QUEUE_LEVEL_MAX`].
    pub queue_level: u16,
    /// Smallest rate a switch on the path offers, in kbit/s; `0` asks for a pause, `u32::MAX` is no information.
    pub rate_hint: u32,
}

impl Feedback {
    /// What senders write: no queue seen, no rate limit known. Identity of [`Feedback::merge`].
    pub const NEUTRAL: Self = Self { queue_level: 0, rate_hint: u32::MAX };
    /// Largest meaningful `queue_level` (2.097 s or more); `0xFFFF` is reserved.
    pub const QUEUE_LEVEL_MAX: u16 = 0xFFFE;
    /// The unit of `queue_level`: BMv2's microsecond `deq_timedelta >> 5`.
    pub const QUEUE_LEVEL_UNIT: Duration = Duration::from_micros(32);
    /// Bytes of the two fields on the wire: `queue_level` (2) and `rate_hint` (4).
    pub const ENCODED_LEN: usize = 6;

    /// `queue_level` with the reserved `0xFFFF` read as [`Feedback::QUEUE_LEVEL_MAX`].
    pub fn effective_queue_level(self) -> u16 {
        self.queue_level.min(Self::QUEUE_LEVEL_MAX)
    }

    /// The queueing delay `queue_level` stands for.
    pub fn queue_delay(self) -> Duration {
        Self::QUEUE_LEVEL_UNIT * u32::from(self.effective_queue_level())
    }

    /// The `queue_level` a switch reports for a queueing delay (rounded down, saturating at the maximum).
    pub fn queue_level_for(delay: Duration) -> u16 {
        let units = delay.as_micros() / Self::QUEUE_LEVEL_UNIT.as_micros();
        u16::try_from(units).map_or(Self::QUEUE_LEVEL_MAX, |units| units.min(Self::QUEUE_LEVEL_MAX))
    }

    /// The rate limit in kbit/s, `None` when no switch gave one.
    pub fn rate_hint_kbps(self) -> Option<u32> {
        (self.rate_hint != Self::NEUTRAL.rate_hint).then_some(self.rate_hint)
    }

    /// Combines two observations as a switch does: the larger queue, the smaller rate.
    pub fn merge(self, other: Self) -> Self {
        Self {
            queue_level: self.effective_queue_level().max(other.effective_queue_level()),
            rate_hint: self.rate_hint.min(other.rate_hint),
        }
    }

    /// The two fields big-endian, as they end the flow header.
    pub fn encode(self) -> [u8; Self::ENCODED_LEN] {
        let mut bytes = [0; Self::ENCODED_LEN];
        bytes[..2].copy_from_slice(&self.queue_level.to_be_bytes());
        bytes[2..].copy_from_slice(&self.rate_hint.to_be_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutral_values_change_nothing() {
        let observed = Feedback { queue_level: 1234, rate_hint: 0 };
        assert_eq!(observed.merge(Feedback::NEUTRAL), observed);
        assert_eq!(Feedback::NEUTRAL.merge(observed), observed);
        assert_eq!(Feedback::NEUTRAL.merge(Feedback::NEUTRAL), Feedback::NEUTRAL);
        assert_eq!(Feedback::NEUTRAL.rate_hint_kbps(), None);
        assert_eq!(observed.rate_hint_kbps(), Some(0));
        assert_eq!(Feedback::NEUTRAL.queue_delay(), Duration::ZERO);
    }

    #[test]
    fn reserved_queue_level_reads_as_the_maximum() {
        let reserved = Feedback { queue_level: 0xFFFF, rate_hint: u32::MAX };
        assert_eq!(reserved.effective_queue_level(), Feedback::QUEUE_LEVEL_MAX);
        assert_eq!(reserved.merge(Feedback::NEUTRAL).queue_level, Feedback::QUEUE_LEVEL_MAX);
    }

    #[test]
    fn queue_level_converts_delays_in_32_microsecond_units() {
        assert_eq!(Feedback::queue_level_for(Duration::from_micros(31)), 0);
        assert_eq!(Feedback::queue_level_for(Duration::from_micros(3_200)), 100);
        assert_eq!(Feedback::queue_level_for(Duration::from_secs(3)), Feedback::QUEUE_LEVEL_MAX);
        assert_eq!(Feedback::queue_level_for(Duration::MAX), Feedback::QUEUE_LEVEL_MAX);
        let typical = Feedback { queue_level: 100, rate_hint: u32::MAX };
        assert_eq!(typical.queue_delay(), Duration::from_micros(3_200));
        let full = Feedback { queue_level: Feedback::QUEUE_LEVEL_MAX, rate_hint: u32::MAX };
        assert_eq!(full.queue_delay(), Duration::from_micros(2_097_088));
    }

    #[test]
    fn encodes_both_fields_big_endian() {
        let feedback = Feedback { queue_level: 0x0102, rate_hint: 0x0304_0506 };
        assert_eq!(feedback.encode(), [1, 2, 3, 4, 5, 6]);
    }
}
