//! `tng`: the tng host agent's command line.

mod alcc;
mod args;
mod config;
mod control;
mod driver;
mod ifaddrs;
mod keys;
mod metrics;
mod netlink;
mod perf;
mod policy;
mod proxy;
mod registry;
mod relay;
mod relay_route;
mod resolver;
mod service;
mod sockopt;
mod subscription;
mod udp;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use tng_proto::{CcKind, Endpoint, ServerConfig, StaticKeypair};
use tng_relay::SectionControl;
use tokio::sync::{oneshot, watch};

use args::{AcceptArgs, ClientArgs, TransportArgs};
use driver::{with_timeout, Agent, Route};
use perf::command::PerfRole;
use perf::server::StatsByToken;
use service::ProxyPolicy;
use subscription::SubscriptionStatus;

/// How long a client waits for the controller's policies before its first connection.
const CONTROLLER_POLICIES_WAIT: Duration = Duration::from_secs(3);

#[derive(Parser)]
#[command(name = "tng", version, about = "tng host agent: multipath transport over UDP, and tools")]
struct Cli {
    /// TOML file with defaults for every flag: one table per command (`[serve]`, `[connect]`, `[proxy]`,
    /// `[perf-server]`, `[perf-client]`, `[status]`), keys named like the flags.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "warn")]
    log_level: tracing::Level,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create an identity key file and print the identity (the hash peers pin).
    Keygen {
        #[arg(long)]
        out: PathBuf,
        /// Replace an existing key file.
        #[arg(long)]
        force: bool,
    },
    /// Accept tng connections: perf streams, and proxy streams to allowed targets.
    Serve(ServeArgs),
    /// Connect to a server, print the connection's channels and exit (a reachability check).
    Connect(ConnectArgs),
    /// Forward local TCP connections through a tng connection to a TCP target behind the server.
    Proxy(ProxyArgs),
    /// Measure throughput and flow completion times (like iperf3), over tng, TCP or MPTCP.
    Perf {
        #[command(subcommand)]
        role: PerfRole,
    },
    /// Relay tng connections section by section (Tng's flow middlebox): terminates the flow layer only, holds no key.
    Relay(RelayArgs),
    /// Show a running daemon's connections and channels.
    Status {
        #[arg(long, default_value_os_t = control::default_path())]
        control: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

/// `tng relay`'s policy.
#[derive(Args)]
struct RelayArgs {
    /// UDP address to receive SECTIONs on.
    #[arg(long, default_value = "0.0.0.0:4477")]
    listen: SocketAddr,
    /// Relay on the path: the host routes between clients and servers, a TPROXY rule diverts the SECTIONs routed
    /// through it to --listen (whose port must be the servers'), and clients speak SECTIONs to their servers
    /// (`--relay on-path`). Needs CAP_NET_ADMIN; the rule is in docs/architecture.md, "Relays".
    #[arg(long)]
    on_path: bool,
    /// Congestion controller of the sections sent toward servers (the core: cubic, newreno, ...), or a fixed rate
    /// for a link of reserved capacity (fixed:20mbit).
    #[arg(long, default_value = "cubic")]
    toward_server_cc: SectionControl,
    /// Congestion controller of the sections sent toward clients (the last mile: vegas, ...), or fixed:RATE.
    #[arg(long, default_value = "vegas")]
    toward_client_cc: SectionControl,
    /// Packets each direction of a connection may queue at the relay; more are dropped unacknowledged.
    #[arg(long, default_value_t = 64)]
    queue_limit: usize,
    /// Another relay to send every section toward servers through (HOST:PORT): a chain of relays, e.g. one at each
    /// end of a WAN, each SECTION naming its server.
    #[arg(long)]
    next_relay: Option<SocketAddr>,
    /// Write the relay's state to FILE as JSON lines, one every --trace-interval: its counters and, per connection
    /// and direction, the queue, the downstream section (controller, window, in flight, SRTT, min RTT) and the counts
    /// received, dropped for a full queue, forwarded and lost.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Milliseconds between two lines of --trace.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    trace_interval: u64,
}

#[derive(Args)]
struct ServeArgs {
    /// UDP address to listen on (repeat for several).
    #[arg(long, required = true)]
    listen: Vec<SocketAddr>,
    /// Identity key file (from `tng keygen`).
    #[arg(long)]
    identity: PathBuf,
    /// A TCP target clients may reach through `tng proxy` (repeat for several).
    #[arg(long)]
    allow_proxy: Vec<SocketAddr>,
    /// Control socket for `tng status`.
    #[arg(long, default_value_os_t = control::default_path())]
    control: PathBuf,
    /// Serve the counters `tng status` shows in the Prometheus text format at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    accept: AcceptArgs,
    #[command(flatten)]
    transport: TransportArgs,
}

#[derive(Args)]
struct ConnectArgs {
    /// The server's address; without it, --server-identity is resolved through the controller's host registry.
    #[arg(long)]
    server: Option<SocketAddr>,
    #[command(flatten)]
    client: ClientArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ProxyArgs {
    /// Local TCP address applications connect to.
    #[arg(long)]
    listen: SocketAddr,
    /// The tng server.
    #[arg(long)]
    via: SocketAddr,
    /// The TCP target, as the server reaches it.
    #[arg(long)]
    to: SocketAddr,
    /// Write to each TCP client only what this tng controller allows (ALCC: copa or verus, fed from the client
    /// socket's TCP_INFO); the kernel's controller still runs underneath. Only the download direction: what
    /// clients send is copied as is.
    #[arg(long, value_name = "CC")]
    alcc: Option<CcKind>,
    #[command(flatten)]
    client: ClientArgs,
}

fn main() -> ExitCode {
    let args = match config::expand_args(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(err) => return fail(&err),
    };
    let cli = Cli::parse_from(args);
    tracing_subscriber::fmt().with_max_level(cli.log_level).with_writer(std::io::stderr).init();
    // One thread: the endpoint is one task and every stream, socket and timer talks to it, so a second thread buys
    // no parallelism, only cross-thread wakeups (on loopback: 8.2 against 6.7 Gbit/s, and a server answering 10^4
    // connections' requests at 54 % of a core where two threads managed three quarters of the rate on both cores).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => return fail(&err.into()),
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// Every error a user can cause ends here: one line, non-zero exit, no backtrace.
fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("tng: error: {err:#}");
    ExitCode::FAILURE
}

async fn run(command: Command) -> Result<()> {
    match command {
        Command::Keygen { out, force } => {
            let keypair = keys::generate(&out, force)?;
            println!("{}", keypair.identity());
            Ok(())
        }
        Command::Serve(args) => serve(args).await,
        Command::Connect(args) => connect(args).await,
        Command::Proxy(args) => proxy(args).await,
        Command::Relay(args) => {
            if args.queue_limit == 0 {
                bail!("--queue-limit must be at least 1");
            }
            let config = tng_relay::RelayConfig {
                toward_server: args.toward_server_cc,
                toward_client: args.toward_client_cc,
                cc: tng_proto::cc::CcConfig::default(),
                queue_limit: args.queue_limit,
                next_relay: args.next_relay,
            };
            let trace = args
                .trace
                .map(|path| relay::TraceOptions { path, interval: Duration::from_millis(args.trace_interval) });
            let reached = if args.on_path { relay::Reached::OnPath } else { relay::Reached::ByAddress };
            relay::run(args.listen, reached, config, trace).await
        }
        Command::Perf { role: PerfRole::Server { listen, identity, accept, transport } } => {
            perf::command::server(listen, identity, accept, transport).await
        }
        Command::Perf { role: PerfRole::Client(args) } => perf::command::client(args).await,
        Command::Status { control, json } => status(&control, json).await,
    }
}

fn load_or_fresh_identity(path: Option<&std::path::Path>) -> Result<StaticKeypair> {
    match path {
        Some(path) => keys::load(path),
        None => Ok(StaticKeypair::generate(&mut rand::rngs::OsRng)),
    }
}

/// What an agent started with a controller is told of its subscription: when the controller's policies are first in
/// force, and how the subscription stands.
struct Subscribed {
    first_snapshot: oneshot::Receiver<()>,
    status: watch::Receiver<SubscriptionStatus>,
}

/// Starts an agent whose connections follow the policy file and, when configured, the controller.
fn start_agent(
    transport: &TransportArgs,
    server: Option<ServerConfig>,
    keypair: StaticKeypair,
    locals: &[SocketAddr],
) -> Result<(Agent, Option<Subscribed>)> {
    let config = transport.endpoint_config(server)?;
    let policies = transport.local_policies()?;
    let controller = transport.controller()?;
    let agent = Agent::start(Endpoint::new(config, keypair.clone(), rand::random()), locals, policies)?;
    let Some(controller) = controller else { return Ok((agent, None)) };
    let (first_snapshot, controller_policies) = oneshot::channel();
    let (status, subscription_status) = watch::channel(SubscriptionStatus::connecting(&controller));
    let traffic_class = transport.traffic_class.clone();
    tokio::spawn(subscription::follow(controller.clone(), traffic_class, agent.clone(), first_snapshot, status));
    tokio::spawn(registry::run(controller, keypair, agent.clone()));
    Ok((agent, Some(Subscribed { first_snapshot: controller_policies, status: subscription_status })))
}

/// A client agent with its paths to `server` bound, and its first connection.
async fn dial(server: SocketAddr, args: &ClientArgs) -> Result<(Agent, Route, tng_proto::ConnectionHandle)> {
    let keypair = load_or_fresh_identity(args.identity.as_deref())?;
    let unspecified: SocketAddr = if server.is_ipv4() { "0.0.0.0:0".parse()? } else { "[::]:0".parse()? };
    let locals = if args.local.is_empty() { vec![unspecified] } else { args.local.clone() };
    let (agent, subscribed) = start_agent(&args.transport, None, keypair, &[])?;
    if let Some(subscribed) = subscribed {
        // A controller policy may name the relay of this connection, which must be known before its first packet.
        if tokio::time::timeout(CONTROLLER_POLICIES_WAIT, subscribed.first_snapshot).await.is_err() {
            tracing::warn!(
                "the controller's policies did not arrive within {CONTROLLER_POLICIES_WAIT:?}; connecting under the \
                 policy file's (later ones apply once they arrive)"
            );
        }
    }
    if let Some(route) = args.relay {
        agent.route_through(server, route.relay_for(server));
    }
    let mut paths = Vec::new();
    for local in locals {
        let bound = agent.bind(local).await?;
        paths.push((bound, server));
    }
    let route = Route { paths, pin: args.server_identity };
    let conn = route.connect(&agent).await?;
    Ok((agent, route, conn))
}

async fn serve(args: ServeArgs) -> Result<()> {
    let keypair = keys::load(&args.identity)?;
    println!("tng serve: identity {}", keypair.identity());
    let (agent, subscribed) = start_agent(&args.transport, Some(args.accept.server_config()?), keypair, &args.listen)?;
    let subscription = subscribed.map(|subscribed| subscribed.status);
    let proxy = ProxyPolicy { allowed: args.allow_proxy };
    let control = args.control.clone();
    let control_agent = agent.clone();
    let metrics_agent = agent.clone();
    let metrics = async move {
        match args.metrics {
            Some(address) => metrics::serve(address, metrics_agent).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        result = service::serve_streams(agent, StatsByToken::default(), proxy) => result,
        result = control::serve(&control, control_agent, subscription) => result,
        result = metrics => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// The server to connect to: --server, or --server-identity's first registered address.
async fn server_address(server: Option<SocketAddr>, args: &ClientArgs) -> Result<SocketAddr> {
    if let Some(server) = server {
        return Ok(server);
    }
    let Some(identity) = args.server_identity else {
        bail!("give --server ADDRESS, or --server-identity ID with --controller to resolve it in the host registry");
    };
    let Some(controller) = args.transport.controller()? else {
        bail!("--server-identity without --server needs --controller (the host registry resolves it)");
    };
    let addresses = with_timeout(
        &format!("resolving {identity} at controller {}", controller.address()),
        Duration::from_secs(10),
        registry::resolve(&controller, identity),
    )
    .await?;
    tracing::info!("the registry has {identity} at {addresses:?}");
    Ok(addresses[0])
}

async fn connect(args: ConnectArgs) -> Result<()> {
    let server = server_address(args.server, &args.client).await?;
    let (agent, _, conn) = dial(server, &args.client).await?;
    // Give every channel a moment to be validated before reporting them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = agent.status().await?;
    let view = control::status_json(&status);
    if args.json {
        println!("{view:#}");
    } else {
        println!("connected to {server} as {}", status.identity);
        for connection in view["connections"].as_array().into_iter().flatten() {
            for ch in connection["channels"].as_array().into_iter().flatten() {
                println!(
                    "  channel {} {} -> {}: {} srtt {:.2} ms",
                    ch["id"],
                    ch["local"],
                    ch["remote"],
                    ch["state"],
                    ch["srtt_ms"].as_f64().unwrap_or(0.0)
                );
            }
        }
    }
    agent.close(conn, "done");
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

async fn proxy(args: ProxyArgs) -> Result<()> {
    let alcc = args.alcc.map(alcc::supported_for_unmodified_clients).transpose()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let (agent, route, conn) = dial(args.via, &args.client).await?;
    let governed = alcc.map_or(String::new(), |kind| format!(", downloads under ALCC {kind}"));
    eprintln!("tng proxy: {} -> {} via {}{governed}", args.listen, args.to, args.via);
    proxy::run(listener, proxy::Proxy::new(agent, route, conn, args.to, alcc)).await
}

async fn status(control: &std::path::Path, json: bool) -> Result<()> {
    let view = control::query(control).await?;
    if json {
        println!("{view:#}");
        return Ok(());
    }
    println!("identity {}", view["identity"].as_str().unwrap_or("?"));
    let controller = &view["controller"];
    if let Some(address) = controller["address"].as_str() {
        let error = controller["last_error"].as_str().map_or(String::new(), |error| format!("; last error: {error}"));
        println!(
            "controller {address}: {}, {} policies in force, {} subscriptions{error}",
            controller["state"].as_str().unwrap_or("?"),
            controller["policies"],
            controller["subscriptions"]
        );
    }
    println!("dropped datagrams {}", view["dropped_datagrams"]);
    println!("counters (as `tng serve --metrics` exports them):");
    for sample in view["metrics"].as_array().into_iter().flatten() {
        println!("  {}", metrics::sample_line(sample));
    }
    for connection in view["connections"].as_array().into_iter().flatten() {
        println!("connection {} ({})", connection["connection_id"], connection["established"]);
        let policy = &connection["policy"];
        let governed_by = match policy["name"].as_str() {
            Some(name) => format!("policy {name} (revision {}, {})", policy["revision"], policy["source"]),
            None => "no policy".to_owned(),
        };
        println!(
            "  {governed_by}, scheduler {}, tail loss {}",
            connection["scheduler"].as_str().unwrap_or(""),
            connection["tail_loss"].as_str().unwrap_or("")
        );
        let millis = |key: &str| connection[key].as_f64().map_or("-".to_owned(), |ms| format!("{ms:.1} ms"));
        println!(
            "  unsent {} of at most {} bytes; sender queueing p50 {}, p95 {}",
            connection["bytes_unsent"],
            connection["unsent_limit"],
            millis("sender_queueing_p50_ms"),
            millis("sender_queueing_p95_ms")
        );
        println!(
            "  {:>3} {:<22} {:<22} {:<10} {:>9} {:>10} {:>12} {:<8} {:>8} {:>8}",
            "ch", "local", "remote", "state", "srtt ms", "cwnd", "pacing Mb/s", "cc", "lost", "queue us"
        );
        for ch in connection["channels"].as_array().into_iter().flatten() {
            println!(
                "  {:>3} {:<22} {:<22} {:<10} {:>9.2} {:>10} {:>12.2} {:<8} {:>8} {:>8}",
                ch["id"],
                ch["local"].as_str().unwrap_or(""),
                ch["remote"].as_str().unwrap_or(""),
                ch["state"].as_str().unwrap_or(""),
                ch["srtt_ms"].as_f64().unwrap_or(0.0),
                ch["cwnd_bytes"],
                ch["pacing_rate_bps"].as_f64().unwrap_or(0.0) / 1e6,
                ch["congestion_control"].as_str().unwrap_or(""),
                ch["lost_packets"],
                ch["feedback_queue_delay_us"],
            );
        }
    }
    Ok(())
}
