//! One tng connection: the isolation layer (Noise handshake, packet protection, replay protection), one flow layer
//! per channel, and the semantic layer on top, all driven by the [`crate::Endpoint`] that owns it.
//!
//! Module map: `establish` runs the handshake, `recv` opens packets and dispatches frames, `send` assembles
//! packets (probes, ACKs, tail-loss probes, scheduled data), `paths` opens, validates and removes channels as
//! addresses come and go, `timers` runs every deadline, `closing` ends the connection; `channel` holds one path's
//! flow state, `loss`, `rtt`, `pacing`, `received` and `replay` are its parts, `crypto` seals and opens packets;
//! `trace` builds the qlog events that need channel state.

mod channel;
mod closing;
mod crypto;
mod establish;
mod handshake;
mod loss;
mod pacing;
mod paths;
mod received;
mod recv;
mod replay;
mod rtt;
pub use rtt::RttEstimator;
mod send;
mod timers;
mod trace;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;

use crate::cc::CcKind;
use crate::config::{HostPolicy, TailLossMode, TransportConfig};
use crate::error::ConnectionError;
use crate::identity::Identity;
use crate::qlog::{Qlog, QlogEvent, TraceStart};
use crate::scheduler::{self, ChannelView, Scheduler, SchedulerKind};
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

/// A datagram to send, written at the end of the caller's buffer: its bytes are the buffer's last `size` bytes. A
/// driver that batches (GSO) lets datagrams to one destination pile up in one buffer and copies none of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Send from this local address (the socket bound to it).
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The ECN codepoint to set in the IP header.
    pub ecn: Option<EcnCodepoint>,
    pub size: usize,
}

/// A datagram with bytes of its own, for callers that keep datagrams apart (queues, simulators, tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// Send from this local address (the socket bound to it).
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The ECN codepoint to set in the IP header.
    pub ecn: Option<EcnCodepoint>,
    pub payload: Vec<u8>,
}

impl Datagram {
    /// The datagram `transmit` wrote at the end of `buf`, taken out of it.
    pub fn split_from(transmit: Transmit, buf: &mut Vec<u8>) -> Datagram {
        let payload = buf.split_off(buf.len() - transmit.size);
        Datagram { local: transmit.local, remote: transmit.remote, ecn: transmit.ecn, payload }
    }

