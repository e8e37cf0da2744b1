//! The semantic layer (Tng's top layer, Viscous's flows): many reliable, ordered byte streams per connection,
//! independent of the channels that carry them.
//!
//! - **Cheap streams without a round trip.** Either side opens a stream locally ([`Streams::open`]); the peer learns
//!   of it from its first frame. Peer streams are opened implicitly up to the count we advertise (MAX_STREAMS), and
//!   each closed peer stream raises that count by one. An idle stream holds no buffer memory.
//! - **End-to-end acknowledgement.** Sent bytes stay buffered until the peer's STREAM_ACK covers them. What the flow
//!   layer reports about packets only steers retransmission: a loss queues the chunk again for any channel
//!   ([`Streams::on_chunk_lost`]), a packet acknowledgement merely cancels such a copy
//!   ([`Streams::on_chunk_delivered_hint`]). A safety-net timer ([`Streams::on_timeout`]) queues again whatever the
//!   peer has not acknowledged within the caller's timeout, so an in-path box that acknowledges packets it then
//!   drops cannot stall or fake a delivery.
//! - **Flow control decoupled from congestion control** (Viscous section III-D). Credit is per stream
//!   (MAX_STREAM_DATA) and per connection (MAX_DATA), granted as the reader consumes (one update per half window) and
//!   never tied to a channel's congestion window. The flow layer sends a packet only when a channel's window allows
//!   it, and this layer fills it only with bytes the credit allows, so what is in flight is at most
//!   `min(sum of credits, sum of cwnd)` (Viscous eq. 2); how a channel's share is split is the scheduler's business.
//! - **No head-of-line blocking across streams**: each stream reassembles on its own.
//! - **Fairness**: streams with data take turns, one frame each, round robin.
//!
//! Sans-IO: the flow layer asks [`Streams::write_frames`] for frames to fill a packet and passes every received
//! stream frame to [`Streams::handle_frame`]; the application uses `open`/`write`/`finish`/`read`/`accept` and polls
//! [`Streams::poll_event`].
//!
//! Wire conventions on top of `docs/wire-format.md` section 7:
//! - A STREAM_ACK lists every byte range received so far (not only new ones), lowest first, so losing one costs
//!   nothing. It rides in any packet that leaves anyway, and goes out on its own (an ack-eliciting DATA packet
//!   the peer must acknowledge) only [`StreamConfig::ack_delay`] after the data arrived, or at once when a stream's
//!   receiving half is complete or reset: one per received packet made the peer piggyback an ACK on almost every
//!   data packet it sent.
//! - The FIN occupies one offset at the final size in acknowledgement space, as in TCP: a range containing the final
//!   size acknowledges the FIN. A receiver acknowledges a RESET_STREAM with the range `0..final_size + 1`.
//! - A zero-length STREAM frame without FIN is a credit probe: a sender blocked by credit sends one each timeout, and
//!   the receiver answers with its current MAX_STREAM_DATA / MAX_DATA / MAX_STREAMS where they exceed what the peer
//!   has used. This recovers from a lost credit update even when a middlebox acknowledged the packet that carried
//!   it. A side refused a new stream probes on the last stream it was allowed to open.

mod byte_buffer;
mod error;
mod id;
mod range_set;
mod recv;
mod send;
#[cfg(test)]
// One-range lists of offsets are data here, not a mistaken `(a..b).collect()`.
#[allow(clippy::single_range_in_vec_init)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::time::Duration;

use tng_wire::{varint, Frame};

use crate::time::Time;

pub use error::StreamError;
pub use id::{Side, StreamId};
pub use recv::ReadOutcome;

use recv::RecvStream;
use send::{Blocked, ChunkKind, SendStream};

/// Highest offset we grant or accept, one below the varint limit: the FIN's acknowledgement offset must fit too.
const MAX_OFFSET: u64 = varint::MAX - 1;
/// Most streams one side may open, so that every stream id fits in a varint.
const MAX_STREAM_COUNT: u64 = 1 << 60;
/// Most acknowledgements for already-closed streams held at once; beyond that the peer's retransmission asks again.
const MAX_CLOSED_ACKS: usize = 256;
/// The STREAM frame types (0x03, 0x10, 0x11) take one varint byte.
const STREAM_TYPE_LEN: usize = 1;

/// Local limits and buffer sizes. Receive windows above 2^62 - 2 and stream counts above 2^60 are lowered to those.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// Peer-opened streams that may be open at once (our MAX_STREAMS).
    pub max_streams: u64,
    /// Credit per stream (our MAX_STREAM_DATA window): bytes the peer may send beyond what the reader consumed.
    pub stream_receive_window: u64,
    /// Credit for the whole connection (our MAX_DATA window). Bounds the memory all receive buffers can take.
    pub receive_window: u64,
    /// Most bytes one stream buffers for sending (written and not yet acknowledged by the peer).
    pub stream_send_buffer: u64,
    /// Most bytes all streams together buffer for sending.
    pub send_buffer: u64,
    /// Most holes one stream's reassembly may have; a peer that leaves more violates the protocol. A sender that
    /// spreads a window over paths of different delay leaves up to about one hole per packet of the slow path in
    /// flight, so keep this above `stream_receive_window / packet size`.
    pub max_reassembly_gaps: usize,
    /// Longest a STREAM_ACK waits for a packet to ride in before it is sent on its own. The peer's retransmission
    /// timer must exceed a round trip plus this (the flow layer's PTO includes the same delay for its ACKs).
    pub ack_delay: Duration,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            max_streams: 1024,
            // One bulk stream must cover the bandwidth-delay product of all paths plus the reordering between them
            // (2 MB: 60 Mbit/s over two paths with a 60 ms spread needs about 1 MB).
            stream_receive_window: 2 * 1024 * 1024,
            receive_window: 16 * 1024 * 1024,
            stream_send_buffer: 4 * 1024 * 1024,
            send_buffer: 16 * 1024 * 1024,
            max_reassembly_gaps: 4096,
            ack_delay: Duration::from_millis(25),
        }
    }
}

