//! Sprout's receiver-side model (Winstein, Sivaraman and Balakrishnan, NSDI 2013, section 3): packet deliveries
//! over a tick are Poisson with a rate that does a Brownian walk, with a sticky zero (an outage) it escapes at a
//! fixed rate. A discretized Bayesian filter over rate bins tracks the rate from the arrivals of each tick, and the
//! forecast is the cautious (5th percentile) cumulative number of deliveries over the next ticks.
//!
//! Differences from the paper, each for a reason:
//! - The rate bins reach 2048 packets/s (the paper: 1000) so that links up to about 20 Mbit/s fit the model.
//! - The distribution of cumulative deliveries from each rate bin is moment-matched by a normal (Poisson variance
//!   plus the variance the Brownian walk adds), where the paper tabulates it offline; the mixture over the
//!   posterior is exact.

use std::sync::OnceLock;
use std::time::Duration;

use crate::time::Time;

/// The model's tick (the paper's tau).
pub const TICK: Duration = Duration::from_millis(20);
/// Ticks the forecast covers (160 ms: more than the sender's horizon on the paths Sprout is meant for).
pub const FORECAST_TICKS: usize = 8;
/// Number of rate bins; bin 0 is the outage rate, zero.
const BINS: usize = 256;
/// Largest rate modelled, in packets per second.
const MAX_RATE: f64 = 2048.0;
/// Brownian volatility of the rate, packets per second per square-root second (the paper's sigma).
const VOLATILITY: f64 = 200.0;
/// Rate at which an outage ends, per second (the paper's lambda_z).
const OUTAGE_ESCAPE_RATE: f64 = 1.0;
/// The forecast's quantile: deliveries the link exceeds with 95% probability.
const CAUTION_QUANTILE: f64 = 0.05;
/// At most this many silent ticks are filtered one by one after a gap; by then the posterior has settled in the
/// outage bin and further empty ticks change nothing measurable.
const MAX_CATCH_UP_TICKS: u64 = 256;
/// A silent tick that moves no bin's probability by more than this has reached the posterior that further silent
/// ticks keep (the walk's spread and the empty ticks' evidence balance): the catch-up after a gap stops there.
const SETTLED: f64 = 1e-12;
/// Bins with less posterior probability than this do not enter the forecast.
const NEGLIGIBLE: f64 = 1e-9;

/// The cautious forecast of one channel's deliveries, as the receiver sends it to the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryForecast {
    /// The receiver's tick count when the forecast was made: a later forecast has a larger one.
    pub tick: u64,
    /// Packets the receiver has received on the channel so far.
    pub received: u64,
    /// `cumulative[i]`: packets the link delivers by the end of tick `i + 1` after the forecast, with 95%
    /// probability; non-decreasing.
    pub cumulative: Vec<u64>,
}

/// The receiver's Bayesian filter over the link rate of one channel.
#[derive(Clone, Debug)]
pub struct DeliveryForecaster {
    /// Posterior probability of each rate bin, summing to one.
    probabilities: Vec<f64>,
    /// Gaussian step of the rate over one tick, in bins, for offsets `-half_width..=half_width`.
    step: Vec<f64>,
    /// The next tick's probabilities while [`Self::evolve`] computes them (kept to spare an allocation per tick).
    scratch: Vec<f64>,
    tick_end: Time,
    tick: u64,
    arrivals_this_tick: u64,
    received: u64,
}

impl DeliveryForecaster {
    /// A forecaster whose first tick starts at `now`, with a uniform prior over the rate.
    pub fn new(now: Time) -> Self {
        let sigma_bins = VOLATILITY * TICK.as_secs_f64().sqrt() / bin_width();
        let half_width = (4.0 * sigma_bins).ceil() as i64;
        let step: Vec<f64> = (-half_width..=half_width)
            .map(|offset| {
                let x = offset as f64 / sigma_bins;
                (-0.5 * x * x).exp()
            })
            .collect();
        let total: f64 = step.iter().sum();
        DeliveryForecaster {
            probabilities: vec![1.0 / BINS as f64; BINS],
            step: step.into_iter().map(|weight| weight / total).collect(),
            scratch: vec![0.0; BINS],
            tick_end: now + TICK,
            tick: 0,
            arrivals_this_tick: 0,
            received: 0,
        }
    }

    /// When the current tick ends: the receiver's next forecast is due then.
    pub fn tick_end(&self) -> Time {
        self.tick_end
    }

    /// A packet arrived at `now`; returns whether a tick ended before it (a new forecast is then due).
    pub fn on_arrival(&mut self, now: Time) -> bool {
        let ticked = self.advance_to(now);
        self.arrivals_this_tick += 1;
        self.received += 1;
        ticked
    }

