//! Viscous's ACK-clocked scheduler. A packet goes only to a channel whose congestion window has room, so the ACK
//! that frees room clocks the next packet onto that channel and every channel runs at its own pace. Among those
//! channels the packet goes where it should arrive first: the wait for the channel's pacer, half an RTT of
//! propagation, and the time to drain what is already in flight at the channel's rate (one window per RTT). A slow
//! channel therefore takes packets only while the faster ones are full or would deliver later, that is when it
//! shortens completion time; a fast channel whose pacer holds the packet for a moment keeps it (a burst that fits
//! the fast channel's window does not leave its tail to the slow one).

use super::{with_room, ChannelView, Scheduler};
use crate::time::Time;

#[derive(Clone, Copy, Debug, Default)]
pub struct AckClocked;

/// Expected delay until a packet sent on `c` arrives, in nanoseconds from `now`: the wait for its pacer, then
/// `srtt/2 + bytes_in_flight / (cwnd/srtt)`.
fn expected_arrival(now: Time, c: &ChannelView) -> u128 {
    let srtt = c.srtt.as_nanos();
    let wait = c.can_send_at.saturating_since(now).as_nanos();
    wait + srtt / 2 + u128::from(c.bytes_in_flight) * srtt / u128::from(c.cwnd.max(1))
}

impl Scheduler for AckClocked {
    /// A channel whose pacer holds the packet for a moment still wins when it would deliver it first: the packet
    /// then waits for it (`None`; the flow layer asks again at that pacer's release) rather than taking a slower path.
    fn pick(&mut self, now: Time, channels: &[ChannelView], packet_len: u64) -> Option<u8> {
        let first = with_room(now, channels, packet_len).min_by_key(|c| (expected_arrival(now, c), c.channel))?;
        (first.can_send_at <= now).then_some(first.channel)
    }

    fn name(&self) -> &'static str {
        "ack-clocked"
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use super::super::tests::{channel, PACKET};
    use super::*;

    #[test]
    fn fast_path_first_and_the_slow_one_only_once_the_fast_one_is_full() {
        let mut channels = [channel(0, 100, 10), channel(1, 20, 10)];
        let mut picks = Vec::new();
        while let Some(picked) = AckClocked.pick(Time::ZERO, &channels, PACKET) {
            picks.push(picked);
            channels[usize::from(picked)].bytes_in_flight += PACKET;
        }
        let mut expected = vec![1; 10];
        expected.extend([0; 10]);
        assert_eq!(picks, expected);
    }

    #[test]
    fn a_paced_fast_path_keeps_the_packet_while_it_still_delivers_first() {
        let mut fast = channel(0, 10, 10);
        let slow = channel(1, 50, 10);
        // Paced for 1 ms, the fast path delivers at 6 ms, the ready slow one at 25 ms: the packet waits.
        fast.can_send_at = Time::from_millis(1);
        assert_eq!(AckClocked.pick(Time::ZERO, &[fast, slow], PACKET), None);
        assert_eq!(AckClocked.pick(Time::from_millis(1), &[fast, slow], PACKET), Some(0));
        // Paced for 30 ms, it would deliver at 35 ms: the slow one takes the packet now.
        fast.can_send_at = Time::from_millis(30);
        assert_eq!(AckClocked.pick(Time::ZERO, &[fast, slow], PACKET), Some(1));
    }

    #[test]
    fn a_queue_on_the_fast_path_shifts_packets_to_a_similar_one() {
        let mut a = channel(0, 20, 10);
        a.bytes_in_flight = 5 * PACKET;
        let b = channel(1, 30, 10);
        // a: 10 ms + 5/10 of 20 ms = 20 ms; b: 15 ms.
        assert_eq!(AckClocked.pick(Time::ZERO, &[a, b], PACKET), Some(1));
    }

    /// Two paths with fixed windows; an ACK comes back one RTT after each packet. With an endless backlog the
    /// scheduler must keep both windows full, so each path carries one window per RTT.
    #[test]
    fn fills_both_paths_of_a_virtual_two_path_network() {
        let mut channels = [channel(0, 20, 10), channel(1, 100, 10)];
        let mut acks: [VecDeque<Time>; 2] = [VecDeque::new(), VecDeque::new()];
        let mut sent = [0u64; 2];
        let mut full_ms = [0u64; 2];
        let duration_ms = 2_000;
        for ms in 0..duration_ms {
            let now = Time::from_millis(ms);
            for (view, pending) in channels.iter_mut().zip(acks.iter_mut()) {
                while pending.front().is_some_and(|&at| at <= now) {
                    pending.pop_front();
                    view.bytes_in_flight -= PACKET;
                }
            }
            while let Some(picked) = AckClocked.pick(now, &channels, PACKET) {
                let i = usize::from(picked);
                channels[i].bytes_in_flight += PACKET;
                acks[i].push_back(now + channels[i].srtt);
                sent[i] += 1;
            }
            for (full, view) in full_ms.iter_mut().zip(&channels) {
                *full += u64::from(view.bytes_in_flight == view.cwnd);
            }
        }
        for (i, view) in channels.iter().enumerate() {
            let capacity = duration_ms * 10 / (view.srtt.as_millis() as u64);
            assert!(sent[i] >= capacity * 95 / 100, "path {i} carried {} of {capacity} packets", sent[i]);
            assert!(full_ms[i] >= duration_ms * 95 / 100, "path {i} was full for only {} ms", full_ms[i]);
        }
        assert_eq!(channels[0].srtt, Duration::from_millis(20));
    }
}