impl StreamConfig {
    /// The initial limits we grant the peer: what the handshake's transport parameters carry.
    pub fn limits(&self) -> StreamLimits {
        StreamLimits {
            max_streams: self.max_streams.min(MAX_STREAM_COUNT),
            max_data: self.receive_window.min(MAX_OFFSET),
            max_stream_data: self.stream_receive_window.min(MAX_OFFSET),
        }
    }
}

/// Initial limits one side grants the other, exchanged in the handshake; MAX_* frames raise them later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// Streams the other side may open.
    pub max_streams: u64,
    /// Connection-level credit in bytes.
    pub max_data: u64,
    /// Credit of each stream in bytes.
    pub max_stream_data: u64,
}

/// Something the application should know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// The peer opened streams: [`Streams::accept`] returns them. Emitted when the accept queue stops being empty.
    Opened,
    /// The stream has something to read. Edge-triggered: read until [`ReadOutcome::Blocked`] to re-arm it.
    Readable(StreamId),
    /// A write that was refused or cut short for lack of buffer room may be retried.
    Writable(StreamId),
    /// The peer acknowledged every byte of the stream and its FIN: delivery is complete end to end.
    Finished(StreamId),
    /// The peer abandoned its sending half with this error code.
    Reset { id: StreamId, error_code: u64 },
    /// The peer asked us to stop sending; we reset our sending half with its error code.
    Stopped { id: StreamId, error_code: u64 },
    /// The peer raised its stream limit after [`Streams::open`] had been refused.
    Available,
}

/// What a packet carried on behalf of the semantic layer, so the flow layer can report the packet's fate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SentChunk {
    /// Stream bytes `range` (possibly empty), and the FIN if `fin`.
    Stream {
        id: StreamId,
        range: Range<u64>,
        fin: bool,
    },
    StreamAck {
        id: StreamId,
    },
    MaxStreamData {
        id: StreamId,
    },
    MaxData,
    MaxStreams,
    ResetStream {
        id: StreamId,
    },
    StopSending {
        id: StreamId,
    },
}

/// Counters since the connection started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Bytes the application wrote (and the buffers accepted).
    pub bytes_written: u64,
    /// Bytes the peer acknowledged end to end.
    pub bytes_acked: u64,
    /// Bytes delivered to the application by `read`.
    pub bytes_read: u64,
    /// Bytes sent more than once.
    pub bytes_retransmitted: u64,
    /// Streams we opened.
    pub streams_opened: u64,
    /// Streams the peer opened.
    pub streams_accepted: u64,
    /// Streams not yet fully closed, both directions.
    pub streams_open: u64,
}

#[derive(Debug)]
struct Stream {
    send: SendStream,
    recv: RecvStream,
    in_send_queue: bool,
    in_control_queue: bool,
    in_ack_queue: bool,
    /// Listed in `Streams::connection_blocked`.
    connection_blocked: bool,
    /// Listed in `Streams::connection_write_waiters`.
    waiting_for_connection_room: bool,
}

impl Stream {
    fn new(send_credit: u64, receive_window: u64) -> Self {
        Stream {
            send: SendStream::new(send_credit),
            recv: RecvStream::new(receive_window),
            in_send_queue: false,
            in_control_queue: false,
            in_ack_queue: false,
            connection_blocked: false,
            waiting_for_connection_room: false,
        }
    }
}

/// A deadline of the semantic retransmission timer, armed when something is sent; it fires `rto` later unless the
/// peer's STREAM_ACK (or new credit) resolved it first.
#[derive(Clone, Debug)]
struct Timer {
    armed_at: Time,
    kind: TimerKind,
}

#[derive(Clone, Debug)]
enum TimerKind {
    Data { id: StreamId, range: Range<u64>, fin: bool },
    Reset { id: StreamId },
    StreamProbe { id: StreamId, limit: u64 },
    ConnectionProbe { limit: u64 },
    StreamCountProbe { limit: u64 },
}

/// Whether a frame's stream still has state.
enum Target {
    Live,
    Closed,
}

/// All streams of one connection.
#[derive(Debug)]
pub struct Streams {
    side: Side,
    config: StreamConfig,
    streams: HashMap<StreamId, Stream>,
    /// Index of the next stream we open.
    next_local: u64,
    /// Index of the next peer stream to be opened implicitly.
    next_remote: u64,
    /// Streams the peer lets us open.
    peer_max_streams: u64,
    /// Streams we let the peer open (our MAX_STREAMS).
    max_remote_streams: u64,
    max_streams_pending: bool,
    /// `open` was refused for the peer's stream limit.
    open_blocked: bool,
    /// The peer's stream limit at which `open` was refused (and a probe timer armed).
    open_blocked_at: Option<u64>,
    /// A stream-count probe should go out.
    stream_count_probe_pending: bool,
    /// The latest `now` a caller told us: `open` has no clock of its own but may need to arm a timer.
    clock: Time,

    // Sending: the peer's credit and our buffers.
    peer_max_data: u64,
    /// Credit the peer grants each new stream.
    peer_max_stream_data: u64,
    /// New bytes sent on all streams: what counts against `peer_max_data`.
    data_sent: u64,
    /// Bytes buffered for sending on all streams.
    buffered: u64,
    /// The connection-level credit at which we found ourselves blocked (and armed a probe timer).
    connection_blocked_at: Option<u64>,

    // Receiving: the credit we grant.
    max_data: u64,
    /// Sum of the highest offsets received on all streams.
    data_received: u64,
    /// Bytes read by the application or discarded.
    data_consumed: u64,
    max_data_pending: bool,

