//! Frames inside a sealed payload (wire-format section 7): `type (varint) | length (varint) | value`, except the
//! compact STREAM frame that ends a plaintext, which has no length.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::{Range, RangeInclusive};

use crate::reader::Reader;
use crate::{varint, WireError};

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
    /// The highest core type defined; the core types above it are unknown.
    pub(super) const LAST_CORE: u64 = STREAM_TO_END_FIN;
    /// Types from here on are extensions, which receivers may skip.
    pub(super) const FIRST_EXTENSION: u64 = 0x20;
}

const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// Why a known frame's value does not decode (the `reason` of [`WireError::MalformedFrame`]).
type Malformed = &'static str;
const VALUE_TOO_SHORT: Malformed = "value ends inside a field";

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

/// ECN counts of an ACK frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EcnCounts {
    /// Packets received with ECT(0).
    pub ect0: u64,
    /// Packets received with ECT(1).
    pub ect1: u64,
    /// Packets received with CE.
    pub ce: u64,
}

/// An ACK frame (RFC 9000 section 19.3 encoding, ECN counts always present).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AckFrame {
    /// Largest packet number acknowledged; the end of `ranges[0]`.
    pub largest: u64,
    /// Time from receiving `largest` to sending this frame, in microseconds.
    pub ack_delay_micros: u64,
    /// Acknowledged packet numbers: descending, the first containing `largest`, with a gap of at least one
    /// packet number between neighbours. Never empty.
    pub ranges: Vec<RangeInclusive<u64>>,
    /// ECN counts.
    pub ecn: EcnCounts,
}

impl AckFrame {
    /// Builds an ACK from packet-number ranges in any order, merging overlapping and adjacent ones and dropping
    /// empty ones. `None` if nothing is acknowledged.
    pub fn from_ranges(
        ranges: impl IntoIterator<Item = RangeInclusive<u64>>,
        ack_delay_micros: u64,
        ecn: EcnCounts,
    ) -> Option<Self> {
        let mut sorted: Vec<_> = ranges.into_iter().filter(|range| !range.is_empty()).collect();
        sorted.sort_unstable_by_key(|range| std::cmp::Reverse(*range.end()));
        let mut merged: Vec<RangeInclusive<u64>> = Vec::with_capacity(sorted.len());
        for range in sorted {
            match merged.last_mut() {
                // Sorted by end, so `range` ends at or below `last`; touching or overlapping means one range.
                Some(last) if range.end().saturating_add(1) >= *last.start() => {
                    *last = (*last.start()).min(*range.start())..=*last.end();
                }
                _ => merged.push(range),
            }
        }
        let largest = *merged.first()?.end();
        Some(Self { largest, ack_delay_micros, ranges: merged, ecn })
    }

