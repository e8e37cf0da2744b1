//! Each core event as a qlog event name and its `data`, and frames as qlog frame objects.
//!
//! Names and fields follow the qlog QUIC event drafts where they have one; what QUIC lacks is a documented
//! extension: `channel` on every per-channel event, the tng packet types and frames, and the `tng:` events.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tng_proto::connection::ChannelState;
use tng_proto::qlog::{ConnectionState, LossTrigger, Metrics, MigrationState, QlogEvent, TraceStart};
use tng_proto::EcnCodepoint;
use tng_wire::{Feedback, Frame, PacketType, PathStatus};

pub(crate) fn name_and_data(event: &QlogEvent<'_>) -> (&'static str, Value) {
    match event {
        QlogEvent::ConnectionIdUpdated { old, new } => (
            "connectivity:connection_id_updated",
            json!({ "owner": "remote", "old": hex_id(*old), "new": hex_id(*new) }),
        ),
        QlogEvent::ConnectionStateUpdated(state) => {
            let new = match state {
                ConnectionState::HandshakeComplete => "handshake_complete",
                ConnectionState::Closed => "closed",
            };
            ("connectivity:connection_state_updated", json!({ "new": new }))
        }
        QlogEvent::PacketSent { channel, packet_type, packet_number, length, frames } => (
            "transport:packet_sent",
            json!({
                "channel": channel,
                "header": header(*packet_type, *packet_number),
                "raw": { "length": length },
                "frames": frames.iter().map(frame).collect::<Vec<_>>(),
            }),
        ),
        QlogEvent::PacketReceived { channel, packet_type, packet_number, length, frames, feedback, ecn } => (
            "transport:packet_received",
            json!({
                "channel": channel,
                "header": header(*packet_type, *packet_number),
                "raw": { "length": length },
                "frames": frames.iter().map(frame).collect::<Vec<_>>(),
                "feedback": feedback_fields(*feedback),
                "ecn": ecn.map(ecn_name),
            }),
        ),
        QlogEvent::PacketLost { channel, packet_number, trigger } => (
            "recovery:packet_lost",
            json!({
                "channel": channel,
                "header": { "packet_number": packet_number },
                "trigger": match trigger {
                    LossTrigger::ReorderingThreshold => "reordering_threshold",
                    LossTrigger::TimeThreshold => "time_threshold",
                    LossTrigger::ChannelReset => "channel_reset",
                },
            }),
        ),
        QlogEvent::ProbeTimeout { channel, pto_count } => (
            "recovery:loss_timer_updated",
            json!({ "channel": channel, "timer_type": "pto", "event_type": "expired", "pto_count": pto_count }),
        ),
        QlogEvent::MetricsUpdated(metrics) => {
            ("recovery:metrics_updated", metrics_changes(None, metrics).unwrap_or_else(|| json!({})))
        }
        QlogEvent::ControllerUpdated { channel, controller, trigger } => {
            ("tng:controller_updated", json!({ "channel": channel, "controller": controller, "trigger": trigger }))
        }
        QlogEvent::ChannelUpdated { channel, local, remote, state } => (
            "tng:channel_updated",
            json!({
                "channel": channel,
                "state": match state {
                    ChannelState::Validating => "validating",
                    ChannelState::Active => "active",
                    ChannelState::Down => "down",
                },
                "local": local.to_string(),
                "remote": remote.to_string(),
            }),
        ),
        QlogEvent::ChannelRemoved { channel } => {
            ("tng:channel_updated", json!({ "channel": channel, "state": "removed" }))
        }
        QlogEvent::MigrationStateUpdated { channel, state, local, remote } => (
            "connectivity:migration_state_updated",
            json!({
                "channel": channel,
                "state": match state {
                    MigrationState::ProbingStarted => "probing_started",
                    MigrationState::ProbingAbandoned => "probing_abandoned",
                    MigrationState::ProbingSuccessful => "probing_successful",
                    MigrationState::MigrationComplete => "migration_complete",
                },
                "local": local.to_string(),
                "remote": remote.to_string(),
            }),
        ),
        QlogEvent::FeedbackEchoed { channel, feedback } => {
            let mut data = feedback_fields(*feedback);
            if let Value::Object(fields) = &mut data {
                fields.insert("channel".into(), json!(channel));
            }
            ("tng:feedback_echoed", data)
        }
        QlogEvent::SectionUpdated(section) => (
            "tng:section_updated",
            json!({
                "remote": section.remote.to_string(),
                "controller": section.controller,
                "congestion_window": section.cwnd,
                "bytes_in_flight": section.bytes_in_flight,
                "smoothed_rtt": section.smoothed_rtt.map(ms),
                "waiting": section.waiting,
            }),
        ),
    }
}

/// `connectivity:connection_started` from what the trace started with.
pub(crate) fn connection_started(start: &TraceStart) -> Value {
    let (src, dst) = (start.local, start.remote);
    json!({
        "ip_version": if src.is_ipv4() { "ipv4" } else { "ipv6" },
        "src_ip": src.ip().to_string(),
        "src_port": src.port(),
        "dst_ip": dst.ip().to_string(),
        "dst_port": dst.port(),
        "connection_id": hex_id(start.connection_id),
    })
}

