//! The agent's counters, one list from one status snapshot: `tng serve --metrics ADDR` exports it in the Prometheus
//! text format (`GET /metrics`), and `tng status` prints the same samples (the control socket carries them), so
//! the two never disagree on a name or a meaning. docs/observability.md lists the names.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::driver::{Agent, Status};

type Labels = Vec<(String, String)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Only grows; exported with the `_total` suffix.
    Counter,
    Gauge,
}

/// One metric family and its samples.
struct Metric {
    /// Without the `_total` a counter is exported with.
    name: &'static str,
    help: &'static str,
    kind: Kind,
    samples: Vec<(Labels, u64)>,
}

impl Metric {
    fn new(name: &'static str, help: &'static str, kind: Kind) -> Metric {
        Metric { name, help, kind, samples: Vec::new() }
    }

    fn with(mut self, labels: Labels, value: u64) -> Metric {
        self.samples.push((labels, value));
        self
    }

    /// The name a sample is exported under.
    fn exported_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            Kind::Gauge => self.name.to_string(),
        }
    }
}

fn label(name: &str, value: impl ToString) -> (String, String) {
    (name.to_string(), value.to_string())
}

/// Every metric of a status snapshot: the endpoint's traffic and drops, and each channel's counters and state.
fn metrics(status: &Status) -> Vec<Metric> {
    let endpoint = &status.endpoint;
    let total = |name, help, value| Metric::new(name, help, Kind::Counter).with(Vec::new(), value);
    let mut dropped = Metric::new("tng_agent_datagrams_dropped", "Datagrams dropped, by reason", Kind::Counter);
    let reasons = [
        ("auth_failed", endpoint.auth_failed),
        ("replayed", endpoint.replayed),
        ("unknown_connection", endpoint.unknown_connection),
        ("unknown_channel", endpoint.unknown_channel),
        ("not_established", endpoint.not_established),
        ("not_a_server", endpoint.not_a_server),
        ("handshake_failed", endpoint.handshake_failed),
        ("unexpected", endpoint.unexpected),
        ("forbidden_frame", endpoint.forbidden_frame),
        ("channel_limit", endpoint.channel_limit),
        ("refused", endpoint.refused),
        ("draining", endpoint.while_draining),
    ];
    for (reason, count) in reasons.into_iter().chain(endpoint.wire_errors.iter().map(|(name, count)| (*name, *count))) {
        dropped = dropped.with(vec![label("reason", reason)], count);
    }
    let mut list = vec![
        total("tng_agent_datagrams_received", "UDP datagrams received", endpoint.datagrams_received),
        total("tng_agent_received_bytes", "Bytes of UDP payload received", endpoint.bytes_received),
        total("tng_agent_datagrams_sent", "UDP datagrams sent", endpoint.datagrams_sent),
        total("tng_agent_sent_bytes", "Bytes of UDP payload sent", endpoint.bytes_sent),
        dropped,
        total("tng_agent_handshakes_accepted", "Handshakes this server accepted", endpoint.handshakes_accepted),
        total("tng_agent_retries_sent", "Stateless RETRY packets sent", endpoint.retries_sent),
        total("tng_agent_invalid_retry_tokens", "Retry tokens that did not verify", endpoint.invalid_tokens),
        total(
            "tng_agent_amplification_limited_bytes",
            "Bytes held back by the anti-amplification limit",
            endpoint.amplification_limited_bytes,
        ),
        Metric::new("tng_agent_connections", "Connections held (any state)", Kind::Gauge)
            .with(Vec::new(), endpoint.connections as u64),
    ];
    let sections = &status.sections;
    list.extend([
        total("tng_agent_sections_sent", "SECTIONs sent toward relays", sections.sent),
        total("tng_agent_sections_unwrapped", "SECTIONs received from relays and unwrapped", sections.unwrapped),
        Metric::new("tng_agent_section_datagrams_dropped", "Section datagrams dropped, by reason", Kind::Counter)
            .with(vec![label("reason", "queue_full")], sections.queue_full)
            .with(vec![label("reason", "too_large")], sections.too_large)
            .with(vec![label("reason", "malformed_or_unknown")], sections.dropped),
        Metric::new("tng_agent_sections", "Sections to relays held (one per relay and connection)", Kind::Gauge)
            .with(Vec::new(), status.sections_held as u64),
    ]);
    type ChannelValue = fn(&tng_proto::ChannelStats) -> u64;
    let per_channel: [(&'static str, &'static str, Kind, ChannelValue); 13] = [
        ("tng_agent_channel_sent_packets", "Packets sent on the channel", Kind::Counter, |c| c.sent_packets),
        ("tng_agent_channel_sent_bytes", "Bytes sent on the channel", Kind::Counter, |c| c.bytes_sent),
        ("tng_agent_channel_received_packets", "Packets received on the channel", Kind::Counter, |c| {
            c.packets_received
        }),
        ("tng_agent_channel_received_bytes", "Bytes received on the channel", Kind::Counter, |c| c.bytes_received),
        ("tng_agent_channel_lost_packets", "Packets declared lost", Kind::Counter, |c| c.lost_packets),
        ("tng_agent_channel_retransmitted_packets", "Packets that carried retransmitted data", Kind::Counter, |c| {
            c.retransmitted_packets
        }),
        ("tng_agent_channel_probe_timeouts", "Probe timeouts that fired", Kind::Counter, |c| c.probe_timeouts),
        ("tng_agent_channel_tail_loss_probes", "Tail-loss probes carried", Kind::Counter, |c| c.tail_loss_probes),
        ("tng_agent_channel_ecn_ce_received", "Packets received marked ECN-CE", Kind::Counter, |c| c.ecn_received.ce),
        ("tng_agent_channel_congestion_window_bytes", "Congestion window", Kind::Gauge, |c| c.cwnd),
        ("tng_agent_channel_bytes_in_flight", "Bytes in flight", Kind::Gauge, |c| c.bytes_in_flight),
        ("tng_agent_channel_pacing_rate_bits_per_second", "Pacing rate", Kind::Gauge, |c| c.pacing_rate * 8),
        ("tng_agent_channel_up", "1 while the channel is validated and carries data", Kind::Gauge, |c| {
            u64::from(c.state == tng_proto::ChannelState::Active)
        }),
    ];
    for (name, help, kind, value) in per_channel {
        let mut metric = Metric::new(name, help, kind);
        for (_, connection) in &status.connections {
            for channel in &connection.channels {
                let labels = vec![
                    label("connection", format!("{:016x}", connection.connection_id)),
                    label("channel", channel.id),
                ];
                metric = metric.with(labels, value(channel));
            }
        }
        list.push(metric);
    }
    list
}

