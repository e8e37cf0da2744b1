//! Configuration: what an endpoint is (client only, or also a server) and how its connections behave.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::cc::{CcConfig, CcKind};
use crate::qlog::QlogConfig;
use crate::scheduler::SchedulerKind;
use crate::streams::StreamConfig;

/// Everything an [`crate::Endpoint`] needs besides its key pair and seed.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// `Some` to accept connections; a client-only endpoint drops every first INITIAL it receives.
    pub server: Option<ServerConfig>,
    pub transport: TransportConfig,
}

impl EndpointConfig {
    /// An endpoint that only connects out.
    pub fn client() -> EndpointConfig {
        EndpointConfig { server: None, transport: TransportConfig::default() }
    }

    /// An endpoint that also accepts connections, with default server settings.
    pub fn server() -> EndpointConfig {
        EndpointConfig { server: Some(ServerConfig::default()), transport: TransportConfig::default() }
    }
}

/// How a server treats handshake attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    pub retry: RetryPolicy,
    /// Connections (established or handshaking) beyond which first INITIALs are dropped.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig { retry: RetryPolicy::WhenBusy { max_pending: 64 }, max_connections: 4096 }
    }
}

/// When a server answers a first INITIAL with a stateless RETRY (address validation before any state is kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryPolicy {
    Never,
    Always,
    /// Only while at least `max_pending` handshakes are unfinished: a flood of spoofed INITIALs then costs the server
    /// no state.
    WhenBusy {
        max_pending: usize,
    },
}

/// Which channel carries the probe when a channel's probe timeout fires (thesis 003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TailLossMode {
    /// The probe repeats the tail on the channel that timed out (RFC 8985 TLP).
    SamePath,
    /// The probe repeats the tail on the lowest-RTT other validated channel with window room, charging that
    /// channel's congestion controller; the timed-out channel gets only a small PING to learn its own losses.
    AlternatePath,
}

impl TailLossMode {
    pub const ALL: [TailLossMode; 2] = [TailLossMode::SamePath, TailLossMode::AlternatePath];

    pub fn name(self) -> &'static str {
        match self {
            TailLossMode::SamePath => "same-path",
            TailLossMode::AlternatePath => "alternate-path",
        }
    }
}

impl fmt::Display for TailLossMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a tail-loss mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown tail-loss mode {0:?} (known: same-path, alternate-path)")]
pub struct UnknownTailLossMode(pub String);

impl FromStr for TailLossMode {
    type Err = UnknownTailLossMode;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        TailLossMode::ALL.into_iter().find(|mode| mode.name() == text).ok_or_else(|| UnknownTailLossMode(text.into()))
    }
}

/// How every connection of an endpoint behaves; [`HostPolicy`] overrides parts per connection at run time.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// Congestion controller of every channel unless a policy says otherwise.
    pub cc: CcKind,
    pub cc_config: CcConfig,
    pub scheduler: SchedulerKind,
    pub tail_loss: TailLossMode,
    /// Channels per connection (paths at connect, plus later additions and peer-opened ones).
    pub max_channels: usize,
    /// Stream limits and flow-control windows of the semantic layer.
    pub streams: StreamConfig,
    /// A connection with nothing received for this long is closed.
    pub idle_timeout: Duration,
    /// A handshake not finished within this long fails.
    pub handshake_timeout: Duration,
    /// A validated channel that sent nothing ack-eliciting for this long sends a PING, so that its liveness is
    /// known; `None` disables keepalives (channel failure is then noticed only while data flows).
    pub keepalive: Option<Duration>,
    /// Start a key update after this many packets under one key; 0 never updates.
    pub key_update_interval_packets: u64,
    /// RTT assumed before the first sample (RFC 9002: 333 ms).
    pub initial_rtt: Duration,
    /// The longest this endpoint delays an ACK, and what it assumes of the peer.
    pub max_ack_delay: Duration,
    /// Consecutive probe timeouts after which a channel is declared down.
    pub channel_down_after_ptos: u32,
    /// How often a down channel is probed to bring it back.
    pub reprobe_interval: Duration,
    /// Mark packets ECT(0) and echo ECN counts.
    pub ecn: bool,
    /// Largest datagram payload sent (1472 fits a 1500-byte IPv4 MTU; 1452 for IPv6).
    pub max_datagram_size: usize,
    /// Where connections trace their events ([`crate::qlog`]); `None`, the default, traces nothing.
    pub qlog: Option<QlogConfig>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            cc: CcKind::Cubic,
            cc_config: CcConfig { max_datagram_size: 1472, ..CcConfig::default() },
            scheduler: SchedulerKind::AckClocked,
            tail_loss: TailLossMode::SamePath,
            max_channels: 8,
            streams: StreamConfig::default(),
            idle_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            keepalive: Some(Duration::from_secs(1)),
            key_update_interval_packets: 1 << 20,
            initial_rtt: Duration::from_millis(333),
            max_ack_delay: Duration::from_millis(25),
            channel_down_after_ptos: 3,
            reprobe_interval: Duration::from_secs(1),
            ecn: true,
            max_datagram_size: tng_wire::MAX_PACKET,
            qlog: None,
        }
    }
}

/// The host half of a controller policy for one connection: which congestion controller on which channel, which
/// scheduler and tail-loss mode, and a rate cap. `None` fields keep the current setting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostPolicy {
    /// Controller for channels without an entry in `cc_per_channel`.
    pub cc: Option<CcKind>,
    pub cc_per_channel: BTreeMap<u8, CcKind>,
    pub scheduler: Option<SchedulerKind>,
    /// Channel weights for the weighted scheduler; channels without one weigh 1.
    pub weights: BTreeMap<u8, u32>,
    pub tail_loss: Option<TailLossMode>,
    /// Aggregate sending rate over all channels, in bytes per second.
    pub rate_cap: Option<u64>,
    /// Parameters of the congestion controllers (queue threshold, Copa's delta); the connection's own datagram size
    /// replaces `max_datagram_size`. Channels restart their controllers when these change.
    pub cc_config: Option<CcConfig>,
}
