//! `tng-sim bench`: simulator speed on a fixed two-path bulk transfer.

use std::path::Path;

use serde::Serialize;

use crate::document::{parse_scenario, Override};
use crate::engine::{run, RunOptions};

/// Two paths (20 Mbit/s 30 ms, 40 Mbit/s 10 ms), bulk download: the shape of `aggregation.toml`.
const BENCH_SCENARIO: &str = r#"
duration_s = 10
[workload]
kind = "bulk"
[[paths]]
name = "lte"
rate_mbps = 20
delay_ms = 15
[[paths]]
name = "wifi"
rate_mbps = 40
delay_ms = 5
"#;

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub benchmark: &'static str,
    pub simulated_s: f64,
    pub wall_s: f64,
    pub events: u64,
    pub events_per_sec: f64,
    /// Simulated seconds per wall-clock second.
    pub speedup: f64,
    pub goodput_mbps: f64,
}

impl BenchResult {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
    }

    pub fn summary(&self) -> String {
        format!(
            "{}: {} events in {:.2} s ({:.0} events/s), {:.1} simulated s ({:.1}x real time), {:.1} Mbit/s goodput",
            self.benchmark,
            self.events,
            self.wall_s,
            self.events_per_sec,
            self.simulated_s,
            self.speedup,
            self.goodput_mbps
        )
    }
}

/// Runs the benchmark for `duration_s` simulated seconds.
pub fn run_bench(duration_s: f64) -> Result<BenchResult, String> {
    let overrides = [Override { key: vec!["duration_s".into()], value: toml::Value::Float(duration_s) }];
    let scenario = parse_scenario(Path::new("<bench>"), BENCH_SCENARIO, &overrides).map_err(|e| e.to_string())?;
    let outcome = run(&scenario, Path::new("."), RunOptions::default()).map_err(|e| e.to_string())?;
    let wall_s = outcome.wall_time.as_secs_f64().max(f64::MIN_POSITIVE);
    let simulated_s = outcome.ended_at.as_secs_f64();
    let goodput_mbps = outcome.ledger.bytes_delivered as f64 * 8.0 / simulated_s.max(f64::MIN_POSITIVE) / 1e6;
    Ok(BenchResult {
        benchmark: "two-path-bulk",
        simulated_s,
        wall_s,
        events: outcome.events,
        events_per_sec: outcome.events as f64 / wall_s,
        speedup: simulated_s / wall_s,
        goodput_mbps,
    })
}
