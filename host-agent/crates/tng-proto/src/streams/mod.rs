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
//! - **Backpressure before the network, not after it**: besides the send buffers, a write is cut short once the
//!   unsent bytes reach a bound the connection keeps at about one congestion window per channel
//!   ([`Streams::set_unsent_limit`], as TCP_NOTSENT_LOWAT), so a fast writer waits instead of queueing seconds of
//!   data; how long written bytes waited for their first transmission is measured ([`StreamStats`]).
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
//!   receiving half is complete or reset or an eighth of its initial window arrived since the last one
//!   (`StreamConfig::ack_every`: the peer frees its send buffer only on STREAM_ACKs). One per received packet made
//!   the peer piggyback an ACK on almost every data packet it sent.
//! - The FIN occupies one offset at the final size in acknowledgement space, as in TCP: a range containing the final
//!   size acknowledges the FIN. A receiver acknowledges a RESET_STREAM with the range `0..final_size + 1`.
//! - A zero-length STREAM frame without FIN is a credit probe: a sender blocked by credit sends one each timeout, and
//!   the receiver answers with its current MAX_STREAM_DATA / MAX_DATA / MAX_STREAMS where they exceed what the peer
//!   has used. This recovers from a lost credit update even when a middlebox acknowledged the packet that carried
//!   it. A side refused a new stream probes on the last stream it was allowed to open.
//!
//! Module map: `state` holds the set of streams and their places in the frame queues; `sending` and `receiving` are
//! the two directions across streams (`send` and `recv` are one stream's halves); `credit` is flow control;
//! `frame_writing` fills packets; `retransmit` handles what the flow layer reports about sent packets and runs the
//! semantic retransmission timer; `config` holds the limits.

mod byte_buffer;
mod config;
mod credit;
mod error;
mod frame_writing;
mod id;
mod queueing;
mod range_set;
mod receiving;
mod recv;
mod retransmit;
mod send;
mod sending;
mod state;
#[cfg(test)]
// One-range lists of offsets are data here, not a mistaken `(a..b).collect()`.
#[allow(clippy::single_range_in_vec_init)]
mod tests;

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use rustc_hash::FxHashMap;
use tng_wire::Frame;

use crate::time::Time;

pub use config::{StreamConfig, StreamLimits};
pub use error::StreamError;
pub use id::{Side, StreamId};
pub use queueing::QueueingDelays;
pub use recv::ReadOutcome;

use config::MAX_STREAM_COUNT;
use retransmit::Timer;
use state::Stream;

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
    /// Bytes written and not yet sent once, that the peer's credit lets us send: what the unsent bound counts.
    pub bytes_unsent: u64,
    /// The bound on `bytes_unsent` ([`StreamConfig::unsent_windows`]); `None` when only the send buffers bound writes.
    pub unsent_limit: Option<u64>,
    /// Median time from the application's write to the first transmission, over the bytes sent so far.
    pub queueing_delay_p50: Option<Duration>,
    /// 95th percentile of the same.
    pub queueing_delay_p95: Option<Duration>,
}

/// All streams of one connection.
#[derive(Debug)]
pub struct Streams {
    side: Side,
    config: StreamConfig,
    streams: FxHashMap<StreamId, Stream>,
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
    /// The connection's longest round trip, when known: receive windows grow against it.
    round_trip: Option<Duration>,

    // Sending: the peer's credit and our buffers.
    peer_max_data: u64,
    /// Credit the peer grants each new stream.
    peer_max_stream_data: u64,
    /// New bytes sent on all streams: what counts against `peer_max_data`.
    data_sent: u64,
    /// Bytes buffered for sending on all streams.
    buffered: u64,
    /// Unsent bytes within each stream's credit, on all streams (see [`StreamStats::bytes_unsent`]).
    unsent: u64,
    unsent_limit: Option<u64>,
    /// How long the bytes sent so far waited between their write and their first transmission.
    queueing: QueueingDelays,
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
            streams: FxHashMap::default(),
            next_local: 0,
            next_remote: 0,
            peer_max_streams: peer.max_streams.min(MAX_STREAM_COUNT),
            max_remote_streams: limits.max_streams,
            max_streams_pending: false,
            open_blocked: false,
            open_blocked_at: None,
            stream_count_probe_pending: false,
            clock: Time::ZERO,
            round_trip: None,
            peer_max_data: peer.max_data,
            peer_max_stream_data: peer.max_stream_data,
            data_sent: 0,
            buffered: 0,
            unsent: 0,
            unsent_limit: None,
            queueing: QueueingDelays::default(),
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

    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        self.events.pop_front()
    }

    /// Stream bytes sent again so far: [`Streams::stats`] without computing the queueing quantiles.
    pub fn bytes_retransmitted(&self) -> u64 {
        self.stats.bytes_retransmitted
    }

    pub fn stats(&self) -> StreamStats {
        StreamStats {
            streams_open: self.streams.len() as u64,
            bytes_unsent: self.unsent,
            unsent_limit: self.unsent_limit,
            queueing_delay_p50: self.queueing.quantile(0.50),
            queueing_delay_p95: self.queueing.quantile(0.95),
            ..self.stats
        }
    }

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
}