    /// Appends the bytes to `buf` and says where they go.
    pub fn write_to(&self, buf: &mut Vec<u8>) -> Transmit {
        buf.extend_from_slice(&self.payload);
        Transmit { local: self.local, remote: self.remote, ecn: self.ecn, size: self.payload.len() }
    }
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
    /// Boxed: a map node has room for eleven values, and most connections have one or two channels.
    channels: BTreeMap<u8, Box<Channel>>,
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
    /// What the scheduler is shown of each channel, rebuilt for every data packet in this reused buffer.
    channel_views: Vec<ChannelView>,
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
    qlog: Qlog,
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
            channel_views: Vec::new(),
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
            qlog: Qlog::default(),
            config,
        }
    }

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

    /// Buffers as much of `data`, written at `now`, as the send buffers and the unsent bound take; returns how much
    /// that was. A refused or partial write is resumed on [`Event::StreamWritable`].
    pub fn write(&mut self, now: Time, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        self.advance(now);
        self.refresh_unsent_limit();
        let result = self.streams_mut()?.write(now, id, data);
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
        let active = self.channels.values().filter(|channel| channel.state == ChannelState::Active);
        let longest_round_trip = active.map(|channel| channel.rtt.smoothed()).max();
        let streams = self.streams_mut()?;
        if let Some(round_trip) = longest_round_trip {
            streams.set_round_trip(round_trip);
        }
        let result = streams.read(id, buf);
        self.pull_stream_events();
        result
    }

    fn streams_mut(&mut self) -> Result<&mut Streams, StreamError> {
        self.streams.as_mut().ok_or(StreamError::StreamLimit { limit: 0 })
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
                channel.set_controller(kind, &cc_config, now);
                if let Some(sink) = self.qlog.sink() {
                    let event = QlogEvent::ControllerUpdated {
                        channel: channel.id,
                        controller: kind.name(),
                        trigger: "policy",
                    };
                    sink.emit(now, &event);
                }
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

    #[inline]
    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.pull_stream_events();
        let event = self.events.pop_front()?;
        if self.qlog.is_on() {
            self.trace_event(&event);
        }
        Some(event)
    }

    /// Starts tracing if the configuration asks for it; `original_connection_id` is the client's provisional id.
    fn start_qlog(&mut self, original_connection_id: u64, (local, remote): (SocketAddr, SocketAddr)) {
        let trace = TraceStart {
            side: self.side,
            original_connection_id,
            connection_id: self.connection_id,
            local,
            remote,
            now: self.now,
        };
        self.qlog = Qlog::start(self.config.qlog.as_ref(), &trace);
    }

    /// The trace's view of an application event: connection state and channel changes, at the time it leaves.
    #[cold]
    fn trace_event(&mut self, event: &Event) {
        let now = self.now;
        let Some(sink) = self.qlog.sink() else { return };
        match event {
            Event::Connected { .. } => {
                sink.emit(now, &QlogEvent::ConnectionStateUpdated(crate::qlog::ConnectionState::HandshakeComplete))
            }
            Event::HandshakeFailed { .. } | Event::Closed { .. } => {
                sink.emit(now, &QlogEvent::ConnectionStateUpdated(crate::qlog::ConnectionState::Closed))
            }
            Event::ChannelUp(id) | Event::ChannelDown(id) => {
                let (local, remote, state) = match self.channels.get(id) {
                    Some(channel) => (channel.local, channel.remote, channel.state),
                    None => return sink.emit(now, &QlogEvent::ChannelRemoved { channel: *id }),
                };
                sink.emit(now, &QlogEvent::ChannelUpdated { channel: *id, local, remote, state });
            }
            _ => {}
        }
    }

    fn pull_stream_events(&mut self) {
        self.refresh_unsent_limit();
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

    /// Channel `id`'s share of the connection's sending rate: its window over its smoothed RTT against the sum of
    /// that over the channels that carry data (1 for the only one). Delay-based controllers keep this share of
    /// their queue target ([`crate::cc::CongestionController::set_rate_share`]).
    fn rate_share(&self, id: u8) -> f64 {
        if self.channels.len() == 1 {
            return 1.0;
        }
        let rate = |channel: &Channel| channel.cc.window() as f64 / channel.rtt.smoothed().as_secs_f64().max(1e-6);
        let Some(own) = self.channels.get(&id).filter(|channel| channel.carries_data()).map(|c| rate(c)) else {
            return 1.0;
        };
        let total: f64 = self.channels.values().filter(|channel| channel.carries_data()).map(|c| rate(c)).sum();
        if total > 0.0 {
            own / total
        } else {
            1.0
        }
    }

    /// Moves the streams' unsent bound with the channels' congestion windows: [`StreamConfig::unsent_windows`]
    /// windows of every channel that carries data, and never less than two datagrams, so that a write always fits.
    ///
    /// [`StreamConfig::unsent_windows`]: crate::streams::StreamConfig::unsent_windows
    fn refresh_unsent_limit(&mut self) {
        let windows = self.config.streams.unsent_windows;
        let floor = 2 * self.max_datagram_size();
        let active = self.channels.values().filter(|channel| channel.state == ChannelState::Active);
        let sum_of_windows = active.map(|channel| channel.cc.window()).fold(0u64, u64::saturating_add);
        let limit = windows.map(|windows| sum_of_windows.saturating_mul(u64::from(windows)).max(floor));
        if let Some(streams) = self.streams.as_mut() {
            streams.set_unsent_limit(limit);
        }
    }

    fn random_token(&mut self) -> [u8; 8] {
        let mut token = [0; 8];
        self.rng.fill_bytes(&mut token);
        token
    }

    /// The channels to `remote` go through a relay's section with room for `packets` more data packets (None: they
    /// do not, and their own controllers govern again); false if no channel goes to `remote`.
    pub(crate) fn set_section_room(&mut self, remote: SocketAddr, packets: Option<u64>) -> bool {
        let mut found = false;
        for channel in self.channels.values_mut().filter(|channel| channel.remote == remote) {
            channel.section_room = packets;
            channel.received.set_relayed(packets.is_some());
            found = true;
        }
        found
    }

    /// Traces the relay section the channels toward `section.remote` go through, if this connection is traced.
    pub(crate) fn trace_section(&mut self, section: &crate::qlog::SectionMetrics) {
        let now = self.now;
        if let Some(sink) = self.qlog.sink() {
            sink.emit(now, &QlogEvent::SectionUpdated(*section));
        }
    }

    /// Sends no datagram larger than `size` bytes from now on (never above the configured size).
    pub(crate) fn limit_datagram_size(&mut self, size: usize) {
        self.config.max_datagram_size = self.config.max_datagram_size.min(size);
    }

    fn max_datagram_size(&self) -> u64 {
        self.config.max_datagram_size.clamp(MIN_DATAGRAM_SIZE, tng_wire::MAX_PACKET) as u64
    }

    fn cc_config(&self) -> crate::cc::CcConfig {
        crate::cc::CcConfig { max_datagram_size: self.max_datagram_size(), ..self.config.cc_config.clone() }
    }
}

/// Smallest datagram size the configuration may ask for: room for the header, a tag and a useful payload.
const MIN_DATAGRAM_SIZE: usize = 200;
