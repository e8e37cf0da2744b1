//! Mahimahi packet-delivery traces: one integer millisecond per line, each line one delivery opportunity.
//!
//! Repeated timestamps mean several opportunities in that millisecond. The trace loops: after the last line the
//! schedule starts again shifted by the last timestamp, as Mahimahi's `LinkQueue` does.

use std::path::Path;

use thiserror::Error;

/// Bytes one opportunity stands for when converting a trace into a mean rate (Mahimahi's MTU-sized packet).
pub const OPPORTUNITY_BYTES: u64 = 1500;

const NANOS_PER_MILLI: u64 = 1_000_000;
/// Keeps every opportunity time, over any number of loops a run can reach, far inside u64 nanoseconds.
const MAX_TIMESTAMP_MS: u64 = 1_000_000_000;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TraceError {
    #[error("line {line}: `{text}` is not a non-negative integer millisecond")]
    NotAnInteger { line: usize, text: String },
    #[error("line {line}: timestamp {value} ms is smaller than the previous one ({previous} ms)")]
    Decreasing { line: usize, value: u64, previous: u64 },
    #[error(
        "line {line}: timestamp {value} ms is beyond the largest supported ({MAX_TIMESTAMP_MS} ms, about 11 days)"
    )]
    TooLarge { line: usize, value: u64 },
    #[error("the trace has no delivery opportunities")]
    Empty,
    #[error("the last timestamp must be above 0 ms: it is the period the trace loops with")]
    ZeroPeriod,
}

/// A parsed trace: sorted opportunity timestamps and the loop period (the last timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    opportunities_ms: Vec<u64>,
}

impl Trace {
    /// Parses trace text; blank lines are ignored.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut opportunities_ms = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let text = raw.trim();
            if text.is_empty() {
                continue;
            }
            let value: u64 = text.parse().map_err(|_| TraceError::NotAnInteger { line, text: text.to_owned() })?;
            if value > MAX_TIMESTAMP_MS {
                return Err(TraceError::TooLarge { line, value });
            }
            if let Some(&previous) = opportunities_ms.last() {
                if value < previous {
                    return Err(TraceError::Decreasing { line, value, previous });
                }
            }
            opportunities_ms.push(value);
        }
        match opportunities_ms.last() {
            None => Err(TraceError::Empty),
            Some(0) => Err(TraceError::ZeroPeriod),
            Some(_) => Ok(Trace { opportunities_ms }),
        }
    }

    /// Reads and parses a trace file; the error names the file.
    pub fn load(path: &Path) -> Result<Trace, String> {
        let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        Trace::parse(&text).map_err(|error| format!("{}: {error}", path.display()))
    }

    pub fn period_ms(&self) -> u64 {
        self.opportunities_ms.last().copied().unwrap_or(0)
    }

    /// Mean capacity when every opportunity carries a 1500-byte packet.
    pub fn mean_bits_per_second(&self) -> f64 {
        let bits = (self.opportunities_ms.len() as u64 * OPPORTUNITY_BYTES * 8) as f64;
        bits * 1000.0 / self.period_ms() as f64
    }
}

/// Walks the looping schedule of a trace, in nanoseconds relative to a caller-chosen origin.
#[derive(Debug, Clone)]
pub struct TraceCursor {
    trace: std::sync::Arc<Trace>,
    origin_ns: u64,
    loop_index: u64,
    position: usize,
}

impl TraceCursor {
    /// Starts the trace so that timestamp 0 falls on `origin_ns`.
    pub fn new(trace: std::sync::Arc<Trace>, origin_ns: u64) -> TraceCursor {
        TraceCursor { trace, origin_ns, loop_index: 0, position: 0 }
    }

    fn period_ns(&self) -> u64 {
        self.trace.period_ms() * NANOS_PER_MILLI
    }

    fn current_ns(&self) -> u64 {
        let offset_ms = self.trace.opportunities_ms[self.position];
        self.origin_ns + self.loop_index * self.period_ns() + offset_ms * NANOS_PER_MILLI
    }

