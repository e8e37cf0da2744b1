//! Seeded randomness: every random component draws from its own stream, derived from the run seed and a label.
//!
//! Deriving per-component streams (instead of sharing one generator) keeps a link's loss pattern unchanged when
//! another link or the workload draws more or fewer numbers, so one knob changed in a scenario does not reshuffle
//! every other random decision.

use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// A deterministic random stream.
#[derive(Clone, Debug)]
pub struct SimRng(ChaCha8Rng);

impl SimRng {
    /// The stream for the component named `label` in a run seeded with `seed`.
    pub fn for_component(seed: u64, label: &str) -> SimRng {
        // FNV-1a over the label, mixed with the seed: stable across platforms and Rust versions.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in label.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&hash.to_le_bytes());
        SimRng(ChaCha8Rng::from_seed(key))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        // 53 random bits: every value is exactly representable.
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (clamped to [0, 1]).
    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponentially distributed with the given mean (inverse transform).
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Pareto distributed with minimum `scale` and tail index `shape` (inverse transform).
    pub fn pareto(&mut self, scale: f64, shape: f64) -> f64 {
        scale / (1.0 - self.unit()).powf(1.0 / shape)
    }

    /// Uniform in [0, max].
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.0.next_u64() % (nanos + 1))
    }
}