    /// Every acknowledged packet number, descending.
    pub fn packet_numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranges.iter().flat_map(|range| range.clone().rev())
    }

    /// Whether `packet_number` is acknowledged.
    pub fn contains(&self, packet_number: u64) -> bool {
        self.ranges.iter().any(|range| range.contains(&packet_number))
    }

    /// The RFC 9000 fields: `first_range`, then (`gap`, `range_len`) pairs. Saturates where the documented
    /// invariants of `ranges` do not hold rather than panicking.
    fn wire_ranges(&self) -> (u64, impl Iterator<Item = (u64, u64)> + '_) {
        debug_assert!(self.is_well_formed(), "malformed AckFrame: {self:?}");
        let first_smallest = self.ranges.first().map_or(self.largest, |range| *range.start());
        let first_range = self.largest.saturating_sub(first_smallest);
        let pairs = self.ranges.windows(2).map(|pair| {
            let (above, below) = (&pair[0], &pair[1]);
            let gap = above.start().saturating_sub(*below.end()).saturating_sub(2);
            (gap, below.end().saturating_sub(*below.start()))
        });
        (first_range, pairs)
    }

    fn is_well_formed(&self) -> bool {
        self.ranges.first().is_some_and(|first| *first.end() == self.largest)
            && self.ranges.iter().all(|range| !range.is_empty())
            && self.ranges.windows(2).all(|pair| pair[1].end().saturating_add(1) < *pair[0].start())
    }

    fn value_len(&self) -> usize {
        let (first_range, pairs) = self.wire_ranges();
        let ranges: usize = pairs.map(|(gap, len)| varint::encoded_len(gap) + varint::encoded_len(len)).sum();
        varint::encoded_len(self.largest)
            + varint::encoded_len(self.ack_delay_micros)
            + varint::encoded_len(self.range_count())
            + varint::encoded_len(first_range)
            + ranges
            + varint::encoded_len(self.ecn.ect0)
            + varint::encoded_len(self.ecn.ect1)
            + varint::encoded_len(self.ecn.ce)
    }

    fn range_count(&self) -> u64 {
        self.ranges.len().saturating_sub(1) as u64
    }

    fn encode_value(&self, out: &mut Vec<u8>) {
        let (first_range, pairs) = self.wire_ranges();
        varint::encode(self.largest, out);
        varint::encode(self.ack_delay_micros, out);
        varint::encode(self.range_count(), out);
        varint::encode(first_range, out);
        for (gap, len) in pairs {
            varint::encode(gap, out);
            varint::encode(len, out);
        }
        varint::encode(self.ecn.ect0, out);
        varint::encode(self.ecn.ect1, out);
        varint::encode(self.ecn.ce, out);
    }

    fn decode_value(reader: &mut Reader<'_>) -> Result<Self, Malformed> {
        let largest = reader.varint().ok_or(VALUE_TOO_SHORT)?;
        let ack_delay_micros = reader.varint().ok_or(VALUE_TOO_SHORT)?;
        let range_count = reader.varint().ok_or(VALUE_TOO_SHORT)?;
        let first_range = reader.varint().ok_or(VALUE_TOO_SHORT)?;
        let mut smallest = largest.checked_sub(first_range).ok_or("first ACK range extends below packet number 0")?;
        // Each further range takes at least two bytes: bound the allocation by the input, not by the count.
        let capacity = usize::try_from(range_count).unwrap_or(usize::MAX).min(reader.remaining() / 2);
        let mut ranges = Vec::with_capacity(1 + capacity);
        ranges.push(smallest..=largest);
        for _ in 0..range_count {
            let gap = reader.varint().ok_or(VALUE_TOO_SHORT)?;
            let len = reader.varint().ok_or(VALUE_TOO_SHORT)?;
            let below = "ACK range extends below packet number 0";
            let end = smallest.checked_sub(gap).and_then(|end| end.checked_sub(2)).ok_or(below)?;
            let start = end.checked_sub(len).ok_or(below)?;
            ranges.push(start..=end);
            smallest = start;
        }
        let ecn = EcnCounts {
            ect0: reader.varint().ok_or(VALUE_TOO_SHORT)?,
            ect1: reader.varint().ok_or(VALUE_TOO_SHORT)?,
            ce: reader.varint().ok_or(VALUE_TOO_SHORT)?,
        };
        Ok(Self { largest, ack_delay_micros, ranges, ecn })
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
            Self::Extension { frame_type, .. } => *frame_type,
        }
    }

    /// Whether a packet carrying this frame must be acknowledged (as in QUIC: all but PADDING, ACK, CLOSE, and
    /// FEEDBACK_ECHO, which rides in non-eliciting ACK packets). Unknown extensions count as eliciting.
    pub fn is_ack_eliciting(&self) -> bool {
        !matches!(self, Self::Padding(_) | Self::Ack(_) | Self::FeedbackEcho { .. } | Self::Close { .. })
    }

    /// Bytes [`Frame::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        let value_len = self.value_len();
        let length_len = if self.has_length() { varint::encoded_len(value_len as u64) } else { 0 };
        varint::encoded_len(self.frame_type()) + length_len + value_len
    }

    /// Whether the encoding carries a length field: every frame but the compact STREAM.
    fn has_length(&self) -> bool {
        !matches!(self, Self::Stream { to_end: true, .. })
    }

    /// Appends the frame, using the shortest varint encodings.
    ///
    /// # Panics
    /// If an integer field that travels as a varint exceeds [`varint::MAX`] (2^62 - 1). Other invariants
    /// documented on the fields (ACK and STREAM_ACK range order, a compact STREAM frame being the last) are the
    /// caller's to keep.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let value_len = self.value_len();
        out.reserve(self.encoded_len());
        varint::encode(self.frame_type(), out);
        if self.has_length() {
            varint::encode(value_len as u64, out);
        }
        match self {
            Self::Padding(len) => out.resize(out.len() + *len, 0),
            Self::Ack(ack) => ack.encode_value(out),
            Self::FeedbackEcho { max_queue_level, min_rate_hint } => {
                out.extend_from_slice(&max_queue_level.to_be_bytes());
                out.extend_from_slice(&min_rate_hint.to_be_bytes());
            }
            Self::Stream { stream_id, offset, fin, data, to_end } => {
                varint::encode(*stream_id, out);
                varint::encode(*offset, out);
                if !to_end {
                    out.push(u8::from(*fin));
                }
                out.extend_from_slice(data);
            }
            Self::StreamAck { stream_id, ranges } => {
                varint::encode(*stream_id, out);
                varint::encode(ranges.len() as u64, out);
                for range in ranges {
                    varint::encode(range.start, out);
                    varint::encode(range.end, out);
                }
            }
            Self::MaxData(max) | Self::MaxStreams(max) => varint::encode(*max, out),
            Self::MaxStreamData { stream_id, max } => {
                varint::encode(*stream_id, out);
                varint::encode(*max, out);
            }
            Self::ResetStream { stream_id, error_code, final_size } => {
                varint::encode(*stream_id, out);
                varint::encode(*error_code, out);
                varint::encode(*final_size, out);
            }
            Self::StopSending { stream_id, error_code } => {
                varint::encode(*stream_id, out);
                varint::encode(*error_code, out);
            }
            Self::PathChallenge(data) | Self::PathResponse(data) => out.extend_from_slice(data),
            Self::PathStatus { channel_id, status } => out.extend_from_slice(&[*channel_id, status.to_u8()]),
            Self::Ping => {}
            Self::Close { error_code, reason } => {
                varint::encode(*error_code, out);
                out.extend_from_slice(reason);
            }
            Self::NewAddress(address) => {
                match address.ip() {
                    IpAddr::V4(ip) => {
                        out.push(FAMILY_V4);
                        out.extend_from_slice(&ip.octets());
                    }
                    IpAddr::V6(ip) => {
                        out.push(FAMILY_V6);
                        out.extend_from_slice(&ip.octets());
                    }
                }
                out.extend_from_slice(&address.port().to_be_bytes());
            }
            Self::Extension { data, .. } => out.extend_from_slice(data),
        }
    }

    fn value_len(&self) -> usize {
        let varints = |values: &[u64]| values.iter().map(|&value| varint::encoded_len(value)).sum::<usize>();
        match self {
            Self::Padding(len) => *len,
            Self::Ack(ack) => ack.value_len(),
            Self::FeedbackEcho { .. } => 2 + 4,
            Self::Stream { stream_id, offset, data, to_end, .. } => {
                varints(&[*stream_id, *offset]) + usize::from(!to_end) + data.len()
            }
            Self::StreamAck { stream_id, ranges } => {
                varints(&[*stream_id, ranges.len() as u64])
                    + ranges.iter().map(|range| varints(&[range.start, range.end])).sum::<usize>()
            }
            Self::MaxData(max) | Self::MaxStreams(max) => varints(&[*max]),
            Self::MaxStreamData { stream_id, max } => varints(&[*stream_id, *max]),
            Self::ResetStream { stream_id, error_code, final_size } => varints(&[*stream_id, *error_code, *final_size]),
            Self::StopSending { stream_id, error_code } => varints(&[*stream_id, *error_code]),
            Self::PathChallenge(data) | Self::PathResponse(data) => data.len(),
            Self::PathStatus { .. } => 2,
            Self::Ping => 0,
            Self::Close { error_code, reason } => varints(&[*error_code]) + reason.len(),
            Self::NewAddress(SocketAddr::V4(_)) => 1 + 4 + 2,
            Self::NewAddress(SocketAddr::V6(_)) => 1 + 16 + 2,
            Self::Extension { data, .. } => data.len(),
        }
    }
}

