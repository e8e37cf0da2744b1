//! Frames inside a sealed payload (wire-format section 7): `type (varint) | length (varint) | value`, except the
//! compact STREAM frame that ends a plaintext, which has no length.

mod ack;
mod encode;
mod parse;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::ops::Range;

pub use ack::{AckFrame, EcnCounts};
pub use parse::{parse_frames, Frames};

/// The frame type codes and the address family bytes of NEW_ADDRESS.
mod frame_type {
    pub(super) const PADDING: u64 = 0x00;
    pub(super) const ACK: u64 = 0x01;
    pub(super) const FEEDBACK_ECHO: u64 = 0x02;
    pub(super) const STREAM: u64 = 0x03;
    pub(super) const STREAM_ACK: u64 = 0x04;
    pub(super) const MAX_DATA: u64 = 0x05;
    pub(super) const MAX_STREAM_DATA: u64 = 0x06;
    pub(super) const MAX_STREAMS: u64 = 0x07;
    pub(super) const RESET_STREAM: u64 = 0x08;
    pub(super) const STOP_SENDING: u64 = 0x09;
    pub(super) const PATH_CHALLENGE: u64 = 0x0a;
    pub(super) const PATH_RESPONSE: u64 = 0x0b;
    pub(super) const PATH_STATUS: u64 = 0x0c;
    pub(super) const PING: u64 = 0x0d;
    pub(super) const CLOSE: u64 = 0x0e;
    pub(super) const NEW_ADDRESS: u64 = 0x0f;
    /// STREAM without length or fin byte, running to the end of the plaintext; FIN clear.
    pub(super) const STREAM_TO_END: u64 = 0x10;
    /// The same with FIN set.
    pub(super) const STREAM_TO_END_FIN: u64 = 0x11;
    pub(super) const DELIVERY_FORECAST: u64 = 0x12;
    /// The highest core type defined; the core types above it are unknown.
    pub(super) const LAST_CORE: u64 = DELIVERY_FORECAST;
    /// Types from here on are extensions, which receivers may skip.
    pub(super) const FIRST_EXTENSION: u64 = 0x20;

    /// NEW_ADDRESS family byte of an IPv4 address.
    pub(super) const FAMILY_V4: u8 = 4;
    /// NEW_ADDRESS family byte of an IPv6 address.
    pub(super) const FAMILY_V6: u8 = 6;
}

/// One frame. Borrowed fields point into the plaintext it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// PADDING with this many zero bytes of value.
    Padding(usize),
    /// ACK of packet numbers on the channel the packet travelled.
    Ack(AckFrame),
    /// The largest `queue_level` and smallest `rate_hint` received on this channel since the last echo.
    FeedbackEcho {
        /// Largest `queue_level` seen.
        max_queue_level: u16,
        /// Smallest `rate_hint` seen.
        min_rate_hint: u32,
    },
    /// Stream data at a byte offset.
    Stream {
        /// Stream.
        stream_id: u64,
        /// Offset of `data` in the stream.
        offset: u64,
        /// Whether the stream ends after `data`.
        fin: bool,
        /// The bytes.
        data: &'a [u8],
        /// Encoded in the compact form (types 0x10/0x11): no length and no fin byte, `data` runs to the end of the
        /// plaintext, so the frame must be the last one. It saves 3 bytes on a full packet.
        to_end: bool,
    },
    /// End-to-end acknowledgement of stream bytes.
    StreamAck {
        /// Stream.
        stream_id: u64,
        /// Acknowledged byte ranges, ascending, non-empty, non-overlapping.
        ranges: Vec<Range<u64>>,
    },
    /// Connection-level credit in bytes.
    MaxData(u64),
    /// Stream-level credit in bytes.
    MaxStreamData {
        /// Stream.
        stream_id: u64,
        /// Credit.
        max: u64,
    },
    /// Highest stream count the peer may open.
    MaxStreams(u64),
    /// The sender abandons sending on a stream.
    ResetStream {
        /// Stream.
        stream_id: u64,
        /// Application error code.
        error_code: u64,
        /// Final size of the stream in bytes.
        final_size: u64,
    },
    /// The sender no longer reads a stream.
    StopSending {
        /// Stream.
        stream_id: u64,
        /// Application error code.
        error_code: u64,
    },
    /// Channel validation challenge.
    PathChallenge([u8; 8]),
    /// Echo of a [`Frame::PathChallenge`].
    PathResponse([u8; 8]),
    /// The sender's view of a channel.
    PathStatus {
        /// Channel.
        channel_id: u8,
        /// Status.
        status: PathStatus,
    },
    /// Elicits an acknowledgement.
    Ping,
    /// Closes the connection.
    Close {
        /// Error code.
        error_code: u64,
        /// Reason phrase, UTF-8 by convention (not checked).
        reason: &'a [u8],
    },
    /// An address the peer may open a channel to (flow info and scope id are not carried).
    NewAddress(SocketAddr),
    /// The receiver's cautious forecast of the channel's deliveries (Sprout), one per 20 ms tick.
    DeliveryForecast {
        /// The receiver's tick count when it made the forecast; later forecasts have larger ones.
        tick: u64,
        /// Packets the receiver has received on the channel so far.
        received: u64,
        /// Packets the channel delivers, with 95% probability, by the end of each of the next ticks: cumulative,
        /// non-decreasing, at least one tick.
        cumulative: Vec<u64>,
    },
    /// A frame of extension type (0x20 or above) this codec does not interpret.
    Extension {
        /// Frame type, at least 0x20.
        frame_type: u64,
        /// The value.
        data: &'a [u8],
    },
}

