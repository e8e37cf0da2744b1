//! Verus's delay profile: which RTT a sending window brings, learnt from the ACKs.
//!
//! Each window (in whole packets) keeps an EWMA of the RTTs its packets saw. Verus refits a curve through these
//! points every second and reads it backwards: the largest window whose delay stays within the delay estimate. The
//! reference implementation fits a penalized cubic spline (alglib); this one fits the non-decreasing curve closest
//! to the points (pool-adjacent-violators), which needs no tuning and keeps the backwards reading unambiguous, since
//! a longer queue never shortens the delay.

use std::collections::BTreeMap;

/// Weight of the previous value in each window's RTT average (the reference: 0.875).
const PROFILE_EWMA_WEIGHT: f64 = 0.875;
/// Windows beyond this many packets are recorded at this bucket, so that no input can grow the profile unbounded.
const MAX_PROFILE_WINDOW: u32 = 100_000;

#[derive(Clone, Debug, Default)]
pub(crate) struct DelayProfile {
    /// Window (packets) -> averaged RTT (ms) of the packets sent with that window.
    samples: BTreeMap<u32, f64>,
    /// The last fitted curve: (window, delay ms), windows increasing, delays non-decreasing.
    curve: Vec<(u32, f64)>,
}

impl DelayProfile {
    /// Records the RTT of a packet sent while the window was `window` packets.
    pub(crate) fn record(&mut self, window: f64, rtt_ms: f64) {
        if !rtt_ms.is_finite() {
            return;
        }
        // `as` saturates and maps NaN to 0; the window is at least one packet.
        let bucket = (window.round() as u32).clamp(1, MAX_PROFILE_WINDOW);
        self.samples
            .entry(bucket)
            .and_modify(|average| *average = PROFILE_EWMA_WEIGHT * *average + (1.0 - PROFILE_EWMA_WEIGHT) * rtt_ms)
            .or_insert(rtt_ms);
    }

    /// Refits the curve to the samples recorded so far.
    pub(crate) fn refit(&mut self) {
        // Pool adjacent violators: merge neighbouring blocks while a block's mean exceeds the next one's.
        let mut blocks: Vec<(u32, u32, f64, f64)> = Vec::new(); // (first window, last window, sum, count)
        for (&window, &delay) in &self.samples {
            blocks.push((window, window, delay, 1.0));
            while blocks.len() >= 2 {
                let last = blocks[blocks.len() - 1];
                let previous = blocks[blocks.len() - 2];
                if previous.2 / previous.3 <= last.2 / last.3 {
                    break;
                }
                blocks.pop();
                let merged = blocks.last_mut().expect("two blocks");
                *merged = (previous.0, last.1, previous.2 + last.2, previous.3 + last.3);
            }
        }
        self.curve.clear();
        for (first, last, sum, count) in blocks {
            let mean = sum / count;
            self.curve.extend(self.samples.range(first..=last).map(|(&window, _)| (window, mean)));
        }
    }

    pub(crate) fn is_fitted(&self) -> bool {
        !self.curve.is_empty()
    }

    /// The fitted delay of `window` packets: interpolated between fitted windows, held flat outside them.
    pub(crate) fn delay_of(&self, window: f64) -> Option<f64> {
        let after = self.curve.iter().position(|&(w, _)| f64::from(w) >= window);
        match after {
            None => self.curve.last().map(|&(_, delay)| delay),
            Some(0) => Some(self.curve[0].1),
            Some(index) => {
                let (w0, d0) = self.curve[index - 1];
                let (w1, d1) = self.curve[index];
                let fraction = (window - f64::from(w0)) / f64::from(w1 - w0);
                Some(d0 + fraction * (d1 - d0))
            }
        }
    }

    /// The largest window (packets) whose fitted delay stays within `delay_ms`. Past the largest window measured,
    /// the curve is extended along its mean slope, so that a delay estimate above everything seen lets the window
    /// grow; a flat curve allows one packet more than measured. `None` before the first fit or when even the
    /// smallest window measured exceeds the estimate.
    pub(crate) fn window_for(&self, delay_ms: f64) -> Option<f64> {
        let &(first_window, first_delay) = self.curve.first()?;
        if first_delay > delay_ms {
            return None;
        }
        let &(last_window, last_delay) = self.curve.last()?;
        if last_delay <= delay_ms {
            let slope = (last_delay - first_delay) / f64::from(last_window - first_window).max(1.0);
            let beyond = if slope > 0.0 { (delay_ms - last_delay) / slope } else { 1.0 };
            return Some((f64::from(last_window) + beyond).min(f64::from(MAX_PROFILE_WINDOW)));
        }
        // The first fitted point above the estimate; interpolate back to where the curve crosses it.
        let above = self.curve.iter().position(|&(_, delay)| delay > delay_ms)?;
        let (w0, d0) = self.curve[above - 1];
        let (w1, d1) = self.curve[above];
        Some(f64::from(w0) + f64::from(w1 - w0) * (delay_ms - d0) / (d1 - d0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_is_the_closest_non_decreasing_curve() {
        let mut profile = DelayProfile::default();
        for (window, delay) in [(1.0, 40.0), (2.0, 50.0), (3.0, 44.0), (4.0, 60.0)] {
            profile.record(window, delay);
        }
        assert_eq!(profile.window_for(100.0), None);
        assert!(!profile.is_fitted());
        profile.refit();
        // 50 then 44 violate the order: both become their mean, 47.
        assert_eq!(profile.curve, vec![(1, 40.0), (2, 47.0), (3, 47.0), (4, 60.0)]);
        assert_eq!(profile.delay_of(3.5), Some(53.5));
    }

    #[test]
    fn the_window_is_read_backwards_from_the_curve() {
        let mut profile = DelayProfile::default();
        // A linear profile: 40 ms plus 1 ms per packet of window.
        for window in 1..=30 {
            profile.record(f64::from(window), 40.0 + f64::from(window));
        }
        profile.refit();
        assert_eq!(profile.window_for(60.0), Some(20.0));
        assert_eq!(profile.window_for(60.5), Some(20.5));
        assert_eq!(profile.window_for(40.0), None);
        // Above everything measured: extended along the slope of 1 ms per packet.
        assert_eq!(profile.window_for(80.0), Some(40.0));
    }

    #[test]
    fn samples_are_averaged_per_window_and_a_flat_curve_allows_one_more_packet() {
        let mut profile = DelayProfile::default();
        profile.record(10.0, 40.0);
        profile.record(10.2, 48.0);
        profile.refit();
        assert_eq!(profile.delay_of(10.0), Some(41.0));
        assert_eq!(profile.window_for(50.0), Some(11.0));
        profile.record(f64::NAN, 10.0);
        profile.record(1e12, f64::INFINITY);
        profile.refit();
        assert_eq!(profile.curve, vec![(1, 10.0), (10, 41.0)]);
    }
}
