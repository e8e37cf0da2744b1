//! `tng relay`: the thin UDP driver around the sans-IO relay core (`tng_relay::Relay`). One socket; datagrams in,
//! datagrams out, the core's timer. Everything the relay knows lives in the core and is soft state: killing the
//! process loses at most the packets it held (docs/architecture.md, "Relays"). On the path (`--on-path`) the socket
//! is transparent: a TPROXY rule diverts the SECTIONs routed through the host to it, and it answers each client from
//! the server address the client sent to.

use std::fs::File;
use std::future::{pending, poll_fn};
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tng_proto::Time;
use tng_relay::{DirectionState, Relay, RelayConfig};

use crate::udp::{self, Socket};

/// Receives handled before the relay sends what they released.
const RECEIVE_BATCH: usize = 32;

/// Where and how often `tng relay --trace` writes the relay's state.
pub struct TraceOptions {
    pub path: PathBuf,
    pub interval: Duration,
}

/// The relay's state as JSON lines, one per interval: its counters and, per connection, each direction's queue,
/// downstream section and counters (docs/architecture.md, "Relays").
struct Trace {
    out: BufWriter<File>,
    path: PathBuf,
}

impl Trace {
    fn create(path: &Path) -> Result<Trace> {
        let file = File::create(path).with_context(|| format!("--trace: cannot create {}", path.display()))?;
        Ok(Trace { out: BufWriter::new(file), path: path.to_path_buf() })
    }

    /// One line, flushed: a reader sees whole lines while the relay runs, and everything once it stopped.
    fn write(&mut self, relay: &Relay, now: Time) -> Result<()> {
        let stats = relay.stats();
        let connections: Vec<Value> = relay
            .connection_states(now)
            .map(|state| {
                json!({
                    "id": format!("{:016x}", state.connection_id),
                    "toward_server": direction_json(&state.toward_server),
                    "toward_client": direction_json(&state.toward_client),
                })
            })
            .collect();
        // Unix time too, to line the trace up with other processes' logs and qlogs.
        let unix_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |since| since.as_secs_f64());
        let line = json!({
            "t_s": now.saturating_since(Time::ZERO).as_secs_f64(),
            "unix_s": unix_s,
            "stats": {"forwarded": stats.forwarded, "queue_full": stats.queue_full, "dropped": stats.dropped},
            "connections": connections,
        });
        serde_json::to_writer(&mut self.out, &line)?;
        self.out.write_all(b"\n")?;
        self.out.flush().with_context(|| format!("--trace: cannot write {}", self.path.display()))
    }
}

fn direction_json(state: &DirectionState) -> Value {
    let millis = |duration: Duration| duration.as_secs_f64() * 1e3;
    json!({
        "queued": state.queued,
        "head_wait_ms": millis(state.head_wait),
        "cc": state.controller,
        "window": state.window,
        "in_flight": state.in_flight,
        "srtt_ms": state.srtt.map(millis),
        "min_rtt_ms": state.min_rtt.map(millis),
        "received": state.received,
        "queue_full": state.queue_full,
        "forwarded": state.forwarded,
        "lost": state.lost,
    })
}

/// How the relay's socket finds the SECTIONs it relays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Clients address their SECTIONs to the relay (`--relay ADDR`, a policy's `host_policy.relay`).
    ByAddress,
    /// The relay routes between client and server and a TPROXY rule diverts the SECTIONs addressed to servers to
    /// its transparent socket (clients with `--relay on-path`).
    OnPath,
}

/// Relays SECTIONs arriving on `listen` until interrupted, writing its state to `trace` if given.
pub async fn run(listen: SocketAddr, reached: Reached, config: RelayConfig, trace: Option<TraceOptions>) -> Result<()> {
    let socket = match reached {
        Reached::ByAddress => Socket::bind(listen, true),
        Reached::OnPath => Socket::bind_transparent(listen),
    }
    .with_context(|| format!("binding the relay socket {listen}"))?;
    tracing::info!(address = %socket.local, ?reached, "relay listening");
    let start = Instant::now();
    let now = || Time::from_nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let mut relay = Relay::new(config);
    let mut buffer = udp::recv_buffer();
    let (mut trace, mut trace_ticks) = match trace {
        Some(options) => {
            let mut ticks = tokio::time::interval(options.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            (Some(Trace::create(&options.path)?), Some(ticks))
        }
        None => (None, None),
    };
    loop {
        while let Some(sent) = relay.poll_transmit(now()) {
            let source = sent.source.unwrap_or(socket.local);
            let size = sent.datagram.len();
            if let Err(err) = socket.send(source, sent.destination, None, &sent.datagram, size).await {
                // One unreachable next hop must not stop the others: the packet is lost like any section loss.
                tracing::debug!(to = %sent.destination, %err, "relay send failed");
            }
        }
        let timer = relay.poll_timeout().map(|deadline| deadline.saturating_since(now()));
        tokio::select! {
            ready = poll_fn(|cx| socket.poll_recv_ready(cx)) => {
                ready.context("receiving on the relay socket")?;
                // A bounded batch: what the datagrams release is sent before more are read.
                for _ in 0..RECEIVE_BATCH {
                    let Some(received) = socket.try_recv(&mut buffer).context("receiving on the relay socket")? else {
                        break;
                    };
                    for datagram in received.payloads() {
                        relay.handle_datagram(now(), received.local, received.remote, datagram);
                    }
                }
            }
            () = async {
                match timer {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => pending().await,
                }
            } => relay.handle_timeout(now()),
            _ = async {
                match trace_ticks.as_mut() {
                    Some(ticks) => ticks.tick().await,
                    None => pending().await,
                }
            } => {
                if let Some(trace) = trace.as_mut() {
                    trace.write(&relay, now())?;
                }
            }
            interrupted = tokio::signal::ctrl_c() => {
                interrupted.context("waiting for Ctrl-C")?;
                if let Some(trace) = trace.as_mut() {
                    trace.write(&relay, now())?;
                }
                tracing::info!(stats = ?relay.stats(), "relay stopping");
                return Ok(());
            }
        }
    }
}