    /// Streams with data, FIN or a probe to send, in round-robin order.
    send_queue: VecDeque<StreamId>,
    /// Streams with unsent bytes waiting for connection-level credit.
    connection_blocked: VecDeque<StreamId>,
    /// Streams with RESET_STREAM, STOP_SENDING or MAX_STREAM_DATA to send.
    control_queue: VecDeque<StreamId>,
    /// Streams with a STREAM_ACK to send.
    ack_queue: VecDeque<StreamId>,
    /// When the queued STREAM_ACKs must leave even in a packet of their own; `None` while none is queued.
    acks_due_at: Option<Time>,
    /// Acknowledgements for streams already closed here, as the end of the range `0..end`.
    closed_acks: VecDeque<(StreamId, u64)>,
    /// Streams whose writes were refused because all send buffers together were full.
    connection_write_waiters: Vec<StreamId>,
    accept_queue: VecDeque<StreamId>,
    events: VecDeque<StreamEvent>,
    /// Armed in send order, so the front expires first.
    timers: VecDeque<Timer>,
    stats: StreamStats,
}

impl Streams {
    /// `peer` is what the peer granted us in the handshake (its [`StreamConfig::limits`]).
    pub fn new(side: Side, config: StreamConfig, peer: StreamLimits) -> Self {
        let limits = config.limits();
        Streams {
            side,
            streams: HashMap::new(),
            next_local: 0,
            next_remote: 0,
            peer_max_streams: peer.max_streams.min(MAX_STREAM_COUNT),
            max_remote_streams: limits.max_streams,
            max_streams_pending: false,
            open_blocked: false,
            open_blocked_at: None,
            stream_count_probe_pending: false,
            clock: Time::ZERO,
            peer_max_data: peer.max_data,
            peer_max_stream_data: peer.max_stream_data,
            data_sent: 0,
            buffered: 0,
            connection_blocked_at: None,
            max_data: limits.max_data,
            data_received: 0,
            data_consumed: 0,
            max_data_pending: false,
            send_queue: VecDeque::new(),
            connection_blocked: VecDeque::new(),
            control_queue: VecDeque::new(),
            ack_queue: VecDeque::new(),
            acks_due_at: None,
            closed_acks: VecDeque::new(),
            connection_write_waiters: Vec::new(),
            accept_queue: VecDeque::new(),
            events: VecDeque::new(),
            timers: VecDeque::new(),
            stats: StreamStats::default(),
            config: StreamConfig {
                stream_receive_window: limits.max_stream_data,
                receive_window: limits.max_data,
                max_streams: limits.max_streams,
                ..config
            },
        }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Application side.

    /// Opens a stream; the peer learns of it from the first frame we send on it.
    pub fn open(&mut self) -> Result<StreamId, StreamError> {
        if self.next_local >= self.peer_max_streams {
            self.open_blocked = true;
            let limit = self.peer_max_streams;
            if limit > 0 && self.open_blocked_at != Some(limit) {
                self.open_blocked_at = Some(limit);
                self.timers.push_back(Timer { armed_at: self.clock, kind: TimerKind::StreamCountProbe { limit } });
            }
            return Err(StreamError::StreamLimit { limit });
        }
        let id = StreamId::new(self.side, self.next_local);
        self.next_local += 1;
        self.streams.insert(id, Stream::new(self.peer_max_stream_data, self.config.stream_receive_window));
        self.stats.streams_opened += 1;
        Ok(id)
    }

    /// A stream the peer opened, oldest first.
    pub fn accept(&mut self) -> Option<StreamId> {
        self.accept_queue.pop_front()
    }

    /// Buffers as much of `data` as the send buffers take; returns how many bytes that was.
    /// [`StreamError::Blocked`] if none: a [`StreamEvent::Writable`] follows when room frees up.
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        if let Some(error_code) = stream.send.stopped_by_peer() {
            return Err(StreamError::Stopped { id, error_code });
        }
        if !stream.send.is_writable() {
            return Err(StreamError::SendClosed(id));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let stream_room = self.config.stream_send_buffer.saturating_sub(stream.send.buffered());
        let connection_room = self.config.send_buffer.saturating_sub(self.buffered);
        let accepted = usize::try_from(stream_room.min(connection_room)).unwrap_or(usize::MAX).min(data.len());
        if accepted < data.len() {
            if stream_room <= connection_room {
                stream.send.write_blocked = true;
            } else if !stream.waiting_for_connection_room {
                stream.waiting_for_connection_room = true;
                self.connection_write_waiters.push(id);
            }
        }
        if accepted == 0 {
            return Err(StreamError::Blocked(id));
        }
        stream.send.push(&data[..accepted]);
        self.buffered += accepted as u64;
        self.stats.bytes_written += accepted as u64;
        self.schedule_send(id);
        Ok(accepted)
    }

    /// Ends the sending half after the bytes written so far. [`StreamEvent::Finished`] follows once the peer
    /// acknowledged all of them and the FIN.
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamError> {
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        if let Some(error_code) = stream.send.stopped_by_peer() {
            return Err(StreamError::Stopped { id, error_code });
        }
        if !stream.send.is_writable() {
            return Err(StreamError::SendClosed(id));
        }
        stream.send.finish();
        self.schedule_send(id);
        Ok(())
    }

    /// Abandons the sending half: unacknowledged bytes are dropped and the peer is told with RESET_STREAM. Does
    /// nothing if the sending half already ended (reset, or everything acknowledged).
    pub fn reset(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        check_error_code(error_code)?;
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        if stream.send.is_done() || stream.send.is_reset() {
            return Ok(());
        }
        let released = stream.send.reset(error_code);
        self.buffered -= released;
        self.schedule_control(id);
        self.on_send_room(id);
        Ok(())
    }

    /// Stops reading: buffered and arriving bytes are discarded and the peer is asked (STOP_SENDING) to reset its
    /// sending half. Does nothing if the receiving half already ended.
    pub fn stop_sending(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        check_error_code(error_code)?;
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        let (discarded, frame_due) = stream.recv.stop(error_code);
        let credit_due = discarded > 0 && stream.recv.grant_credit(MAX_OFFSET);
        if frame_due || credit_due {
            self.schedule_control(id);
        }
        self.consume(discarded);
        self.maybe_free(id);
        Ok(())
    }

    /// Reads in-order bytes into `buf`.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, StreamError> {
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        let outcome = stream.recv.read(id, buf)?;
        match outcome {
            ReadOutcome::Data(n) => {
                let credit_due = stream.recv.grant_credit(MAX_OFFSET);
                self.stats.bytes_read += n as u64;
                if credit_due {
                    self.schedule_control(id);
                }
                self.consume(n as u64);
            }
            ReadOutcome::Finished | ReadOutcome::Reset { .. } => self.maybe_free(id),
            ReadOutcome::Blocked => {}
        }
        Ok(outcome)
    }

    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        self.events.pop_front()
    }

    pub fn stats(&self) -> StreamStats {
        StreamStats { streams_open: self.streams.len() as u64, ..self.stats }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Flow-layer side: frames out.

    /// Whether [`Streams::write_frames`] has something to write that should not wait: everything but STREAM_ACKs
    /// before they are due (those ride along in any packet that leaves). May be true once more after everything
    /// left is blocked by credit; the next `write_frames` call notices and clears it.
    pub fn has_pending_frames(&self, now: Time) -> bool {
        self.max_data_pending
            || self.max_streams_pending
            || self.stream_count_probe_pending
            || !self.closed_acks.is_empty()
            || !self.control_queue.is_empty()
            || !self.send_queue.is_empty()
            || self.acks_due_at.is_some_and(|due| due <= now)
    }

    /// When the queued STREAM_ACKs become due (see [`Streams::has_pending_frames`]), if any are queued.
    pub fn stream_ack_deadline(&self) -> Option<Time> {
        self.acks_due_at
    }

    /// Appends to `out` the frames that fit in `max_len` bytes: credit updates, STREAM_ACKs and other control frames
    /// first, then stream data round robin across streams. Records in `sent` what the packet carries, for
    /// [`Streams::on_chunk_lost`] and [`Streams::on_chunk_delivered_hint`]. Returns the bytes appended.
    ///
    /// A STREAM frame that fills the packet uses the compact encoding without a length, which runs to the end of
    /// the plaintext: the caller must append nothing after these frames.
    pub fn write_frames(&mut self, now: Time, max_len: usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) -> usize {
        self.clock = self.clock.max(now);
        let start = out.len();
        let mut budget = max_len;
        if self.stream_count_probe_pending {
            // The last stream we were allowed to open: the peer knows it, open or closed.
            let id = StreamId::new(self.side, self.peer_max_streams.saturating_sub(1));
            let probe = Frame::Stream { stream_id: id.as_u64(), offset: 0, fin: false, data: &[], to_end: false };
            if emit(&probe, &mut budget, out) {
                self.stream_count_probe_pending = false;
                sent.push(SentChunk::Stream { id, range: 0..0, fin: false });
            }
        }
        if self.max_data_pending && emit(&Frame::MaxData(self.max_data), &mut budget, out) {
            self.max_data_pending = false;
            sent.push(SentChunk::MaxData);
        }
        if self.max_streams_pending && emit(&Frame::MaxStreams(self.max_remote_streams), &mut budget, out) {
            self.max_streams_pending = false;
            sent.push(SentChunk::MaxStreams);
        }
        while let Some(&(id, end)) = self.closed_acks.front() {
            if !emit(
                &Frame::StreamAck { stream_id: id.as_u64(), ranges: vec![Range { start: 0, end }] },
                &mut budget,
                out,
            ) {
                break;
            }
            self.closed_acks.pop_front();
            sent.push(SentChunk::StreamAck { id });
        }
        self.write_control_frames(now, &mut budget, out, sent);
        self.write_stream_acks(&mut budget, out, sent);
        self.write_stream_frames(now, &mut budget, out, sent);
        out.len() - start
    }

    fn write_control_frames(&mut self, now: Time, budget: &mut usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) {
        while let Some(&id) = self.control_queue.front() {
            if let Some(stream) = self.streams.get_mut(&id) {
                let stream_id = id.as_u64();
                if let Some((error_code, final_size)) = stream.send.pending_reset() {
                    if !emit(&Frame::ResetStream { stream_id, error_code, final_size }, budget, out) {
                        return;
                    }
                    stream.send.on_reset_sent();
                    sent.push(SentChunk::ResetStream { id });
                    self.timers.push_back(Timer { armed_at: now, kind: TimerKind::Reset { id } });
                }
                if let Some(error_code) = stream.recv.pending_stop() {
                    if !emit(&Frame::StopSending { stream_id, error_code }, budget, out) {
                        return;
                    }
                    stream.recv.on_stop_sent();
                    sent.push(SentChunk::StopSending { id });
                }
                if stream.recv.credit_pending {
                    if !emit(&Frame::MaxStreamData { stream_id, max: stream.recv.limit() }, budget, out) {
                        return;
                    }
                    stream.recv.credit_pending = false;
                    sent.push(SentChunk::MaxStreamData { id });
                }
                stream.in_control_queue = false;
            }
            self.control_queue.pop_front();
        }
    }

    /// Every queued STREAM_ACK that fits, due or not: in a packet that leaves anyway they cost no extra packet.
    fn write_stream_acks(&mut self, budget: &mut usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) {
        let max_ack_ranges = self.config.max_reassembly_gaps.saturating_add(2);
        while let Some(&id) = self.ack_queue.front() {
            if let Some(stream) = self.streams.get_mut(&id) {
                if stream.recv.ack_pending {
                    let stream_id = id.as_u64();
                    let mut ranges = stream.recv.ack_ranges(max_ack_ranges);
                    if !ranges.is_empty() {
                        truncate_ack_to_fit(stream_id, &mut ranges, *budget);
                        if ranges.is_empty() || !emit(&Frame::StreamAck { stream_id, ranges }, budget, out) {
                            return;
                        }
                        sent.push(SentChunk::StreamAck { id });
                    }
                    stream.recv.ack_pending = false;
                }
                stream.in_ack_queue = false;
            }
            self.ack_queue.pop_front();
        }
        self.acks_due_at = None;
    }

    fn write_stream_frames(&mut self, now: Time, budget: &mut usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) {
        while let Some(id) = self.send_queue.pop_front() {
            let credit = self.peer_max_data.saturating_sub(self.data_sent);
            let Some(stream) = self.streams.get_mut(&id) else { continue };
            stream.in_send_queue = false;
            let Some(next) = stream.send.next_chunk(credit) else {
                self.note_blocked(id, now);
                continue;
            };
            let capacity = stream_frame_capacity(*budget, id, next.offset).filter(|&n| n > 0 || !next.carries_data);
            let Some(chunk) = capacity.and_then(|n| stream.send.take_chunk(n as u64, credit)) else {
                // Not even a minimal frame fits: the stream keeps its turn for the next packet.
                stream.in_send_queue = true;
                self.send_queue.push_front(id);
                return;
            };
            let mut frame = Frame::Stream {
                stream_id: id.as_u64(),
                offset: chunk.range.start,
                fin: chunk.fin,
                data: stream.send.chunk_data(&chunk.range),
                to_end: false,
            };
            // The frame with a length is kept whenever it fits, so that more frames may follow; otherwise the
            // chunk fills the packet and goes in the compact form, the last frame.
            let fills_packet = frame.encoded_len() > *budget;
            if let Frame::Stream { to_end, .. } = &mut frame {
                *to_end = fills_packet;
            }
            if !emit(&frame, budget, out) {
                // `stream_frame_capacity` sized the frame to fit, so this is unreachable; stay consistent anyway.
                stream.send.on_lost(chunk.range, chunk.fin);
                stream.in_send_queue = true;
                self.send_queue.push_front(id);
                return;
            }
            let len = chunk.range.end - chunk.range.start;
            match chunk.kind {
                ChunkKind::New => self.data_sent += len,
                ChunkKind::Retransmission => self.stats.bytes_retransmitted += len,
                ChunkKind::Probe => {}
            }
            if chunk.kind != ChunkKind::Probe {
                let kind = TimerKind::Data { id, range: chunk.range.clone(), fin: chunk.fin };
                self.timers.push_back(Timer { armed_at: now, kind });
            }
            sent.push(SentChunk::Stream { id, range: chunk.range, fin: chunk.fin });
            if fills_packet {
                // Nothing may follow a compact frame.
                *budget = 0;
            }
            let credit = self.peer_max_data.saturating_sub(self.data_sent);
            if stream.send.next_chunk(credit).is_some() {
                stream.in_send_queue = true;
                self.send_queue.push_back(id);
            } else {
                self.note_blocked(id, now);
            }
        }
    }

    /// A stream has nothing it may send: if credit is what holds it back, wait for credit and arm a probe.
    fn note_blocked(&mut self, id: StreamId, now: Time) {
        let credit = self.peer_max_data.saturating_sub(self.data_sent);
        let Some(stream) = self.streams.get_mut(&id) else { return };
        match stream.send.blocked(credit) {
            Some(Blocked::Stream(limit)) if stream.send.blocked_at != Some(limit) => {
                stream.send.blocked_at = Some(limit);
                self.timers.push_back(Timer { armed_at: now, kind: TimerKind::StreamProbe { id, limit } });
            }
            Some(Blocked::Connection) => {
                if !stream.connection_blocked {
                    stream.connection_blocked = true;
                    self.connection_blocked.push_back(id);
                }
                if self.connection_blocked_at != Some(self.peer_max_data) {
                    self.connection_blocked_at = Some(self.peer_max_data);
                    let kind = TimerKind::ConnectionProbe { limit: self.peer_max_data };
                    self.timers.push_back(Timer { armed_at: now, kind });
                }
            }
            Some(Blocked::Stream(_)) | None => {}
        }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Flow-layer side: what happened to sent packets.

    /// The flow layer declared lost a packet that carried `chunk`: queue what still matters, for any channel.
    pub fn on_chunk_lost(&mut self, chunk: &SentChunk) {
        match chunk {
            SentChunk::Stream { id, range, fin } => {
                if self.streams.get_mut(id).is_some_and(|s| s.send.on_lost(range.clone(), *fin)) {
                    self.schedule_send(*id);
                }
            }
            SentChunk::StreamAck { id } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.recv.ack_pending = true;
                    // The peer has waited a round trip already.
                    self.schedule_ack(*id, true);
                }
            }
            SentChunk::MaxStreamData { id } => {
                if let Some(stream) = self.streams.get_mut(id).filter(|s| s.recv.wants_credit()) {
                    stream.recv.credit_pending = true;
                    self.schedule_control(*id);
                }
            }
            SentChunk::MaxData => self.max_data_pending = true,
            SentChunk::MaxStreams => self.max_streams_pending = true,
            SentChunk::ResetStream { id } => {
                if self.streams.get_mut(id).is_some_and(|s| s.send.on_reset_lost()) {
                    self.schedule_control(*id);
                }
            }
            SentChunk::StopSending { id } => {
                if self.streams.get_mut(id).is_some_and(|s| s.recv.on_stop_lost()) {
                    self.schedule_control(*id);
                }
            }
        }
    }

    /// The flow layer acknowledged a packet that carried `chunk`. Only a hint: it cancels a copy that a (then
    /// spurious) loss report had queued, and never releases bytes.
    pub fn on_chunk_delivered_hint(&mut self, chunk: &SentChunk) {
        match chunk {
            SentChunk::Stream { id, range, fin } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.send.on_delivered_hint(range.clone(), *fin);
                }
            }
            SentChunk::ResetStream { id } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.send.on_reset_delivered_hint();
                }
            }
            SentChunk::StopSending { id } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.recv.on_stop_sent();
                }
            }
            SentChunk::StreamAck { .. }
            | SentChunk::MaxStreamData { .. }
            | SentChunk::MaxData
            | SentChunk::MaxStreams => {}
        }
    }

    /// When the semantic retransmission timer next needs [`Streams::on_timeout`], for timeout `rto`.
    pub fn next_timeout(&self, rto: Duration) -> Option<Time> {
        self.timers.front().map(|timer| timer.armed_at + rto)
    }

    /// Queues again everything sent at least `rto` ago and still not acknowledged by the peer, and sends credit
    /// probes for streams blocked that long. `rto` should comfortably exceed an end-to-end round trip on the slowest
    /// channel (e.g. 3 x the largest smoothed RTT).
    pub fn on_timeout(&mut self, now: Time, rto: Duration) {
        self.clock = self.clock.max(now);
        // Re-armed timers go to the back; bounding the pass keeps a zero `rto` from looping.
        for _ in 0..self.timers.len() {
            match self.timers.front() {
                Some(timer) if timer.armed_at + rto <= now => {}
                _ => break,
            }
            if let Some(timer) = self.timers.pop_front() {
                self.fire(timer.kind, now);
            }
        }
        self.prune_timers();
    }

    fn fire(&mut self, kind: TimerKind, now: Time) {
        match kind {
            // A range that was lost, sent again and is still unacknowledged when its first timer fires goes out
            // once more: the price of one timer per transmission instead of a send time per byte.
            TimerKind::Data { id, range, fin } => {
                if self.streams.get_mut(&id).is_some_and(|s| s.send.on_lost(range, fin)) {
                    self.schedule_send(id);
                }
            }
            TimerKind::Reset { id } => {
                if self.streams.get_mut(&id).is_some_and(|s| s.send.on_reset_lost()) {
                    self.schedule_control(id);
                }
            }
            TimerKind::StreamProbe { id, limit } => {
                let Some(stream) = self.streams.get_mut(&id) else { return };
                if stream.send.blocked_at == Some(limit) && stream.send.sent_end() >= limit {
                    stream.send.probe_pending = true;
                    self.schedule_send(id);
                    self.timers.push_back(Timer { armed_at: now, kind: TimerKind::StreamProbe { id, limit } });
                }
            }
            TimerKind::ConnectionProbe { limit } => {
                if self.connection_blocked_at != Some(limit) || self.data_sent < limit {
                    return;
                }
                let prober = self
                    .connection_blocked
                    .iter()
                    .copied()
                    .find(|id| self.streams.get(id).is_some_and(|s| s.connection_blocked && !s.send.is_reset()));
                if let Some(id) = prober {
                    if let Some(stream) = self.streams.get_mut(&id) {
                        stream.send.probe_pending = true;
                    }
                    self.schedule_send(id);
                }
                self.timers.push_back(Timer { armed_at: now, kind: TimerKind::ConnectionProbe { limit } });
            }
            TimerKind::StreamCountProbe { limit } => {
                if self.open_blocked_at == Some(limit) && self.peer_max_streams == limit {
                    self.stream_count_probe_pending = true;
                    self.timers.push_back(Timer { armed_at: now, kind: TimerKind::StreamCountProbe { limit } });
                }
            }
        }
    }

    /// Drops resolved timers from the front, so `next_timeout` does not wake the caller for nothing.
    fn prune_timers(&mut self) {
        while let Some(timer) = self.timers.front() {
            let pending = match &timer.kind {
                TimerKind::Data { id, range, fin } => {
                    matches!(self.streams.get(id), Some(s) if !s.send.is_resolved(range, *fin))
                }
                TimerKind::Reset { id } => matches!(self.streams.get(id), Some(s) if !s.send.is_reset_acked()),
                TimerKind::StreamProbe { id, limit } => {
                    matches!(self.streams.get(id), Some(s) if s.send.blocked_at == Some(*limit))
                }
                TimerKind::ConnectionProbe { limit } => self.connection_blocked_at == Some(*limit),
                TimerKind::StreamCountProbe { limit } => self.open_blocked_at == Some(*limit),
            };
            if pending {
                return;
            }
            self.timers.pop_front();
        }
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Flow-layer side: frames in.

    /// A frame from a packet the flow layer opened at `now`. Frames of other layers are ignored. An error is a peer
    /// protocol violation ([`StreamError::is_peer_violation`]): the connection should be closed.
    pub fn handle_frame(&mut self, now: Time, frame: &Frame<'_>) -> Result<(), StreamError> {
        self.clock = self.clock.max(now);
        match *frame {
            Frame::Stream { stream_id, offset, fin, data, .. } => self.on_stream(stream_id.into(), offset, fin, data),
            Frame::StreamAck { stream_id, ref ranges } => self.on_stream_ack(stream_id.into(), ranges),
            Frame::MaxData(max) => {
                self.on_max_data(max);
                Ok(())
            }
            Frame::MaxStreamData { stream_id, max } => self.on_max_stream_data(stream_id.into(), max),
            Frame::MaxStreams(max) => {
                self.on_max_streams(max);
                Ok(())
            }
            Frame::ResetStream { stream_id, error_code, final_size } => {
                self.on_reset_stream(stream_id.into(), error_code, final_size)
            }
            Frame::StopSending { stream_id, error_code } => self.on_stop_sending(stream_id.into(), error_code),
            _ => Ok(()),
        }
    }

    fn on_stream(&mut self, id: StreamId, offset: u64, fin: bool, data: &[u8]) -> Result<(), StreamError> {
        let end = offset.saturating_add(data.len() as u64);
        let probe = data.is_empty() && !fin;
        let target = self.target(id)?;
        if probe && self.max_remote_streams > self.next_remote {
            self.max_streams_pending = true;
        }
        if let Target::Closed = target {
            self.ack_closed(id, end.saturating_add(u64::from(fin)));
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        let received = self.data_received.saturating_add(stream.recv.credit_growth(end));
        if received > self.max_data {
            return Err(StreamError::ConnectionFlowControl { received, limit: self.max_data });
        }
        let credit = stream.recv.ingest(id, offset, data, fin, self.config.max_reassembly_gaps)?;
        self.data_received += credit.received;
        if credit.discarded > 0 {
            // Stopped streams keep granting credit, so a peer that missed our STOP_SENDING can still finish.
            stream.recv.grant_credit(MAX_OFFSET);
        }
        if probe && stream.recv.wants_credit() && stream.recv.limit() > offset {
            stream.recv.credit_pending = true;
        }
        if probe && self.max_data > self.data_received {
            self.max_data_pending = true;
        }
        if stream.recv.credit_pending {
            self.schedule_control(id);
        }
        self.schedule_ack(id, false);
        self.consume(credit.discarded);
        self.signal_readable(id);
        self.maybe_free(id);
        Ok(())
    }

    fn on_stream_ack(&mut self, id: StreamId, ranges: &[Range<u64>]) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        let was_done = stream.send.is_done();
        let outcome = stream.send.on_ack(id, ranges)?;
        self.stats.bytes_acked += outcome.newly_acked;
        self.buffered -= outcome.released;
        if outcome.finished && !was_done {
            self.events.push_back(StreamEvent::Finished(id));
        }
        if outcome.released > 0 {
            self.on_send_room(id);
        }
        self.prune_timers();
        self.maybe_free(id);
        Ok(())
    }

    fn on_max_data(&mut self, max: u64) {
        if max <= self.peer_max_data {
            return;
        }
        self.peer_max_data = max;
        self.connection_blocked_at = None;
        while let Some(id) = self.connection_blocked.pop_front() {
            if let Some(stream) = self.streams.get_mut(&id) {
                stream.connection_blocked = false;
                self.schedule_send(id);
            }
        }
        self.prune_timers();
    }

    fn on_max_stream_data(&mut self, id: StreamId, max: u64) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            return Ok(());
        }
        if self.streams.get_mut(&id).is_some_and(|s| s.send.raise_max_data(max)) {
            self.schedule_send(id);
            self.prune_timers();
        }
        Ok(())
    }

    fn on_max_streams(&mut self, max: u64) {
        let max = max.min(MAX_STREAM_COUNT);
        if max <= self.peer_max_streams {
            return;
        }
        self.peer_max_streams = max;
        self.open_blocked_at = None;
        self.stream_count_probe_pending = false;
        self.prune_timers();
        if self.open_blocked {
            self.open_blocked = false;
            self.events.push_back(StreamEvent::Available);
        }
    }

    fn on_reset_stream(&mut self, id: StreamId, error_code: u64, final_size: u64) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            self.ack_closed(id, final_size.saturating_add(1));
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        let received = self.data_received.saturating_add(stream.recv.credit_growth(final_size));
        if received > self.max_data {
            return Err(StreamError::ConnectionFlowControl { received, limit: self.max_data });
        }
        let was_reset = stream.recv.reset_unread().is_some();
        let credit = stream.recv.on_reset(id, error_code, final_size)?;
        self.data_received += credit.received;
        if !was_reset && stream.recv.reset_unread().is_some() {
            stream.recv.readable_signalled = true;
            self.events.push_back(StreamEvent::Reset { id, error_code });
        }
        self.schedule_ack(id, false);
        self.consume(credit.discarded);
        self.maybe_free(id);
        Ok(())
    }

    fn on_stop_sending(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        if stream.send.is_done() || stream.send.is_reset() {
            return Ok(());
        }
        let released = stream.send.stop(error_code);
        self.buffered -= released;
        self.events.push_back(StreamEvent::Stopped { id, error_code });
        self.schedule_control(id);
        self.on_send_room(id);
        Ok(())
    }

    // ---------------------------------------------------------------------------------------------------------------
    // Bookkeeping.

    /// Local API calls may name only streams that were opened.
    fn check_opened(&self, id: StreamId) -> Result<(), StreamError> {
        let opened = if id.initiator() == self.side { self.next_local } else { self.next_remote };
        if id.index() < opened {
            Ok(())
        } else {
            Err(StreamError::NotOpen(id))
        }
    }

    /// Resolves the stream a peer frame names, opening peer streams implicitly (with every lower-numbered one).
    fn target(&mut self, id: StreamId) -> Result<Target, StreamError> {
        if id.initiator() == self.side {
            if id.index() >= self.next_local {
                return Err(StreamError::UnopenedStream(id));
            }
        } else if id.index() >= self.next_remote {
            if id.index() >= self.max_remote_streams {
                return Err(StreamError::StreamLimitViolation { id, limit: self.max_remote_streams });
            }
            let announce = self.accept_queue.is_empty();
            while self.next_remote <= id.index() {
                let opened = StreamId::new(self.side.peer(), self.next_remote);
                self.streams.insert(opened, Stream::new(self.peer_max_stream_data, self.config.stream_receive_window));
                self.accept_queue.push_back(opened);
                self.next_remote += 1;
                self.stats.streams_accepted += 1;
            }
            if announce {
                self.events.push_back(StreamEvent::Opened);
            }
        }
        Ok(if self.streams.contains_key(&id) { Target::Live } else { Target::Closed })
    }

    /// A closed stream's peer repeats data or a reset because our last STREAM_ACK was lost: everything up to `end`
    /// was received (we close only complete streams), so acknowledge `0..end`.
    fn ack_closed(&mut self, id: StreamId, end: u64) {
        if end == 0 || end > varint::MAX {
            return;
        }
        if let Some(entry) = self.closed_acks.iter_mut().find(|(acked, _)| *acked == id) {
            entry.1 = entry.1.max(end);
        } else if self.closed_acks.len() < MAX_CLOSED_ACKS {
            self.closed_acks.push_back((id, end));
        }
    }

    /// The application consumed (or we discarded) `n` received bytes: grant connection-level credit once half the
    /// window is used.
    fn consume(&mut self, n: u64) {
        self.data_consumed += n;
        let window = self.config.receive_window;
        let new_max = self.data_consumed.saturating_add(window).min(MAX_OFFSET);
        if new_max > self.max_data && new_max - self.max_data >= window / 2 {
            self.max_data = new_max;
            self.max_data_pending = true;
        }
    }

    fn signal_readable(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if !stream.recv.readable_signalled && stream.recv.is_readable() {
                stream.recv.readable_signalled = true;
                self.events.push_back(StreamEvent::Readable(id));
            }
        }
    }

    /// Send buffer room was freed on `id` (and so on the connection): wake writers that were refused.
    fn on_send_room(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if stream.send.write_blocked && stream.send.is_writable() {
                stream.send.write_blocked = false;
                self.events.push_back(StreamEvent::Writable(id));
            }
        }
        if self.buffered >= self.config.send_buffer {
            return;
        }
        for waiter in self.connection_write_waiters.drain(..) {
            if let Some(stream) = self.streams.get_mut(&waiter) {
                stream.waiting_for_connection_room = false;
                if stream.send.is_writable() {
                    stream.send.write_blocked = false;
                    self.events.push_back(StreamEvent::Writable(waiter));
                }
            }
        }
    }

    /// Forgets a stream once both halves are over; a closed peer stream makes room for one more.
    fn maybe_free(&mut self, id: StreamId) {
        let Some(stream) = self.streams.get(&id).filter(|s| s.send.is_done() && s.recv.is_done()) else { return };
        // A STREAM_ACK still waiting to ride along must not be forgotten with the stream.
        let unsent_ack = stream.recv.final_size().filter(|_| stream.recv.ack_pending);
        self.streams.remove(&id);
        if let Some(final_size) = unsent_ack {
            self.ack_closed(id, final_size.saturating_add(1));
        }
        if id.initiator() != self.side {
            self.max_remote_streams = (self.max_remote_streams + 1).min(MAX_STREAM_COUNT);
            self.max_streams_pending = true;
        }
    }

    fn schedule_send(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if !stream.in_send_queue {
                stream.in_send_queue = true;
                self.send_queue.push_back(id);
            }
        }
    }

    /// Queues the stream's STREAM_ACK (its `ack_pending` is set): due [`StreamConfig::ack_delay`] from now, or at
    /// once if `urgent` or when the stream's receiving half is complete or reset, so that the peer can release it
    /// without delay.
    fn schedule_ack(&mut self, id: StreamId, urgent: bool) {
        let Some(stream) = self.streams.get_mut(&id) else { return };
        let at_once = urgent || stream.recv.is_complete();
        let due = if at_once { self.clock } else { self.clock + self.config.ack_delay };
        self.acks_due_at = Some(self.acks_due_at.map_or(due, |earlier| earlier.min(due)));
        if !stream.in_ack_queue {
            stream.in_ack_queue = true;
            self.ack_queue.push_back(id);
        }
    }

    fn schedule_control(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if !stream.in_control_queue {
                stream.in_control_queue = true;
                self.control_queue.push_back(id);
            }
        }
    }
}

