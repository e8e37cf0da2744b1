//! One tng connection: the isolation layer (Noise handshake, packet protection, replay protection), one flow layer
//! per channel, and the semantic layer on top, all driven by the [`crate::Endpoint`] that owns it.
//!
//! Module map: `establish` runs the handshake, `recv` opens packets and dispatches frames, `send` assembles
//! packets (probes, ACKs, tail-loss probes, scheduled data), `channel` holds one path's flow state, `loss`, `rtt`,
//! `pacing`, `received` and `replay` are its parts, `crypto` seals and opens packets.

mod channel;
mod crypto;
mod establish;
mod handshake;
mod loss;
mod pacing;
mod received;
mod recv;
mod replay;
mod rtt;
mod send;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;

use crate::cc::CcKind;
use crate::config::{HostPolicy, TailLossMode, TransportConfig};
use crate::error::ConnectionError;
use crate::identity::Identity;
use crate::scheduler::{self, Scheduler, SchedulerKind};
use crate::streams::{ReadOutcome, Side, StreamError, StreamEvent, StreamId, StreamStats, Streams};
use crate::time::Time;

pub use channel::{ChannelState, ChannelStats};
pub use received::EcnCodepoint;

pub(crate) use establish::{ClientHandshake, ServerHandshake};

use channel::Channel;
use crypto::PacketProtection;
use loss::ControlFrame;
use pacing::Pacer;

/// Identifies a connection within its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionHandle(pub u64);

impl std::fmt::Display for ConnectionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// Something the application should know about a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The handshake finished; `peer` is the authenticated identity of the other end.
    Connected { peer: Identity },
    /// The handshake failed; the connection is gone.
    HandshakeFailed { reason: ConnectionError },
    /// The peer opened a stream (also returned by [`Connection::accept_stream`]).
    StreamOpened(StreamId),
    /// A stream has bytes (or its end) to read; read until `Blocked` to re-arm.
    StreamReadable(StreamId),
    /// A stream whose write was refused or cut short takes data again.
    StreamWritable(StreamId),
    /// The peer acknowledged every byte and the end of a stream we finished.
    StreamFinished(StreamId),
    /// The peer abandoned its sending half of a stream.
    StreamReset { id: StreamId, error_code: u64 },
    /// The peer asked us to stop sending on a stream; its sending half was reset.
    StreamStopped { id: StreamId, error_code: u64 },
    /// The peer raised its stream limit after [`Connection::open_stream`] had been refused.
    StreamsAvailable,
    /// A channel was validated (or came back) and carries data.
    ChannelUp(u8),
    /// A channel lost liveness or was removed; its data moves to the other channels.
    ChannelDown(u8),
    /// The connection ended; the handle stays valid until the endpoint drops it after draining.
    Closed { reason: ConnectionError },
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Send from this local address (the socket bound to it).
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The ECN codepoint to set in the IP header.
    pub ecn: Option<EcnCodepoint>,
    pub payload: Vec<u8>,
}

/// A snapshot of a connection's counters and flow state.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionStats {
    pub connection_id: u64,
    pub established: bool,
    pub channels: Vec<ChannelStats>,
    pub streams: StreamStats,
    /// Key updates initiated or followed.
    pub key_updates: u64,
    pub scheduler: SchedulerKind,
    pub tail_loss: TailLossMode,
    /// Bytes held back by the anti-amplification limit.
    pub amplification_limited_bytes: u64,
}

/// Where the connection is in its life.
#[derive(Debug)]
enum State {
    /// Client: stage 1 sent, waiting for stage 2 (or a RETRY).
    ClientHello(ClientHandshake),
    /// Client: stage 2 read; stage 3 is built at the next transmit so that data written in reaction to `Connected`
    /// rides in it.
    ClientFinishDue(ClientHandshake),
    /// Server: stage 2 sent, waiting for stage 3.
    ServerHello(ServerHandshake),
    Established,
    /// We closed: CLOSE packets answer whatever still arrives until `until`.
    Closing {
        until: Time,
    },
    /// The peer closed: silence until `until`.
    Draining {
        until: Time,
    },
    /// Gone; the endpoint drops it.
    Drained,
}

