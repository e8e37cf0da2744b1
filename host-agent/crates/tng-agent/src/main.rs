//! `tng`: the tng host agent's command line.

mod perf;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use perf::client::{ClientOptions, Mode};
use perf::kernel::KernelTransport;

#[derive(Parser)]
#[command(name = "tng", version, about = "tng host agent: multipath transport over UDP, and tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure throughput and flow completion times (like iperf3), over tng, TCP or MPTCP.
    Perf {
        #[command(subcommand)]
        role: PerfRole,
    },
}

#[derive(Subcommand)]
enum PerfRole {
    /// Answer perf clients.
    Server {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0:5201")]
        listen: SocketAddr,
    },
    /// Run a workload against a perf server.
    Client(PerfClientArgs),
}

#[derive(Args)]
struct PerfClientArgs {
    /// Server address.
    #[arg(long)]
    connect: SocketAddr,
    /// Local address to send from (repeat for several; flows are spread over them).
    #[arg(long)]
    local: Vec<SocketAddr>,
    /// Workload.
    #[arg(long, value_enum, default_value_t = Mode::Bulk)]
    mode: Mode,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Transport carrying the workload.
    #[arg(long, value_enum, default_value_t = KernelTransport::Tcp)]
    transport: KernelTransport,
    /// Congestion control (kernel names for tcp/mptcp: cubic, bbr, reno).
    #[arg(long)]
    cc: Option<String>,
    /// Parallel clients in shortflows mode.
    #[arg(long, default_value_t = 10)]
    parallel: usize,
    /// Mean flow size in bytes in shortflows mode (sizes are exponentially distributed).
    #[arg(long, default_value_t = 100_000)]
    flow_size: u64,
    /// Response size in bytes in rr mode.
    #[arg(long, default_value_t = 1000)]
    response_size: u64,
    /// Seed of the flow-size distribution.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of a progress line per second and a summary.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => return fail(&anyhow::Error::from(err)),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// Every error a user can cause ends here: one line, non-zero exit, no backtrace.
fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("tng: error: {err:#}");
    ExitCode::FAILURE
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Perf { role: PerfRole::Server { listen } } => perf::server::serve(listen).await,
        Command::Perf { role: PerfRole::Client(args) } => perf_client(args).await,
    }
}

async fn perf_client(args: PerfClientArgs) -> anyhow::Result<()> {
    if !(args.duration.is_finite() && args.duration > 0.0) {
        anyhow::bail!("--duration must be a positive number of seconds, not {}", args.duration);
    }
    let options = ClientOptions {
        connect: args.connect,
        local: args.local,
        mode: args.mode,
        duration: Duration::from_secs_f64(args.duration),
        transport: args.transport,
        cc: args.cc,
        parallel: args.parallel,
        mean_flow_bytes: args.flow_size,
        response_bytes: args.response_size,
        seed: args.seed,
        progress: !args.json,
    };
    let report = perf::client::run(options).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{:?} over {:?}: goodput {:.2} Mbit/s, {} flows (FCT mean {:.1} ms, p99 {:.1} ms), {} retransmitted \
             packets, cpu {:.0}%",
            report.mode,
            report.transport,
            report.goodput_mbps,
            report.fct_ms.count,
            report.fct_ms.mean,
            report.fct_ms.p99,
            report.retransmitted_packets,
            report.cpu_percent
        );
        for path in &report.paths {
            println!("  path {}: {} bytes, rtt {:.2} ms", path.name, path.bytes, path.rtt_ms);
        }
    }
    if report.bytes_corrupted > 0 {
        anyhow::bail!("{} received bytes did not match what the server sent", report.bytes_corrupted);
    }
    Ok(())
}
