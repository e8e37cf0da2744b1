//! `tng perf client`: runs one workload over a kernel transport and reports it as a person or as JSON.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::os::fd::OwnedFd;

use anyhow::{bail, Context, Result};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use socket2::SockRef;
use tng_proto::alcc::needs_receiver;
use tng_proto::{CcKind, ConnectionHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::cpu::CpuClock;
use super::kernel::{self, KernelTransport};
use super::protocol::{count_corrupted, Request, SenderStats, DATA_FOLLOWS, REFUSED, STATS_LEN, UNBOUNDED};
use super::stats::Summary;
use super::{BoxStream, Transport};
use crate::alcc::AlccClient;
use crate::driver::{Agent, Route, Stream};
use crate::service;

mod connections;

pub use connections::ConnectionsReport;

/// The workloads every transport runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One long download for the whole duration.
    Bulk,
    /// `parallel` clients, each running sequential flows with exponentially distributed sizes.
    Shortflows,
    /// Request/response on one connection: a small request, a response of `response_size` bytes.
    Rr,
    /// `connections` tng connections from one endpoint, each asking for a response of `response_size` bytes every
    /// `interval` on a stream of its own: how many connections a server holds (tng only).
    Connections,
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub connect: SocketAddr,
    pub local: Vec<SocketAddr>,
    pub mode: Mode,
    pub duration: Duration,
    pub transport: Transport,
    pub cc: Option<String>,
    /// The tng controller that limits what the server writes to its kernel TCP socket (ALCC).
    pub alcc: Option<CcKind>,
    pub parallel: usize,
    pub mean_flow_bytes: u64,
    pub response_bytes: u64,
    /// Connections mode: how many connections, and the time between one connection's requests.
    pub connections: usize,
    pub interval: Duration,
    pub seed: u64,
    pub progress: bool,
}

#[derive(Debug, Serialize)]
pub struct PathReport {
    pub name: String,
    pub bytes: u64,
    pub rtt_ms: f64,
}

/// The perf report; `tng-lab` and the benchmarks read these field names.
#[derive(Debug, Serialize)]
pub struct Report {
    pub transport: Transport,
    pub mode: Mode,
    pub cc: Option<String>,
    /// The congestion control the data sender (the server) used: read back from its kernel socket, or the tng
    /// controller of its first channel.
    pub sender_cc: Option<String>,
    /// The ALCC controller that limited the server's writes, and what it saw (kernel TCP with `--alcc` only).
    pub alcc: Option<AlccReport>,
    /// Wall-clock time the workload started (seconds since the Unix epoch): with `duration_s`, it places the runs
    /// of clients that ran at once on one time axis, so that their goodputs can be combined over the span they
    /// covered together.
    pub started_unix_s: f64,
    /// The measured interval: the duration asked for, or less if the workload ended sooner.
    pub duration_s: f64,
    /// What `goodput_mbps` counts, stated in the report so a reader need not guess.
    pub goodput_counts: &'static str,
    pub goodput_mbps: f64,
    pub bytes_received: u64,
    pub bytes_corrupted: u64,
    pub fct_ms: Summary,
    /// Every flow completion time, in completion order, so a reader can draw the whole distribution.
    pub fct_samples_ms: Vec<f64>,
    pub rtt_ms: BTreeMap<String, f64>,
    pub retransmitted_packets: u64,
    pub sent_packets: u64,
    pub cpu_percent: f64,
    pub paths: Vec<PathReport>,
    /// Time the server's bytes waited between its write and their first transmission (tng only).
    pub sender_queueing_ms: Option<QueueingReport>,
    /// Seconds from the workload's start until the run ended: its streams closed (at the duration at the latest)
    /// and the server's counters fetched.
    pub run_s: f64,
    /// Connections mode's handshakes, requests and losses (null in the other modes). Its requests' times are here,
    /// not in `fct_ms`, and `paths` is empty: listing 10^4 connections' samples and channels would swamp the report.
    pub connections: Option<ConnectionsReport>,
}

#[derive(Debug, Serialize)]
pub struct AlccReport {
    pub controller: &'static str,
    /// TCP_INFO reads on the server, over every connection of the run.
    pub samples: u64,
    /// The largest window the controller set, in bytes.
    pub peak_window_bytes: u64,
    /// The most bytes the server's kernel held at once (in flight and unsent): at most the peak window when ALCC
    /// bounded the kernel.
    pub peak_kernel_bytes: u64,
    /// Forecasts of the link this client sent and the server's controller took (Sprout's; 0 for the others).
    pub forecasts: u64,
    /// ACKs the controller took with a round trip the server timed from the kernel's byte counters (the others
    /// carried the kernel's smoothed RTT: ambiguous after a retransmission, or covering no newly sent data).
    pub round_trips: u64,
}

