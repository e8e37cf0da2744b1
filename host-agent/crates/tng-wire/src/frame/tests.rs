use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::RangeInclusive;

use super::*;
use crate::error::WireError;
use crate::varint;

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
        Frame::DeliveryForecast { tick: 0, received: 0, cumulative: vec![0] },
        Frame::DeliveryForecast { tick: 1 << 40, received: 123_456, cumulative: vec![3, 7, 7, 20, 70, 140, 141, 200] },
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
    for core in 0x13..0x20u8 {
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
    let cases: [(&[u8], &str); 16] = [
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
        (&[0x12, 0x03, 0x01, 0x00, 0x00], "no tick"),
        (&[0x12, 0x05, 0x01, 0x00, 0x02, 0x05, 0x04], "decrease"),
        (&[0x12, 0x04, 0x01, 0x00, 0x02, 0x05], "ends inside"),
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
    assert_eq!(not_eliciting, [0x00, 0x00, 0x01, 0x01, 0x02, 0x0e, 0x12, 0x12]);
}
