//! `tng-sim`: run a scenario file on the deterministic simulator, or measure the simulator's speed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use tng_qlog::{Clock, QlogDir};
use tng_sim::document::{load_scenario, Override};
use tng_sim::engine::{run, RunOptions};
use tng_sim::report::build_report;

#[derive(Parser)]
#[command(name = "tng-sim", about = "Deterministic network simulator driving real tng endpoints")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario file.
    Run {
        scenario: PathBuf,
        /// Seed of every random decision (overrides the file's `seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Override any scenario value: `--set paths.0.rate_mbps=15`, `--set mode=connection-per-flow`.
        #[arg(long = "set", value_name = "DOTTED.KEY=VALUE")]
        overrides: Vec<String>,
        /// Simulated seconds (overrides the file's `duration_s`).
        #[arg(long)]
        duration: Option<f64>,
        /// Print one JSON object instead of a summary.
        #[arg(long)]
        json: bool,
        /// Leave out the machine-dependent fields (`events_per_sec`, `steady_events_per_cpu_sec`): same seed,
        /// byte-identical output.
        #[arg(long)]
        deterministic: bool,
        /// No progress lines on stderr.
        #[arg(long)]
        quiet: bool,
        /// Every MS simulated milliseconds, print each channel's RTT, window, bytes in flight and pacing rate, each
        /// relay's queues and each section end's window to stderr as JSON lines (to see what limits a transfer).
        #[arg(long, value_name = "MS")]
        channel_log: Option<u64>,
        /// Write a qlog trace of every connection end into DIR (JSON-SEQ, one `.sqlog` file each; virtual time).
        #[arg(long, value_name = "DIR")]
        qlog: Option<PathBuf>,
        /// Add a `timeline` to the report: goodput and the server's smoothed RTT every MS simulated milliseconds
        /// (a multiple of 100).
        #[arg(long, value_name = "MS")]
        timeline: Option<u64>,
        /// Run every path end to end, without the relays the file gives it (to compare with the split run).
        #[arg(long)]
        without_relays: bool,
    },
    /// Measure simulator speed (events per second) on a fixed workload; prints JSON.
    Bench {
        /// Simulated seconds of the benchmark run.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run {
            scenario,
            seed,
            overrides,
            duration,
            json,
            deterministic,
            quiet,
            channel_log,
            qlog,
            timeline,
            without_relays,
        } => {
            let timeline = timeline.map(std::time::Duration::from_millis);
            let step = tng_sim::ledger::TIMELINE_INTERVAL;
            if let Some(interval) = timeline.filter(|t| t.is_zero() || t.as_nanos() % step.as_nanos() != 0) {
                return fail(&format!("--timeline {}: must be a positive multiple of {step:?}", interval.as_millis()));
            }
            let mut parsed = Vec::new();
            for text in &overrides {
                match Override::parse(text) {
                    Ok(override_) => parsed.push(override_),
                    Err(error) => return fail(&error),
                }
            }
            if let Some(seed) = seed {
                parsed.push(Override { key: vec!["seed".into()], value: toml::Value::Integer(seed as i64) });
            }
            if let Some(duration) = duration {
                parsed.push(Override { key: vec!["duration_s".into()], value: toml::Value::Float(duration) });
            }
            let mut loaded = match load_scenario(&scenario, &parsed) {
                Ok(loaded) => loaded,
                Err(error) => return fail(&error),
            };
            if without_relays {
                loaded.paths.iter_mut().for_each(|path| (path.relay, path.server_relay) = (None, None));
            }
            let base_dir = scenario.parent().map(PathBuf::from).unwrap_or_default();
            let qlog = match qlog.map(|dir| QlogDir::new(&dir, "tng-sim", Clock::Virtual).map_err(|e| (dir, e))) {
                None => None,
                Some(Ok(dir)) => Some(dir.into_config()),
                Some(Err((dir, error))) => return fail(&format!("--qlog {}: {error}", dir.display())),
            };
            let options = RunOptions {
                progress: !json && !quiet,
                channel_log: channel_log.map(std::time::Duration::from_millis),
                qlog,
                timeline,
            };
            let outcome = match run(&loaded, &base_dir, options) {
                Ok(outcome) => outcome,
                Err(error) => return fail(&format!("{}: {error}", scenario.display())),
            };
            let name = scenario.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
            let report = build_report(&name, &outcome, !deterministic);
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.summary());
            }
            ExitCode::SUCCESS
        }
        Command::Bench { duration, json } => match tng_sim::bench::run_bench(duration) {
            Ok(result) if json => {
                println!("{}", result.to_json());
                ExitCode::SUCCESS
            }
            Ok(result) => {
                println!("{}", result.summary());
                ExitCode::SUCCESS
            }
            Err(error) => fail(&error),
        },
    }
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("tng-sim: {error}");
    ExitCode::FAILURE
}