#[derive(Debug, Serialize)]
pub struct QueueingReport {
    pub p50: f64,
    pub p95: f64,
}

/// The counting rule behind `goodput_mbps`.
const GOODPUT_COUNTS: &str = "bytes the client read within duration_s of the workload's start, over duration_s";
/// The counting rule behind `goodput_mbps` in connections mode, whose measured phase follows the handshakes.
const CONNECTIONS_GOODPUT_COUNTS: &str =
    "bytes of the requests started within duration_s of the last handshake's end, over duration_s";

/// Counters shared by every worker of a run, for the progress line.
#[derive(Default)]
struct Progress {
    bytes: AtomicU64,
    /// Connections mode: connections established, requests completed, connections lost.
    established: AtomicU64,
    requests: AtomicU64,
    lost: AtomicU64,
}

/// Opens the byte streams a workload runs on.
#[derive(Clone)]
pub enum Dialer {
    /// A new kernel connection per stream.
    Kernel(KernelTransport),
    /// A new stream on one tng connection per stream; connections mode opens more connections over `route`.
    Tng { agent: Agent, route: Route, conn: ConnectionHandle },
}

/// A byte stream and, for kernel connections, a descriptor to read its counters when it is done; for tng, the
/// stream's handle, to abandon it.
struct Opened {
    io: BoxStream,
    probe: Option<OwnedFd>,
    tng: Option<Stream>,
    name: String,
}

pub async fn run(options: ClientOptions, dialer: Dialer) -> Result<Report> {
    let token = rand::random::<u64>();
    let progress = Arc::new(Progress::default());
    let ticker = options.progress.then(|| tokio::spawn(print_progress(progress.clone(), options.mode)));
    let cpu = CpuClock::start();
    let started = Instant::now();
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |since| since.as_secs_f64());
    let outcome = match options.mode {
        Mode::Bulk => bulk(&options, &dialer, token, &progress).await,
        Mode::Shortflows => shortflows(&options, &dialer, token, &progress).await,
        Mode::Rr => request_response(&options, &dialer, token, &progress).await,
        Mode::Connections => connections::connections(&options, &dialer, token, &progress).await,
    };
    if let Some(ticker) = ticker {
        ticker.abort();
    }
    let mut outcome = outcome?;
    let elapsed = outcome.measured_s.unwrap_or_else(|| started.elapsed().min(options.duration).as_secs_f64()).max(1e-9);
    let sender = fetch_sender_stats(&options, &dialer, token).await?;
    let run_s = started.elapsed().as_secs_f64();
    match &dialer {
        Dialer::Tng { agent, conn, .. } if outcome.connections.is_none() => {
            outcome.paths.extend(tng_paths(agent, *conn).await?);
        }
        _ => {}
    }
    let mut paths: BTreeMap<String, PathReport> = BTreeMap::new();
    for sample in outcome.paths {
        let entry = paths.entry(sample.name.clone()).or_insert(PathReport { name: sample.name, bytes: 0, rtt_ms: 0.0 });
        entry.bytes += sample.bytes;
        entry.rtt_ms = sample.rtt_ms;
    }
    Ok(Report {
        transport: options.transport,
        mode: options.mode,
        cc: options.cc.clone(),
        sender_cc: sender.cc,
        alcc: options.alcc.zip(sender.alcc).map(|(kind, stats)| AlccReport {
            controller: kind.name(),
            samples: stats.samples,
            peak_window_bytes: stats.peak_window,
            peak_kernel_bytes: stats.peak_kernel_bytes,
            forecasts: stats.forecasts,
            round_trips: stats.round_trips,
        }),
        started_unix_s,
        duration_s: elapsed,
        goodput_counts: if outcome.connections.is_some() { CONNECTIONS_GOODPUT_COUNTS } else { GOODPUT_COUNTS },
        goodput_mbps: outcome.measured_bytes as f64 * 8.0 / elapsed / 1e6,
        bytes_received: outcome.received_bytes,
        bytes_corrupted: outcome.corrupted_bytes,
        fct_ms: Summary::of(&outcome.fct_ms),
        fct_samples_ms: outcome.fct_ms,
        rtt_ms: paths.values().map(|p| (p.name.clone(), p.rtt_ms)).collect(),
        retransmitted_packets: sender.retransmitted_packets,
        sent_packets: sender.sent_packets,
        cpu_percent: cpu.percent(),
        paths: paths.into_values().collect(),
        sender_queueing_ms: sender
            .queueing
            .map(|q| QueueingReport { p50: q.p50.as_secs_f64() * 1000.0, p95: q.p95.as_secs_f64() * 1000.0 }),
        run_s,
        connections: outcome.connections,
    })
}

