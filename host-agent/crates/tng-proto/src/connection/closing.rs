//! Ending a connection: closed by the application (a CLOSE, then three probe timeouts of closing), by the peer
//! (draining), for a peer's protocol violation, or at once without telling the peer.

use super::channel::ChannelState;
use super::{Connection, Event, State};
use crate::error::ConnectionError;
use crate::time::Time;

impl Connection {
    /// Closes the connection with an application error code and reason: the peer gets a CLOSE, then the
    /// connection drains for three probe timeouts. Emits `Closed` at once.
    pub fn close(&mut self, now: Time, error_code: u64, reason: impl AsRef<[u8]>) {
        let reason_text = String::from_utf8_lossy(reason.as_ref()).into_owned();
        let error_code = error_code.min(tng_wire::varint::MAX);
        if self.is_closed() {
            return;
        }
        let error = ConnectionError::LocallyClosed { code: error_code, reason: reason_text.clone() };
        if self.protection.is_none() {
            self.fail(error);
            return;
        }
        self.enter_closing(now, error_code, reason_text, error);
    }

    fn enter_closing(&mut self, now: Time, error_code: u64, reason: String, error: ConnectionError) {
        self.close_frame = Some((error_code, reason));
        for channel in self.channels.values_mut() {
            channel.close_pending = channel.state != ChannelState::Down;
        }
        self.state = State::Closing { until: now + self.three_ptos() };
        self.events.push_back(Event::Closed { reason: error });
    }

    pub(super) fn enter_draining(&mut self, now: Time, error: ConnectionError) {
        self.state = State::Draining { until: now + self.three_ptos() };
        self.events.push_back(Event::Closed { reason: error });
    }

    /// The peer broke the protocol: close with an error it can read.
    pub(super) fn protocol_violation(&mut self, now: Time, what: String) {
        if self.is_closed() {
            return;
        }
        let error = ConnectionError::ProtocolViolation(what.clone());
        if self.protection.is_some() {
            self.enter_closing(now, PROTOCOL_VIOLATION, what, error);
        } else {
            self.fail(error);
        }
    }

    /// Ends the connection at once, without telling the peer.
    pub(crate) fn abort(&mut self, error: ConnectionError) {
        if !self.is_closed() {
            self.fail(error);
        }
    }

    /// Ends the connection before or instead of closing it properly.
    pub(super) fn fail(&mut self, error: ConnectionError) {
        let event = if self.peer_identity.is_some() && !matches!(error, ConnectionError::IdentityMismatch { .. }) {
            Event::Closed { reason: error }
        } else {
            Event::HandshakeFailed { reason: error }
        };
        self.events.push_back(event);
        self.state = State::Drained;
    }
}

/// Error code of a CLOSE caused by a peer's protocol violation.
const PROTOCOL_VIOLATION: u64 = 0x0a;
