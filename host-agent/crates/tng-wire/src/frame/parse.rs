//! Parsing a plaintext into frames: the type and length of each, then its value by type.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

use super::frame_type::{self, FAMILY_V4, FAMILY_V6};
use super::{AckFrame, EcnCounts, Frame, PathStatus};
use crate::error::WireError;
use crate::reader::Reader;
use crate::varint;

/// Why a known frame's value does not decode (the `reason` of [`WireError::MalformedFrame`]).
type Malformed = &'static str;
const VALUE_TOO_SHORT: Malformed = "value ends inside a field";

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
        frame_type::DELIVERY_FORECAST => {
            let tick = varint(&mut reader)?;
            let received = varint(&mut reader)?;
            let count = varint(&mut reader)?;
            if count == 0 {
                return Err("DELIVERY_FORECAST covers no tick");
            }
            // Each tick takes at least one byte: bound the allocation by the input, not by the count.
            let capacity = usize::try_from(count).unwrap_or(usize::MAX).min(reader.remaining());
            let mut cumulative: Vec<u64> = Vec::with_capacity(capacity);
            for _ in 0..count {
                let packets = varint(&mut reader)?;
                if cumulative.last().is_some_and(|&previous| packets < previous) {
                    return Err("DELIVERY_FORECAST deliveries decrease");
                }
                cumulative.push(packets);
            }
            Frame::DeliveryForecast { tick, received, cumulative }
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

impl AckFrame {
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