/// Status carried by [`Frame::PathStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathStatus {
    /// The channel is given up.
    Abandon,
    /// The channel may carry traffic.
    Available,
    /// The channel is kept for backup.
    Standby,
}

impl PathStatus {
    fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            0 => Self::Abandon,
            1 => Self::Available,
            2 => Self::Standby,
            _ => return None,
        })
    }

    fn to_u8(self) -> u8 {
        match self {
            Self::Abandon => 0,
            Self::Available => 1,
            Self::Standby => 2,
        }
    }
}

impl Frame<'_> {
    /// The frame's type.
    pub fn frame_type(&self) -> u64 {
        match self {
            Self::Padding(_) => frame_type::PADDING,
            Self::Ack(_) => frame_type::ACK,
            Self::FeedbackEcho { .. } => frame_type::FEEDBACK_ECHO,
            Self::Stream { to_end: false, .. } => frame_type::STREAM,
            Self::Stream { to_end: true, fin: false, .. } => frame_type::STREAM_TO_END,
            Self::Stream { to_end: true, fin: true, .. } => frame_type::STREAM_TO_END_FIN,
            Self::StreamAck { .. } => frame_type::STREAM_ACK,
            Self::MaxData(_) => frame_type::MAX_DATA,
            Self::MaxStreamData { .. } => frame_type::MAX_STREAM_DATA,
            Self::MaxStreams(_) => frame_type::MAX_STREAMS,
            Self::ResetStream { .. } => frame_type::RESET_STREAM,
            Self::StopSending { .. } => frame_type::STOP_SENDING,
            Self::PathChallenge(_) => frame_type::PATH_CHALLENGE,
            Self::PathResponse(_) => frame_type::PATH_RESPONSE,
            Self::PathStatus { .. } => frame_type::PATH_STATUS,
            Self::Ping => frame_type::PING,
            Self::Close { .. } => frame_type::CLOSE,
            Self::NewAddress(_) => frame_type::NEW_ADDRESS,
            Self::DeliveryForecast { .. } => frame_type::DELIVERY_FORECAST,
            Self::Extension { frame_type, .. } => *frame_type,
        }
    }

    /// Whether a packet carrying this frame must be acknowledged (as in QUIC: all but PADDING, ACK, CLOSE, and
    /// FEEDBACK_ECHO and DELIVERY_FORECAST, which ride in non-eliciting ACK packets). Unknown extensions count as
    /// eliciting.
    pub fn is_ack_eliciting(&self) -> bool {
        !matches!(
            self,
            Self::Padding(_)
                | Self::Ack(_)
                | Self::FeedbackEcho { .. }
                | Self::DeliveryForecast { .. }
                | Self::Close { .. }
        )
    }
}