fn check_error_code(error_code: u64) -> Result<(), StreamError> {
    if error_code <= varint::MAX {
        Ok(())
    } else {
        Err(StreamError::ErrorCodeTooLarge(error_code))
    }
}

/// Encodes `frame` if it fits in `budget`.
fn emit(frame: &Frame<'_>, budget: &mut usize, out: &mut Vec<u8>) -> bool {
    let len = frame.encoded_len();
    if len > *budget {
        return false;
    }
    frame.encode(out);
    *budget -= len;
    true
}

/// Most data bytes a STREAM frame for `id` at `offset` can carry within `budget`, or `None` if not even an empty one
/// fits: the compact frame `type | id | offset | data` that runs to the end of the packet.
fn stream_frame_capacity(budget: usize, id: StreamId, offset: u64) -> Option<usize> {
    budget.checked_sub(STREAM_TYPE_LEN + varint::encoded_len(id.as_u64()) + varint::encoded_len(offset))
}

/// Keeps the lowest ranges of a STREAM_ACK that fit in `budget` (all, if they fit): the lowest matter most, since
/// they release the head of the peer's buffer. Leaves `ranges` empty if not even one fits.
fn truncate_ack_to_fit(stream_id: u64, ranges: &mut Vec<Range<u64>>, budget: usize) {
    let id_len = varint::encoded_len(stream_id);
    let mut ranges_len = 0;
    let mut fitting = 0;
    for (i, range) in ranges.iter().enumerate() {
        ranges_len += varint::encoded_len(range.start) + varint::encoded_len(range.end);
        let value_len = id_len + varint::encoded_len(i as u64 + 1) + ranges_len;
        if 1 + varint::encoded_len(value_len as u64) + value_len > budget {
            break;
        }
        fitting = i + 1;
    }
    ranges.truncate(fitting);
}
