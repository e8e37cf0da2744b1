//! Synthetic cellular traces: Sprout's stochastic link model (Winstein et al., NSDI 2013), and a rapidly changing
//! channel whose rate is redrawn every few seconds (the ALCC paper's "rapidly changing network", after Verus).
//!
//! Sprout: the link rate (packets per second) drifts by Brownian motion with noise power `sigma` packets/s per sqrt(s), as in
//! Sprout's model; unlike Sprout's pure random walk it is pulled back towards the requested mean (an
//! Ornstein-Uhlenbeck process with rate `mean_reversion`), so a long trace keeps the requested average. Outages start
//! as a Poisson process and last an exponentially distributed time, during which the rate is zero. Each millisecond
//! then emits Poisson(rate x 1 ms) delivery opportunities, as Sprout assumes packet deliveries are Poisson given the
//! rate. The rate path is finally scaled so that its time average is exactly the requested mean (outages and the
//! floor at zero would otherwise bias it), which leaves only the Poisson sampling noise in the trace's mean.
//!
//! Steps: every `period_seconds` the rate jumps to a level drawn uniformly from mean x (1 - spread) to
//! mean x (1 + spread) and holds it; deliveries and the scaling to the mean are as for Sprout.

use std::io::{self, Write};

use thiserror::Error;

use crate::random::{exponential, poisson, rng, standard_normal, uniform, Stream};
use crate::trace::OPPORTUNITY_BYTES;

const MILLIS_PER_SECOND: u64 = 1000;
const STEP_SECONDS: f64 = 0.001;
const MAX_SECONDS: u64 = 86_400;
/// 10 Gbit/s: far above any cellular link, and it bounds the trace's size.
const MAX_MEAN_MBPS: f64 = 10_000.0;

#[derive(Debug, Clone, PartialEq)]
pub struct SproutModel {
    pub mean_mbps: f64,
    /// Brownian-motion noise power in packets/s per sqrt(s) (Sprout: 200).
    pub sigma: f64,
    /// Pull towards the mean, per second.
    pub mean_reversion: f64,
    pub outages_per_minute: f64,
    pub outage_mean_seconds: f64,
}

/// A rate held for `period_seconds`, then redrawn.
#[derive(Debug, Clone, PartialEq)]
pub struct StepsModel {
    pub mean_mbps: f64,
    pub period_seconds: f64,
    /// Levels lie within mean x (1 +- spread); 0 keeps the rate constant, below 1 keeps it above zero.
    pub spread: f64,
}

#[derive(Debug, Error, PartialEq)]
pub enum GenTraceError {
    #[error("--mean-mbps must be above 0 and at most {MAX_MEAN_MBPS}, got {0}")]
    Mean(f64),
    #[error("--seconds must be between 1 and {MAX_SECONDS}, got {0}")]
    Seconds(u64),
    #[error("--{name} must be finite and >= 0, got {value}")]
    Parameter { name: &'static str, value: f64 },
    #[error("--period-seconds must be at least 0.001 (one millisecond), got {0}")]
    Period(f64),
    #[error("--spread must be between 0 and 1 (a level below zero is no rate), got {0}")]
    Spread(f64),
}

fn validate_mean_and_length(mean_mbps: f64, seconds: u64) -> Result<(), GenTraceError> {
    if !(mean_mbps > 0.0 && mean_mbps <= MAX_MEAN_MBPS) {
        return Err(GenTraceError::Mean(mean_mbps));
    }
    if !(1..=MAX_SECONDS).contains(&seconds) {
        return Err(GenTraceError::Seconds(seconds));
    }
    Ok(())
}

fn packets_per_second(mbps: f64) -> f64 {
    mbps * 1e6 / (OPPORTUNITY_BYTES * 8) as f64
}

/// Delivery opportunities for a rate path (packets/s per millisecond), scaled so that its mean is `mean_pps`:
/// Poisson(rate x 1 ms) per millisecond. The last line is always the final millisecond, so the trace loops with
/// exactly the path's length.
fn deliveries(path: &[f64], mean_pps: f64, rng: &mut impl rand_core::RngCore) -> Vec<u64> {
    let path_mean = path.iter().sum::<f64>() / path.len() as f64;
    let scale = if path_mean > 0.0 { mean_pps / path_mean } else { 0.0 };
    let mut timestamps = Vec::new();
    for (index, rate) in path.iter().enumerate() {
        let millisecond = index as u64 + 1;
        let count = poisson(rng, rate * scale * STEP_SECONDS);
        timestamps.extend(std::iter::repeat_n(millisecond, count as usize));
    }
    let milliseconds = path.len() as u64;
    if timestamps.last() != Some(&milliseconds) {
        timestamps.push(milliseconds);
    }
    timestamps
}

impl SproutModel {
    fn validate(&self, seconds: u64) -> Result<(), GenTraceError> {
        validate_mean_and_length(self.mean_mbps, seconds)?;
        for (name, value) in [
            ("sigma", self.sigma),
            ("mean-reversion", self.mean_reversion),
            ("outages-per-minute", self.outages_per_minute),
            ("outage-mean-seconds", self.outage_mean_seconds),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(GenTraceError::Parameter { name, value });
            }
        }
        Ok(())
    }

