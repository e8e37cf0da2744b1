//! The handshake as the connection runs it (wire-format section 5): INITIAL stages 1-3, RETRY, the transport
//! parameters inside the Noise payloads, identity pinning, anti-amplification, and confirmation.
//!
//! Noise payloads (encrypted from message 2 on):
//! - message 1: empty (nothing is secret yet);
//! - message 2: the server-chosen connection id (8 bytes), then the server's stream limits (three varints);
//! - message 3: the client's stream limits (three varints), then the client's first frames.

use std::net::SocketAddr;
use std::time::Duration;

use blake2::{Blake2s256, Digest};
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;
use tng_wire::{varint, Feedback, Flags, Frame, Packet, Payload, Stage, HEADER_LEN, MAX_PACKET};

use super::channel::{AmplificationBudget, ChannelState};
use super::handshake::{Handshake, NOISE_OVERHEAD};
use super::{Connection, Event, State, Transmit, UnconfirmedFinish};
use crate::config::TransportConfig;
use crate::endpoint::DropReason;
use crate::error::{ConnectError, ConnectionError};
use crate::identity::{Identity, StaticKeypair};
use crate::qlog::QlogEvent;
use crate::streams::{Side, StreamLimits, Streams};
use crate::time::Time;

/// RETRYs a client follows per connection attempt: more means someone is bouncing it around.
const MAX_RETRIES: u32 = 3;
/// `stage`, `token_length`, `noise_length`.
const INITIAL_PREFIX_LEN: usize = 5;

/// Client handshake state until stage 3 leaves.
#[derive(Debug)]
pub(crate) struct ClientHandshake {
    noise: Handshake,
    provisional_id: u64,
    local: SocketAddr,
    remote: SocketAddr,
    hello: Vec<u8>,
    token: Vec<u8>,
    retries: u32,
    pin: Option<Identity>,
    hello_due: bool,
    first_sent: Option<Time>,
    /// Stage 1 was sent more than once (or retried): its answer gives no clean RTT sample.
    ambiguous: bool,
    pub(super) resend_at: Time,
    resend_interval: Duration,
    attempts: u32,
}

impl ClientHandshake {
    /// The retransmission timer fired: stage 1 goes out again, the timer backs off.
    pub(super) fn schedule_resend(&mut self, now: Time) {
        self.hello_due = true;
        self.ambiguous = true;
        self.attempts += 1;
        self.resend_at = now + self.resend_interval * (1u32 << self.attempts.min(6));
    }

    pub(super) fn local_address_changed(&mut self, old: SocketAddr, new: SocketAddr) {
        if self.local == old {
            self.local = new;
        }
    }
}

/// Server handshake state until stage 3 arrives.
#[derive(Debug)]
pub(crate) struct ServerHandshake {
    noise: Handshake,
    local: SocketAddr,
    remote: SocketAddr,
    /// The stage-2 datagram, repeated when stage 1 is repeated.
    reply: Vec<u8>,
    reply_due: bool,
    /// `None` once the client's address is validated (by a retry token).
    budget: Option<AmplificationBudget>,
}

fn encode_limits(limits: &StreamLimits, out: &mut Vec<u8>) {
    // StreamConfig::limits keeps every value below the varint maximum.
    for value in [limits.max_streams, limits.max_data, limits.max_stream_data] {
        varint::encode(value.min(varint::MAX), out);
    }
}

fn decode_limits(bytes: &[u8]) -> Option<(StreamLimits, usize)> {
    let (max_streams, a) = varint::decode(bytes)?;
    let (max_data, b) = varint::decode(bytes.get(a..)?)?;
    let (max_stream_data, c) = varint::decode(bytes.get(a + b..)?)?;
    Some((StreamLimits { max_streams, max_data, max_stream_data }, a + b + c))
}

