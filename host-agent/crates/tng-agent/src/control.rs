//! The daemon's local control socket: `tng status` asks, the daemon answers with one JSON document.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use crate::driver::{Agent, Status};
use crate::subscription::SubscriptionStatus;

/// Default control socket: under $XDG_RUNTIME_DIR, or /run/tng for root.
pub fn default_path() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| PathBuf::from("/run/tng"), PathBuf::from).join("tng.sock")
}

/// Serves `status` requests on `path` until the process ends; `subscription` is the controller subscription's, if the
/// agent has one.
pub async fn serve(path: &Path, agent: Agent, subscription: Option<watch::Receiver<SubscriptionStatus>>) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // A socket left by a crashed daemon would make bind fail; a live daemon answers, a stale socket does not.
    if UnixStream::connect(path).await.is_err() {
        let _ = std::fs::remove_file(path);
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot open control socket {}", path.display()))?;
    loop {
        let (stream, _) = listener.accept().await?;
        let agent = agent.clone();
        let subscription = subscription.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let answer = match line.trim() {
                    "status" => match agent.status().await {
                        Ok(status) => {
                            let mut view = status_json(&status);
                            view["controller"] =
                                subscription.as_ref().map_or(Value::Null, |s| subscription_json(&s.borrow()));
                            view
                        }
                        Err(err) => json!({ "error": err.to_string() }),
                    },
                    other => json!({ "error": format!("unknown request {other:?}; known: status") }),
                };
                if write.write_all(format!("{answer}\n").as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Asks the daemon at `path` for its status.
pub async fn query(path: &Path) -> Result<Value> {
    let stream = UnixStream::connect(path)
        .await
        .with_context(|| format!("no tng daemon answers on {} (is 'tng serve' running?)", path.display()))?;
    let (read, mut write) = stream.into_split();
    write.write_all(b"status\n").await?;
    let line = BufReader::new(read).lines().next_line().await?.context("the daemon closed the control socket")?;
    Ok(serde_json::from_str(&line)?)
}

pub fn status_json(status: &Status) -> Value {
    let connections: Vec<Value> = status
        .connections
        .iter()
        .map(|(handle, c)| {
            let channels: Vec<Value> = c
                .channels
                .iter()
                .map(|ch| {
                    json!({
                        "id": ch.id,
                        "local": ch.local.to_string(),
                        "remote": ch.remote.to_string(),
                        "state": format!("{:?}", ch.state),
                        "srtt_ms": ch.srtt.as_secs_f64() * 1000.0,
                        "min_rtt_ms": ch.min_rtt.as_secs_f64() * 1000.0,
                        "cwnd_bytes": ch.cwnd,
                        "bytes_in_flight": ch.bytes_in_flight,
                        "pacing_rate_bps": ch.pacing_rate * 8,
                        "congestion_control": ch.cc,
                        "sent_packets": ch.sent_packets,
                        "retransmitted_packets": ch.retransmitted_packets,
                        "lost_packets": ch.lost_packets,
                        "bytes_sent": ch.bytes_sent,
                        "bytes_received": ch.bytes_received,
                        "feedback_queue_delay_us": ch.last_feedback.and_then(|f| f.queue_delay).map(|d| d.as_micros() as u64),
                        "feedback_rate_hint_bps": ch.last_feedback.and_then(|f| f.rate_hint).map(|r| r * 8),
                        "ecn_ce_received": ch.ecn_received.ce,
                    })
                })
                .collect();
            let policy = status.policies.get(handle).map(|p| {
                json!({ "name": p.name, "revision": p.revision, "source": p.source.to_string() })
            });
            let millis = |delay: Option<std::time::Duration>| delay.map(|d| d.as_secs_f64() * 1000.0);
            json!({
                "handle": handle.0,
                "connection_id": format!("{:016x}", c.connection_id),
                "established": c.established,
                "scheduler": c.scheduler.name(),
                "tail_loss": c.tail_loss.name(),
                "policy": policy,
                "channels": channels,
                "bytes_unsent": c.streams.bytes_unsent,
                "unsent_limit": c.streams.unsent_limit,
                "sender_queueing_p50_ms": millis(c.streams.queueing_delay_p50),
                "sender_queueing_p95_ms": millis(c.streams.queueing_delay_p95),
            })
        })
        .collect();
    json!({
        "identity": status.identity.to_string(),
        "local_addresses": status.local_addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "dropped_datagrams": status.endpoint.dropped(),
        "connections": connections,
        "metrics": crate::metrics::samples_json(status),
    })
}

/// The controller subscription's state, as `tng status` reports it under "controller".
fn subscription_json(status: &SubscriptionStatus) -> Value {
    json!({
        "address": status.controller,
        "state": status.state.name(),
        "policies": status.policies,
        "since_unix_s": status.since.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        "subscriptions": status.subscriptions,
        "last_error": status.last_error,
    })
}
