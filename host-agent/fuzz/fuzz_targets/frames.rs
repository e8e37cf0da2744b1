//! The frame codec from the encoder's side: a fuzzed sequence of valid frames of every type (each keeping the
//! invariants `Frame::encode` documents) must encode to exactly `encoded_len` bytes each and parse back to the same
//! frames, in order, with nothing left over. `parse_packet` covers arbitrary bytes into the decoder; this target
//! reaches the values random bytes rarely form (long ranges, large varints, every address family).

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tng_wire::varint;
use tng_wire::{parse_frames, AckFrame, EcnCounts, Frame, PathStatus};

/// Frames per input.
const MAX_FRAMES: usize = 16;
/// Ranges or ticks per list-valued frame.
const MAX_LIST: usize = 40;

/// A varint value, biased towards each encoding length's boundaries.
fn varint(u: &mut Unstructured<'_>) -> Result<u64> {
    let raw: u64 = u.arbitrary()?;
    Ok(match u.int_in_range(0..=4u8)? {
        0 => raw % (1 << 6),
        1 => raw % (1 << 14),
        2 => raw % (1 << 30),
        3 => varint::MAX - raw % 4,
        _ => raw & varint::MAX,
    })
}

fn ack(u: &mut Unstructured<'_>) -> Result<AckFrame> {
    let count = u.int_in_range(1..=MAX_LIST)?;
    let mut ranges = Vec::with_capacity(count);
    for _ in 0..count {
        let (a, b) = (varint(u)?, varint(u)?);
        ranges.push(a.min(b)..=a.max(b));
    }
    let ecn = EcnCounts { ect0: varint(u)?, ect1: varint(u)?, ce: varint(u)? };
    // Never None: every range above is non-empty.
    Ok(AckFrame::from_ranges(ranges, varint(u)?, ecn).expect("non-empty ranges"))
}

fn frame<'a>(u: &mut Unstructured<'a>) -> Result<Frame<'a>> {
    Ok(match u.int_in_range(0..=17u8)? {
        0 => Frame::Padding(u.int_in_range(0..=64)?),
        1 => Frame::Ack(ack(u)?),
        2 => Frame::FeedbackEcho { max_queue_level: u.arbitrary()?, min_rate_hint: u.arbitrary()? },
        3 => {
            let data: &[u8] = u.arbitrary()?;
            let offset = varint(u)?.min(varint::MAX - data.len() as u64);
            Frame::Stream { stream_id: varint(u)?, offset, fin: u.arbitrary()?, data, to_end: false }
        }
        4 => {
            let stream_id = varint(u)?;
            let mut ranges = Vec::new();
            let mut end = 0u64;
            for _ in 0..u.int_in_range(0..=MAX_LIST)? {
                let start = end.saturating_add(varint(u)? % 1000);
                let Some(next) = start.checked_add(1 + varint(u)? % 100_000).filter(|&e| e <= varint::MAX) else {
                    break;
                };
                ranges.push(start..next);
                end = next;
            }
            Frame::StreamAck { stream_id, ranges }
        }
        5 => Frame::MaxData(varint(u)?),
        6 => Frame::MaxStreamData { stream_id: varint(u)?, max: varint(u)? },
        7 => Frame::MaxStreams(varint(u)?),
        8 => Frame::ResetStream { stream_id: varint(u)?, error_code: varint(u)?, final_size: varint(u)? },
        9 => Frame::StopSending { stream_id: varint(u)?, error_code: varint(u)? },
        10 => Frame::PathChallenge(u.arbitrary()?),
        11 => Frame::PathResponse(u.arbitrary()?),
        12 => {
            let status = [PathStatus::Abandon, PathStatus::Available, PathStatus::Standby][u.int_in_range(0..=2)?];
            Frame::PathStatus { channel_id: u.arbitrary()?, status }
        }
        13 => Frame::Ping,
        14 => Frame::Close { error_code: varint(u)?, reason: u.arbitrary()? },
        15 => {
            let ip = if u.arbitrary()? {
                IpAddr::V4(Ipv4Addr::from(u.arbitrary::<[u8; 4]>()?))
            } else {
                IpAddr::V6(Ipv6Addr::from(u.arbitrary::<[u8; 16]>()?))
            };
            Frame::NewAddress(SocketAddr::new(ip, u.arbitrary()?))
        }
        16 => {
            let (tick, received) = (varint(u)?, varint(u)?);
            let mut cumulative = vec![varint(u)? % 1_000_000];
            for _ in 1..u.int_in_range(1..=MAX_LIST)? {
                let last = *cumulative.last().expect("one tick");
                cumulative.push(last + varint(u)? % 1000);
            }
            Frame::DeliveryForecast { tick, received, cumulative }
        }
        _ => Frame::Extension { frame_type: 0x20 + varint(u)? % (varint::MAX - 0x20), data: u.arbitrary()? },
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut frames = Vec::new();
    while frames.len() < MAX_FRAMES {
        match frame(&mut u) {
            Ok(frame) => frames.push(frame),
            Err(_) => break,
        }
    }
    // The compact STREAM frame runs to the end of the plaintext, so only the last frame may be one.
    if let Ok(data) = u.arbitrary::<&[u8]>() {
        if !data.is_empty() || u.arbitrary().unwrap_or(false) {
            let fin = u.arbitrary().unwrap_or(false);
            let offset = u.arbitrary::<u64>().unwrap_or(0) % (varint::MAX - data.len() as u64);
            frames.push(Frame::Stream { stream_id: 4, offset, fin, data, to_end: true });
        }
    }
    let mut encoded = Vec::new();
    for frame in &frames {
        let before = encoded.len();
        frame.encode(&mut encoded);
        assert_eq!(encoded.len() - before, frame.encoded_len(), "encoded_len is wrong for {frame:?}");
    }
    let parsed: Result<Vec<Frame<'_>>, _> = parse_frames(&encoded).collect();
    assert_eq!(parsed, Ok(frames));
});