#[derive(Default)]
struct Outcome {
    /// Bytes received within the measured duration.
    measured_bytes: u64,
    received_bytes: u64,
    corrupted_bytes: u64,
    fct_ms: Vec<f64>,
    paths: Vec<PathReport>,
    /// The measured interval in seconds, for a workload that does not measure from its start (connections mode).
    measured_s: Option<f64>,
    connections: Option<ConnectionsReport>,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.measured_bytes += other.measured_bytes;
        self.received_bytes += other.received_bytes;
        self.corrupted_bytes += other.corrupted_bytes;
        self.fct_ms.extend(other.fct_ms);
        self.paths.extend(other.paths);
    }
}

async fn open(options: &ClientOptions, dialer: &Dialer, worker: usize) -> Result<Opened> {
    match dialer {
        Dialer::Kernel(transport) => {
            let local = (!options.local.is_empty()).then(|| options.local[worker % options.local.len()]);
            let stream = kernel::connect(*transport, local, options.connect, options.cc.as_deref()).await?;
            let name = match (stream.local_addr(), stream.peer_addr()) {
                (Ok(l), Ok(r)) => format!("{l}->{r}"),
                _ => "unknown".to_string(),
            };
            Ok(Opened { probe: kernel::probe(&stream), io: Box::new(stream), tng: None, name })
        }
        Dialer::Tng { agent, conn, .. } => {
            let stream = agent.open_stream(*conn).await?;
            let mut io = stream.clone().into_io();
            io.write_all(&[service::PERF]).await?;
            Ok(Opened { io: Box::new(io), probe: None, tng: Some(stream), name: String::new() })
        }
    }
}

/// Path counters of a finished kernel connection, named by address pair (or subflow index for MPTCP).
fn kernel_paths(opened: &Opened) -> Vec<PathReport> {
    let Some(socket) = &opened.probe else { return Vec::new() };
    let subflows = kernel::subflow_info(socket);
    let multipath = subflows.len() > 1;
    subflows
        .iter()
        .enumerate()
        .map(|(i, info)| PathReport {
            name: if multipath { format!("subflow{i}") } else { opened.name.clone() },
            bytes: info.bytes_received,
            rtt_ms: f64::from(info.rtt_us) / 1000.0,
        })
        .collect()
}

/// Per-channel counters of the tng connection, named by address pair.
async fn tng_paths(agent: &Agent, conn: ConnectionHandle) -> Result<Vec<PathReport>> {
    let Some(stats) = agent.connection_stats(conn).await? else {
        bail!("the tng connection closed before its statistics could be read");
    };
    Ok(stats
        .channels
        .iter()
        .map(|c| PathReport {
            name: format!("{}->{}", c.local, c.remote),
            bytes: c.bytes_received,
            rtt_ms: c.srtt.as_secs_f64() * 1000.0,
        })
        .collect())
}

