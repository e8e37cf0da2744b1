//! One connection's trace as JSON-SEQ (RFC 7464): the header record, then one record per event.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tng_proto::qlog::{Metrics, QlogEvent, QlogSink, SectionMetrics, TraceStart};
use tng_proto::streams::Side;
use tng_proto::Time;

use crate::events;

/// The qlog version whose JSON-SEQ serialization this writes (draft-ietf-quic-qlog-main-schema-03/-04), the one qvis
/// reads.
pub const QLOG_VERSION: &str = "0.3";

/// RFC 7464: every JSON text of a sequence starts with RS (and this writer ends it with LF).
const RECORD_SEPARATOR: u8 = 0x1e;

/// Buffered records are written out at least this often in trace time (and when the connection ends), so that a
/// long-lived agent's files are readable while it runs.
const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Serialize)]
struct Header<'a> {
    qlog_version: &'static str,
    qlog_format: &'static str,
    title: &'a str,
    description: &'a str,
    trace: Trace<'a>,
}

#[derive(Serialize)]
struct Trace<'a> {
    title: &'a str,
    vantage_point: VantagePoint<'a>,
    common_fields: CommonFields,
    configuration: Configuration,
}

#[derive(Serialize)]
struct VantagePoint<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct CommonFields {
    /// The client's provisional connection id, shared by both ends' traces.
    group_id: String,
    #[serde(rename = "ODCID")]
    odcid: String,
    protocol_type: [&'static str; 1],
    /// Milliseconds since the Unix epoch of time 0 of the events (0 for virtual time).
    reference_time: f64,
    time_format: &'static str,
}

#[derive(Serialize)]
struct Configuration {
    time_offset: f64,
    time_units: &'static str,
}

#[derive(Serialize)]
struct Record<'a> {
    /// Milliseconds since `reference_time`.
    time: f64,
    name: &'a str,
    data: &'a Value,
}

/// Writes one connection's trace to `out`: implements the core's sink.
pub struct QlogWriter<W: Write> {
    out: W,
    /// What each channel's last `metrics_updated` said, so that only changes are written (as qlog asks).
    metrics: BTreeMap<u8, Metrics>,
    /// What each relay section's last `tng:section_updated` said, likewise.
    sections: BTreeMap<SocketAddr, SectionMetrics>,
    last_flush: Time,
    /// The first write error; nothing more is written after it.
    failed: bool,
}

impl<W: Write + Send> QlogWriter<W> {
    /// Writes the header and `connectivity:connection_started`.
    pub fn new(out: W, name: &str, start: &TraceStart, reference_time_ms: f64) -> QlogWriter<W> {
        let (kind, title) = match start.side {
            Side::Client => ("client", format!("tng client {:016x}", start.original_connection_id)),
            Side::Server => ("server", format!("tng server {:016x}", start.original_connection_id)),
        };
        let header = Header {
            qlog_version: QLOG_VERSION,
            qlog_format: "JSON-SEQ",
            title: &title,
            description: "tng connection trace (docs/observability.md)",
            trace: Trace {
                title: &title,
                vantage_point: VantagePoint { name, kind },
                common_fields: CommonFields {
                    group_id: format!("{:016x}", start.original_connection_id),
                    odcid: format!("{:016x}", start.original_connection_id),
                    protocol_type: ["TNG"],
                    reference_time: reference_time_ms,
                    time_format: "relative",
                },
                configuration: Configuration { time_offset: 0.0, time_units: "ms" },
            },
        };
        let mut writer = QlogWriter {
            out,
            metrics: BTreeMap::new(),
            sections: BTreeMap::new(),
            last_flush: start.now,
            failed: false,
        };
        writer.record_value(&header);
        writer.record(start.now, "connectivity:connection_started", &events::connection_started(start));
        writer
    }

    fn record_value(&mut self, value: &impl Serialize) {
        if self.failed {
            return;
        }
        let written = self
            .out
            .write_all(&[RECORD_SEPARATOR])
            .and_then(|()| serde_json::to_writer(&mut self.out, value).map_err(std::io::Error::from))
            .and_then(|()| self.out.write_all(b"\n"));
        if let Err(error) = written {
            eprintln!("qlog: write failed: {error}; the rest of this trace is lost");
            self.failed = true;
        }
    }

    fn record(&mut self, now: Time, name: &str, data: &Value) {
        let time = now.as_nanos() as f64 / 1e6;
        self.record_value(&Record { time, name, data });
    }

    /// `metrics_updated` with only the fields that changed, and `congestion_state_updated` when the phase did.
    fn metrics(&mut self, now: Time, metrics: &Metrics) {
        let previous = self.metrics.insert(metrics.channel, *metrics);
        if let Some(data) = events::metrics_changes(previous.as_ref(), metrics) {
            self.record(now, "recovery:metrics_updated", &data);
        }
        let old = previous.map(|previous| previous.congestion_state);
        if old != Some(metrics.congestion_state) {
            let mut data = json!({ "channel": metrics.channel, "new": metrics.congestion_state });
            if let (Some(old), Value::Object(fields)) = (old, &mut data) {
                fields.insert("old".into(), json!(old));
            }
            self.record(now, "recovery:congestion_state_updated", &data);
        }
    }

    fn flush(&mut self, now: Time) {
        self.last_flush = now;
        if !self.failed && self.out.flush().is_err() {
            self.failed = true;
        }
    }
}

impl<W: Write + Send> QlogSink for QlogWriter<W> {
    fn emit(&mut self, now: Time, event: &QlogEvent<'_>) {
        match event {
            QlogEvent::MetricsUpdated(metrics) => self.metrics(now, metrics),
            QlogEvent::SectionUpdated(section) => {
                // A section is told of every acknowledgement and send; only a change is an event.
                if self.sections.insert(section.remote, *section) != Some(*section) {
                    let (name, data) = events::name_and_data(event);
                    self.record(now, name, &data);
                }
            }
            QlogEvent::ChannelRemoved { channel } => {
                self.metrics.remove(channel);
                let (name, data) = events::name_and_data(event);
                self.record(now, name, &data);
            }
            _ => {
                let (name, data) = events::name_and_data(event);
                self.record(now, name, &data);
            }
        }
        let ended = matches!(event, QlogEvent::ConnectionStateUpdated(_));
        if ended || now.saturating_since(self.last_flush) >= FLUSH_INTERVAL {
            self.flush(now);
        }
    }
}

impl<W: Write> Drop for QlogWriter<W> {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}
