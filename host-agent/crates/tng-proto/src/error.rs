//! Errors of the connection API: why a connection could not be started, and why one ended.

use std::time::Duration;

use crate::identity::Identity;

/// Why [`crate::Endpoint::connect`] refused to start a connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("no path given: connect needs at least one (local, remote) address pair")]
    NoPaths,
    #[error("{given} paths given but at most {max} channels are allowed (TransportConfig::max_channels)")]
    TooManyPaths { given: usize, max: usize },
    #[error("path {0} is listed twice")]
    DuplicatePath(usize),
    #[error("the handshake could not be set up: {0}")]
    Handshake(String),
}

/// Why a connection failed to establish or ended (the `reason` of `HandshakeFailed` and `Closed` events).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    #[error("server identity {actual} does not match pinned {pinned}")]
    IdentityMismatch { actual: Identity, pinned: Identity },
    #[error("handshake timed out: no answer within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("handshake failed: {0}")]
    Handshake(String),
    #[error("idle timeout: nothing received for {0:?}")]
    IdleTimeout(Duration),
    #[error("closed by the peer (error code {code}): {reason}")]
    PeerClosed { code: u64, reason: String },
    #[error("closed locally (error code {code}): {reason}")]
    LocallyClosed { code: u64, reason: String },
    #[error("protocol violation by the peer: {0}")]
    ProtocolViolation(String),
    #[error("packet numbers exhausted on channel {0}")]
    PacketNumbersExhausted(u8),
}
