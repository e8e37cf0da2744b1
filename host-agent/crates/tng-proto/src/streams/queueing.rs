//! How long written bytes wait in the sender before their first transmission, as a byte-weighted histogram.
//!
//! Buckets are exact below 16 microseconds, then eight per power of two, so a quantile is read to within 1/16 of
//! its value at any scale with a fixed 2.7 KB of counters, however many bytes are sent.

use std::time::Duration;

/// Microsecond values below this have a bucket each.
const EXACT: u64 = 16;
/// Buckets per power of two above [`EXACT`].
const PER_OCTAVE: u64 = 8;
/// Octaves from 2^4 up to 2^44 microseconds (about 200 days); longer delays land in the last bucket.
const OCTAVES: u64 = 40;
const BUCKETS: usize = (EXACT + OCTAVES * PER_OCTAVE) as usize;

/// Bytes by the delay they waited between the application's write and their first transmission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueingDelays {
    bytes: Box<[u64; BUCKETS]>,
    total: u64,
}

impl Default for QueueingDelays {
    fn default() -> Self {
        QueueingDelays { bytes: Box::new([0; BUCKETS]), total: 0 }
    }
}

impl QueueingDelays {
    /// `bytes` waited `delay`.
    pub fn record(&mut self, delay: Duration, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.bytes[bucket(micros)] += bytes;
        self.total += bytes;
    }

    /// Bytes recorded.
    pub fn bytes(&self) -> u64 {
        self.total
    }

    /// The delay that a fraction `quantile` of the bytes waited at most (the middle of its bucket); `None` before
    /// any byte was sent.
    pub fn quantile(&self, quantile: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        // The first byte of rank ceil(q * total), as nearest-rank percentiles count.
        let rank = ((quantile.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &count) in self.bytes.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Duration::from_micros(middle(index)));
            }
        }
        Some(Duration::from_micros(middle(BUCKETS - 1)))
    }
}

fn bucket(micros: u64) -> usize {
    if micros < EXACT {
        return micros as usize;
    }
    let octave = u64::from(micros.ilog2()) - EXACT.ilog2() as u64;
    if octave >= OCTAVES {
        return BUCKETS - 1;
    }
    // The three bits after the leading one pick the bucket within the octave.
    let step = (micros >> (octave + EXACT.ilog2() as u64 - PER_OCTAVE.ilog2() as u64)) & (PER_OCTAVE - 1);
    (EXACT + octave * PER_OCTAVE + step) as usize
}

/// The middle of bucket `index`, in microseconds.
fn middle(index: usize) -> u64 {
    let index = index as u64;
    if index < EXACT {
        return index;
    }
    let (octave, step) = ((index - EXACT) / PER_OCTAVE, (index - EXACT) % PER_OCTAVE);
    let width = 1u64 << (octave + EXACT.ilog2() as u64 - PER_OCTAVE.ilog2() as u64);
    let start = (EXACT << octave) + step * width;
    start + width / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_byte_weighted_and_within_a_sixteenth() {
        let mut delays = QueueingDelays::default();
        assert_eq!(delays.quantile(0.5), None);
        delays.record(Duration::from_millis(2), 9_000);
        delays.record(Duration::from_millis(900), 1_000);
        assert_eq!(delays.bytes(), 10_000);
        let p50 = delays.quantile(0.50).unwrap().as_secs_f64();
        let p95 = delays.quantile(0.95).unwrap().as_secs_f64();
        assert!((p50 / 0.002 - 1.0).abs() <= 1.0 / 16.0, "p50 {p50}");
        assert!((p95 / 0.9 - 1.0).abs() <= 1.0 / 16.0, "p95 {p95}");
        assert_eq!(delays.quantile(0.90), delays.quantile(0.50), "the 9,000th byte waited 2 ms");
    }

    #[test]
    fn every_value_falls_in_the_bucket_whose_range_holds_it() {
        for micros in (0..5_000).chain([1 << 20, (1 << 30) + 12_345, u64::MAX / 2]) {
            let index = bucket(micros);
            let middle = middle(index);
            if micros < EXACT {
                assert_eq!(middle, micros);
            } else if index < BUCKETS - 1 {
                assert!(
                    micros.abs_diff(middle) as f64 <= micros as f64 / 16.0,
                    "{micros} -> bucket {index} ~ {middle}"
                );
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }
}
