//! Summary statistics reported by a run.

use std::time::Duration;

use serde::Serialize;

/// Mean and tail of a set of completion times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CompletionSummary {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub count: usize,
}

impl CompletionSummary {
    /// Summarises durations in milliseconds; percentiles are nearest-rank.
    pub fn of(durations: &[Duration]) -> CompletionSummary {
        if durations.is_empty() {
            return CompletionSummary::default();
        }
        let mut millis: Vec<f64> = durations.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        millis.sort_by(f64::total_cmp);
        let mean = millis.iter().sum::<f64>() / millis.len() as f64;
        CompletionSummary {
            mean,
            p50: nearest_rank(&millis, 0.50),
            p99: nearest_rank(&millis, 0.99),
            count: millis.len(),
        }
    }
}

fn nearest_rank(sorted: &[f64], quantile: f64) -> f64 {
    let rank = (quantile * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Jain's fairness index of per-competitor throughputs: 1 when all are equal, 1/n when one takes everything.
pub fn jain_fairness(throughputs: &[f64]) -> f64 {
    let sum: f64 = throughputs.iter().sum();
    let sum_of_squares: f64 = throughputs.iter().map(|x| x * x).sum();
    if throughputs.is_empty() || sum_of_squares == 0.0 {
        return 1.0;
    }
    sum * sum / (throughputs.len() as f64 * sum_of_squares)
}

/// Tracks the longest interval without newly delivered application bytes while some were outstanding
/// (written by a sender but not yet read by the receiver).
#[derive(Clone, Debug, Default)]
pub struct StallTracker {
    outstanding: u64,
    /// Start of the current interval without progress, while bytes are outstanding.
    waiting_since: Option<Duration>,
    longest: Duration,
}

impl StallTracker {
    pub fn on_written(&mut self, now: Duration, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if self.outstanding == 0 {
            self.waiting_since = Some(now);
        }
        self.outstanding += bytes;
    }

    pub fn on_delivered(&mut self, now: Duration, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if let Some(since) = self.waiting_since {
            self.longest = self.longest.max(now.saturating_sub(since));
        }
        self.outstanding = self.outstanding.saturating_sub(bytes);
        self.waiting_since = (self.outstanding > 0).then_some(now);
    }

    /// The longest stall, counting a stall still in progress at `now`.
    pub fn longest(&self, now: Duration) -> Duration {
        let current = self.waiting_since.map_or(Duration::ZERO, |since| now.saturating_sub(since));
        self.longest.max(current)
    }
}

/// Application bytes delivered inside the measurement window.
#[derive(Clone, Copy, Debug, Default)]
pub struct GoodputMeter {
    window_start: Duration,
    bytes: u64,
}

impl GoodputMeter {
    pub fn new(window_start: Duration) -> Self {
        GoodputMeter { window_start, bytes: 0 }
    }

    pub fn on_delivered(&mut self, now: Duration, bytes: u64) {
        if now >= self.window_start {
            self.bytes += bytes;
        }
    }

    /// Bytes delivered inside the window so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Mbit/s over [window start, `end`].
    pub fn mbps(&self, end: Duration) -> f64 {
        let seconds = end.saturating_sub(self.window_start).as_secs_f64();
        if seconds <= 0.0 {
            return 0.0;
        }
        self.bytes as f64 * 8.0 / seconds / 1e6
    }
}

/// Bytes delivered per fixed interval of the run, to read goodput over any span of it afterwards.
#[derive(Clone, Debug)]
pub struct DeliveryTimeline {
    interval: Duration,
    bytes: Vec<u64>,
}

impl DeliveryTimeline {
    pub fn new(interval: Duration) -> DeliveryTimeline {
        assert!(!interval.is_zero(), "a timeline needs a positive interval");
        DeliveryTimeline { interval, bytes: Vec::new() }
    }

    pub fn on_delivered(&mut self, now: Duration, bytes: u64) {
        let index = usize::try_from(now.as_nanos() / self.interval.as_nanos()).unwrap_or(usize::MAX);
        if index >= self.bytes.len() {
            self.bytes.resize(index + 1, 0);
        }
        self.bytes[index] += bytes;
    }

    /// Mbit/s over the intervals that lie wholly within [`from`, `to`); 0 when none does.
    pub fn mbps(&self, from: Duration, to: Duration) -> f64 {
        let step = self.interval.as_nanos();
        let first = from.as_nanos().div_ceil(step);
        let end = to.as_nanos() / step;
        if end <= first {
            return 0.0;
        }
        let bytes: u64 = (first..end).filter_map(|index| self.bytes.get(index as usize)).sum();
        bytes as f64 * 8.0 / (self.interval.as_secs_f64() * (end - first) as f64) / 1e6
    }
}
