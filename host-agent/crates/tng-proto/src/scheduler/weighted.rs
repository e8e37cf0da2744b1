//! Smooth weighted round robin (as in nginx): each pick, every eligible channel earns its weight in credit, the
//! richest one sends and pays the total. Over any run of picks with the same eligible set, each channel's share is
//! its weight's share, and the picks interleave instead of coming in bursts.
//!
//! Weight 0 means "not for data": such a channel is never picked, even if it is the only eligible one.

use super::{eligible, ChannelView, Scheduler};
use crate::time::Time;

#[derive(Clone, Debug)]
pub struct Weighted {
    /// Credit per channel id.
    credit: [i64; 256],
}

impl Default for Weighted {
    fn default() -> Self {
        Weighted { credit: [0; 256] }
    }
}

impl Scheduler for Weighted {
    fn pick(&mut self, now: Time, channels: &[ChannelView], packet_len: u64) -> Option<u8> {
        let candidates = eligible(now, channels, packet_len).filter(|c| c.weight > 0);
        let total: i64 = candidates.clone().map(|c| i64::from(c.weight)).sum();
        let mut richest: Option<(u8, i64)> = None;
        for c in candidates {
            let credit = &mut self.credit[usize::from(c.channel)];
            *credit = credit.saturating_add(i64::from(c.weight));
            match richest {
                Some((_, most)) if *credit <= most => {}
                _ => richest = Some((c.channel, *credit)),
            }
        }
        let (chosen, _) = richest?;
        let credit = &mut self.credit[usize::from(chosen)];
        *credit = credit.saturating_sub(total);
        Some(chosen)
    }

    fn name(&self) -> &'static str {
        "weighted"
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{channel, PACKET};
    use super::*;

    fn weighted(id: u8, weight: u32) -> ChannelView {
        ChannelView { weight, ..channel(id, 10, 10) }
    }

    #[test]
    fn split_over_ten_thousand_picks_follows_the_weights_within_one_percent() {
        let channels = [weighted(0, 3), weighted(1, 1), weighted(5, 6)];
        let mut scheduler = Weighted::default();
        let mut counts = [0u32; 256];
        for _ in 0..10_000 {
            let picked = scheduler.pick(Time::ZERO, &channels, PACKET).expect("a channel");
            counts[usize::from(picked)] += 1;
        }
        for (id, share) in [(0, 0.3), (1, 0.1), (5, 0.6)] {
            let measured = f64::from(counts[id]) / 10_000.0;
            assert!((measured - share).abs() <= 0.01 * share, "channel {id}: {measured} vs {share}");
        }
    }

    #[test]
    fn picks_interleave_rather_than_burst() {
        let channels = [weighted(0, 2), weighted(1, 1)];
        let mut scheduler = Weighted::default();
        let picks: Vec<u8> = (0..6).filter_map(|_| scheduler.pick(Time::ZERO, &channels, PACKET)).collect();
        assert_eq!(picks, [0, 1, 0, 0, 1, 0]);
    }

    #[test]
    fn full_channels_are_skipped_and_zero_weight_is_never_used() {
        let mut full = weighted(0, 5);
        full.bytes_in_flight = full.cwnd;
        let mut scheduler = Weighted::default();
        assert_eq!(scheduler.pick(Time::ZERO, &[full, weighted(1, 1)], PACKET), Some(1));
        assert_eq!(scheduler.pick(Time::ZERO, &[full, weighted(1, 0)], PACKET), None);
    }
}