fn initial_datagram(connection_id: u64, stage: Stage, token: &[u8], noise: &[u8]) -> Option<Vec<u8>> {
    let packet = Packet {
        flags: Flags::EMPTY,
        channel_id: 0,
        connection_id,
        packet_number: 0,
        feedback: Feedback::NEUTRAL,
        payload: Payload::Initial(tng_wire::Handshake::new(stage, token, noise)),
    };
    let mut datagram = Vec::with_capacity(packet.encoded_len());
    packet.encode(&mut datagram).ok()?;
    Some(datagram)
}

impl Connection {
    /// A client connection: stage 1 goes out on `paths[0]` at the next transmit.
    pub(crate) fn connect(
        now: Time,
        config: TransportConfig,
        keypair: &StaticKeypair,
        mut rng: ChaCha20Rng,
        paths: &[(SocketAddr, SocketAddr)],
        pin: Option<Identity>,
        provisional_id: u64,
    ) -> Result<Connection, ConnectError> {
        let &(local, remote) = paths.first().ok_or(ConnectError::NoPaths)?;
        if paths.len() > config.max_channels {
            return Err(ConnectError::TooManyPaths { given: paths.len(), max: config.max_channels });
        }
        if let Some(duplicate) = (1..paths.len()).find(|&i| paths[..i].contains(&paths[i])) {
            return Err(ConnectError::DuplicatePath(duplicate));
        }
        let mut seed = [0; 32];
        rng.fill_bytes(&mut seed);
        let mut noise = Handshake::initiator(keypair, provisional_id, seed)
            .map_err(|error| ConnectError::Handshake(error.to_string()))?;
        let hello = noise.write(&[]).map_err(|error| ConnectError::Handshake(error.to_string()))?;
        let resend_interval = config.initial_rtt * 3;
        let handshake = ClientHandshake {
            noise,
            provisional_id,
            local,
            remote,
            hello,
            token: Vec::new(),
            retries: 0,
            pin,
            hello_due: true,
            first_sent: None,
            ambiguous: false,
            resend_at: now + resend_interval,
            resend_interval,
            attempts: 0,
        };
        let mut connection =
            Connection::new(now, Side::Client, config, provisional_id, State::ClientHello(handshake), rng);
        connection.planned_paths = paths.to_vec();
        connection.start_qlog(provisional_id, (local, remote));
        Ok(connection)
    }