/// The fields of `metrics` that differ from `previous` (all of them without one), with the channel; `None` if
/// nothing changed. Times in milliseconds, the pacing rate in bits per second as qlog has it.
pub(crate) fn metrics_changes(previous: Option<&Metrics>, metrics: &Metrics) -> Option<Value> {
    let mut data = Map::new();
    let mut put = |name: &str, changed: bool, value: Value| {
        if changed {
            data.insert(name.into(), value);
        }
    };
    let differs = |field: fn(&Metrics) -> Value| previous.is_none_or(|previous| field(previous) != field(metrics));
    put("congestion_window", differs(|m| json!(m.cwnd)), json!(metrics.cwnd));
    put("bytes_in_flight", differs(|m| json!(m.bytes_in_flight)), json!(metrics.bytes_in_flight));
    put("smoothed_rtt", differs(|m| json!(m.smoothed_rtt)), ms(metrics.smoothed_rtt));
    put("min_rtt", differs(|m| json!(m.min_rtt)), ms(metrics.min_rtt));
    put("rtt_variance", differs(|m| json!(m.rtt_variance)), ms(metrics.rtt_variance));
    if let Some(latest) = metrics.latest_rtt {
        put("latest_rtt", true, ms(latest));
    }
    put("pacing_rate", differs(|m| json!(m.pacing_rate)), json!(metrics.pacing_rate.saturating_mul(8)));
    if data.is_empty() {
        return None;
    }
    data.insert("channel".into(), json!(metrics.channel));
    Some(Value::Object(data))
}

fn ms(duration: Duration) -> Value {
    json!(duration.as_secs_f64() * 1e3)
}

fn hex_id(id: u64) -> String {
    format!("{id:016x}")
}

fn header(packet_type: PacketType, packet_number: u64) -> Value {
    json!({ "packet_type": packet_type.name(), "packet_number": packet_number })
}

/// The flow header's feedback fields, raw and read: `queue_delay_us` and `rate_hint_kbps` are null when neutral.
fn feedback_fields(feedback: Feedback) -> Value {
    let queue_delay = (feedback.effective_queue_level() > 0).then(|| feedback.queue_delay().as_micros() as u64);
    json!({
        "queue_level": feedback.queue_level,
        "rate_hint": feedback.rate_hint,
        "queue_delay_us": queue_delay,
        "rate_hint_kbps": feedback.rate_hint_kbps(),
    })
}

fn ecn_name(ecn: EcnCodepoint) -> &'static str {
    match ecn {
        EcnCodepoint::Ect0 => "ECT(0)",
        EcnCodepoint::Ect1 => "ECT(1)",
        EcnCodepoint::Ce => "CE",
    }
}

fn address(address: &SocketAddr) -> Value {
    json!(address.to_string())
}

fn frame(frame: &Frame<'_>) -> Value {
    match frame {
        Frame::Padding(length) => json!({ "frame_type": "padding", "payload_length": length }),
        Frame::Ping => json!({ "frame_type": "ping" }),
        Frame::Ack(ack) => json!({
            "frame_type": "ack",
            "ack_delay": ack.ack_delay_micros as f64 / 1e3,
            "acked_ranges": ack.ranges.iter().rev().map(|range| [range.start(), range.end()]).collect::<Vec<_>>(),
            "ect0": ack.ecn.ect0,
            "ect1": ack.ecn.ect1,
            "ce": ack.ecn.ce,
        }),
        Frame::FeedbackEcho { max_queue_level, min_rate_hint } => json!({
            "frame_type": "feedback_echo",
            "queue_level": max_queue_level,
            "rate_hint": min_rate_hint,
        }),
        Frame::Stream { stream_id, offset, fin, data, .. } => json!({
            "frame_type": "stream",
            "stream_id": stream_id,
            "offset": offset,
            "length": data.len(),
            "fin": fin,
        }),
        Frame::StreamAck { stream_id, ranges } => json!({
            "frame_type": "stream_ack",
            "stream_id": stream_id,
            "acked_ranges": ranges.iter().map(|range| [range.start, range.end]).collect::<Vec<_>>(),
        }),
        Frame::MaxData(maximum) => json!({ "frame_type": "max_data", "maximum": maximum }),
        Frame::MaxStreamData { stream_id, max } => {
            json!({ "frame_type": "max_stream_data", "stream_id": stream_id, "maximum": max })
        }
        Frame::MaxStreams(maximum) => {
            json!({ "frame_type": "max_streams", "stream_type": "bidirectional", "maximum": maximum })
        }
        Frame::ResetStream { stream_id, error_code, final_size } => json!({
            "frame_type": "reset_stream",
            "stream_id": stream_id,
            "error_code": error_code,
            "final_size": final_size,
        }),
        Frame::StopSending { stream_id, error_code } => {
            json!({ "frame_type": "stop_sending", "stream_id": stream_id, "error_code": error_code })
        }
        Frame::PathChallenge(token) => json!({ "frame_type": "path_challenge", "data": hex_bytes(token) }),
        Frame::PathResponse(token) => json!({ "frame_type": "path_response", "data": hex_bytes(token) }),
        Frame::PathStatus { channel_id, status } => json!({
            "frame_type": "path_status",
            "channel": channel_id,
            "status": match status {
                PathStatus::Abandon => "abandon",
                PathStatus::Standby => "standby",
                PathStatus::Available => "available",
            },
        }),
        Frame::Close { error_code, reason } => json!({
            "frame_type": "connection_close",
            "error_space": "application",
            "error_code": error_code,
            "reason": String::from_utf8_lossy(reason),
        }),
        Frame::NewAddress(new) => json!({ "frame_type": "new_address", "address": address(new) }),
        Frame::DeliveryForecast { tick, received, cumulative } => json!({
            "frame_type": "delivery_forecast",
            "tick": tick,
            "received": received,
            "cumulative": cumulative,
        }),
        Frame::Extension { frame_type, data } => {
            json!({ "frame_type": "unknown", "raw_frame_type": frame_type, "length": data.len() })
        }
    }
}

fn hex_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