    /// Takes the first unused opportunity at or after `earliest_ns` and returns its time.
    ///
    /// Opportunities before `earliest_ns` are wasted, as in Mahimahi when the queue is empty.
    pub fn take_at_or_after(&mut self, earliest_ns: u64) -> u64 {
        // Skip whole loops at once so a long idle period costs no per-opportunity work. Every opportunity of loop L
        // lies in [L * period, (L + 1) * period], so all loops before `loop_of_t - 1` end before `earliest_ns`.
        let loop_of_t = earliest_ns.saturating_sub(self.origin_ns) / self.period_ns();
        if loop_of_t > self.loop_index + 1 {
            self.loop_index = loop_of_t - 1;
            self.position = 0;
        }
        while self.current_ns() < earliest_ns {
            self.advance();
        }
        let time = self.current_ns();
        self.advance();
        time
    }

    fn advance(&mut self) {
        self.position += 1;
        if self.position == self.trace.opportunities_ms.len() {
            self.position = 0;
            self.loop_index += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const MS: u64 = NANOS_PER_MILLI;

    #[test]
    fn parses_lines_and_reports_the_bad_one() {
        let trace = Trace::parse("1\n1\n\n3\n").unwrap();
        assert_eq!(trace.period_ms(), 3);
        // Three opportunities per 3 ms: 1000 packets/s.
        assert!((trace.mean_bits_per_second() - 12e6).abs() < 1e-6);
        assert_eq!(Trace::parse("1\nx\n"), Err(TraceError::NotAnInteger { line: 2, text: "x".into() }));
        assert_eq!(Trace::parse("5\n4\n"), Err(TraceError::Decreasing { line: 2, value: 4, previous: 5 }));
        assert_eq!(Trace::parse("\n"), Err(TraceError::Empty));
        assert_eq!(Trace::parse("1\n99999999999\n"), Err(TraceError::TooLarge { line: 2, value: 99_999_999_999 }));
        assert_eq!(Trace::parse("0\n0\n"), Err(TraceError::ZeroPeriod));
        assert_eq!(Trace::parse("-1\n"), Err(TraceError::NotAnInteger { line: 1, text: "-1".into() }));
    }

    #[test]
    fn mean_rate_counts_1500_byte_opportunities() {
        // One opportunity per millisecond is 1000 packets of 1500 bytes per second: 12 Mbit/s.
        let text: String = (1..=1000).map(|ms| format!("{ms}\n")).collect();
        let trace = Trace::parse(&text).unwrap();
        assert!((trace.mean_bits_per_second() - 12e6).abs() < 1e-6);
    }

    #[test]
    fn repeated_timestamps_give_several_opportunities() {
        let mut cursor = TraceCursor::new(Arc::new(Trace::parse("2\n2\n4\n").unwrap()), 0);
        assert_eq!(cursor.take_at_or_after(0), 2 * MS);
        assert_eq!(cursor.take_at_or_after(0), 2 * MS);
        assert_eq!(cursor.take_at_or_after(0), 4 * MS);
    }

    #[test]
    fn trace_loops_shifted_by_its_last_timestamp() {
        let mut cursor = TraceCursor::new(Arc::new(Trace::parse("2\n2\n4\n").unwrap()), 10 * MS);
        let times: Vec<u64> = (0..7).map(|_| cursor.take_at_or_after(0) / MS).collect();
        assert_eq!(times, vec![12, 12, 14, 16, 16, 18, 20]);
    }

    #[test]
    fn idle_time_wastes_opportunities_and_skips_whole_loops() {
        let mut cursor = TraceCursor::new(Arc::new(Trace::parse("1\n3\n").unwrap()), 0);
        assert_eq!(cursor.take_at_or_after(2 * MS), 3 * MS);
        // Loop 1000 covers (3000 ms, 3003 ms]: opportunities at 3001 and 3003 ms.
        assert_eq!(cursor.take_at_or_after(3000 * MS + 1), 3001 * MS);
        assert_eq!(cursor.take_at_or_after(3001 * MS), 3003 * MS);
        // An opportunity exactly at the requested time is usable.
        assert_eq!(cursor.take_at_or_after(3004 * MS), 3004 * MS);
    }
}