/// Reads `size` bytes of the pattern, or as many as arrive before `deadline`, the end of the run; returns whether
/// all of them came. Only bytes read by the deadline count as measured. With `forecasts` (ALCC Sprout), it also
/// sends the server a forecast of the link every tick, from what it reads.
async fn receive(
    stream: &mut BoxStream,
    size: u64,
    deadline: Instant,
    progress: &Progress,
    outcome: &mut Outcome,
    mut forecasts: Option<&mut AlccClient>,
) -> Result<Received> {
    // Sized for the response: connections mode reads thousands of small ones a second.
    let mut buf = vec![0u8; size.min(64 * 1024) as usize];
    let mut offset = 0u64;
    while offset < size {
        let want = (size - offset).min(buf.len() as u64) as usize;
        // The timeout alone is not enough: it polls the read first, which is always ready on a fast link.
        if Instant::now() >= deadline {
            return Ok(Received::Cut);
        }
        let wake = forecasts.as_ref().map_or(deadline, |f| deadline.min(f.next_forecast_at()));
        let read = match tokio::time::timeout_at(wake.into(), stream.read(&mut buf[..want])).await {
            Ok(Ok(0)) => bail!("server closed the connection after {offset} of {size} bytes"),
            Ok(read) => read?,
            Err(_) if wake == deadline => return Ok(Received::Cut),
            // A forecast is due: a silent link is news too.
            Err(_) => 0,
        };
        if let Some(forecasts) = forecasts.as_deref_mut() {
            forecasts.on_read(read)?;
            if let Some(message) = forecasts.poll_message() {
                stream.write_all(&message).await?;
            }
        }
        outcome.corrupted_bytes += count_corrupted(offset, &buf[..read]);
        offset += read as u64;
        outcome.received_bytes += read as u64;
        outcome.measured_bytes += read as u64;
        progress.bytes.fetch_add(read as u64, Ordering::Relaxed);
    }
    Ok(Received::All)
}

/// How a response ended.
#[derive(Debug, PartialEq, Eq)]
enum Received {
    All,
    /// The run's deadline came first.
    Cut,
}

/// Asks for `size` bytes, for a kernel connection with the congestion control the server must send with, and reads
/// the server's answer: the data follows, or the reason it cannot.
async fn request_data(
    options: &ClientOptions,
    dialer: &Dialer,
    opened: &mut Opened,
    size: u64,
    token: u64,
) -> Result<()> {
    let (cc, alcc) = match dialer {
        Dialer::Kernel(_) => (options.cc.clone(), options.alcc),
        Dialer::Tng { .. } => (None, None),
    };
    opened.io.write_all(&Request::Data { size, token, cc, alcc }.encode()?).await?;
    let mut status = [0u8; 1];
    opened.io.read_exact(&mut status).await.context("the server closed the connection without answering")?;
    match status[0] {
        DATA_FOLLOWS => Ok(()),
        REFUSED => {
            let mut len = [0u8; 2];
            opened.io.read_exact(&mut len).await?;
            let mut reason = vec![0u8; usize::from(u16::from_be_bytes(len))];
            opened.io.read_exact(&mut reason).await?;
            bail!("the server refused: {}", String::from_utf8_lossy(&reason))
        }
        other => bail!("the server answered with unknown status {other:#04x}"),
    }
}

/// Closes our side and waits for the server's close (until `deadline` at the latest), so it has recorded its
/// counters.
async fn finish(mut opened: Opened, deadline: Instant, outcome: &mut Outcome) -> Result<()> {
    let closed = async {
        opened.io.shutdown().await?;
        // The response was read whole, so only the end of the stream is left: a small buffer, as connections mode
        // holds thousands of these waits at once.
        let mut sink = vec![0u8; 1024];
        while opened.io.read(&mut sink).await? > 0 {}
        anyhow::Ok(())
    };
    match tokio::time::timeout_at(deadline.into(), closed).await {
        Ok(result) => {
            outcome.paths.extend(kernel_paths(&opened));
            result
        }
        Err(_) => {
            abandon(opened, outcome);
            Ok(())
        }
    }
}

/// Ends a stream at the run's deadline without waiting for what is still queued or in flight: a kernel connection
/// is reset (SO_LINGER 0), a tng stream reset in both directions. The server takes either as the end of the
/// transfer and records its counters; draining instead would stretch the run by whatever the sender had queued.
fn abandon(opened: Opened, outcome: &mut Outcome) {
    outcome.paths.extend(kernel_paths(&opened));
    if let Some(socket) = &opened.probe {
        if let Err(err) = SockRef::from(socket).set_linger(Some(Duration::ZERO)) {
            tracing::debug!("cannot reset the connection at the deadline ({err}); it closes instead");
        }
    }
    if let Some(stream) = &opened.tng {
        stream.abandon();
    }
    // Dropping the stream and the probe closes the socket: with a zero linger, by a reset.
}

