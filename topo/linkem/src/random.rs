//! Seeded random streams and the few distributions the emulator needs.
//!
//! ChaCha8 with an explicit stream number gives independent, reproducible sequences for each consumer (loss and
//! jitter of each direction, the trace generator) from one user-visible seed.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Which consumer a random stream belongs to; each gets its own ChaCha stream from the same seed.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    LossAb = 1,
    LossBa = 2,
    JitterAb = 3,
    JitterBa = 4,
    TraceGenerator = 5,
}

pub fn rng(seed: u64, stream: Stream) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream as u64);
    rng
}

/// Uniform in [0, 1) with 53 random bits.
pub fn uniform(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// True with probability `p`.
pub fn bernoulli(rng: &mut impl RngCore, p: f64) -> bool {
    uniform(rng) < p
}

/// Standard normal sample (Box-Muller).
pub fn standard_normal(rng: &mut impl RngCore) -> f64 {
    // 1 - uniform is in (0, 1], so the logarithm is finite.
    let radius = (-2.0 * (1.0 - uniform(rng)).ln()).sqrt();
    radius * (std::f64::consts::TAU * uniform(rng)).cos()
}

/// Exponential sample with the given mean.
pub fn exponential(rng: &mut impl RngCore, mean: f64) -> f64 {
    -mean * (1.0 - uniform(rng)).ln()
}

/// Largest mean drawn in one piece by Knuth's product method; larger means are split, since a sum of independent
/// Poisson variables is Poisson with the summed mean (and exp(-mean) would underflow for huge means).
const POISSON_CHUNK: f64 = 30.0;

/// Poisson sample with the given mean (exact for any mean >= 0).
pub fn poisson(rng: &mut impl RngCore, mean: f64) -> u64 {
    let mut remaining = mean.max(0.0);
    let mut total = 0;
    while remaining > 0.0 {
        let chunk = remaining.min(POISSON_CHUNK);
        remaining -= chunk;
        let limit = (-chunk).exp();
        let mut product = uniform(rng);
        while product > limit {
            total += 1;
            product *= uniform(rng);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_and_variance(samples: &[f64]) -> (f64, f64) {
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let variance = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        (mean, variance)
    }

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = rng(7, Stream::LossAb);
                move |_| r.next_u64()
            })
            .collect();
        let again: Vec<u64> = (0..4)
            .map({
                let mut r = rng(7, Stream::LossAb);
                move |_| r.next_u64()
            })
            .collect();
        let other: Vec<u64> = (0..4)
            .map({
                let mut r = rng(7, Stream::LossBa);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, again);
        assert_ne!(a, other);
    }

    #[test]
    fn poisson_has_matching_mean_and_variance_for_small_and_large_means() {
        let mut r = rng(1, Stream::TraceGenerator);
        for mean in [0.8, 75.0] {
            let samples: Vec<f64> = (0..20_000).map(|_| poisson(&mut r, mean) as f64).collect();
            let (m, v) = mean_and_variance(&samples);
            assert!((m - mean).abs() < 0.03 * mean, "mean {m} for {mean}");
            assert!((v - mean).abs() < 0.06 * mean, "variance {v} for {mean}");
        }
        assert_eq!(poisson(&mut r, 0.0), 0);
    }

    #[test]
    fn normal_is_standard() {
        let mut r = rng(2, Stream::TraceGenerator);
        let samples: Vec<f64> = (0..20_000).map(|_| standard_normal(&mut r)).collect();
        let (m, v) = mean_and_variance(&samples);
        assert!(m.abs() < 0.03, "mean {m}");
        assert!((v - 1.0).abs() < 0.05, "variance {v}");
    }
}
