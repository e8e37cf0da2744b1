//! The endpoint's counters: traffic, every reason a datagram was dropped, and how much work connections cost.

use std::collections::BTreeMap;

/// Why a datagram was dropped (internal; counted in [`EndpointStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// Malformed packet or frame; the name is the wire format's (`WireError::as_str`).
    Wire(&'static str),
    /// A sealed packet that did not open: wrong key, tampered header or payload.
    AuthFailed,
    /// A packet number already seen, or below the replay window.
    Replayed,
    UnknownConnection,
    UnknownChannel,
    /// A sealed packet for a connection whose keys do not exist yet.
    NotEstablished,
    /// A stage-1 INITIAL at an endpoint that does not accept connections.
    NotAServer,
    /// A handshake message that failed to authenticate or decode.
    HandshakeFailed,
    /// A valid packet that does not fit the connection's state (a repeated stage 2, a late RETRY).
    Unexpected,
    /// A frame not allowed in the packet type carrying it.
    ForbiddenFrame,
    /// A new channel beyond `max_channels`.
    ChannelLimit,
    /// A handshake beyond `max_connections`.
    Refused,
    /// The connection is draining after a CLOSE.
    Draining,
}

/// Counters of an endpoint: traffic and every reason a datagram was dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    pub datagrams_received: u64,
    pub bytes_received: u64,
    pub datagrams_sent: u64,
    pub bytes_sent: u64,
    /// Malformed packets and frames by wire-format error name (`bad_version`, `length_mismatch`, `unknown_frame`, ...).
    pub wire_errors: BTreeMap<&'static str, u64>,
    pub auth_failed: u64,
    pub replayed: u64,
    pub unknown_connection: u64,
    pub unknown_channel: u64,
    pub not_established: u64,
    pub not_a_server: u64,
    pub handshake_failed: u64,
    pub unexpected: u64,
    pub forbidden_frame: u64,
    pub channel_limit: u64,
    pub refused: u64,
    pub while_draining: u64,
    /// Retry tokens that were present but did not verify (forged, expired, other address).
    pub invalid_tokens: u64,
    pub retries_sent: u64,
    pub handshakes_accepted: u64,
    /// Bytes held back by the anti-amplification limit (3x what an unvalidated address sent).
    pub amplification_limited_bytes: u64,
    /// Connections currently held (any state).
    pub connections: usize,
    /// Connection timers that came due and ran. With [`EndpointStats::transmit_polls`], the work per event: it
    /// follows what the connections have to do, not how many the endpoint holds.
    pub timers_fired: u64,
    /// Times a connection was asked for a datagram to send (whether it had one or not).
    pub transmit_polls: u64,
}

impl EndpointStats {
    /// Every datagram dropped, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.wire_errors.values().sum::<u64>()
            + self.auth_failed
            + self.replayed
            + self.unknown_connection
            + self.unknown_channel
            + self.not_established
            + self.not_a_server
            + self.handshake_failed
            + self.unexpected
            + self.forbidden_frame
            + self.channel_limit
            + self.refused
            + self.while_draining
    }

    pub(super) fn record(&mut self, reason: DropReason) {
        let counter = match reason {
            DropReason::Wire(name) => self.wire_errors.entry(name).or_default(),
            DropReason::AuthFailed => &mut self.auth_failed,
            DropReason::Replayed => &mut self.replayed,
            DropReason::UnknownConnection => &mut self.unknown_connection,
            DropReason::UnknownChannel => &mut self.unknown_channel,
            DropReason::NotEstablished => &mut self.not_established,
            DropReason::NotAServer => &mut self.not_a_server,
            DropReason::HandshakeFailed => &mut self.handshake_failed,
            DropReason::Unexpected => &mut self.unexpected,
            DropReason::ForbiddenFrame => &mut self.forbidden_frame,
            DropReason::ChannelLimit => &mut self.channel_limit,
            DropReason::Refused => &mut self.refused,
            DropReason::Draining => &mut self.while_draining,
        };
        *counter += 1;
    }
}
