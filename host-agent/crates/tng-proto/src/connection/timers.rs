//! The connection's timers: the earliest deadline it needs to be woken for, and what runs when one is due
//! (handshake repeats and deadlines, idle timeout, key discard, the semantic retransmission timer, and each
//! channel's path validation, keepalive and loss recovery timers).

use std::time::Duration;

use super::channel::{self, Channel, ChannelState};
use super::crypto::PacketProtection;
use super::loss;
use super::{Connection, Event, State};
use crate::error::ConnectionError;
use crate::qlog::{MigrationState, QlogEvent};
use crate::time::Time;

impl Connection {
    /// The earliest time [`Connection::handle_timeout`] has something to do.
    pub(crate) fn poll_timeout(&self) -> Option<Time> {
        let mut earliest: Option<Time> = None;
        let mut consider = |time: Option<Time>| {
            if let Some(time) = time {
                earliest = Some(earliest.map_or(time, |current| current.min(time)));
            }
        };
        match &self.state {
            State::ClientHello(handshake) => {
                consider(Some(handshake.resend_at));
                consider(Some(self.handshake_deadline));
                return earliest;
            }
            // Stage 3 leaves at the next transmit, which follows the datagram that brought stage 2.
            State::ClientFinishDue(_) => return None,
            State::ServerHello(_) => return Some(self.handshake_deadline),
            State::Closing { until } | State::Draining { until } => return Some(*until),
            State::Drained => return None,
            State::Established => {}
        }
        consider(Some(self.last_activity + self.config.idle_timeout));
        if let Some(finish) = &self.finish {
            consider(Some(finish.resend_at));
        }
        consider(self.protection.as_ref().and_then(PacketProtection::next_timeout));
        if let Some(streams) = &self.streams {
            consider(streams.next_timeout(self.semantic_rto()));
            // Once due, STREAM_ACKs wait only for the window or the pacer, which `pacing_deadline` covers.
            consider(streams.stream_ack_deadline().filter(|&due| due > self.now));
        }
        let max_ack_delay = self.config.max_ack_delay;
        for channel in self.channels.values() {
            consider(channel.probe_at);
            consider(channel.received.ack_deadline(max_ack_delay));
            consider(channel.forecast_tick_end(self.now));
            if channel.state == ChannelState::Active {
                consider(channel.recovery.timer(&channel.rtt, max_ack_delay));
                consider(self.keepalive_at(channel));
            }
        }
        consider(self.pacing_deadline());
        earliest
    }

    fn keepalive_at(&self, channel: &Channel) -> Option<Time> {
        let interval = self.config.keepalive?;
        if channel.recovery.has_ack_eliciting_in_flight() || channel.ping_pending {
            return None;
        }
        Some(channel.last_sent_eliciting.max(channel.last_received) + interval)
    }

