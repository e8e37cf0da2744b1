//! MPTCP's default scheduler: the eligible channel with the lowest smoothed RTT.

use super::{eligible, ChannelView, Scheduler};
use crate::time::Time;

#[derive(Clone, Copy, Debug, Default)]
pub struct LowestRtt;

impl Scheduler for LowestRtt {
    fn pick(&mut self, now: Time, channels: &[ChannelView], packet_len: u64) -> Option<u8> {
        eligible(now, channels, packet_len).min_by_key(|c| (c.srtt, c.channel)).map(|c| c.channel)
    }

    fn name(&self) -> &'static str {
        "lowest-rtt"
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{channel, PACKET};
    use super::*;

    #[test]
    fn lowest_rtt_with_room_wins() {
        let now = Time::ZERO;
        let mut fast = channel(7, 10, 2);
        let slow = channel(3, 50, 2);
        assert_eq!(LowestRtt.pick(now, &[slow, fast], PACKET), Some(7));
        fast.bytes_in_flight = fast.cwnd;
        assert_eq!(LowestRtt.pick(now, &[slow, fast], PACKET), Some(3));
    }

    #[test]
    fn standby_only_when_no_active_channel_has_room() {
        let now = Time::ZERO;
        let mut backup = channel(1, 5, 10);
        backup.standby = true;
        let mut active = channel(2, 80, 1);
        assert_eq!(LowestRtt.pick(now, &[backup, active], PACKET), Some(2));
        active.bytes_in_flight = active.cwnd;
        assert_eq!(LowestRtt.pick(now, &[backup, active], PACKET), Some(1));
    }

    #[test]
    fn equal_rtts_break_ties_by_channel_id() {
        assert_eq!(LowestRtt.pick(Time::ZERO, &[channel(9, 10, 2), channel(4, 10, 2)], PACKET), Some(4));
    }
}