async fn bulk(options: &ClientOptions, dialer: &Dialer, token: u64, progress: &Progress) -> Result<Outcome> {
    let mut outcome = Outcome::default();
    let mut opened = open(options, dialer, 0).await?;
    let deadline = Instant::now() + options.duration;
    request_data(options, dialer, &mut opened, UNBOUNDED, token).await?;
    // ALCC Sprout's receiver half: the server's controller runs on this side's forecasts.
    let mut forecasts = match (&opened.probe, options.alcc) {
        (Some(socket), Some(kind)) if needs_receiver(kind) => Some(AlccClient::new(socket)?),
        _ => None,
    };
    receive(&mut opened.io, UNBOUNDED, deadline, progress, &mut outcome, forecasts.as_mut()).await?;
    abandon(opened, &mut outcome);
    Ok(outcome)
}

async fn shortflows(options: &ClientOptions, dialer: &Dialer, token: u64, progress: &Arc<Progress>) -> Result<Outcome> {
    let sizes = Exp::new(1.0 / options.mean_flow_bytes.max(1) as f64).context("flow size distribution")?;
    let deadline = Instant::now() + options.duration;
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..options.parallel.max(1) {
        let options = options.clone();
        let dialer = dialer.clone();
        let progress = progress.clone();
        let mut rng = StdRng::seed_from_u64(options.seed.wrapping_add(worker as u64));
        workers.spawn(async move {
            let mut outcome = Outcome::default();
            while Instant::now() < deadline {
                let size = (sizes.sample(&mut rng) as u64).max(1);
                let started = Instant::now();
                let Ok(opened) = tokio::time::timeout_at(deadline.into(), open(&options, &dialer, worker)).await else {
                    break;
                };
                let mut opened = opened?;
                let requested = request_data(&options, &dialer, &mut opened, size, token);
                if tokio::time::timeout_at(deadline.into(), requested).await.is_err() {
                    abandon(opened, &mut outcome);
                    break;
                }
                // A flow the deadline cuts counts its bytes so far, but no completion time.
                if receive(&mut opened.io, size, deadline, &progress, &mut outcome, None).await? == Received::Cut {
                    abandon(opened, &mut outcome);
                    break;
                }
                outcome.fct_ms.push(started.elapsed().as_secs_f64() * 1000.0);
                finish(opened, deadline, &mut outcome).await?;
            }
            anyhow::Ok(outcome)
        });
    }
    let mut total = Outcome::default();
    while let Some(done) = workers.join_next().await {
        total.merge(done??);
    }
    Ok(total)
}

async fn request_response(
    options: &ClientOptions,
    dialer: &Dialer,
    token: u64,
    progress: &Progress,
) -> Result<Outcome> {
    let mut outcome = Outcome::default();
    let mut opened = open(options, dialer, 0).await?;
    let deadline = Instant::now() + options.duration;
    while Instant::now() < deadline {
        let started = Instant::now();
        let requested = request_data(options, dialer, &mut opened, options.response_bytes, token);
        let cut = match tokio::time::timeout_at(deadline.into(), requested).await {
            Ok(requested) => {
                requested?;
                receive(&mut opened.io, options.response_bytes, deadline, progress, &mut outcome, None).await?
                    == Received::Cut
            }
            Err(_) => true,
        };
        if cut {
            abandon(opened, &mut outcome);
            return Ok(outcome);
        }
        outcome.fct_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    abandon(opened, &mut outcome);
    Ok(outcome)
}

async fn fetch_sender_stats(options: &ClientOptions, dialer: &Dialer, token: u64) -> Result<SenderStats> {
    let mut opened = open(options, dialer, 0).await?;
    opened.io.write_all(&Request::Stats { token }.encode()?).await?;
    let mut raw = [0u8; STATS_LEN];
    opened.io.read_exact(&mut raw).await.context("server did not answer the statistics request")?;
    opened.io.shutdown().await?;
    Ok(SenderStats::decode(&raw))
}

async fn print_progress(progress: Arc<Progress>, mode: Mode) {
    let (mut last_bytes, mut last_requests) = (0u64, 0u64);
    let mut second = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        second += 1;
        let (bytes, requests) = (progress.bytes.load(Ordering::Relaxed), progress.requests.load(Ordering::Relaxed));
        if mode == Mode::Connections {
            eprintln!(
                "[{second:>4} s] {:>6} connections, {:>6} requests/s, {} lost",
                progress.established.load(Ordering::Relaxed),
                requests - last_requests,
                progress.lost.load(Ordering::Relaxed)
            );
        } else {
            eprintln!("[{second:>4} s] {:>9.2} Mbit/s", (bytes - last_bytes) as f64 * 8.0 / 1e6);
        }
        (last_bytes, last_requests) = (bytes, requests);
    }
}
