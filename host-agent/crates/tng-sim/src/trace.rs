//! Mahimahi delivery traces: one integer millisecond per line, each line one delivery opportunity for a packet of
//! up to 1500 bytes; repeated timestamps are several opportunities in that millisecond; the trace loops with a
//! period equal to its last timestamp (as `mm-link` does).

use std::fmt;
use std::time::Duration;

/// Bytes one delivery opportunity can carry (a whole IP packet, headers included).
pub const OPPORTUNITY_BYTES: u64 = 1500;

/// A parsed, looping delivery trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryTrace {
    /// Opportunity times within one period, in milliseconds, non-decreasing.
    timestamps_ms: Vec<u64>,
    period_ms: u64,
}

/// Why a trace could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceError {
    Empty,
    NotAnInteger { line: usize, text: String },
    Decreasing { line: usize },
    ZeroPeriod,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Empty => f.write_str("the trace has no delivery opportunities"),
            TraceError::NotAnInteger { line, text } => {
                write!(f, "line {line}: {text:?} is not a whole number of milliseconds")
            }
            TraceError::Decreasing { line } => {
                write!(f, "line {line}: timestamps must not decrease")
            }
            TraceError::ZeroPeriod => f.write_str("the last timestamp must be above 0 ms (it is the loop period)"),
        }
    }
}

impl std::error::Error for TraceError {}

impl DeliveryTrace {
    /// Parses Mahimahi trace text; blank lines are ignored.
    pub fn parse(text: &str) -> Result<DeliveryTrace, TraceError> {
        let mut timestamps_ms = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let value: u64 =
                line.parse().map_err(|_| TraceError::NotAnInteger { line: index + 1, text: line.to_owned() })?;
            if timestamps_ms.last().is_some_and(|&previous| value < previous) {
                return Err(TraceError::Decreasing { line: index + 1 });
            }
            timestamps_ms.push(value);
        }
        let period_ms = *timestamps_ms.last().ok_or(TraceError::Empty)?;
        if period_ms == 0 {
            return Err(TraceError::ZeroPeriod);
        }
        Ok(DeliveryTrace { timestamps_ms, period_ms })
    }

    /// Average capacity in bits per second, counting every opportunity as a full 1500-byte packet.
    pub fn mean_rate_bps(&self) -> f64 {
        (self.timestamps_ms.len() as u64 * OPPORTUNITY_BYTES * 8) as f64 / (self.period_ms as f64 / 1000.0)
    }

    /// Time of the opportunity with global index `index` (counting across loops).
    pub fn opportunity_time(&self, index: u64) -> Duration {
        let per_loop = self.timestamps_ms.len() as u64;
        let loop_number = index / per_loop;
        let within = self.timestamps_ms[(index % per_loop) as usize];
        Duration::from_millis(loop_number * self.period_ms + within)
    }

    /// Global index of the first opportunity at or after `at`.
    pub fn first_opportunity_at_or_after(&self, at: Duration) -> u64 {
        let target_ms = u64::try_from(at.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX / 2);
        let per_loop = self.timestamps_ms.len() as u64;
        // The previous loop's last opportunity can coincide with this loop's start, so search from one loop back.
        let first_loop = (target_ms / self.period_ms).saturating_sub(1);
        for loop_number in first_loop..first_loop + 2 {
            let base = loop_number * self.period_ms;
            let within = self.timestamps_ms.partition_point(|&ms| base + ms < target_ms) as u64;
            if within < per_loop {
                return loop_number * per_loop + within;
            }
        }
        (first_loop + 2) * per_loop
    }
}
