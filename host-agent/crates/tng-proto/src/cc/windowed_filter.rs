//! Windowed min/max filter in constant space (Kathleen Nichols' algorithm, as Linux `lib/win_minmax.c`).

/// Whether the filter tracks the largest or the smallest sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extremum {
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    time: u64,
    value: u64,
}

/// The best sample over a sliding window, approximated by the best, second-best and third-best samples of successive
/// sub-windows. Time is any monotonic count: nanoseconds for Copa's RTT, round trips for BBR's bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowedFilter {
    extremum: Extremum,
    estimates: Option<[Sample; 3]>,
}

impl WindowedFilter {
    pub(crate) fn new(extremum: Extremum) -> Self {
        WindowedFilter { extremum, estimates: None }
    }

    /// The best sample in the window, if any sample was taken.
    pub(crate) fn get(&self) -> Option<u64> {
        self.estimates.map(|estimates| estimates[0].value)
    }

    fn at_least_as_good(&self, a: u64, b: u64) -> bool {
        match self.extremum {
            Extremum::Max => a >= b,
            Extremum::Min => a <= b,
        }
    }

    /// Adds a sample taken at `time`; samples older than `window` stop counting. Returns the new best.
    pub(crate) fn update(&mut self, time: u64, window: u64, value: u64) -> u64 {
        let sample = Sample { time, value };
        let Some(mut s) = self.estimates else {
            self.estimates = Some([sample; 3]);
            return value;
        };
        if self.at_least_as_good(value, s[0].value) || time.saturating_sub(s[2].time) > window {
            self.estimates = Some([sample; 3]);
            return value;
        }
        if self.at_least_as_good(value, s[1].value) {
            s[1] = sample;
            s[2] = sample;
        } else if self.at_least_as_good(value, s[2].value) {
            s[2] = sample;
        }
        // Age the sub-window estimates so the best always comes from within the window.
        let age = time.saturating_sub(s[0].time);
        if age > window {
            s = [s[1], s[2], sample];
            if time.saturating_sub(s[0].time) > window {
                s = [s[1], s[2], sample];
            }
        } else if s[1] == s[0] && age > window / 4 {
            s[1] = sample;
            s[2] = sample;
        } else if s[2] == s[1] && age > window / 2 {
            s[2] = sample;
        }
        self.estimates = Some(s);
        s[0].value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_holds_for_the_window_then_expires() {
        let mut filter = WindowedFilter::new(Extremum::Max);
        assert_eq!(filter.get(), None);
        assert_eq!(filter.update(0, 10, 100), 100);
        for round in 1..=10 {
            assert_eq!(filter.update(round, 10, 50), 100, "round {round}");
        }
        assert_eq!(filter.update(11, 10, 50), 50);
    }

    #[test]
    fn max_falls_back_to_the_best_recent_sample() {
        let mut filter = WindowedFilter::new(Extremum::Max);
        filter.update(0, 10, 100);
        filter.update(4, 10, 80);
        filter.update(8, 10, 60);
        assert_eq!(filter.update(12, 10, 10), 80);
        assert_eq!(filter.update(16, 10, 10), 60);
    }

    #[test]
    fn min_takes_a_new_low_at_once() {
        let mut filter = WindowedFilter::new(Extremum::Min);
        filter.update(0, 1_000, 40);
        assert_eq!(filter.update(10, 1_000, 50), 40);
        assert_eq!(filter.update(20, 1_000, 30), 30);
        assert_eq!(filter.update(1_021, 1_000, 45), 45);
    }
}
