//! Encoding frames: each value after its type and (except for the compact STREAM frame) its length.

use std::net::{IpAddr, SocketAddr};

use super::frame_type::{FAMILY_V4, FAMILY_V6};
use super::{AckFrame, Frame};
use crate::varint;

impl Frame<'_> {
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
    /// documented on the fields (ACK and STREAM_ACK range order, a compact STREAM frame being the last, a
    /// non-empty, non-decreasing DELIVERY_FORECAST) are the caller's to keep.
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
            Self::DeliveryForecast { tick, received, cumulative } => {
                varint::encode(*tick, out);
                varint::encode(*received, out);
                varint::encode(cumulative.len() as u64, out);
                for &packets in cumulative {
                    varint::encode(packets, out);
                }
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
            Self::DeliveryForecast { tick, received, cumulative } => {
                varints(&[*tick, *received, cumulative.len() as u64]) + varints(cumulative)
            }
            Self::Extension { data, .. } => data.len(),
        }
    }
}

impl AckFrame {
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
}