/// The snapshot in the Prometheus text exposition format.
pub fn prometheus_text(status: &Status) -> String {
    let mut registry = Registry::default();
    for metric in metrics(status) {
        match metric.kind {
            Kind::Counter => {
                let family = Family::<Labels, Counter>::default();
                for (labels, value) in &metric.samples {
                    family.get_or_create(labels).inc_by(*value);
                }
                registry.register(metric.name, metric.help, family);
            }
            Kind::Gauge => {
                let family = Family::<Labels, Gauge>::default();
                for (labels, value) in &metric.samples {
                    family.get_or_create(labels).set(i64::try_from(*value).unwrap_or(i64::MAX));
                }
                registry.register(metric.name, metric.help, family);
            }
        }
    }
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

/// The same samples for the control socket: `[{"name", "labels", "value"}]`, names as exported.
pub fn samples_json(status: &Status) -> Value {
    let samples: Vec<Value> = metrics(status)
        .iter()
        .flat_map(|metric| {
            let name = metric.exported_name();
            metric.samples.iter().map(move |(labels, value)| {
                let labels: BTreeMap<&str, &str> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                json!({ "name": name, "labels": labels, "value": value })
            })
        })
        .collect();
    Value::Array(samples)
}

/// One sample as a Prometheus text line, for `tng status`.
pub fn sample_line(sample: &Value) -> String {
    let labels: Vec<String> = sample["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| format!("{name}=\"{}\"", value.as_str().unwrap_or("")))
        .collect();
    let name = sample["name"].as_str().unwrap_or("?");
    match labels.is_empty() {
        true => format!("{name} {}", sample["value"]),
        false => format!("{name}{{{}}} {}", labels.join(","), sample["value"]),
    }
}

/// Serves `GET /metrics` on `address` until the process ends.
pub async fn serve(address: SocketAddr, agent: Agent) -> Result<()> {
    let listener =
        TcpListener::bind(address).await.with_context(|| format!("cannot listen on {address} for --metrics"))?;
    loop {
        let (stream, _) = listener.accept().await?;
        let agent = agent.clone();
        tokio::spawn(async move {
            if let Err(err) = answer(stream, &agent).await {
                tracing::debug!("metrics request: {err:#}");
            }
        });
    }
}

/// Answers one HTTP/1.x request and closes the connection (what Prometheus and curl need, nothing more).
async fn answer(mut stream: TcpStream, agent: &Agent) -> Result<()> {
    let head = read_request_head(&mut stream).await?;
    let path = head.split_whitespace().nth(1).unwrap_or("");
    let (status_line, content_type, body) = if !head.starts_with("GET ") {
        ("405 Method Not Allowed", "text/plain", "only GET\n".to_string())
    } else if path == "/metrics" {
        let status = agent.status().await?;
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", prometheus_text(&status))
    } else {
        ("404 Not Found", "text/plain", "metrics are at /metrics\n".to_string())
    };
    let response = format!(
        "HTTP/1.1 {status_line}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await?;
    Ok(())
}

/// The request line and headers, up to the blank line that ends them.
async fn read_request_head(stream: &mut TcpStream) -> Result<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        let read = stream.read(&mut buf).await?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buf[..read]);
        if head.len() > MAX_REQUEST_HEAD {
            bail!("request head longer than {MAX_REQUEST_HEAD} bytes");
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

const MAX_REQUEST_HEAD: usize = 8192;