/// The client's stage-3 datagram, repeated until the server proves it has the keys (any packet it seals).
#[derive(Debug)]
struct UnconfirmedFinish {
    datagram: Vec<u8>,
    /// Sent at the next transmit.
    due: bool,
    resend_at: Time,
    attempts: u32,
}

/// One connection, owned by an [`crate::Endpoint`].
#[derive(Debug)]
pub struct Connection {
    side: Side,
    config: TransportConfig,
    connection_id: u64,
    state: State,
    protection: Option<PacketProtection>,
    channels: BTreeMap<u8, Channel>,
    /// Client: paths whose channels open right after the handshake.
    planned_paths: Vec<(SocketAddr, SocketAddr)>,
    /// Client: the next channel id to allocate (ids are never reused).
    next_channel_id: Option<u8>,
    /// Server: channel ids the peer abandoned, never revived by a late packet.
    abandoned: [u64; 4],
    finish: Option<UnconfirmedFinish>,
    streams: Option<Streams>,
    accepted: VecDeque<StreamId>,
    scheduler: Box<dyn Scheduler>,
    scheduler_kind: SchedulerKind,
    tail_loss: TailLossMode,
    cc_default: CcKind,
    cc_per_channel: BTreeMap<u8, CcKind>,
    /// Per-channel weights for the weighted scheduler (1 when absent).
    weights: BTreeMap<u8, u32>,
    /// Aggregate rate cap over all channels, as a pacer.
    rate_cap: Option<(u64, Pacer)>,
    peer_identity: Option<Identity>,
    /// Error code and reason of our CLOSE, once closing.
    close_frame: Option<(u64, String)>,
    control: VecDeque<ControlFrame>,
    events: VecDeque<Event>,
    rng: ChaCha20Rng,
    handshake_deadline: Time,
    /// Server: digest of the stage-3 Noise message, to recognise the client repeating it.
    finish_digest: Option<[u8; 32]>,
    /// Client: the RTT stage 1 -> stage 2 measured (none if stage 1 was repeated), channel 0's first sample.
    handshake_rtt: Option<Duration>,
    /// The latest time the caller passed in.
    now: Time,
    last_activity: Time,
    /// Round-robin position for control packets across channels.
    cursor: u8,
    amplification_limited_bytes: u64,
}

impl Connection {
    fn new(
        now: Time,
        side: Side,
        config: TransportConfig,
        connection_id: u64,
        state: State,
        rng: ChaCha20Rng,
    ) -> Connection {
        let scheduler_kind = config.scheduler;
        Connection {
            side,
            connection_id,
            state,
            protection: None,
            channels: BTreeMap::new(),
            planned_paths: Vec::new(),
            next_channel_id: Some(0),
            abandoned: [0; 4],
            finish: None,
            streams: None,
            accepted: VecDeque::new(),
            scheduler: scheduler::new_scheduler(scheduler_kind),
            scheduler_kind,
            tail_loss: config.tail_loss,
            cc_default: config.cc,
            cc_per_channel: BTreeMap::new(),
            weights: BTreeMap::new(),
            rate_cap: None,
            peer_identity: None,
            close_frame: None,
            control: VecDeque::new(),
            events: VecDeque::new(),
            rng,
            handshake_deadline: now + config.handshake_timeout,
            handshake_rtt: None,
            finish_digest: None,
            now,
            last_activity: now,
            cursor: 0,
            amplification_limited_bytes: 0,
            config,
        }
    }

    // -------------------------------------------------------------------------------------------------------------
    // Application API.

    /// Opens a stream. Before the handshake delivered the peer's limits, the peer allows no stream yet.
    pub fn open_stream(&mut self) -> Result<StreamId, StreamError> {
        let result = self.streams_mut()?.open();
        self.pull_stream_events();
        result
    }

