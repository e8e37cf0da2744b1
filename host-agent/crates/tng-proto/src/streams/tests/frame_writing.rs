//! Filling packets: turns across streams and frame sizing.

use super::*;

#[test]
fn streams_take_turns() {
    let mut pair = Pair::default_configs();
    let ids: Vec<StreamId> = (0..3).map(|_| pair.client.open().unwrap()).collect();
    for &id in &ids {
        pair.client.write(pair.now, id, &[0; 5000]).unwrap();
    }
    let order: Vec<StreamId> = (0..6)
        .map(|_| match pair.transmit(Side::Client, 500).unwrap().chunks.as_slice() {
            [SentChunk::Stream { id, .. }] => *id,
            other => panic!("one stream chunk per packet expected, got {other:?}"),
        })
        .collect();
    assert_eq!(order, [ids[0], ids[1], ids[2], ids[0], ids[1], ids[2]]);
}

#[test]
fn a_chunk_that_fills_the_packet_uses_the_compact_frame_and_ends_it() {
    let mut pair = Pair::default_configs();
    let (first, second) = (pair.client.open().unwrap(), pair.client.open().unwrap());
    pair.client.write(pair.now, first, &[1; 3000]).unwrap();
    pair.client.write(pair.now, second, &[2; 100]).unwrap();
    pair.client.finish(second).unwrap();

    // Full packets: one compact frame each, exactly `MTU` long, 3 bytes more data than a frame with a length.
    let packet = pair.transmit(Side::Client, MTU).unwrap();
    assert_eq!(packet.bytes.len(), MTU);
    let frames: Vec<Frame<'_>> = parse_frames(&packet.bytes).map(Result::unwrap).collect();
    let explicit_capacity = MTU - (1 + 2 + 1 + 1 + 1);
    match frames.as_slice() {
        [Frame::Stream { to_end: true, fin: false, data, .. }] => assert_eq!(data.len(), explicit_capacity + 3),
        other => panic!("one compact STREAM frame expected, got {other:?}"),
    }
    pair.receive(&packet).unwrap();
    // Round robin: the short second stream ends with a length (and its FIN), so the first stream follows it.
    let packet = pair.transmit(Side::Client, MTU).unwrap();
    let frames: Vec<Frame<'_>> = parse_frames(&packet.bytes).map(Result::unwrap).collect();
    match frames.as_slice() {
        [Frame::Stream { stream_id, to_end: false, fin: true, data: short, .. }, Frame::Stream { to_end: true, .. }] => {
            assert_eq!((*stream_id, short.len()), (second.as_u64(), 100));
        }
        other => panic!("a STREAM frame with a length, then a compact one expected, got {other:?}"),
    }
    assert_eq!(packet.bytes.len(), MTU);
    pair.receive(&packet).unwrap();
    pair.drive();
    assert_eq!(read_available(&mut pair.server, first).0, [1; 3000]);
    assert_eq!(read_available(&mut pair.server, second), (vec![2; 100], ReadOutcome::Finished));
}

#[test]
fn frame_sizing_matches_the_codec() {
    for id in [0u64, 63, 64, 16_384].map(StreamId::from) {
        for offset in [0, 63, 16_383, 1 << 30] {
            for budget in (0..20).chain([63, 64, 65, 66, 1200, 16_390, 16_400, 70_000]) {
                let compact = |data| Frame::Stream { stream_id: id.as_u64(), offset, fin: true, data, to_end: true };
                match stream_frame_capacity(budget, id, offset) {
                    None => assert!(compact(&[]).encoded_len() > budget, "{id:?} {offset} {budget}"),
                    Some(n) => {
                        let data = vec![0; n + 1];
                        let len = |n: usize| compact(&data[..n]).encoded_len();
                        assert!(len(n) <= budget, "{id:?} {offset} {budget}: {n} does not fit");
                        assert!(len(n + 1) > budget, "{id:?} {offset} {budget}: {} would fit", n + 1);
                    }
                }
            }
        }
    }
    let all: Vec<Range<u64>> = (0..100u64).map(|i| i * 1000..i * 1000 + 10).collect();
    for budget in [0, 5, 6, 7, 20, 100, 1200] {
        let mut ranges = all.clone();
        truncate_ack_to_fit(5, &mut ranges, budget);
        let len = |ranges: &[Range<u64>]| Frame::StreamAck { stream_id: 5, ranges: ranges.to_vec() }.encoded_len();
        if !ranges.is_empty() {
            assert!(len(&ranges) <= budget);
        }
        if ranges.len() < all.len() {
            assert!(len(&all[..ranges.len() + 1]) > budget, "budget {budget}");
        }
    }
}
