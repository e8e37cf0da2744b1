//! The `tng perf` command line: the server and client roles, their flags, and the client's summary for a person.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use tng_proto::alcc::needs_receiver;
use tng_proto::CcKind;

use super::client::{ClientOptions, Dialer, Mode};
use super::kernel::KernelTransport;
use super::server::StatsByToken;
use super::Transport;
use crate::args::{AcceptArgs, ClientArgs, TransportArgs};
use crate::service::{self, ProxyPolicy};
use crate::{alcc, dial, load_or_fresh_identity, start_agent};

#[derive(Subcommand)]
pub enum PerfRole {
    /// Answer perf clients over tng (UDP) and kernel TCP/MPTCP on the same port number.
    Server {
        #[arg(long, default_value = "0.0.0.0:5201")]
        listen: SocketAddr,
        /// Identity key file; a fresh identity for this run if absent.
        #[arg(long)]
        identity: Option<PathBuf>,
        #[command(flatten)]
        accept: AcceptArgs,
        #[command(flatten)]
        transport: TransportArgs,
    },
    /// Run a workload against a perf server.
    Client(PerfClientArgs),
}

#[derive(Args)]
pub struct PerfClientArgs {
    /// Server address.
    #[arg(long)]
    pub connect: SocketAddr,
    /// Workload.
    #[arg(long, value_enum, default_value_t = Mode::Bulk)]
    pub mode: Mode,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Transport carrying the workload.
    #[arg(long, value_enum, default_value_t = Transport::Tng)]
    pub transport: Transport,
    /// With `--transport tcp`: the server writes to its TCP socket only what this tng controller allows (ALCC:
    /// copa or verus, fed from the kernel's TCP_INFO; or sprout in bulk mode, fed also from the forecasts this client
    /// sends); the kernel's controller (`--cc`, default the system's) still runs underneath.
    #[arg(long, value_name = "CC")]
    pub alcc: Option<CcKind>,
    /// Parallel clients in shortflows mode.
    #[arg(long, default_value_t = 10)]
    pub parallel: usize,
    /// Mean flow size in bytes in shortflows mode (sizes are exponentially distributed).
    #[arg(long, default_value_t = 100_000)]
    pub flow_size: u64,
    /// Response size in bytes in rr and connections modes.
    #[arg(long, default_value_t = 1000)]
    pub response_size: u64,
    /// Connections to open in connections mode (tng only; the run's statistics take one more).
    #[arg(long, default_value_t = 100)]
    pub connections: usize,
    /// Seconds between one connection's requests in connections mode.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Seed of the flow-size distribution and of the connections' request phases.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of a progress line per second and a summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn server(
    listen: SocketAddr,
    identity: Option<PathBuf>,
    accept: AcceptArgs,
    transport: TransportArgs,
) -> Result<()> {
    let server = accept.server_config()?;
    let keypair = load_or_fresh_identity(identity.as_deref())?;
    eprintln!("tng perf server on {listen} (tng over UDP, tcp and mptcp over TCP), identity {}", keypair.identity());
    let (agent, _) = start_agent(&transport, Some(server), keypair, &[listen])?;
    let stats = StatsByToken::default();
    tokio::select! {
        result = super::server::serve_kernel(listen, stats.clone()) => result,
        result = service::serve_streams(agent, stats, ProxyPolicy::default()) => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

pub async fn client(args: PerfClientArgs) -> Result<()> {
    if !(args.duration.is_finite() && args.duration > 0.0) {
        bail!("--duration must be a positive number of seconds, not {}", args.duration);
    }
    if let Some(kind) = args.alcc {
        if args.transport != Transport::Tcp {
            bail!("--alcc {kind} needs --transport tcp: ALCC limits what a server writes to a kernel TCP socket");
        }
        alcc::supported(kind)?;
        if needs_receiver(kind) && args.mode != Mode::Bulk {
            bail!("--alcc {kind} needs --mode bulk: this client sends its forecasts while the server's data flows");
        }
    }
    if args.mode == Mode::Connections {
        if args.transport != Transport::Tng {
            bail!("--mode connections needs --transport tng: it opens many tng connections from one endpoint");
        }
        if args.connections == 0 {
            bail!("--connections must be at least 1");
        }
        if !(args.interval.is_finite() && args.interval > 0.0) {
            bail!("--interval must be a positive number of seconds, not {}", args.interval);
        }
    }
    let dialer = match args.transport {
        Transport::Tcp => Dialer::Kernel(KernelTransport::Tcp),
        Transport::Mptcp => Dialer::Kernel(KernelTransport::Mptcp),
        Transport::Tng => {
            let (agent, route, conn) = dial(args.connect, &args.client).await?;
            Dialer::Tng { agent, route, conn }
        }
    };
    let options = ClientOptions {
        connect: args.connect,
        local: args.client.local.clone(),
        mode: args.mode,
        duration: Duration::from_secs_f64(args.duration),
        transport: args.transport,
        cc: args.client.transport.cc.clone(),
        alcc: args.alcc,
        parallel: args.parallel,
        mean_flow_bytes: args.flow_size,
        response_bytes: args.response_size,
        connections: args.connections,
        interval: Duration::from_secs_f64(args.interval),
        seed: args.seed,
        progress: !args.json,
    };
    let report = super::client::run(options, dialer).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if let Some(connections) = &report.connections {
        print_connections(connections, report.cpu_percent);
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
        if let Some(alcc) = &report.alcc {
            println!(
                "  alcc {}: window peaked at {} bytes, the server's kernel held at most {} ({} TCP_INFO reads, {} \
                 timed round trips, {} forecasts)",
                alcc.controller,
                alcc.peak_window_bytes,
                alcc.peak_kernel_bytes,
                alcc.samples,
                alcc.round_trips,
                alcc.forecasts
            );
        }
        if let Some(queueing) = &report.sender_queueing_ms {
            println!("  sender queueing: p50 {:.1} ms, p95 {:.1} ms", queueing.p50, queueing.p95);
        }
        for path in &report.paths {
            println!("  path {}: {} bytes, rtt {:.2} ms", path.name, path.bytes, path.rtt_ms);
        }
    }
    if report.bytes_corrupted > 0 {
        bail!("{} received bytes did not match what the server sent", report.bytes_corrupted);
    }
    Ok(())
}

/// Connections mode's summary for a person.
fn print_connections(report: &super::client::ConnectionsReport, cpu_percent: f64) {
    println!(
        "connections over tng: {} of {} established in {:.1} s ({:.0} handshakes/s, p99 {:.1} ms), {} failed; {} \
         requests (p50 {:.1} ms, p99 {:.1} ms), {} connections lost, cpu {:.0}%",
        report.established,
        report.requested,
        report.establish_s,
        report.handshakes_per_s,
        report.handshake_ms.p99,
        report.failed_handshakes,
        report.requests,
        report.request_ms.p50,
        report.request_ms.p99,
        report.lost,
        cpu_percent
    );
    if let Some(error) = &report.first_error {
        println!("  first error: {error}");
    }
}
