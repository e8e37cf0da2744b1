//! Connection events for qlog traces: what a connection tells a sink the driver plugs in, as typed values.
//!
//! The core only emits; writing them out (qlog JSON-SEQ files, with the event names of the IETF qlog drafts) is the
//! driver's business (`tng-qlog`). Tracing is off unless [`crate::TransportConfig::qlog`] names a factory: every
//! emission point is then one `None` check, and events are built only inside it.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tng_wire::{Feedback, Frame, PacketType};

use crate::connection::{ChannelState, EcnCodepoint};
use crate::streams::Side;
use crate::time::Time;

/// Receives one connection's events, in the order they happen.
pub trait QlogSink: Send {
    fn emit(&mut self, now: Time, event: &QlogEvent<'_>);
}

/// Makes the sink of each new connection (or `None` to leave it untraced).
pub trait QlogFactory: Send + Sync {
    fn start(&self, trace: &TraceStart) -> Option<Box<dyn QlogSink>>;
}

/// What is known of a connection when its trace starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceStart {
    pub side: Side,
    /// The client's provisional connection id: the same at both ends, so it names the pair of traces (qlog's
    /// `group_id`, like QUIC's original destination connection id).
    pub original_connection_id: u64,
    /// The id the connection goes by now (a client learns the server's choice later: `ConnectionIdUpdated`).
    pub connection_id: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub now: Time,
}

/// The factory a [`crate::TransportConfig`] carries; cloned with the configuration.
#[derive(Clone)]
pub struct QlogConfig(pub Arc<dyn QlogFactory>);

impl fmt::Debug for QlogConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QlogConfig")
    }
}

/// A connection's sink, if it is traced.
#[derive(Default)]
pub(crate) struct Qlog(Option<Box<dyn QlogSink>>);

impl Qlog {
    pub(crate) fn start(config: Option<&QlogConfig>, trace: &TraceStart) -> Qlog {
        Qlog(config.and_then(|config| config.0.start(trace)))
    }

    /// The sink, when tracing is on: callers build the event only then.
    #[inline]
    pub(crate) fn sink(&mut self) -> Option<&mut (dyn QlogSink + 'static)> {
        self.0.as_deref_mut()
    }

    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }
}

impl fmt::Debug for Qlog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Qlog(on)" } else { "Qlog(off)" })
    }
}

/// Where the connection is in its life (qlog `connection_state_updated`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// The handshake finished: keys and the peer's identity are known.
    HandshakeComplete,
    /// The handshake failed or the connection ended.
    Closed,
}

/// Why a packet was declared lost (qlog `packet_lost` trigger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossTrigger {
    /// A packet at least three numbers later was acknowledged.
    ReorderingThreshold,
    /// It is older than 9/8 RTT than an acknowledged one.
    TimeThreshold,
    /// Its channel went down or changed path: what was in flight went the old way.
    ChannelReset,
}

/// Stages of validating a path and moving a channel to it (qlog `migration_state_updated`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationState {
    /// A PATH_CHALLENGE for `local` -> `remote` goes out.
    ProbingStarted,
    /// The challenge was never answered; the channel stays where it was (or goes down).
    ProbingAbandoned,
    /// The answer came back from the challenged address.
    ProbingSuccessful,
    /// The channel now runs on the validated addresses (a fresh flow state).
    MigrationComplete,
}

/// A channel's flow state after an ACK or a loss (qlog `metrics_updated`, one per channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metrics {
    pub channel: u8,
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    pub smoothed_rtt: Duration,
    pub min_rtt: Duration,
    pub rtt_variance: Duration,
    pub latest_rtt: Option<Duration>,
    /// Bytes per second.
    pub pacing_rate: u64,
    /// The controller's phase (`slow_start`, `congestion_avoidance`, `recovery`, BBR's modes, ...).
    pub congestion_state: &'static str,
}

/// The flow state of a relay's section that a connection's channels toward `remote` go through (`tng:section_updated`):
/// the section's own controller sets their window (`Endpoint::set_section_room`), so their `metrics_updated` show
/// only what they have in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionMetrics {
    /// Where the channels send: the relay, or the peer a client names through it.
    pub remote: SocketAddr,
    /// The section controller's name.
    pub controller: &'static str,
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    /// `None` until the section has a sample.
    pub smoothed_rtt: Option<Duration>,
    /// Datagrams waiting for the section's window.
    pub waiting: u64,
}

/// One event of a connection.
#[derive(Debug)]
pub enum QlogEvent<'a> {
    /// Client: the server's connection id replaces the provisional one.
    ConnectionIdUpdated {
        old: u64,
        new: u64,
    },
    ConnectionStateUpdated(ConnectionState),
    PacketSent {
        channel: u8,
        packet_type: PacketType,
        packet_number: u64,
        /// Datagram bytes.
        length: usize,
        frames: &'a [Frame<'a>],
    },
    PacketReceived {
        channel: u8,
        packet_type: PacketType,
        packet_number: u64,
        length: usize,
        frames: &'a [Frame<'a>],
        /// The in-network feedback fields as they arrived (switches rewrite them on the way).
        feedback: Feedback,
        ecn: Option<EcnCodepoint>,
    },
    PacketLost {
        channel: u8,
        packet_number: u64,
        trigger: LossTrigger,
    },
    /// A channel's probe timeout fired (`pto_count` in a row).
    ProbeTimeout {
        channel: u8,
        pto_count: u32,
    },
    MetricsUpdated(Metrics),
    /// A channel started a fresh congestion controller (`trigger`: `policy`, or `path_change` when it moved or came
    /// back).
    ControllerUpdated {
        channel: u8,
        controller: &'static str,
        trigger: &'static str,
    },
    /// A channel was opened, validated, went down or came back.
    ChannelUpdated {
        channel: u8,
        local: SocketAddr,
        remote: SocketAddr,
        state: ChannelState,
    },
    ChannelRemoved {
        channel: u8,
    },
    MigrationStateUpdated {
        channel: u8,
        state: MigrationState,
        local: SocketAddr,
        remote: SocketAddr,
    },
    /// The peer echoed the in-network feedback it saw on this channel; the controller got it.
    FeedbackEchoed {
        channel: u8,
        feedback: Feedback,
    },
    /// The section the channels toward a relay go through changed its window, flight, RTT or queue.
    SectionUpdated(SectionMetrics),
}
