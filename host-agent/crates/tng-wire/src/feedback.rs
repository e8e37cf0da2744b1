//! The in-network feedback fields (`queue_level`, `rate_hint`): the only header bytes a switch may rewrite.

use std::time::Duration;

use crate::header::{ASSOCIATED_DATA_LEN, HEADER_LEN};
use crate::packet::Packet;
use crate::WireError;

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

    /// The 6 bytes at header offset 18.
    pub fn encode(self) -> [u8; HEADER_LEN - ASSOCIATED_DATA_LEN] {
        let mut bytes = [0; HEADER_LEN - ASSOCIATED_DATA_LEN];
        bytes[..2].copy_from_slice(&self.queue_level.to_be_bytes());
        bytes[2..].copy_from_slice(&self.rate_hint.to_be_bytes());
        bytes
    }
}

/// Does in place what a switch does at dequeue: checks that `datagram` is a well-formed tng packet (every receiver
/// rule), then writes `max(queue_level, own)` and `min(rate_hint, own)` into its header. Returns the feedback now
/// in the header. Leaves `datagram` untouched on error; the AEAD does not cover these bytes, so the packet still opens.
pub fn rewrite_feedback(datagram: &mut [u8], own: Feedback) -> Result<Feedback, WireError> {
    let merged = Packet::parse(datagram)?.feedback.merge(own);
    let len = datagram.len();
    let field = datagram.get_mut(ASSOCIATED_DATA_LEN..HEADER_LEN).ok_or(WireError::TruncatedHeader { len })?;
    field.copy_from_slice(&merged.encode());
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{Flags, FlowHeader, PacketType, TAG_LEN};

    fn data_packet(feedback: Feedback) -> Vec<u8> {
        let header = FlowHeader {
            packet_type: PacketType::Data,
            flags: Flags::EMPTY,
            channel_id: 1,
            connection_id: 42,
            packet_number: 9,
            payload_length: TAG_LEN as u16,
            feedback,
        };
        let mut datagram = header.encode().to_vec();
        datagram.extend_from_slice(&[0xaa; TAG_LEN]);
        datagram
    }

    #[test]
    fn switch_keeps_the_larger_queue_and_the_smaller_rate() {
        let mut datagram = data_packet(Feedback { queue_level: 100, rate_hint: 10_000 });
        let own = Feedback { queue_level: 50, rate_hint: 20_000 };
        assert_eq!(rewrite_feedback(&mut datagram, own), Ok(Feedback { queue_level: 100, rate_hint: 10_000 }));
        let own = Feedback { queue_level: 300, rate_hint: 5_000 };
        assert_eq!(rewrite_feedback(&mut datagram, own), Ok(Feedback { queue_level: 300, rate_hint: 5_000 }));
        assert_eq!(&datagram[18..24], &[0x01, 0x2c, 0x00, 0x00, 0x13, 0x88]);
        assert_eq!(Packet::parse(&datagram).map(|p| p.feedback), Ok(Feedback { queue_level: 300, rate_hint: 5_000 }));
    }

    #[test]
    fn rewrite_changes_only_the_feedback_bytes() {
        let original = data_packet(Feedback::NEUTRAL);
        let mut datagram = original.clone();
        rewrite_feedback(&mut datagram, Feedback { queue_level: 7, rate_hint: 0 }).expect("well-formed packet");
        assert_eq!(datagram[..ASSOCIATED_DATA_LEN], original[..ASSOCIATED_DATA_LEN]);
        assert_eq!(datagram[HEADER_LEN..], original[HEADER_LEN..]);
        assert_ne!(datagram[ASSOCIATED_DATA_LEN..HEADER_LEN], original[ASSOCIATED_DATA_LEN..HEADER_LEN]);
    }

    #[test]
    fn neutral_values_change_nothing() {
        let observed = Feedback { queue_level: 1234, rate_hint: 0 };
        assert_eq!(observed.merge(Feedback::NEUTRAL), observed);
        assert_eq!(Feedback::NEUTRAL.merge(observed), observed);
        assert_eq!(Feedback::NEUTRAL.merge(Feedback::NEUTRAL), Feedback::NEUTRAL);
        assert_eq!(Feedback::NEUTRAL.rate_hint_kbps(), None);
        assert_eq!(observed.rate_hint_kbps(), Some(0));
        assert_eq!(Feedback::NEUTRAL.queue_delay(), Duration::ZERO);
        let mut datagram = data_packet(observed);
        assert_eq!(rewrite_feedback(&mut datagram, Feedback::NEUTRAL), Ok(observed));
    }

    #[test]
    fn reserved_queue_level_reads_as_the_maximum() {
        let reserved = Feedback { queue_level: 0xFFFF, rate_hint: u32::MAX };
        assert_eq!(reserved.effective_queue_level(), Feedback::QUEUE_LEVEL_MAX);
        assert_eq!(reserved.merge(Feedback::NEUTRAL).queue_level, Feedback::QUEUE_LEVEL_MAX);
        let mut datagram = data_packet(Feedback::NEUTRAL);
        assert_eq!(rewrite_feedback(&mut datagram, reserved).map(|f| f.queue_level), Ok(Feedback::QUEUE_LEVEL_MAX));
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
    fn malformed_packets_are_left_untouched() {
        let mut datagram = data_packet(Feedback::NEUTRAL);
        datagram[0] = 2;
        let before = datagram.clone();
        let own = Feedback { queue_level: 9, rate_hint: 9 };
        assert_eq!(rewrite_feedback(&mut datagram, own), Err(WireError::BadVersion { version: 2 }));
        assert_eq!(datagram, before);
        let mut short = vec![1, 3, 0];
        assert_eq!(rewrite_feedback(&mut short, own), Err(WireError::TruncatedHeader { len: 3 }));
    }
}