    /// Filters every tick that ended by `now`; returns whether any did (a new forecast is then due).
    pub fn advance_to(&mut self, now: Time) -> bool {
        if now < self.tick_end {
            return false;
        }
        let elapsed = (now - self.tick_end).as_nanos() / TICK.as_nanos() + 1;
        let ticks = u64::try_from(elapsed).unwrap_or(u64::MAX);
        // The tick that ended holds the arrivals counted so far; every later one of the gap is silent.
        self.evolve();
        self.observe(self.arrivals_this_tick);
        self.arrivals_this_tick = 0;
        for _ in 1..ticks.min(MAX_CATCH_UP_TICKS) {
            self.evolve();
            self.observe(0);
            let change = self.probabilities.iter().zip(&self.scratch).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
            if change <= SETTLED {
                break;
            }
        }
        self.tick = self.tick.saturating_add(ticks);
        self.tick_end += TICK * u32::try_from(ticks).unwrap_or(u32::MAX);
        true
    }

    /// The cautious forecast for the ticks after the last one filtered.
    pub fn forecast(&self) -> DeliveryForecast {
        let mut floor = 0;
        let cumulative = (1..=FORECAST_TICKS)
            .map(|ticks| {
                floor = self.cumulative_quantile(ticks, CAUTION_QUANTILE).max(floor);
                floor
            })
            .collect();
        DeliveryForecast { tick: self.tick, received: self.received, cumulative }
    }

    /// The posterior mean rate, in packets per second.
    pub fn mean_rate(&self) -> f64 {
        self.probabilities.iter().enumerate().map(|(bin, p)| p * rate_of(bin)).sum()
    }

    /// Expected deliveries over the next `ticks` ticks.
    pub fn mean_cumulative(&self, ticks: usize) -> f64 {
        self.mean_rate() * TICK.as_secs_f64() * ticks as f64
    }

    /// The rate walks one tick: the Brownian step, with what falls below zero stuck in the outage bin, of which
    /// only the escaping share walks on.
    fn evolve(&mut self) {
        let half_width = self.step.len() / 2;
        let escape = OUTAGE_ESCAPE_RATE * TICK.as_secs_f64();
        let mut next = std::mem::take(&mut self.scratch);
        next.fill(0.0);
        next[0] = self.probabilities[0] * (1.0 - escape);
        for (bin, &p) in self.probabilities.iter().enumerate() {
            let walking = if bin == 0 { p * escape } else { p };
            if walking < NEGLIGIBLE * NEGLIGIBLE {
                continue;
            }
            if bin > half_width && bin + half_width < BINS {
                // Away from the edges the step lands on consecutive bins: one slice, which the compiler
                // vectorizes (the same additions in the same order as below, so the same sums).
                let targets = &mut next[bin - half_width..=bin + half_width];
                targets.iter_mut().zip(&self.step).for_each(|(target, weight)| *target += walking * weight);
            } else {
                step_at_edge(&mut next, &self.step, bin, walking);
            }
        }
        // The previous tick's probabilities stay in `scratch`, for the catch-up to see how much the tick moved.
        self.scratch = std::mem::replace(&mut self.probabilities, next);
    }

    /// Bayes' rule with the Poisson likelihood of `arrivals` in one tick.
    fn observe(&mut self, arrivals: u64) {
        let k = arrivals as f64;
        let tables = bin_tables();
        // ln(k!) is common to every bin and cancels in the normalization; bin 0 (rate zero) explains only silence.
        let log_likelihood = |bin: usize| {
            if bin == 0 {
                if arrivals == 0 {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            } else {
                k * tables.ln_mean[bin] - tables.mean[bin]
            }
        };
        let best = (0..BINS)
            .filter(|&bin| self.probabilities[bin] > 0.0)
            .map(log_likelihood)
            .fold(f64::NEG_INFINITY, f64::max);
        if !best.is_finite() {
            return;
        }
        let mut total = 0.0;
        for (bin, p) in self.probabilities.iter_mut().enumerate() {
            *p *= (log_likelihood(bin) - best).exp();
            total += *p;
        }
        if total > 0.0 && total.is_finite() {
            self.probabilities.iter_mut().for_each(|p| *p /= total);
        }
    }

    /// The `quantile` of the deliveries over the next `ticks` ticks, in whole packets (rounded down).
    fn cumulative_quantile(&self, ticks: usize, quantile: f64) -> u64 {
        let tau = TICK.as_secs_f64();
        let t = ticks as f64;
        // Variance of the summed rate over the horizon from the Brownian walk: sigma^2 tau^3 t(t+1)(2t+1)/6.
        let walk_variance = VOLATILITY * VOLATILITY * tau.powi(3) * t * (t + 1.0) * (2.0 * t + 1.0) / 6.0;
        let components: Vec<(f64, f64, f64)> = self
            .probabilities
            .iter()
            .enumerate()
            .filter(|(_, &p)| p > NEGLIGIBLE)
            .map(|(bin, &p)| {
                let mean = rate_of(bin) * tau * t;
                let deviation = (mean + walk_variance).sqrt().max(0.5);
                (p, mean, deviation)
            })
            .collect();
        let weight: f64 = components.iter().map(|(p, _, _)| p).sum();
        let cdf = |x: f64| components.iter().map(|&(p, mean, sd)| p * normal_cdf((x - mean) / sd)).sum::<f64>();
        let target = quantile * weight;
        // The answer is in whole packets: the largest count whose CDF is still below the target, by bisection over
        // counts (`cdf(low) < target <= cdf(high)` throughout).
        if cdf(0.0) >= target {
            return 0;
        }
        let mut low = 0u64;
        let mut high = components.iter().map(|&(_, mean, sd)| mean + 6.0 * sd).fold(1.0, f64::max).ceil() as u64;
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if cdf(middle as f64) < target {
                low = middle;
            } else {
                high = middle;
            }
        }
        low
    }
}

