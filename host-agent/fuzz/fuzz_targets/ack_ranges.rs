//! The ACK range codec. A fuzzed set of packet-number ranges in any order, overlapping or empty, goes through
//! `AckFrame::from_ranges`: the result acknowledges exactly the numbers of the input ranges (checked at every range
//! boundary and its neighbours), keeps the documented shape (descending, separated by gaps, `largest` first), and
//! survives encode-then-parse. Then the same input as a raw ACK value: whatever the decoder accepts has that shape
//! too and re-encodes to the same bytes.

#![no_main]

use std::ops::RangeInclusive;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tng_wire::varint;
use tng_wire::{parse_frames, AckFrame, EcnCounts, Frame};

const MAX_RANGES: usize = 64;
/// The ACK frame type (wire-format section 7).
const ACK_TYPE: u8 = 0x01;

fn ranges(u: &mut Unstructured<'_>) -> Result<Vec<RangeInclusive<u64>>> {
    // Clustered numbers so that ranges touch and overlap often; now and then anywhere up to the varint limit.
    let base: u64 = u.arbitrary::<u64>()? & varint::MAX;
    let base = base.min(varint::MAX - 4096);
    let mut ranges = Vec::new();
    for _ in 0..u.int_in_range(0..=MAX_RANGES)? {
        let (start, end) = if u.ratio(1, 16)? {
            (u.arbitrary::<u64>()? & varint::MAX, u.arbitrary::<u64>()? & varint::MAX)
        } else {
            (base + u64::from(u.int_in_range(0..=4095u16)?), base + u64::from(u.int_in_range(0..=4095u16)?))
        };
        // Reversed pairs are empty ranges, which from_ranges must drop.
        ranges.push(start..=end);
    }
    Ok(ranges)
}

fn assert_shape(ack: &AckFrame) {
    let first = ack.ranges.first().expect("an ACK acknowledges something");
    assert_eq!(*first.end(), ack.largest, "largest is not the end of the first range: {ack:?}");
    assert!(ack.ranges.iter().all(|range| !range.is_empty()), "empty range: {ack:?}");
    assert!(
        ack.ranges.windows(2).all(|pair| pair[1].end().saturating_add(1) < *pair[0].start()),
        "ranges not descending with gaps: {ack:?}"
    );
}

fn roundtrip(ack: &AckFrame) {
    let frame = Frame::Ack(ack.clone());
    let mut encoded = Vec::new();
    frame.encode(&mut encoded);
    assert_eq!(encoded.len(), frame.encoded_len());
    let parsed: Result<Vec<Frame<'_>>, _> = parse_frames(&encoded).collect();
    assert_eq!(parsed, Ok(vec![frame]));
}

fn check_from_ranges(input: &[RangeInclusive<u64>], ack_delay: u64) {
    let built = AckFrame::from_ranges(input.iter().cloned(), ack_delay, EcnCounts::default());
    let Some(ack) = built else {
        assert!(input.iter().all(RangeInclusive::is_empty), "nothing acknowledged for {input:?}");
        return;
    };
    assert_shape(&ack);
    let acknowledged = |n: u64| input.iter().any(|range| range.contains(&n));
    for range in input {
        for n in [range.start(), range.end()].into_iter().flat_map(|&n| [n.saturating_sub(1), n, n.saturating_add(1)]) {
            assert_eq!(ack.contains(n), acknowledged(n), "packet {n} of {input:?} in {ack:?}");
        }
    }
    roundtrip(&ack);
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(input) = ranges(&mut u) {
        let ack_delay = u.arbitrary::<u64>().unwrap_or(0) & varint::MAX;
        check_from_ranges(&input, ack_delay);
    }

    // The raw input as an ACK frame's value.
    let mut frame = vec![ACK_TYPE];
    varint::encode(data.len() as u64, &mut frame);
    frame.extend_from_slice(data);
    if let Some(Ok(Frame::Ack(ack))) = parse_frames(&frame).next() {
        assert_shape(&ack);
        let mut encoded = Vec::new();
        Frame::Ack(ack.clone()).encode(&mut encoded);
        // The decoder accepts non-minimal varints, which the encoder never writes: compare the frames instead.
        let reparsed: Result<Vec<Frame<'_>>, _> = parse_frames(&encoded).collect();
        assert_eq!(reparsed, Ok(vec![Frame::Ack(ack)]));
    }
});