    /// The rate in packets/s for each millisecond, before rescaling to the mean.
    fn rate_path(&self, milliseconds: usize, rng: &mut impl rand_core::RngCore) -> Vec<f64> {
        let mean = packets_per_second(self.mean_mbps);
        let outage_start_probability = self.outages_per_minute / 60.0 * STEP_SECONDS;
        let mut rate = mean;
        let mut outage_left_seconds = 0.0;
        let mut path = Vec::with_capacity(milliseconds);
        for _ in 0..milliseconds {
            rate += self.mean_reversion * (mean - rate) * STEP_SECONDS
                + self.sigma * STEP_SECONDS.sqrt() * standard_normal(rng);
            rate = rate.max(0.0);
            if outage_left_seconds <= 0.0 && uniform(rng) < outage_start_probability {
                outage_left_seconds = exponential(rng, self.outage_mean_seconds);
            }
            if outage_left_seconds > 0.0 {
                outage_left_seconds -= STEP_SECONDS;
                path.push(0.0);
            } else {
                path.push(rate);
            }
        }
        path
    }

    /// Generates the trace's timestamps (milliseconds 1..=seconds*1000, non-decreasing). The last line is always the
    /// final millisecond, so the trace loops with exactly the requested period.
    pub fn generate(&self, seconds: u64, seed: u64) -> Result<Vec<u64>, GenTraceError> {
        self.validate(seconds)?;
        let mut rng = rng(seed, Stream::TraceGenerator);
        let path = self.rate_path((seconds * MILLIS_PER_SECOND) as usize, &mut rng);
        Ok(deliveries(&path, packets_per_second(self.mean_mbps), &mut rng))
    }
}

impl StepsModel {
    /// Generates the trace's timestamps, as [`SproutModel::generate`] does.
    pub fn generate(&self, seconds: u64, seed: u64) -> Result<Vec<u64>, GenTraceError> {
        validate_mean_and_length(self.mean_mbps, seconds)?;
        if !(self.period_seconds.is_finite() && self.period_seconds >= STEP_SECONDS) {
            return Err(GenTraceError::Period(self.period_seconds));
        }
        if !(0.0..=1.0).contains(&self.spread) {
            return Err(GenTraceError::Spread(self.spread));
        }
        let mut rng = rng(seed, Stream::TraceGenerator);
        let mean = packets_per_second(self.mean_mbps);
        let hold = (self.period_seconds / STEP_SECONDS).round() as usize;
        let milliseconds = (seconds * MILLIS_PER_SECOND) as usize;
        let mut path = Vec::with_capacity(milliseconds);
        while path.len() < milliseconds {
            let level = mean * (1.0 + self.spread * (2.0 * uniform(&mut rng) - 1.0));
            path.extend(std::iter::repeat_n(level, hold.min(milliseconds - path.len())));
        }
        Ok(deliveries(&path, mean, &mut rng))
    }
}