/// Per rate bin, the mean deliveries over one tick and their logarithm: the same for every forecaster.
struct BinTables {
    mean: [f64; BINS],
    ln_mean: [f64; BINS],
}

fn bin_tables() -> &'static BinTables {
    static TABLES: OnceLock<BinTables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mean: [f64; BINS] = std::array::from_fn(|bin| rate_of(bin) * TICK.as_secs_f64());
        BinTables { mean, ln_mean: mean.map(f64::ln) }
    })
}

fn bin_width() -> f64 {
    MAX_RATE / (BINS - 1) as f64
}

/// One bin's step near an edge: what would walk below zero stays in bin 0 or, escaping the outage (bin 0 itself),
/// is reflected upward; what would walk past the top stays in the top bin.
fn step_at_edge(next: &mut [f64], step: &[f64], bin: usize, walking: f64) {
    let half_width = (step.len() / 2) as i64;
    for (index, &weight) in step.iter().enumerate() {
        let mut target = bin as i64 + index as i64 - half_width;
        if bin == 0 {
            // Escaping the outage moves the rate up.
            target = target.abs();
        }
        let target = target.clamp(0, BINS as i64 - 1) as usize;
        next[target] += walking * weight;
    }
}

fn rate_of(bin: usize) -> f64 {
    bin as f64 * bin_width()
}

