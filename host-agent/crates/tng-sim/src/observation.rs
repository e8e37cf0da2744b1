//! What the simulator reads off endpoints while a run goes on: the channel log and the timeline's RTT.

use std::time::Duration;

use tng_proto::{Endpoint, Time};
use tng_relay::{DirectionState, EndpointSections, Relay, SectionState};

/// Prints each channel of `endpoint`'s connections to stderr as one JSON line (`tng-sim run --channel-log`).
pub fn log_channels(now: Duration, host: &str, endpoint: &mut Endpoint) {
    let at_ms = now.as_secs_f64() * 1000.0;
    for handle in endpoint.connection_handles() {
        let Some(connection) = endpoint.connection(handle) else {
            continue;
        };
        for channel in connection.stats().channels {
            let line = serde_json::json!({
                "t_ms": at_ms,
                "host": host,
                "connection": handle.0,
                "channel": channel.id,
                "local": channel.local.to_string(),
                "remote": channel.remote.to_string(),
                "state": format!("{:?}", channel.state),
                "cc": channel.cc,
                "srtt_ms": channel.srtt.as_secs_f64() * 1000.0,
                "min_rtt_ms": channel.min_rtt.as_secs_f64() * 1000.0,
                "cwnd": channel.cwnd,
                "bytes_in_flight": channel.bytes_in_flight,
                "pacing_mbps": channel.pacing_rate as f64 * 8.0 / 1e6,
                "sent_packets": channel.sent_packets,
                "bytes_sent": channel.bytes_sent,
                "lost_packets": channel.lost_packets,
                "retransmitted_packets": channel.retransmitted_packets,
                "probe_timeouts": channel.probe_timeouts,
            });
            eprintln!("{line}");
        }
    }
}

/// Prints each section `host`'s endpoint sends through a relay to stderr as one JSON line: the section's own
/// controller, which bounds the channel through it (`tng-sim run --channel-log`).
pub fn log_sections(now: Duration, host: &str, sections: &EndpointSections) {
    let at_ms = now.as_secs_f64() * 1000.0;
    let ms = |rtt: Option<Duration>| rtt.map(|rtt| rtt.as_secs_f64() * 1000.0);
    for state in sections.section_states() {
        let SectionState { relay, connection_id, flow, min_rtt, lost } = state;
        let line = serde_json::json!({
            "t_ms": at_ms,
            "host": host,
            "section": relay.to_string(),
            "connection": connection_id,
            "waiting": flow.waiting,
            "cc": flow.controller,
            "cwnd": flow.cwnd,
            "bytes_in_flight": flow.bytes_in_flight,
            "srtt_ms": ms(flow.smoothed_rtt),
            "min_rtt_ms": ms(min_rtt),
            "lost": lost,
        });
        eprintln!("{line}");
    }
}

/// Prints each direction of every connection `relay` carries to stderr as one JSON line: its queue and the
/// downstream section's controller (`tng-sim run --channel-log`), so that a split flow shows which section limits it.
pub fn log_relay(now: Duration, site: &str, relay: &Relay) {
    let at_ms = now.as_secs_f64() * 1000.0;
    let ms = |rtt: Option<Duration>| rtt.map(|rtt| rtt.as_secs_f64() * 1000.0);
    for connection in relay.connection_states(Time::ZERO + now) {
        let directions = [("toward_server", &connection.toward_server), ("toward_client", &connection.toward_client)];
        for (direction, state) in directions {
            let DirectionState { queued, head_wait, controller, window, in_flight, srtt, min_rtt, .. } = *state;
            let line = serde_json::json!({
                "t_ms": at_ms,
                "relay": site,
                "connection": connection.connection_id,
                "direction": direction,
                "queued": queued,
                "head_wait_ms": head_wait.as_secs_f64() * 1000.0,
                "cc": controller,
                "cwnd": window,
                "bytes_in_flight": in_flight,
                "srtt_ms": ms(srtt),
                "min_rtt_ms": ms(min_rtt),
                "received": state.received,
                "queue_full": state.queue_full,
                "forwarded": state.forwarded,
                "lost": state.lost,
            });
            eprintln!("{line}");
        }
    }
}

/// The largest smoothed RTT over the channels of `endpoint`'s connections that have measured one.
pub fn largest_srtt(endpoint: &mut Endpoint) -> Option<Duration> {
    let mut largest = None;
    for handle in endpoint.connection_handles() {
        let Some(connection) = endpoint.connection(handle) else {
            continue;
        };
        let measured = connection.stats().channels.into_iter().map(|channel| channel.srtt).filter(|s| !s.is_zero());
        largest = largest.max(measured.max());
    }
    largest
}