    /// Runs every timer due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Time) {
        match &mut self.state {
            State::ClientHello(handshake) => {
                if now >= self.handshake_deadline {
                    self.fail(ConnectionError::HandshakeTimeout(self.config.handshake_timeout));
                } else if now >= handshake.resend_at {
                    handshake.schedule_resend(now);
                }
                return;
            }
            State::ServerHello(_) => {
                if now >= self.handshake_deadline {
                    // Nobody was told about this connection: it just goes away.
                    self.state = State::Drained;
                }
                return;
            }
            State::Closing { until } | State::Draining { until } => {
                if now >= *until {
                    self.state = State::Drained;
                }
                return;
            }
            State::ClientFinishDue(_) | State::Drained => return,
            State::Established => {}
        }
        if now >= self.last_activity + self.config.idle_timeout {
            let error = ConnectionError::IdleTimeout(self.config.idle_timeout);
            self.events.push_back(Event::Closed { reason: error });
            self.state = State::Drained;
            return;
        }
        // Unconfirmed, the client repeats stage 3 until the server is heard from; if it never is, the idle
        // timeout ends the connection.
        if let Some(finish) = &mut self.finish {
            if now >= finish.resend_at {
                finish.attempts += 1;
                finish.resend_at = now + self.config.initial_rtt * (1u32 << finish.attempts.min(4));
                finish.due = true;
            }
        }
        if let Some(protection) = self.protection.as_mut() {
            protection.handle_timeout(now);
        }
        let rto = self.semantic_rto();
        if let Some(streams) = self.streams.as_mut() {
            if streams.next_timeout(rto).is_some_and(|when| when <= now) {
                streams.on_timeout(now, rto);
            }
        }
        let ids: Vec<u8> = self.channels.keys().copied().collect();
        for id in ids {
            self.handle_channel_timeout(now, id);
        }
        self.pull_stream_events();
    }

    fn handle_channel_timeout(&mut self, now: Time, id: u8) {
        let max_ack_delay = self.config.max_ack_delay;
        let keepalive_due = self.channels.get(&id).and_then(|c| self.keepalive_at(c)).is_some_and(|at| at <= now);
        let token = self.random_token();
        let Some(channel) = self.channels.get_mut(&id) else { return };
        if channel.forecast_tick_end(now).is_some_and(|end| end <= now) {
            if let Some(forecaster) = channel.forecaster.as_mut() {
                channel.forecast_due |= forecaster.advance_to(now);
            }
        }
        if channel.probe_at.is_some_and(|at| at <= now) {
            channel.probe_at = None;
            match channel.challenge {
                _ if channel.state == ChannelState::Down => {
                    // Periodic re-probe: any answer brings the channel back.
                    if channel.challenge.is_none() {
                        let (local, remote) = (channel.local, channel.remote);
                        channel.challenge =
                            Some(channel::Challenge { token, local, remote, attempts: 0, budget: None });
                    }
                    channel.probe_pending = true;
                }
                Some(challenge) if challenge.attempts >= MAX_CHALLENGES => {
                    channel.challenge = None;
                    if challenge.local == channel.local && challenge.remote == channel.remote {
                        // The channel's own addresses never answered: down, re-probed later.
                        self.channel_down(now, id);
                        return;
                    }
                    // A migration target never answered (perhaps a spoofed source): the channel stays where it is.
                    if let Some(sink) = self.qlog.sink() {
                        let (local, remote) = (challenge.local, challenge.remote);
                        let state = MigrationState::ProbingAbandoned;
                        sink.emit(now, &QlogEvent::MigrationStateUpdated { channel: id, state, local, remote });
                    }
                }
                Some(_) => channel.probe_pending = true,
                None => {}
            }
        }
        if channel.state != ChannelState::Active {
            return;
        }
        if keepalive_due {
            channel.ping_pending = true;
        }
        if channel.recovery.timer(&channel.rtt, max_ack_delay).is_none_or(|at| at > now) {
            return;
        }
        match channel.recovery.on_timeout(now, &channel.rtt, max_ack_delay) {
            loss::TimeoutOutcome::Nothing => {}
            loss::TimeoutOutcome::Lost { lost, persistent } => {
                self.on_packets_lost(now, id, lost, persistent);
                self.trace_metrics(now, id, None);
            }
            loss::TimeoutOutcome::ProbeTimeout => self.on_probe_timeout(now, id),
        }
    }

    /// Timeout of the semantic layer's safety net: well above an end-to-end round trip on the slowest channel.
    fn semantic_rto(&self) -> Duration {
        let max_ack_delay = self.config.max_ack_delay;
        self.channels
            .values()
            .filter(|channel| channel.state == ChannelState::Active)
            .map(|channel| channel.rtt.pto_base(max_ack_delay) * 2)
            .max()
            .unwrap_or(self.config.initial_rtt * 3)
    }

    /// Three probe timeouts of the slowest channel: how long old keys and closing state are kept.
    pub(super) fn three_ptos(&self) -> Duration {
        let max_ack_delay = self.config.max_ack_delay;
        self.channels
            .values()
            .map(|channel| channel.rtt.pto_base(max_ack_delay))
            .max()
            .unwrap_or(self.config.initial_rtt)
            * 3
    }
}

/// PATH_CHALLENGEs sent for one validation before giving up.
const MAX_CHALLENGES: u32 = 4;