/// Standard normal CDF, from the complementary error function (Numerical Recipes' erfc, relative error < 1.2e-7).
fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let polynomial = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * polynomial.exp();
    if x >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `rate` packets per second, evenly spaced, for `seconds`, starting at `start`; returns the end.
    fn feed(forecaster: &mut DeliveryForecaster, start: Time, rate: f64, seconds: f64) -> Time {
        let end = start + Duration::from_secs_f64(seconds);
        if rate > 0.0 {
            let gap = Duration::from_secs_f64(1.0 / rate);
            let mut at = start;
            while at < end {
                forecaster.on_arrival(at);
                at += gap;
            }
        }
        forecaster.advance_to(end);
        end
    }

    #[test]
    fn normal_cdf_matches_known_values() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.644_853_6) - 0.95).abs() < 1e-6);
        assert!((normal_cdf(-1.959_964) - 0.025).abs() < 1e-6);
    }

    #[test]
    fn the_posterior_converges_to_a_constant_link_rate() {
        let mut forecaster = DeliveryForecaster::new(Time::ZERO);
        // The uniform prior's mean is half the range.
        assert!((forecaster.mean_rate() - MAX_RATE / 2.0).abs() < 1.0);
        feed(&mut forecaster, Time::ZERO, 500.0, 5.0);
        let mean = forecaster.mean_rate();
        assert!((mean - 500.0).abs() < 25.0, "posterior mean {mean:.1} packets/s");
        let spread: f64 =
            forecaster.probabilities.iter().enumerate().map(|(bin, p)| p * (rate_of(bin) - mean).powi(2)).sum();
        assert!(spread.sqrt() < 100.0, "posterior deviation {:.1} packets/s", spread.sqrt());
    }

    #[test]
    fn the_cautious_forecast_is_below_the_mean_and_grows_with_the_horizon() {
        let mut forecaster = DeliveryForecaster::new(Time::ZERO);
        feed(&mut forecaster, Time::ZERO, 500.0, 5.0);
        let forecast = forecaster.forecast();
        assert_eq!(forecast.cumulative.len(), FORECAST_TICKS);
        assert_eq!(forecast.tick, 250);
        assert!((2495..=2500).contains(&forecast.received), "received {}", forecast.received);
        for (index, &cautious) in forecast.cumulative.iter().enumerate() {
            let mean = forecaster.mean_cumulative(index + 1);
            assert!((cautious as f64) < mean, "tick {}: cautious {cautious}, mean {mean:.1}", index + 1);
        }
        assert!(forecast.cumulative.windows(2).all(|pair| pair[0] < pair[1]), "{:?}", forecast.cumulative);
        // Over 8 ticks (160 ms) at 500 packets/s the mean is 80; the walk's uncertainty keeps the 5th percentile
        // well below it but not at zero.
        let last = forecast.cumulative[FORECAST_TICKS - 1];
        assert!((40..80).contains(&last), "{:?}", forecast.cumulative);
    }

    #[test]
    fn an_outage_drives_the_forecast_toward_zero() {
        let mut forecaster = DeliveryForecaster::new(Time::ZERO);
        let end = feed(&mut forecaster, Time::ZERO, 500.0, 5.0);
        let before = forecaster.forecast().cumulative[FORECAST_TICKS - 1];
        feed(&mut forecaster, end, 0.0, 0.2);
        let during = forecaster.forecast().cumulative[FORECAST_TICKS - 1];
        assert!(during < before / 4, "forecast {before} before the outage, {during} 200 ms into it");
        feed(&mut forecaster, end + Duration::from_millis(200), 0.0, 1.0);
        assert_eq!(forecaster.forecast().cumulative, vec![0; FORECAST_TICKS]);
        assert!(forecaster.probabilities[0] > 0.9, "outage bin {:.3}", forecaster.probabilities[0]);
    }

    #[test]
    fn the_rate_recovers_after_an_outage() {
        let mut forecaster = DeliveryForecaster::new(Time::ZERO);
        let end = feed(&mut forecaster, Time::ZERO, 0.0, 2.0);
        feed(&mut forecaster, end, 300.0, 1.0);
        let mean = forecaster.mean_rate();
        assert!((mean - 300.0).abs() < 40.0, "posterior mean {mean:.1} packets/s a second after the outage");
    }

    #[test]
    fn a_tick_walks_every_bin_as_one_step_per_offset_would() {
        // The reference: every bin walks offset by offset, clamped at the edges, bin 0 reflected upward.
        let mut forecaster = DeliveryForecaster::new(Time::ZERO);
        for (bin, p) in forecaster.probabilities.iter_mut().enumerate() {
            *p = ((bin * 37 % 101) as f64 + 1.0) / 5000.0;
        }
        let mut expected = vec![0.0; BINS];
        let escape = OUTAGE_ESCAPE_RATE * TICK.as_secs_f64();
        expected[0] = forecaster.probabilities[0] * (1.0 - escape);
        for (bin, &p) in forecaster.probabilities.iter().enumerate() {
            step_at_edge(&mut expected, &forecaster.step, bin, if bin == 0 { p * escape } else { p });
        }
        forecaster.evolve();
        assert_eq!(forecaster.probabilities, expected, "bit for bit");
    }

    #[test]
    fn a_gap_filtered_at_once_ends_where_filtering_it_tick_by_tick_does() {
        let mut at_once = DeliveryForecaster::new(Time::ZERO);
        let end = feed(&mut at_once, Time::ZERO, 500.0, 5.0);
        let mut tick_by_tick = at_once.clone();
        let resumed = end + Duration::from_secs(3);
        at_once.advance_to(resumed);
        while tick_by_tick.tick_end() <= resumed {
            tick_by_tick.advance_to(tick_by_tick.tick_end());
        }
        assert_eq!(at_once.tick_end(), tick_by_tick.tick_end());
        let largest_difference = at_once
            .probabilities
            .iter()
            .zip(&tick_by_tick.probabilities)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(largest_difference < 1e-9, "posteriors differ by up to {largest_difference:e}");
        assert_eq!(at_once.forecast(), tick_by_tick.forecast());
        // And arrivals after the gap move both alike.
        feed(&mut at_once, resumed, 300.0, 1.0);
        feed(&mut tick_by_tick, resumed, 300.0, 1.0);
        assert_eq!(at_once.forecast(), tick_by_tick.forecast());
    }

    #[test]
    fn a_long_gap_counts_its_ticks_but_filters_a_bounded_number() {
        let mut forecaster = DeliveryForecaster::new(Time::ZERO);
        assert!(!forecaster.advance_to(Time::from_millis(19)));
        assert!(forecaster.advance_to(Time::from_millis(20)));
        assert_eq!(forecaster.forecast().tick, 1);
        assert_eq!(forecaster.tick_end(), Time::from_millis(40));
        assert!(forecaster.advance_to(Time::from_millis(3_600_000)));
        assert_eq!(forecaster.forecast().tick, 180_000);
        assert_eq!(forecaster.tick_end(), Time::from_millis(3_600_020));
    }
}