    /// A server connection for a stage-1 INITIAL: reads message 1 and prepares stage 2. `validated` when a retry
    /// token proved the client's address.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        now: Time,
        config: TransportConfig,
        keypair: &StaticKeypair,
        mut rng: ChaCha20Rng,
        (local, remote): (SocketAddr, SocketAddr),
        provisional_id: u64,
        connection_id: u64,
        hello: &[u8],
        datagram_len: usize,
        validated: bool,
    ) -> Result<Connection, DropReason> {
        let mut seed = [0; 32];
        rng.fill_bytes(&mut seed);
        let mut noise = Handshake::responder(keypair, provisional_id, seed).map_err(|_| DropReason::HandshakeFailed)?;
        noise.read(hello).map_err(|_| DropReason::HandshakeFailed)?;
        let mut payload = connection_id.to_be_bytes().to_vec();
        encode_limits(&config.streams.limits(), &mut payload);
        let message = noise.write(&payload).map_err(|_| DropReason::HandshakeFailed)?;
        let reply =
            initial_datagram(provisional_id, Stage::ServerHello, &[], &message).ok_or(DropReason::HandshakeFailed)?;
        let budget = (!validated).then_some(AmplificationBudget { received: datagram_len as u64, sent: 0 });
        let handshake = ServerHandshake { noise, local, remote, reply, reply_due: true, budget };
        let mut connection =
            Connection::new(now, Side::Server, config, connection_id, State::ServerHello(handshake), rng);
        connection.start_qlog(provisional_id, (local, remote));
        Ok(connection)
    }

    /// Client: the server's RETRY for our provisional id. Followed at most [`MAX_RETRIES`] times, and only before
    /// stage 2: a RETRY is unauthenticated.
    pub(crate) fn handle_retry(&mut self, token: &[u8]) -> Result<(), DropReason> {
        let State::ClientHello(handshake) = &mut self.state else {
            return Err(DropReason::Unexpected);
        };
        if handshake.retries >= MAX_RETRIES || token.is_empty() {
            return Err(DropReason::Unexpected);
        }
        handshake.retries += 1;
        handshake.token = token.to_vec();
        handshake.hello_due = true;
        handshake.ambiguous = true;
        Ok(())
    }

    /// Client: stage 2. Checks the pinned identity, learns the server's connection id and limits.
    pub(crate) fn handle_server_hello(&mut self, now: Time, message: &[u8]) -> Result<(), DropReason> {
        let State::ClientHello(handshake) = &mut self.state else {
            // A repeated stage 2 after ours crossed it: nothing new.
            return Err(DropReason::Unexpected);
        };
        // A forged stage 2 fails here without touching the handshake (snow restores its transcript).
        let payload = handshake.noise.read(message).map_err(|_| DropReason::HandshakeFailed)?;
        let server_id = payload.get(..8).and_then(|id| id.try_into().ok()).map(u64::from_be_bytes);
        let limits = payload.get(8..).and_then(decode_limits);
        let identity = handshake.noise.remote_identity();
        let (Some(server_id), Some((limits, _)), Ok(identity)) = (server_id, limits, identity) else {
            self.fail(ConnectionError::Handshake("malformed server handshake payload".into()));
            return Ok(());
        };
        if let Some(pinned) = handshake.pin.filter(|pinned| *pinned != identity) {
            self.fail(ConnectionError::IdentityMismatch { actual: identity, pinned });
            return Ok(());
        }
        let hello_rtt = handshake.first_sent.filter(|_| !handshake.ambiguous).map(|sent| now.saturating_since(sent));
        self.handshake_rtt = hello_rtt;
        if let Some(sink) = self.qlog.sink() {
            sink.emit(now, &QlogEvent::ConnectionIdUpdated { old: self.connection_id, new: server_id });
        }
        self.connection_id = server_id;
        self.peer_identity = Some(identity);
        self.streams = Some(Streams::new(Side::Client, self.config.streams.clone(), limits));
        self.last_activity = now;
        self.state = match std::mem::replace(&mut self.state, State::Drained) {
            State::ClientHello(handshake) => State::ClientFinishDue(handshake),
            other => other,
        };
        self.events.push_back(Event::Connected { peer: identity });
        Ok(())
    }

    /// Server: stage 3. Finishes the handshake, opens channel 0 on the address it came from and confirms with a
    /// PING (an ack-eliciting packet, so loss recovery repeats it until the client has it).
    pub(crate) fn handle_client_finish(
        &mut self,
        now: Time,
        (local, remote): (SocketAddr, SocketAddr),
        message: &[u8],
        datagram_len: usize,
    ) -> Result<(), DropReason> {
        if let Some(digest) = self.finish_digest {
            return self.handle_repeated_finish(digest, local, remote, message, datagram_len);
        }
        let State::ServerHello(handshake) = &mut self.state else {
            return Err(DropReason::Unexpected);
        };
        let payload = handshake.noise.read(message).map_err(|_| DropReason::HandshakeFailed)?;
        let Ok(identity) = handshake.noise.remote_identity() else {
            return Err(DropReason::HandshakeFailed);
        };
        let Some((limits, used)) = decode_limits(&payload) else {
            self.fail(ConnectionError::Handshake("malformed client handshake payload".into()));
            return Ok(());
        };
        let State::ServerHello(handshake) = std::mem::replace(&mut self.state, State::Established) else {
            return Err(DropReason::Unexpected);
        };
        let protection = match handshake.noise.into_protection() {
            Ok(protection) => protection,
            Err(error) => {
                self.fail(ConnectionError::Handshake(error.to_string()));
                return Ok(());
            }
        };
        self.protection = Some(protection);
        self.finish_digest = Some(Blake2s256::digest(message).into());
        self.peer_identity = Some(identity);
        self.streams = Some(Streams::new(Side::Server, self.config.streams.clone(), limits));
        self.last_activity = now;
        let mut channel = self.new_channel(now, 0, local, remote, ChannelState::Active);
        channel.ping_pending = true;
        channel.last_received = now;
        self.channels.insert(0, Box::new(channel));
        if let Some(sink) = self.qlog.sink() {
            // Born validated by the handshake: no ChannelUp event announces it.
            sink.emit(now, &QlogEvent::ChannelUpdated { channel: 0, local, remote, state: ChannelState::Active });
        }
        self.events.push_back(Event::Connected { peer: identity });
        self.handle_handshake_frames(now, payload.get(used..).unwrap_or_default());
        Ok(())
    }

    /// Server: the client repeated stage 3, so it has not heard from us: confirm again. If it now sends from
    /// elsewhere (it moved while unconfirmed), our packets go to an address it left: validate the new one, within
    /// the anti-amplification budget (the INITIAL's padding and header are not authenticated, so the address may be
    /// spoofed). Anything but the exact Noise message of the handshake changes nothing.
    fn handle_repeated_finish(
        &mut self,
        digest: [u8; 32],
        local: SocketAddr,
        remote: SocketAddr,
        message: &[u8],
        datagram_len: usize,
    ) -> Result<(), DropReason> {
        let repeated: [u8; 32] = Blake2s256::digest(message).into();
        if repeated != digest || !matches!(self.state, State::Established) {
            return Err(DropReason::Unexpected);
        }
        let token = self.random_token();
        let Some(channel) = self.channels.get_mut(&0) else { return Ok(()) };
        channel.ping_pending = true;
        let elsewhere = (local, remote) != (channel.local, channel.remote);
        let validating = channel.challenge.is_some_and(|c| (c.local, c.remote) == (local, remote));
        if elsewhere && !validating {
            let budget = AmplificationBudget { received: datagram_len as u64, sent: 0 };
            self.begin_validation(0, token, (local, remote), Some(budget));
        }
        Ok(())
    }

    /// Server: stage 1 again for a handshake in progress (stage 2 was lost): answer again, within the
    /// anti-amplification budget.
    pub(crate) fn handle_repeated_hello(&mut self, datagram_len: usize) {
        if let State::ServerHello(handshake) = &mut self.state {
            if let Some(budget) = handshake.budget.as_mut() {
                budget.received = budget.received.saturating_add(datagram_len as u64);
            }
            handshake.reply_due = true;
        }
    }

    /// Frames that rode in stage 3: only the semantic layer's count (there is no channel packet to acknowledge).
    fn handle_handshake_frames(&mut self, now: Time, frames: &[u8]) {
        let mut violation = None;
        if let Some(streams) = self.streams.as_mut() {
            for frame in tng_wire::parse_frames(frames) {
                let Ok(frame) = frame else { break };
                if matches!(
                    frame,
                    Frame::Stream { .. } | Frame::MaxData(_) | Frame::MaxStreams(_) | Frame::MaxStreamData { .. }
                ) {
                    if let Err(error) = streams.handle_frame(now, &frame) {
                        if error.is_peer_violation() {
                            violation = Some(error.to_string());
                            break;
                        }
                    }
                }
            }
        }
        if let Some(what) = violation {
            self.protocol_violation(now, what);
        }
        self.pull_stream_events();
    }

    /// The next handshake datagram, if one is due.
    pub(super) fn poll_handshake_transmit(&mut self, now: Time, out: &mut Vec<u8>) -> Option<Transmit> {
        match &mut self.state {
            State::ClientHello(handshake) if handshake.hello_due => {
                handshake.hello_due = false;
                handshake.first_sent.get_or_insert(now);
                let datagram =
                    initial_datagram(handshake.provisional_id, Stage::ClientHello, &handshake.token, &handshake.hello)?;
                Some(write_datagram(out, (handshake.local, handshake.remote), &datagram))
            }
            State::ClientFinishDue(_) => self.finish_handshake(now, out),
            State::ServerHello(handshake) if handshake.reply_due => {
                handshake.reply_due = false;
                let len = handshake.reply.len() as u64;
                if let Some(budget) = handshake.budget.as_mut() {
                    if !budget.allows(len) {
                        self.amplification_limited_bytes += len;
                        return None;
                    }
                    budget.sent += len;
                }
                Some(write_datagram(out, (handshake.local, handshake.remote), &handshake.reply))
            }
            State::Established => {
                let finish = self.finish.as_mut().filter(|finish| finish.due)?;
                finish.due = false;
                let &(local, remote) = self.planned_paths.first()?;
                Some(write_datagram(out, (local, remote), &finish.datagram))
            }
            _ => None,
        }
    }

    /// Client: writes stage 3 with our limits and whatever frames the application queued, derives the keys and
    /// opens every channel at once (Viscous): channel 0 on the handshake path, validated by the handshake, the
    /// others validated by PATH_CHALLENGE.
    fn finish_handshake(&mut self, now: Time, out: &mut Vec<u8>) -> Option<Transmit> {
        let State::ClientFinishDue(mut handshake) = std::mem::replace(&mut self.state, State::Established) else {
            return None;
        };
        let mut payload = Vec::new();
        encode_limits(&self.config.streams.limits(), &mut payload);
        let most = usize::try_from(self.max_datagram_size()).unwrap_or(MAX_PACKET);
        let room = most.saturating_sub(HEADER_LEN + INITIAL_PREFIX_LEN + NOISE_OVERHEAD + payload.len());
        if let Some(streams) = self.streams.as_mut() {
            // The semantic layer's own timer repeats these bytes if the server never acknowledges them; the
            // datagram itself is repeated verbatim until the server confirms.
            let mut chunks = Vec::new();
            streams.write_frames(now, room, &mut payload, &mut chunks);
        }
        let message = match handshake.noise.write(&payload) {
            Ok(message) => message,
            Err(error) => {
                self.fail(ConnectionError::Handshake(error.to_string()));
                return None;
            }
        };
        let Some(datagram) = initial_datagram(self.connection_id, Stage::ClientFinish, &[], &message) else {
            self.fail(ConnectionError::Handshake("stage 3 does not fit a datagram".into()));
            return None;
        };
        match handshake.noise.into_protection() {
            Ok(protection) => self.protection = Some(protection),
            Err(error) => {
                self.fail(ConnectionError::Handshake(error.to_string()));
                return None;
            }
        }
        let (local, remote) = (handshake.local, handshake.remote);
        if let Some(first) = self.planned_paths.first_mut() {
            *first = (local, remote);
        }
        let mut channel = self.new_channel(now, 0, local, remote, ChannelState::Active);
        if let Some(rtt) = self.handshake_rtt {
            channel.rtt.update(rtt, Duration::ZERO);
        }
        channel.last_received = now;
        self.channels.insert(0, Box::new(channel));
        self.next_channel_id = Some(1);
        let others: Vec<(SocketAddr, SocketAddr)> = self.planned_paths.iter().skip(1).copied().collect();
        for (local, remote) in others {
            self.open_channel(now, local, remote);
        }
        self.events.push_back(Event::ChannelUp(0));
        let resend_at =
            now + self.channels.get(&0).map_or(self.config.initial_rtt, |c| c.rtt.pto_base(self.config.max_ack_delay));
        let transmit = write_datagram(out, (local, remote), &datagram);
        self.finish = Some(UnconfirmedFinish { datagram, due: false, resend_at, attempts: 0 });
        Some(transmit)
    }

    /// Client: the server sealed a packet, so it has the keys: stop repeating stage 3.
    pub(super) fn confirm_handshake(&mut self) {
        self.finish = None;
    }
}

/// A handshake datagram (kept by its state for repeats) appended to the caller's buffer.
fn write_datagram(out: &mut Vec<u8>, (local, remote): (SocketAddr, SocketAddr), datagram: &[u8]) -> Transmit {
    out.extend_from_slice(datagram);
    Transmit { local, remote, ecn: None, size: datagram.len() }
}