/// Parses the frames of a plaintext in order. The iterator yields each frame, or one error and then stops.
pub fn parse_frames(plaintext: &[u8]) -> Frames<'_> {
    Frames { plaintext, offset: 0, failed: false }
}

/// Iterator returned by [`parse_frames`].
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    plaintext: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.plaintext.get(self.offset..).filter(|rest| !rest.is_empty() && !self.failed)?;
        let mut reader = Reader::new(rest);
        let result = parse_frame(&mut reader, self.offset);
        self.offset = self.plaintext.len() - reader.remaining();
        self.failed = result.is_err();
        Some(result)
    }
}

fn parse_frame<'a>(reader: &mut Reader<'a>, offset: usize) -> Result<Frame<'a>, WireError> {
    let truncated = WireError::FrameTruncated { offset };
    let frame_type = reader.varint().ok_or(truncated)?;
    if frame_type > frame_type::LAST_CORE && frame_type < frame_type::FIRST_EXTENSION {
        return Err(WireError::UnknownFrame { frame_type });
    }
    let value = if matches!(frame_type, frame_type::STREAM_TO_END | frame_type::STREAM_TO_END_FIN) {
        reader.rest()
    } else {
        let value_len = reader.varint().ok_or(truncated)?;
        usize::try_from(value_len).ok().and_then(|len| reader.bytes(len)).ok_or(truncated)?
    };
    decode_value(frame_type, value).map_err(|reason| WireError::MalformedFrame { frame_type, reason })
}

