//! Any datagram: `Packet::parse` must not panic, and a packet it accepts must re-encode to the same bytes.
//! The same input as a plaintext: `parse_frames` must not panic, and the frames it yields must survive
//! encode-then-parse unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tng_wire::{parse_frames, Frame, Packet};

fuzz_target!(|data: &[u8]| {
    if let Ok(packet) = Packet::parse(data) {
        let mut encoded = Vec::with_capacity(data.len());
        assert_eq!(
            packet.encode(&mut encoded),
            Ok(()),
            "parsed packet refused to encode: {packet:?}"
        );
        assert_eq!(encoded, data, "re-encoding differs for {packet:?}");
    }

    let frames: Vec<Frame<'_>> = parse_frames(data).map_while(Result::ok).collect();
    let mut encoded = Vec::new();
    for frame in &frames {
        frame.encode(&mut encoded);
    }
    let reparsed: Result<Vec<Frame<'_>>, _> = parse_frames(&encoded).collect();
    assert_eq!(reparsed, Ok(frames));
});
