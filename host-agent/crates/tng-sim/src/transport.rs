//! Mapping between the scenario's transport knobs and tng-proto's configuration types.

use std::time::Duration;

use tng_proto::{CcKind, ChannelState, Connection, EcnCodepoint, SchedulerKind, TailLossMode, TransportConfig};

use crate::datagram::Ecn;
use crate::scenario::TransportSpec;
use crate::topology::ScenarioError;

/// The endpoints' transport configuration: tng-proto's defaults with the scenario's knobs applied.
pub fn transport_config(spec: &TransportSpec) -> Result<TransportConfig, ScenarioError> {
    let mut config = TransportConfig::default();
    if let Some(name) = &spec.cc {
        config.cc = name.parse::<CcKind>().map_err(|error| bad("transport.cc", error))?;
    }
    if let Some(name) = &spec.scheduler {
        config.scheduler = name.parse::<SchedulerKind>().map_err(|error| bad("transport.scheduler", error))?;
    }
    if let Some(name) = &spec.tlp {
        config.tail_loss = name.parse::<TailLossMode>().map_err(|error| bad("transport.tlp", error))?;
    }
    if let Some(delta) = spec.copa_delta {
        config.cc_config.copa_delta = delta;
    }
    if let Some(threshold_ms) = spec.queue_threshold_ms {
        config.cc_config.queue_threshold = Some(Duration::from_secs_f64(threshold_ms / 1000.0));
    }
    if let Some(ecn) = spec.ecn {
        config.ecn = ecn;
    }
    if let Some(window) = spec.stream_receive_window {
        config.streams.stream_receive_window = window;
    }
    if let Some(window) = spec.receive_window {
        config.streams.receive_window = window;
    }
    Ok(config)
}

fn bad(key: &str, error: impl std::fmt::Display) -> ScenarioError {
    ScenarioError { key: key.to_owned(), problem: error.to_string() }
}

pub fn ecn_to_proto(ecn: Ecn) -> Option<EcnCodepoint> {
    match ecn {
        Ecn::NotEct => None,
        Ecn::Ect0 => Some(EcnCodepoint::Ect0),
        Ecn::Ect1 => Some(EcnCodepoint::Ect1),
        Ecn::Ce => Some(EcnCodepoint::Ce),
    }
}

pub fn ecn_from_proto(ecn: Option<EcnCodepoint>) -> Ecn {
    match ecn {
        None => Ecn::NotEct,
        Some(EcnCodepoint::Ect0) => Ecn::Ect0,
        Some(EcnCodepoint::Ect1) => Ecn::Ect1,
        Some(EcnCodepoint::Ce) => Ecn::Ce,
    }
}

/// Whether a connection has sent, at least once, every stream byte it had been given when its total of written
/// bytes was `bytes_written_mark`.
///
/// tng-proto does not count first transmissions of stream bytes, so this reads the sender's state instead: the
/// simulator calls it right after draining the endpoint (it has nothing it may send now), and if every channel
/// that carries data still has room for a full datagram in its congestion window, the window held nothing back:
/// whatever was written has left. (The pacer may still hold a packet; the simulator also ends a first
/// transmission at the first loss-recovery packet, see [`recovery_transmissions`].)
pub fn sent_once(connection: &Connection, bytes_written_mark: u64) -> bool {
    let stats = connection.stats();
    if stats.streams.bytes_written < bytes_written_mark {
        return false;
    }
    stats
        .channels
        .iter()
        .filter(|channel| channel.state == ChannelState::Active)
        .all(|channel| channel.bytes_in_flight + MAX_DATAGRAM <= channel.cwnd)
}

/// Loss-recovery transmissions a connection has made: probe timeouts, tail-loss probes and packets carrying
/// retransmitted data, over all its channels.
pub fn recovery_transmissions(connection: &Connection) -> u64 {
    connection
        .stats()
        .channels
        .iter()
        .map(|channel| channel.probe_timeouts + channel.tail_loss_probes + channel.retransmitted_packets)
        .sum()
}

/// Largest datagram a channel sends (tng-proto's default `max_datagram_size`).
const MAX_DATAGRAM: u64 = 1472;