    /// A stream the peer opened, oldest first.
    pub fn accept_stream(&mut self) -> Option<StreamId> {
        self.pull_stream_events();
        self.accepted.pop_front()
    }

    /// Buffers as much of `data` as the send buffers take; returns how much that was.
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        let result = self.streams_mut()?.write(id, data);
        self.pull_stream_events();
        result
    }

    /// Ends the sending half of a stream after what was written.
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamError> {
        let result = self.streams_mut()?.finish(id);
        self.pull_stream_events();
        result
    }

    /// Abandons the sending half of a stream.
    pub fn reset(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        let result = self.streams_mut()?.reset(id, error_code);
        self.pull_stream_events();
        result
    }

    /// Stops reading a stream and asks the peer to stop sending.
    pub fn stop_sending(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        let result = self.streams_mut()?.stop_sending(id, error_code);
        self.pull_stream_events();
        result
    }

    /// Reads in-order bytes of a stream.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, StreamError> {
        let result = self.streams_mut()?.read(id, buf);
        self.pull_stream_events();
        result
    }

    fn streams_mut(&mut self) -> Result<&mut Streams, StreamError> {
        self.streams.as_mut().ok_or(StreamError::StreamLimit { limit: 0 })
    }

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

    /// Applies a controller policy: congestion controller per channel (a channel whose controller kind or
    /// parameters change starts a fresh controller), scheduler and its weights, tail-loss mode and aggregate rate cap.
    pub fn set_policy(&mut self, policy: HostPolicy) {
        let mut parameters_changed = false;
        if let Some(cc_config) = policy.cc_config {
            let current = &self.config.cc_config;
            parameters_changed =
                cc_config.queue_threshold != current.queue_threshold || cc_config.copa_delta != current.copa_delta;
            self.config.cc_config = cc_config;
        }
        if let Some(kind) = policy.cc {
            self.cc_default = kind;
        }
        self.cc_per_channel = policy.cc_per_channel;
        self.weights = policy.weights;
        if let Some(kind) = policy.scheduler {
            if kind != self.scheduler_kind {
                self.scheduler = scheduler::new_scheduler(kind);
                self.scheduler_kind = kind;
            }
        }
        if let Some(mode) = policy.tail_loss {
            self.tail_loss = mode;
        }
        self.rate_cap = policy.rate_cap.map(|rate| {
            let pacer = match self.rate_cap.take() {
                Some((_, pacer)) => pacer,
                None => Pacer::new(self.now, self.max_datagram_size()),
            };
            (rate.max(1), pacer)
        });
        let cc_config = self.cc_config();
        let now = self.now;
        for channel in self.channels.values_mut() {
            let kind = self.cc_per_channel.get(&channel.id).copied().unwrap_or(self.cc_default);
            if kind != channel.cc_kind || parameters_changed {
                channel.cc_kind = kind;
                channel.cc = crate::cc::new_controller(kind, &cc_config, now);
            }
        }
    }

    /// Counters and flow state of every channel and the streams.
    pub fn stats(&self) -> ConnectionStats {
        let mtu = self.max_datagram_size();
        ConnectionStats {
            connection_id: self.connection_id,
            established: self.protection.is_some(),
            channels: self.channels.values().map(|channel| channel.stats(mtu)).collect(),
            streams: self.streams.as_ref().map(Streams::stats).unwrap_or_default(),
            key_updates: self.protection.as_ref().map_or(0, PacketProtection::updates),
            scheduler: self.scheduler_kind,
            tail_loss: self.tail_loss,
            amplification_limited_bytes: self.amplification_limited_bytes,
        }
    }

    /// Bytes held back by the anti-amplification limit so far.
    pub fn amplification_limited_bytes(&self) -> u64 {
        self.amplification_limited_bytes
    }

    /// The authenticated identity of the peer, once the handshake revealed it.
    pub fn peer_identity(&self) -> Option<Identity> {
        self.peer_identity
    }

    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    pub fn side(&self) -> Side {
        self.side
    }

    /// Whether the handshake finished and the connection is not closing.
    pub fn is_established(&self) -> bool {
        matches!(self.state, State::Established | State::ClientFinishDue(_))
    }

    /// Whether the connection closed (it may still be draining).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closing { .. } | State::Draining { .. } | State::Drained)
    }

    pub(crate) fn is_drained(&self) -> bool {
        matches!(self.state, State::Drained)
    }

    /// Whether this is a server handshake still waiting for stage 3.
    pub(crate) fn is_pending_handshake(&self) -> bool {
        matches!(self.state, State::ServerHello(_))
    }

    /// Records the caller's clock; every entry point from the endpoint starts with it.
    pub(crate) fn advance(&mut self, now: Time) {
        self.now = self.now.max(now);
    }

    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.pull_stream_events();
        self.events.pop_front()
    }

    // -------------------------------------------------------------------------------------------------------------
    // Address changes (driven by the endpoint).

    /// The local address `old` became `new` (DHCP renewal, NAT rebinding seen locally, interface switch): channels
    /// bound to it move and are validated again from the new address, on a fresh flow state.
    pub(crate) fn local_address_changed(&mut self, now: Time, old: SocketAddr, new: SocketAddr) {
        for path in &mut self.planned_paths {
            if path.0 == old {
                path.0 = new;
            }
        }
        if let State::ClientHello(handshake) | State::ClientFinishDue(handshake) = &mut self.state {
            handshake.local_address_changed(old, new);
        }
        let moved: Vec<u8> = self.channels.values().filter(|c| c.local == old).map(|c| c.id).collect();
        let cc_config = self.cc_config();
        for id in moved {
            let token = self.random_token();
            if let Some(channel) = self.channels.get_mut(&id) {
                channel.local = new;
                // The new path is probably much like the old one: its RTT is the best first guess.
                let guess = channel.rtt.smoothed();
                let lost = channel.restart_flow(now, &cc_config, guess);
                let remote = channel.remote;
                self.release_lost(lost);
                self.begin_validation(id, token, (new, remote), None);
            }
        }
    }

    /// A new local address (a radio came up): a client opens a channel from it to every remote address in use; a
    /// server advertises it (NEW_ADDRESS) so that clients open channels to it.
    pub(crate) fn add_local_address(&mut self, now: Time, address: SocketAddr) {
        if !self.is_established() {
            return;
        }
        if self.side == Side::Server {
            self.control.push_back(ControlFrame::NewAddress(address));
            return;
        }
        let mut remotes: Vec<SocketAddr> = self.channels.values().map(|c| c.remote).collect();
        remotes.sort();
        remotes.dedup();
        for remote in remotes {
            if remote.is_ipv4() != address.is_ipv4() {
                continue;
            }
            if self.channels.values().any(|c| c.local == address && c.remote == remote) {
                continue;
            }
            self.open_channel(now, address, remote);
        }
    }

    /// A local address went away: its channels are abandoned (the peer is told on the remaining ones) and their
    /// data moves to the other channels.
    pub(crate) fn remove_local_address(&mut self, address: SocketAddr) {
        let gone: Vec<u8> = self.channels.values().filter(|c| c.local == address).map(|c| c.id).collect();
        for id in gone {
            self.control.push_back(ControlFrame::PathStatus { channel_id: id, status: tng_wire::PathStatus::Abandon });
            self.remove_channel(id);
        }
        self.planned_paths.retain(|path| path.0 != address);
    }

    // -------------------------------------------------------------------------------------------------------------
    // Channels.

    /// Client: opens a channel on a new path and starts validating it.
    fn open_channel(&mut self, now: Time, local: SocketAddr, remote: SocketAddr) -> Option<u8> {
        if self.channels.len() >= self.config.max_channels {
            return None;
        }
        let id = self.next_channel_id?;
        self.next_channel_id = id.checked_add(1);
        let channel = self.new_channel(now, id, local, remote, ChannelState::Validating);
        self.channels.insert(id, channel);
        let token = self.random_token();
        self.begin_validation(id, token, (local, remote), None);
        Some(id)
    }

    fn new_channel(&self, now: Time, id: u8, local: SocketAddr, remote: SocketAddr, state: ChannelState) -> Channel {
        let kind = self.cc_per_channel.get(&id).copied().unwrap_or(self.cc_default);
        Channel::new(now, id, local, remote, state, kind, &self.cc_config(), self.initial_rtt())
    }

    /// RTT assumed for a new channel: what the first channel measured if it did, else the configured guess.
    fn initial_rtt(&self) -> Duration {
        self.channels
            .values()
            .find(|channel| channel.rtt.has_sample())
            .map_or(self.config.initial_rtt, |channel| channel.rtt.smoothed().max(Duration::from_millis(1)))
    }

    /// Validates `local` -> `remote` for channel `id`: a PATH_CHALLENGE goes out at the next transmit and is
    /// repeated until answered. For the channel's own addresses (a new channel, or our own address change) the
    /// channel carries no data meanwhile; a migration target (the peer's packets came from elsewhere) is probed
    /// while the channel goes on where it was, within `budget` if the target may not be the peer's.
    fn begin_validation(
        &mut self,
        id: u8,
        token: [u8; 8],
        (local, remote): (SocketAddr, SocketAddr),
        budget: Option<channel::AmplificationBudget>,
    ) {
        let Some(channel) = self.channels.get_mut(&id) else { return };
        channel.challenge = Some(channel::Challenge { token, local, remote, attempts: 0, budget });
        channel.probe_pending = true;
        channel.probe_at = None;
        let own = (local, remote) == (channel.local, channel.remote);
        if own && channel.state == ChannelState::Active {
            channel.state = ChannelState::Validating;
        }
    }

    /// A channel lost liveness: everything in flight on it is handed back for retransmission elsewhere.
    fn channel_down(&mut self, now: Time, id: u8) {
        let reprobe = self.config.reprobe_interval;
        let Some(channel) = self.channels.get_mut(&id) else { return };
        if channel.state == ChannelState::Down {
            return;
        }
        let was_up = channel.was_up;
        channel.state = ChannelState::Down;
        channel.challenge = None;
        channel.probe_pending = false;
        channel.probe_at = Some(now + reprobe);
        let lost = channel.recovery.drain_all();
        channel.counters.lost_packets += lost.len() as u64;
        self.release_lost(lost);
        if was_up {
            self.events.push_back(Event::ChannelDown(id));
        }
    }

    fn remove_channel(&mut self, id: u8) {
        let Some(mut channel) = self.channels.remove(&id) else { return };
        let lost = channel.recovery.drain_all();
        self.release_lost(lost);
        if self.side == Side::Server {
            self.mark_abandoned(id);
        }
        if channel.state == ChannelState::Active || channel.was_up {
            self.events.push_back(Event::ChannelDown(id));
        }
    }

    fn mark_abandoned(&mut self, id: u8) {
        if let Some(word) = self.abandoned.get_mut(usize::from(id / 64)) {
            *word |= 1 << (id % 64);
        }
    }

    fn is_abandoned(&self, id: u8) -> bool {
        self.abandoned.get(usize::from(id / 64)).is_some_and(|word| word & (1 << (id % 64)) != 0)
    }

    /// Hands the stream chunks and control frames of lost packets back to their owners.
    fn release_lost(&mut self, lost: Vec<loss::SentPacket>) {
        for packet in lost {
            if let Some(streams) = self.streams.as_mut() {
                for chunk in &packet.chunks {
                    streams.on_chunk_lost(chunk);
                }
            }
            for frame in packet.control {
                let still_relevant = match &frame {
                    ControlFrame::PathStatus { channel_id, status } => {
                        *status == tng_wire::PathStatus::Abandon || self.channels.contains_key(channel_id)
                    }
                    ControlFrame::NewAddress(_) => true,
                };
                if still_relevant {
                    self.control.push_back(frame);
                }
            }
        }
    }

    // -------------------------------------------------------------------------------------------------------------
    // Timers.

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
            loss::TimeoutOutcome::Lost { lost, persistent } => self.on_packets_lost(now, id, lost, persistent),
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
    fn three_ptos(&self) -> Duration {
        let max_ack_delay = self.config.max_ack_delay;
        self.channels
            .values()
            .map(|channel| channel.rtt.pto_base(max_ack_delay))
            .max()
            .unwrap_or(self.config.initial_rtt)
            * 3
    }

    // -------------------------------------------------------------------------------------------------------------
    // Closing.

    fn enter_closing(&mut self, now: Time, error_code: u64, reason: String, error: ConnectionError) {
        self.close_frame = Some((error_code, reason));
        for channel in self.channels.values_mut() {
            channel.close_pending = channel.state != ChannelState::Down;
        }
        self.state = State::Closing { until: now + self.three_ptos() };
        self.events.push_back(Event::Closed { reason: error });
    }

    fn enter_draining(&mut self, now: Time, error: ConnectionError) {
        self.state = State::Draining { until: now + self.three_ptos() };
        self.events.push_back(Event::Closed { reason: error });
    }

    /// The peer broke the protocol: close with an error it can read.
    fn protocol_violation(&mut self, now: Time, what: String) {
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
    fn fail(&mut self, error: ConnectionError) {
        let event = if self.peer_identity.is_some() && !matches!(error, ConnectionError::IdentityMismatch { .. }) {
            Event::Closed { reason: error }
        } else {
            Event::HandshakeFailed { reason: error }
        };
        self.events.push_back(event);
        self.state = State::Drained;
    }

    // -------------------------------------------------------------------------------------------------------------
    // Helpers.

    fn pull_stream_events(&mut self) {
        let Some(streams) = self.streams.as_mut() else { return };
        while let Some(event) = streams.poll_event() {
            let event = match event {
                StreamEvent::Opened => {
                    while let Some(id) = streams.accept() {
                        self.accepted.push_back(id);
                        self.events.push_back(Event::StreamOpened(id));
                    }
                    continue;
                }
                StreamEvent::Readable(id) => Event::StreamReadable(id),
                StreamEvent::Writable(id) => Event::StreamWritable(id),
                StreamEvent::Finished(id) => Event::StreamFinished(id),
                StreamEvent::Reset { id, error_code } => Event::StreamReset { id, error_code },
                StreamEvent::Stopped { id, error_code } => Event::StreamStopped { id, error_code },
                StreamEvent::Available => Event::StreamsAvailable,
            };
            self.events.push_back(event);
        }
    }

    fn random_token(&mut self) -> [u8; 8] {
        let mut token = [0; 8];
        self.rng.fill_bytes(&mut token);
        token
    }

    fn max_datagram_size(&self) -> u64 {
        self.config.max_datagram_size.clamp(MIN_DATAGRAM_SIZE, tng_wire::MAX_PACKET) as u64
    }

    fn cc_config(&self) -> crate::cc::CcConfig {
        crate::cc::CcConfig { max_datagram_size: self.max_datagram_size(), ..self.config.cc_config.clone() }
    }
}

/// PATH_CHALLENGEs sent for one validation before giving up.
const MAX_CHALLENGES: u32 = 4;
/// Error code of a CLOSE caused by a peer's protocol violation.
const PROTOCOL_VIOLATION: u64 = 0x0a;
/// Smallest datagram size the configuration may ask for: room for the header, a tag and a useful payload.
const MIN_DATAGRAM_SIZE: usize = 200;
