//! The `linkem` command: bridge two interfaces, generate a synthetic trace, or benchmark the forwarder.

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::thread;

use clap::{Args, Parser, Subcommand, ValueEnum};

use linkem::bridge::{self, Clock};
use linkem::control::{self, Control, ControlledDirection};
use linkem::gentrace::{write_trace, SproutModel, StepsModel};
use linkem::link::RandomStreams;
use linkem::spec::LinkSpec;

#[derive(Parser)]
#[command(
    version,
    about = "User-space link emulator: bridges two interfaces, emulating rate or a Mahimahi trace, delay, jitter, \
             loss, a queue and ECN marking in each direction",
    subcommand_negates_reqs = true
)]
struct Cli {
    /// First interface (frames read here go through the `ab` direction)
    #[arg(long = "a", value_name = "IFACE", required = true)]
    a: Option<String>,
    /// Second interface (frames read here go through the `ba` direction)
    #[arg(long = "b", value_name = "IFACE", required = true)]
    b: Option<String>,
    /// Spec of the a-to-b direction, e.g. "rate=20mbit,delay=20ms,loss=0.5%,queue=100pkt" (empty: pass through)
    #[arg(long, value_name = "SPEC", default_value = "")]
    ab: String,
    /// Spec of the b-to-a direction
    #[arg(long, value_name = "SPEC", default_value = "")]
    ba: String,
    /// Unix socket for JSON-line control commands (set, get, counters, reset)
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Seed of the loss and jitter random streams (a control `reset` re-seeds them)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print a synthetic cellular trace in Mahimahi format to standard output
    GenTrace(GenTraceArgs),
    /// Measure the highest forwarding rate through two veths in namespaces (needs root)
    Bench(BenchArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum TraceModel {
    /// Sprout's stochastic model: Brownian rate, Poisson deliveries, outages
    Sprout,
    /// A rapidly changing channel: a level redrawn every --period-seconds, Poisson deliveries
    Steps,
}

#[derive(Args)]
struct GenTraceArgs {
    #[arg(long, value_enum, default_value = "sprout")]
    model: TraceModel,
    /// Mean rate of 1500-byte opportunities, in Mbit/s
    #[arg(long)]
    mean_mbps: f64,
    /// Length of the trace (its loop period)
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Brownian-motion noise power, packets/s per sqrt(s)
    #[arg(long, default_value_t = 200.0)]
    sigma: f64,
    /// Pull of the rate towards the mean, per second
    #[arg(long, default_value_t = 0.5)]
    mean_reversion: f64,
    /// Mean number of outages per minute
    #[arg(long, default_value_t = 2.0)]
    outages_per_minute: f64,
    /// Mean outage length in seconds (exponentially distributed)
    #[arg(long, default_value_t = 0.5)]
    outage_mean_seconds: f64,
    /// Steps: how long each level holds
    #[arg(long, default_value_t = 5.0)]
    period_seconds: f64,
    /// Steps: levels are drawn uniformly from mean x (1 - spread) to mean x (1 + spread)
    #[arg(long, default_value_t = 0.8)]
    spread: f64,
}

#[derive(Args)]
struct BenchArgs {
    /// Length of the measurement window
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// UDP payload per datagram (1472 fills a 1500-byte MTU)
    #[arg(long, default_value_t = 1472)]
    payload: usize,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::GenTrace(args)) => gen_trace(&args),
        Some(Command::Bench(args)) => bench(&args),
        None => run_bridge(&cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("linkem: {message}");
            ExitCode::FAILURE
        }
    }
}

fn gen_trace(args: &GenTraceArgs) -> Result<(), String> {
    let generated = match args.model {
        TraceModel::Sprout => SproutModel {
            mean_mbps: args.mean_mbps,
            sigma: args.sigma,
            mean_reversion: args.mean_reversion,
            outages_per_minute: args.outages_per_minute,
            outage_mean_seconds: args.outage_mean_seconds,
        }
        .generate(args.seconds, args.seed),
        TraceModel::Steps => {
            StepsModel { mean_mbps: args.mean_mbps, period_seconds: args.period_seconds, spread: args.spread }
                .generate(args.seconds, args.seed)
        }
    };
    let timestamps = generated.map_err(|e| e.to_string())?;
    write_trace(&mut io::stdout().lock(), &timestamps).map_err(|e| format!("writing the trace: {e}"))
}

fn bench(args: &BenchArgs) -> Result<(), String> {
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 600.0) {
        return Err(format!("--seconds must be in (0, 600], got {}", args.seconds));
    }
    if !(8..=65_507).contains(&args.payload) {
        return Err(format!("--payload must be between 8 and 65507 bytes, got {}", args.payload));
    }
    let executable = std::env::current_exe().map_err(|e| format!("cannot find the linkem binary: {e}"))?;
    let report = linkem::bench::run(&executable, args.seconds, args.payload).map_err(|e| format!("bench: {e}"))?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{json}");
    } else {
        println!(
            "forwarded {:.0} packets/s = {:.1} Mbit/s of {}-byte IP packets (offered {:.0} packets/s, lost {:.2}%) \
             over {} s",
            report.forwarded_packets_per_second,
            report.forwarded_mbit_per_second,
            report.ip_packet_bytes,
            report.offered_packets_per_second,
            report.loss_fraction * 100.0,
            report.seconds
        );
    }
    Ok(())
}

fn run_bridge(cli: &Cli) -> Result<(), String> {
    let (Some(a), Some(b)) = (&cli.a, &cli.b) else {
        return Err("--a and --b are required".into());
    };
    let ab_spec = LinkSpec::parse(&cli.ab).map_err(|e| format!("--ab: {e}"))?;
    let ba_spec = LinkSpec::parse(&cli.ba).map_err(|e| format!("--ba: {e}"))?;
    let clock = Clock::start();
    let (ab, ab_handle) = bridge::direction("ab", a, b, ab_spec.clone(), RandomStreams::AB, cli.seed, clock)
        .map_err(|e| format!("opening {a} -> {b}: {e}"))?;
    let (ba, ba_handle) = bridge::direction("ba", b, a, ba_spec.clone(), RandomStreams::BA, cli.seed, clock)
        .map_err(|e| format!("opening {b} -> {a}: {e}"))?;
    eprintln!("linkem: bridging {a} <-> {b}\n  ab: {ab_spec}\n  ba: {ba_spec}");
    // The control holds the handles for as long as forwarding runs: a dropped handle would close the wake socket,
    // which the forwarding thread then sees as permanently readable.
    let control = Arc::new(Control::new(
        ControlledDirection::new("ab", ab_spec, ab_handle),
        ControlledDirection::new("ba", ba_spec, ba_handle),
        clock,
    ));
    if let Some(path) = &cli.control {
        control::serve(path, Arc::clone(&control)).map_err(|e| format!("--control {}: {e}", path.display()))?;
    }
    let (finished, first_to_finish) = mpsc::channel();
    for forwarder in [ab, ba] {
        let finished = finished.clone();
        thread::Builder::new()
            .name(format!("linkem-{}", forwarder.name()))
            .spawn(move || {
                let name = forwarder.name();
                let _ = finished.send((name, forwarder.run()));
            })
            .map_err(|e| format!("starting a forwarding thread: {e}"))?;
    }
    match first_to_finish.recv() {
        Ok((name, Err(error))) => Err(format!("{name}: {error}")),
        Ok((name, Ok(()))) => Err(format!("{name}: forwarding stopped")),
        Err(_) => Err("forwarding threads ended without a result".into()),
    }
}