pub fn write_trace(out: &mut impl Write, timestamps: &[u64]) -> io::Result<()> {
    let mut writer = io::BufWriter::new(out);
    for timestamp in timestamps {
        writeln!(writer, "{timestamp}")?;
    }
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Trace;

    fn model(mean_mbps: f64) -> SproutModel {
        SproutModel { mean_mbps, sigma: 200.0, mean_reversion: 0.5, outages_per_minute: 2.0, outage_mean_seconds: 0.5 }
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let a = model(10.0).generate(20, 42).unwrap();
        assert_eq!(a, model(10.0).generate(20, 42).unwrap());
        assert_ne!(a, model(10.0).generate(20, 43).unwrap());
    }

    #[test]
    fn mean_rate_matches_the_request_and_the_trace_parses() {
        for mean_mbps in [10.0, 2.0] {
            let timestamps = model(mean_mbps).generate(60, 7).unwrap();
            let mut text = Vec::new();
            write_trace(&mut text, &timestamps).unwrap();
            let trace = Trace::parse(std::str::from_utf8(&text).unwrap()).unwrap();
            assert_eq!(trace.period_ms(), 60_000);
            let measured = trace.mean_bits_per_second() / 1e6;
            assert!((measured - mean_mbps).abs() < 0.02 * mean_mbps, "asked {mean_mbps} Mbit/s, trace has {measured}");
        }
    }

    #[test]
    fn rate_varies_and_has_outages() {
        let timestamps = model(10.0).generate(120, 3).unwrap();
        let mut per_second = vec![0u32; 120];
        for t in &timestamps {
            per_second[((t - 1) / 1000) as usize] += 1;
        }
        let max = *per_second.iter().max().unwrap();
        let min = *per_second.iter().min().unwrap();
        // 10 Mbit/s is 833 packets/s; Brownian drift moves whole seconds far from it, and an outage empties them.
        assert!(max > 1000, "max {max}");
        assert!(min < 500, "min {min}");
        let silent_stretch = timestamps.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(silent_stretch >= 100, "longest gap {silent_stretch} ms");
    }

    fn steps(spread: f64) -> StepsModel {
        StepsModel { mean_mbps: 8.0, period_seconds: 5.0, spread }
    }

    /// Packets per whole second of a trace.
    fn per_second(timestamps: &[u64], seconds: usize) -> Vec<u32> {
        let mut counts = vec![0u32; seconds];
        for t in timestamps {
            counts[((t - 1) / 1000) as usize] += 1;
        }
        counts
    }

    #[test]
    fn steps_hold_a_level_for_a_period_then_jump() {
        let timestamps = steps(0.8).generate(60, 5).unwrap();
        let seconds = per_second(&timestamps, 60);
        // 8 Mbit/s is 667 packets/s; levels lie within 133-1200 packets/s.
        let periods: Vec<f64> =
            seconds.chunks(5).map(|chunk| chunk.iter().map(|&c| f64::from(c)).sum::<f64>() / 5.0).collect();
        for (period, chunk) in periods.iter().zip(seconds.chunks(5)) {
            for &count in chunk {
                // Within a period only Poisson noise moves the count: a few sqrt(level).
                assert!((f64::from(count) - period).abs() < 5.0 * period.sqrt() + 5.0, "{chunk:?}");
            }
        }
        let jumps = periods.windows(2).filter(|w| (w[1] - w[0]).abs() > 100.0).count();
        assert!(jumps >= 6, "levels {periods:?}");
        assert!(periods.iter().all(|&p| p > 100.0), "no level near zero with spread 0.8: {periods:?}");
        let mean_mbps = timestamps.len() as f64 * (OPPORTUNITY_BYTES * 8) as f64 / 60.0 / 1e6;
        assert!((mean_mbps - 8.0).abs() < 0.02 * 8.0, "mean {mean_mbps}");
    }

    #[test]
    fn steps_without_spread_are_a_constant_rate() {
        let seconds = per_second(&steps(0.0).generate(20, 1).unwrap(), 20);
        assert!(seconds.iter().all(|&c| (c as f64 - 667.0).abs() < 5.0 * 667f64.sqrt()), "{seconds:?}");
    }

    #[test]
    fn bad_steps_are_errors() {
        assert_eq!(steps(1.5).generate(10, 1), Err(GenTraceError::Spread(1.5)));
        let mut zero_period = steps(0.5);
        zero_period.period_seconds = 0.0;
        assert_eq!(zero_period.generate(10, 1), Err(GenTraceError::Period(0.0)));
        let mut no_mean = steps(0.5);
        no_mean.mean_mbps = 0.0;
        assert_eq!(no_mean.generate(10, 1), Err(GenTraceError::Mean(0.0)));
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert_eq!(model(0.0).generate(10, 1), Err(GenTraceError::Mean(0.0)));
        assert!(matches!(model(f64::NAN).generate(10, 1), Err(GenTraceError::Mean(_))));
        assert_eq!(model(1e6).generate(10, 1), Err(GenTraceError::Mean(1e6)));
        assert_eq!(model(1.0).generate(0, 1), Err(GenTraceError::Seconds(0)));
        let mut negative = model(1.0);
        negative.sigma = -1.0;
        assert!(matches!(negative.generate(10, 1), Err(GenTraceError::Parameter { name: "sigma", .. })));
    }
}