/// Decodes a known frame's value, which must be used up exactly.
fn decode_value(frame_type: u64, value: &[u8]) -> Result<Frame<'_>, Malformed> {
    let mut reader = Reader::new(value);
    let varint = |reader: &mut Reader<'_>| reader.varint().ok_or(VALUE_TOO_SHORT);
    let frame = match frame_type {
        frame_type::PADDING => {
            if value.iter().any(|&byte| byte != 0) {
                return Err("PADDING value has a non-zero byte");
            }
            Frame::Padding(reader.rest().len())
        }
        frame_type::ACK => Frame::Ack(AckFrame::decode_value(&mut reader)?),
        frame_type::FEEDBACK_ECHO => Frame::FeedbackEcho {
            max_queue_level: reader.u16().ok_or(VALUE_TOO_SHORT)?,
            min_rate_hint: reader.u32().ok_or(VALUE_TOO_SHORT)?,
        },
        frame_type::STREAM | frame_type::STREAM_TO_END | frame_type::STREAM_TO_END_FIN => {
            let stream_id = varint(&mut reader)?;
            let offset = varint(&mut reader)?;
            let to_end = frame_type != frame_type::STREAM;
            let fin = if to_end {
                frame_type == frame_type::STREAM_TO_END_FIN
            } else {
                match reader.u8().ok_or(VALUE_TOO_SHORT)? {
                    0 => false,
                    1 => true,
                    _ => return Err("STREAM fin is neither 0 nor 1"),
                }
            };
            let data = reader.rest();
            if offset.checked_add(data.len() as u64).is_none_or(|end| end > varint::MAX) {
                return Err("STREAM data extends past byte offset 2^62 - 1");
            }
            Frame::Stream { stream_id, offset, fin, data, to_end }
        }
        frame_type::STREAM_ACK => {
            let stream_id = varint(&mut reader)?;
            let range_count = varint(&mut reader)?;
            let capacity = usize::try_from(range_count).unwrap_or(usize::MAX).min(reader.remaining() / 2);
            let mut ranges: Vec<Range<u64>> = Vec::with_capacity(capacity);
            for _ in 0..range_count {
                let range = varint(&mut reader)?..varint(&mut reader)?;
                if range.is_empty() {
                    return Err("STREAM_ACK range is empty");
                }
                if ranges.last().is_some_and(|previous| range.start < previous.end) {
                    return Err("STREAM_ACK ranges are not ascending and disjoint");
                }
                ranges.push(range);
            }
            Frame::StreamAck { stream_id, ranges }
        }
        frame_type::MAX_DATA => Frame::MaxData(varint(&mut reader)?),
        frame_type::MAX_STREAM_DATA => {
            Frame::MaxStreamData { stream_id: varint(&mut reader)?, max: varint(&mut reader)? }
        }
        frame_type::MAX_STREAMS => Frame::MaxStreams(varint(&mut reader)?),
        frame_type::RESET_STREAM => Frame::ResetStream {
            stream_id: varint(&mut reader)?,
            error_code: varint(&mut reader)?,
            final_size: varint(&mut reader)?,
        },
        frame_type::STOP_SENDING => {
            Frame::StopSending { stream_id: varint(&mut reader)?, error_code: varint(&mut reader)? }
        }
        frame_type::PATH_CHALLENGE => Frame::PathChallenge(reader.array().ok_or(VALUE_TOO_SHORT)?),
        frame_type::PATH_RESPONSE => Frame::PathResponse(reader.array().ok_or(VALUE_TOO_SHORT)?),
        frame_type::PATH_STATUS => {
            let channel_id = reader.u8().ok_or(VALUE_TOO_SHORT)?;
            let status = reader.u8().ok_or(VALUE_TOO_SHORT)?;
            let status = PathStatus::from_u8(status).ok_or("PATH_STATUS status is not 0, 1 or 2")?;
            Frame::PathStatus { channel_id, status }
        }
        frame_type::PING => Frame::Ping,
        frame_type::CLOSE => Frame::Close { error_code: varint(&mut reader)?, reason: reader.rest() },
        frame_type::NEW_ADDRESS => {
            let ip = match reader.u8().ok_or(VALUE_TOO_SHORT)? {
                FAMILY_V4 => IpAddr::V4(Ipv4Addr::from(reader.array::<4>().ok_or(VALUE_TOO_SHORT)?)),
                FAMILY_V6 => IpAddr::V6(Ipv6Addr::from(reader.array::<16>().ok_or(VALUE_TOO_SHORT)?)),
                _ => return Err("NEW_ADDRESS family is neither 4 nor 6"),
            };
            Frame::NewAddress(SocketAddr::new(ip, reader.u16().ok_or(VALUE_TOO_SHORT)?))
        }
        // `parse_frame` rejected the unknown core types, so only extensions remain.
        frame_type => Frame::Extension { frame_type, data: reader.rest() },
    };
    if reader.is_empty() {
        Ok(frame)
    } else {
        Err("bytes left over after the value's fields")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddrV4, SocketAddrV6};

    fn encoded(frame: &Frame<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        frame.encode(&mut out);
        assert_eq!(out.len(), frame.encoded_len(), "encoded_len of {frame:?}");
        out
    }

    fn parsed(bytes: &[u8]) -> Vec<Result<Frame<'_>, WireError>> {
        parse_frames(bytes).collect()
    }

    fn ack(ranges: &[RangeInclusive<u64>]) -> AckFrame {
        AckFrame {
            largest: *ranges[0].end(),
            ack_delay_micros: 250,
            ranges: ranges.to_vec(),
            ecn: EcnCounts { ect0: 10, ect1: 0, ce: 2 },
        }
    }

    fn one_of_each() -> Vec<Frame<'static>> {
        vec![
            Frame::Padding(0),
            Frame::Padding(70),
            Frame::Ack(ack(&[100..=100])),
            Frame::Ack(ack(&[90..=100, 50..=80, 0..=3])),
            Frame::FeedbackEcho { max_queue_level: 0xfffe, min_rate_hint: 10_000 },
            Frame::Stream { stream_id: 4, offset: 1 << 40, fin: true, data: b"hello", to_end: false },
            Frame::Stream { stream_id: 0, offset: 0, fin: false, data: b"", to_end: false },
            Frame::StreamAck { stream_id: 8, ranges: vec![0..10, 10..20, 100..1 << 20] },
            Frame::StreamAck { stream_id: 8, ranges: vec![] },
            Frame::MaxData(varint::MAX),
            Frame::MaxStreamData { stream_id: 12, max: 65_536 },
            Frame::MaxStreams(100),
            Frame::ResetStream { stream_id: 16, error_code: 7, final_size: 12_345 },
            Frame::StopSending { stream_id: 20, error_code: 0 },
            Frame::PathChallenge(*b"12345678"),
            Frame::PathResponse([0xff; 8]),
            Frame::PathStatus { channel_id: 255, status: PathStatus::Abandon },
            Frame::PathStatus { channel_id: 1, status: PathStatus::Available },
            Frame::PathStatus { channel_id: 2, status: PathStatus::Standby },
            Frame::Ping,
            Frame::Close { error_code: 0x1234, reason: "idle timeout".as_bytes() },
            Frame::NewAddress(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4477))),
            Frame::NewAddress(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 65_535, 0, 0))),
            Frame::Extension { frame_type: 0x20, data: b"" },
            Frame::Extension { frame_type: varint::MAX, data: b"ext" },
        ]
    }

    #[test]
    fn every_frame_round_trips_alone_and_in_sequence() {
        let frames = one_of_each();
        let mut plaintext = Vec::new();
        for frame in &frames {
            let bytes = encoded(frame);
            assert_eq!(parsed(&bytes), [Ok(frame.clone())]);
            plaintext.extend_from_slice(&bytes);
        }
        let reparsed: Result<Vec<_>, _> = parse_frames(&plaintext).collect();
        assert_eq!(reparsed, Ok(frames));
    }

    #[test]
    fn compact_stream_frames_run_to_the_end_of_the_plaintext() {
        let with_fin = Frame::Stream { stream_id: 4, offset: 1000, fin: true, data: b"abc", to_end: true };
        // type 0x11 (FIN), id 4, offset 1000 in two bytes, then the data: no length, no fin byte.
        assert_eq!(encoded(&with_fin), [0x11, 0x04, 0x43, 0xe8, b'a', b'b', b'c']);
        let explicit = Frame::Stream { stream_id: 4, offset: 1000, fin: true, data: b"abc", to_end: false };
        assert_eq!(explicit.encoded_len(), with_fin.encoded_len() + 2);
        let full = vec![7; 1400];
        let full_compact = Frame::Stream { stream_id: 0, offset: 1 << 20, fin: false, data: &full, to_end: true };
        let full_explicit = Frame::Stream { stream_id: 0, offset: 1 << 20, fin: false, data: &full, to_end: false };
        assert_eq!(full_compact.encoded_len(), 1 + 1 + 4 + 1400);
        assert_eq!(full_explicit.encoded_len(), full_compact.encoded_len() + 3);

        let mut plaintext = encoded(&Frame::Ping);
        plaintext.extend_from_slice(&encoded(&full_compact));
        assert_eq!(parsed(&plaintext), [Ok(Frame::Ping), Ok(full_compact)]);
        // Whatever follows the fields is data, even bytes that would parse as frames.
        let empty = Frame::Stream { stream_id: 0, offset: 0, fin: false, data: b"", to_end: true };
        assert_eq!(parsed(&[0x10, 0x00, 0x00]), [Ok(empty)]);
        let absorbing = Frame::Stream { stream_id: 0, offset: 0, fin: false, data: &[0x0d, 0x00], to_end: true };
        assert_eq!(parsed(&[0x10, 0x00, 0x00, 0x0d, 0x00]), [Ok(absorbing)]);
    }

    #[test]
    fn ack_uses_the_rfc_9000_range_encoding() {
        let frame = Frame::Ack(ack(&[90..=100, 50..=80, 0..=3]));
        // type, length, largest 100, delay 250, 2 more ranges, first_range 10, gap 8 (81..=89), len 30,
        // gap 45 (4..=49), len 3, ECN 10 0 2.
        let value = [0x40, 0x64, 0x40, 0xfa, 0x02, 0x0a, 0x08, 0x1e, 0x2d, 0x03, 0x0a, 0x00, 0x02];
        let mut expected = vec![0x01, value.len() as u8];
        expected.extend_from_slice(&value);
        assert_eq!(encoded(&frame), expected);
    }

    #[test]
    fn ack_ranges_below_zero_are_rejected() {
        let malformed = |value: &[u8]| {
            let mut bytes = vec![0x01, value.len() as u8];
            bytes.extend_from_slice(value);
            match parse_frames(&bytes).next() {
                Some(Err(WireError::MalformedFrame { frame_type: 0x01, reason })) => reason,
                other => panic!("expected a malformed ACK, got {other:?}"),
            }
        };
        // first_range 6 > largest 5.
        assert!(malformed(&[5, 0, 0, 6, 0, 0, 0]).contains("below packet number 0"));
        // largest 5, first_range 2 (3..=5), gap 2 would end at 3 - 2 - 2 < 0.
        assert!(malformed(&[5, 0, 1, 2, 2, 0, 0, 0, 0]).contains("below packet number 0"));
        // largest 5, first_range 0, gap 0 ends at 3, range_len 4 starts below 0.
        assert!(malformed(&[5, 0, 1, 0, 0, 4, 0, 0, 0]).contains("below packet number 0"));
        // The lowest legal range: gap 0 ends at 3, range_len 3 starts at 0.
        let bytes = [0x01, 9, 5, 0, 1, 0, 0, 3, 0, 0, 0];
        let Some(Ok(Frame::Ack(lowest))) = parse_frames(&bytes).next() else { panic!("valid ACK") };
        assert_eq!(lowest.ranges, [5..=5, 0..=3]);
        // A range count (63) larger than the value holds is a short value, not a large allocation.
        assert!(malformed(&[0x43, 0xe8, 0, 0x3f, 0, 0, 0, 0, 0, 0]).contains("ends inside a field"));
    }

    #[test]
    fn ack_helpers_merge_and_enumerate() {
        let frame = AckFrame::from_ranges(
            [3..=4, 10..=12, 5..=5, 11..=15, RangeInclusive::new(20, 19), 0..=0],
            9,
            EcnCounts::default(),
        )
        .expect("something acknowledged");
        assert_eq!(frame.largest, 15);
        assert_eq!(frame.ranges, [10..=15, 3..=5, 0..=0]);
        assert_eq!(frame.packet_numbers().collect::<Vec<_>>(), [15, 14, 13, 12, 11, 10, 5, 4, 3, 0]);
        assert!(frame.contains(4) && !frame.contains(6) && !frame.contains(16));
        assert_eq!(parsed(&encoded(&Frame::Ack(frame.clone()))), [Ok(Frame::Ack(frame))]);
        assert_eq!(AckFrame::from_ranges([], 0, EcnCounts::default()), None);
        let up_to_max = AckFrame::from_ranges([u64::MAX - 1..=u64::MAX, 0..=1], 0, EcnCounts::default());
        assert_eq!(up_to_max.map(|ack| ack.ranges.len()), Some(2));
    }

    #[test]
    fn unknown_core_types_are_errors_and_extensions_are_skippable() {
        for core in 0x12..0x20u8 {
            assert_eq!(parsed(&[core, 0]), [Err(WireError::UnknownFrame { frame_type: u64::from(core) })]);
        }
        // A two-byte extension type 0x4242 followed by a PING: the caller sees both and may ignore the first.
        let bytes = [0x42, 0x42, 0x03, 1, 2, 3, 0x0d, 0x00];
        assert_eq!(parsed(&bytes), [Ok(Frame::Extension { frame_type: 0x0242, data: &[1, 2, 3] }), Ok(Frame::Ping)]);
    }

    #[test]
    fn truncation_is_reported_with_the_frame_offset() {
        let ping = [0x0d, 0x00];
        let cases: [(&[u8], usize); 4] = [
            (&[0x0d, 0x00, 0x40], 2),                                                 // type varint cut
            (&[0x0d, 0x00, 0x0d], 2),                                                 // length missing
            (&[0x0d, 0x00, 0x03, 0x05, 1], 2),                                        // value shorter than its length
            (&[0x0d, 0x00, 0x03, 0xc0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], 2), // length near 2^62
        ];
        for (bytes, offset) in cases {
            assert_eq!(parsed(bytes), [Ok(Frame::Ping), Err(WireError::FrameTruncated { offset })], "{bytes:02x?}");
        }
        assert_eq!(parsed(&ping[..0]), []);
    }

    #[test]
    fn parsing_stops_after_the_first_error() {
        let bytes = [0x0d, 0x00, 0x1f, 0x00, 0x0d, 0x00];
        assert_eq!(parsed(&bytes), [Ok(Frame::Ping), Err(WireError::UnknownFrame { frame_type: 0x1f })]);
    }

    #[test]
    fn malformed_values_are_rejected() {
        let cases: [(&[u8], &str); 13] = [
            (&[0x00, 0x02, 0x00, 0x01], "non-zero"),
            (&[0x03, 0x03, 0x00, 0x00, 0x02], "fin"),
            (&[0x03, 0x0b, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01], "2^62"),
            (&[0x10], "ends inside"),
            (&[0x11, 0x04, 0x43], "ends inside"),
            (&[0x11, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], "2^62"),
            (&[0x04, 0x04, 0x00, 0x01, 0x05, 0x05], "empty"),
            (&[0x04, 0x06, 0x00, 0x02, 0x00, 0x05, 0x04, 0x08], "ascending"),
            (&[0x0a, 0x07, 1, 2, 3, 4, 5, 6, 7], "ends inside"),
            (&[0x0c, 0x02, 0x01, 0x03], "status"),
            (&[0x0d, 0x01, 0x00], "left over"),
            (&[0x0f, 0x07, 0x05, 1, 2, 3, 4, 0, 1], "family"),
            (&[0x02, 0x07, 0, 0, 0, 0, 0, 0, 0], "left over"),
        ];
        for (bytes, problem) in cases {
            match parsed(bytes).as_slice() {
                [Err(WireError::MalformedFrame { frame_type, reason })] => {
                    assert_eq!(*frame_type, u64::from(bytes[0]));
                    assert!(reason.contains(problem), "{bytes:02x?}: {reason}");
                }
                other => panic!("{bytes:02x?}: expected one malformed frame, got {other:?}"),
            }
        }
    }

    #[test]
    fn zero_bytes_parse_as_empty_padding_frames() {
        assert_eq!(parsed(&[0; 4]), [Ok(Frame::Padding(0)), Ok(Frame::Padding(0))]);
        assert_eq!(parsed(&[0; 3]), [Ok(Frame::Padding(0)), Err(WireError::FrameTruncated { offset: 2 })]);
    }

    #[test]
    fn non_minimal_varints_in_frames_are_accepted() {
        let bytes = [0x40, 0x05, 0x80, 0x00, 0x00, 0x02, 0x40, 0x07];
        assert_eq!(parsed(&bytes), [Ok(Frame::MaxData(7))]);
    }

    #[test]
    fn ack_eliciting_frames() {
        let not_eliciting: Vec<u64> =
            one_of_each().iter().filter(|frame| !frame.is_ack_eliciting()).map(Frame::frame_type).collect();
        assert_eq!(not_eliciting, [0x00, 0x00, 0x01, 0x01, 0x02, 0x0e]);
    }
}
