//! Local stream limits and buffer sizes, and the initial limits the two sides grant each other.

use std::time::Duration;

use tng_wire::varint;

/// Highest offset we grant or accept, one below the varint limit: the FIN's acknowledgement offset must fit too.
pub(super) const MAX_OFFSET: u64 = varint::MAX - 1;
/// Most streams one side may open, so that every stream id fits in a varint.
pub(super) const MAX_STREAM_COUNT: u64 = 1 << 60;

/// Local limits and buffer sizes. Receive windows above 2^62 - 2 and stream counts above 2^60 are lowered to those.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// Peer-opened streams that may be open at once (our MAX_STREAMS).
    pub max_streams: u64,
    /// Credit per stream at first (our MAX_STREAM_DATA window): bytes the peer may send beyond what the reader
    /// consumed. It grows while the window is what holds the sender, up to `receive_window`.
    pub stream_receive_window: u64,
    /// Credit for the whole connection (our MAX_DATA window). Bounds the memory all receive buffers can take.
    pub receive_window: u64,
    /// Most bytes one stream buffers for sending (written and not yet acknowledged by the peer).
    pub stream_send_buffer: u64,
    /// Most bytes all streams together buffer for sending.
    pub send_buffer: u64,
    /// Unsent bytes (written, not yet transmitted once) all streams together accept, in congestion windows per
    /// channel: the connection bounds them by this many times the sum of its channels' windows, as TCP_NOTSENT_LOWAT
    /// does, so that a writer faster than the network waits instead of queueing seconds of data in the sender.
    /// `None`: only the send buffers bound writes.
    pub unsent_windows: Option<u32>,
    /// Most holes one stream's reassembly may have; a peer that leaves more violates the protocol. A sender that
    /// spreads a window over paths of different delay leaves up to about one hole per packet of the slow path in
    /// flight (which that path's congestion window bounds, however far the receive window grew), so keep this above
    /// the slow path's packets in flight.
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
            unsent_windows: Some(1),
            max_reassembly_gaps: 4096,
            ack_delay: Duration::from_millis(25),
        }
    }
}

impl StreamConfig {
    /// Bytes of a stream received beyond our last STREAM_ACK that make the next one due at once rather than
    /// [`StreamConfig::ack_delay`] later: an eighth of the stream's initial window, or of our own stream send buffer
    /// (the peer's is likely alike) if that is smaller. The peer's sender frees its buffer only on STREAM_ACKs, and a
    /// fast stream's credit updates (on which they would otherwise ride) come only every half of a window that may
    /// have grown to `receive_window`: without this a sender whose buffer is smaller than that waits for the delayed
    /// ack.
    pub(super) fn ack_every(&self) -> u64 {
        (self.stream_receive_window.min(self.stream_send_buffer) / 8).max(1)
    }

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
