//! Property tests: no input makes the parsers panic, whatever parses re-encodes to the same bytes, and packets and
//! frames built from arbitrary fields round-trip.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::RangeInclusive;

use proptest::collection::vec;
use proptest::prelude::*;
use tng_wire::{
    parse_frames, varint, AckFrame, EcnCounts, Feedback, Flags, Frame, Handshake, Packet, PathStatus, Payload, Stage,
    WireError, HEADER_LEN, MAX_PACKET, MIN_CLIENT_INITIAL, TAG_LEN,
};

/// If `datagram` parses, encoding the packet gives `datagram` back.
fn assert_parse_round_trips(datagram: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(packet) = Packet::parse(datagram) {
        let mut encoded = Vec::new();
        prop_assert_eq!(packet.encode(&mut encoded), Ok(()));
        prop_assert_eq!(encoded.as_slice(), datagram);
        prop_assert_eq!(packet.encoded_len(), datagram.len());
    }
    Ok(())
}

/// Frames parsed from `plaintext` (up to the first error) re-encode to bytes that parse to the same frames.
fn assert_frames_reparse(plaintext: &[u8]) -> Result<(), TestCaseError> {
    let frames: Vec<Frame<'_>> = parse_frames(plaintext).map_while(Result::ok).collect();
    let mut encoded = Vec::new();
    for frame in &frames {
        frame.encode(&mut encoded);
    }
    let reparsed: Result<Vec<_>, _> = parse_frames(&encoded).collect();
    prop_assert_eq!(reparsed, Ok(frames));
    Ok(())
}

/// A datagram whose header passes rules 0-5 more often than random bytes would: version 1, a plausible type and
/// flags, and a matching `payload_length`, so that the type-specific rules get exercised.
fn plausible_datagram() -> impl Strategy<Value = Vec<u8>> {
    (0u8..8, 0u8..9, any::<[u8; 16]>(), vec(any::<u8>(), 0..=MAX_PACKET - HEADER_LEN + 1)).prop_map(
        |(packet_type, flags, middle, payload)| {
            let mut datagram = vec![1, packet_type, flags];
            datagram.extend_from_slice(&middle[..13]);
            datagram.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            datagram.extend_from_slice(&middle[13..]);
            datagram.push(0);
            datagram.push(0);
            datagram.extend_from_slice(&payload);
            datagram
        },
    )
}

/// Owned material for one frame; [`frame_of`] borrows from it.
#[derive(Debug, Clone)]
struct FrameSeed {
    kind: u8,
    numbers: [u64; 3],
    fin: bool,
    bytes: Vec<u8>,
    challenge: [u8; 8],
    ranges: Vec<(u64, u64)>,
    ip: [u8; 16],
    port: u16,
}

fn frame_seed() -> impl Strategy<Value = FrameSeed> {
    (
        0u8..17,
        [0..=varint::MAX, 0..=varint::MAX, 0..=varint::MAX],
        any::<bool>(),
        vec(any::<u8>(), 0..64),
        any::<[u8; 8]>(),
        vec((0u64..1 << 20, 0u64..1 << 20), 0..6),
        any::<[u8; 16]>(),
        any::<u16>(),
    )
        .prop_map(|(kind, numbers, fin, bytes, challenge, ranges, ip, port)| FrameSeed {
            kind,
            numbers,
            fin,
            bytes,
            challenge,
            ranges,
            ip,
            port,
        })
}

fn frame_of(seed: &FrameSeed) -> Frame<'_> {
    let [a, b, c] = seed.numbers;
    match seed.kind {
        0 => Frame::Padding(seed.bytes.len()),
        1 => {
            let ranges = seed.ranges.iter().map(|&(start, len)| start..=start + len);
            let ecn = EcnCounts { ect0: a, ect1: b, ce: c };
            AckFrame::from_ranges(ranges, a, ecn).map_or(Frame::Ping, Frame::Ack)
        }
        2 => Frame::FeedbackEcho { max_queue_level: a as u16, min_rate_hint: b as u32 },
        3 => {
            let offset = b.min(varint::MAX - seed.bytes.len() as u64);
            Frame::Stream { stream_id: a, offset, fin: seed.fin, data: &seed.bytes, to_end: false }
        }
        4 => {
            // Ascending, disjoint, non-empty: cumulative (gap, length) steps.
            let mut end = 0;
            let ranges = seed
                .ranges
                .iter()
                .map(|&(gap, len)| {
                    let start = end + gap;
                    end = start + len + 1;
                    start..end
                })
                .collect();
            Frame::StreamAck { stream_id: a, ranges }
        }
        5 => Frame::MaxData(a),
        6 => Frame::MaxStreamData { stream_id: a, max: b },
        7 => Frame::MaxStreams(a),
        8 => Frame::ResetStream { stream_id: a, error_code: b, final_size: c },
        9 => Frame::StopSending { stream_id: a, error_code: b },
        10 => Frame::PathChallenge(seed.challenge),
        11 => Frame::PathResponse(seed.challenge),
        12 => {
            let status = [PathStatus::Abandon, PathStatus::Available, PathStatus::Standby][(a % 3) as usize];
            Frame::PathStatus { channel_id: b as u8, status }
        }
        13 => Frame::Close { error_code: a, reason: &seed.bytes },
        14 => {
            let ip = if seed.fin {
                IpAddr::V4(Ipv4Addr::new(seed.ip[0], seed.ip[1], seed.ip[2], seed.ip[3]))
            } else {
                IpAddr::V6(Ipv6Addr::from(seed.ip))
            };
            Frame::NewAddress(SocketAddr::new(ip, seed.port))
        }
        15 => Frame::Extension { frame_type: a.max(0x20), data: &seed.bytes },
        _ => Frame::Ping,
    }
}

/// Owned material for one valid packet; [`packet_of`] borrows from it.
#[derive(Debug, Clone)]
struct PacketSeed {
    kind: u8,
    flags: u8,
    channel_id: u8,
    connection_id: u64,
    packet_number: u32,
    feedback: (u16, u32),
    stage: u8,
    token: Vec<u8>,
    noise: Vec<u8>,
    padding: Vec<u8>,
    sealed: Vec<u8>,
}

fn packet_seed() -> impl Strategy<Value = PacketSeed> {
    let header = (0u8..6, 0u8..8, any::<u8>(), any::<u64>(), any::<u32>(), any::<(u16, u32)>());
    let handshake = (1u8..=3, vec(any::<u8>(), 0..64), vec(any::<u8>(), 0..400), any::<u8>(), 0usize..=272);
    let sealed = vec(any::<u8>(), TAG_LEN..=MAX_PACKET - HEADER_LEN);
    (header, handshake, sealed).prop_map(
        |(
            (kind, flags, channel_id, connection_id, packet_number, feedback),
            (stage, token, noise, fill, extra),
            sealed,
        )| {
            // Client stages need padding up to the minimum; any stage may carry extra within the maximum.
            let unpadded = HEADER_LEN + 5 + token.len() + noise.len();
            let needed = if stage == 2 { 0 } else { MIN_CLIENT_INITIAL.saturating_sub(unpadded) };
            let room = MAX_PACKET - unpadded - needed;
            let padding = vec![fill; needed + extra.min(room)];
            PacketSeed {
                kind,
                flags,
                channel_id,
                connection_id,
                packet_number,
                feedback,
                stage,
                token,
                noise,
                padding,
                sealed,
            }
        },
    )
}

fn packet_of(seed: &PacketSeed) -> Packet<'_> {
    let payload = match seed.kind {
        0 => Payload::Initial(Handshake {
            stage: Stage::from_u8(seed.stage).unwrap_or(Stage::ServerHello),
            token: &seed.token,
            noise: &seed.noise,
            padding: &seed.padding,
        }),
        1 => Payload::Retry { token: &seed.token },
        2 => Payload::Data(&seed.sealed),
        3 => Payload::Ack(&seed.sealed),
        4 => Payload::Probe(&seed.sealed),
        _ => Payload::Close(&seed.sealed),
    };
    Packet {
        flags: Flags::from_bits(seed.flags).unwrap_or(Flags::EMPTY),
        channel_id: seed.channel_id,
        connection_id: seed.connection_id,
        packet_number: seed.packet_number,
        feedback: Feedback { queue_level: seed.feedback.0, rate_hint: seed.feedback.1 },
        payload,
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_what_parses_round_trips(bytes in vec(any::<u8>(), 0..1600)) {
        assert_parse_round_trips(&bytes)?;
        assert_frames_reparse(&bytes)?;
    }

    #[test]
    fn plausible_headers_reach_the_type_rules_and_round_trip(datagram in plausible_datagram()) {
        assert_parse_round_trips(&datagram)?;
    }

    #[test]
    fn frame_shaped_bytes_never_panic(
        chunks in vec((0u64..0x24, vec(any::<u8>(), 0..24)), 0..8),
    ) {
        // type | length | value with honest lengths, so values get decoded rather than truncated.
        let mut plaintext = Vec::new();
        for (frame_type, value) in &chunks {
            varint::encode(*frame_type, &mut plaintext);
            varint::encode(value.len() as u64, &mut plaintext);
            plaintext.extend_from_slice(value);
        }
        assert_frames_reparse(&plaintext)?;
    }

    #[test]
    fn packets_from_arbitrary_fields_round_trip(seed in packet_seed()) {
        let packet = packet_of(&seed);
        let mut encoded = Vec::new();
        prop_assert_eq!(packet.encode(&mut encoded), Ok(()));
        prop_assert_eq!(encoded.len(), packet.encoded_len());
        prop_assert_eq!(Packet::parse(&encoded), Ok(packet));
    }

    #[test]
    fn packets_a_receiver_would_drop_are_not_encoded(seed in packet_seed(), short in 0..TAG_LEN, cut in 1usize..200) {
        let sealed = packet_of(&seed);
        let mut out = Vec::new();
        let short_sealed = Packet { payload: Payload::Data(&seed.sealed[..short]), ..sealed };
        prop_assert_eq!(short_sealed.encode(&mut out), Err(WireError::ShortSealedPayload { len: short }));
        let oversized = [0u8; MAX_PACKET + 200];
        let too_large = Packet { payload: Payload::Probe(&oversized[..MAX_PACKET - HEADER_LEN + cut]), ..sealed };
        prop_assert_eq!(too_large.encode(&mut out), Err(WireError::TooLarge { len: MAX_PACKET + cut }));
        let noise = [0u8; MIN_CLIENT_INITIAL];
        let noise_len = MIN_CLIENT_INITIAL - HEADER_LEN - 5 - cut;
        let handshake = Handshake { stage: Stage::ClientHello, token: b"", noise: &noise[..noise_len], padding: b"" };
        let unpadded = Packet { payload: Payload::Initial(handshake), ..sealed };
        prop_assert_eq!(unpadded.encode(&mut out), Err(WireError::InitialTooSmall { len: MIN_CLIENT_INITIAL - cut }));
        prop_assert!(out.is_empty());
    }

    #[test]
    fn frames_from_arbitrary_fields_round_trip(seeds in vec(frame_seed(), 0..8), compact_last in any::<bool>()) {
        let mut frames: Vec<Frame<'_>> = seeds.iter().map(frame_of).collect();
        // Only the last frame may be a compact STREAM (it runs to the end of the plaintext).
        if let Some(Frame::Stream { to_end, .. }) = frames.last_mut() {
            *to_end = compact_last;
        }
        let mut plaintext = Vec::new();
        for frame in &frames {
            let before = plaintext.len();
            frame.encode(&mut plaintext);
            prop_assert_eq!(plaintext.len() - before, frame.encoded_len());
        }
        let parsed: Result<Vec<_>, _> = parse_frames(&plaintext).collect();
        prop_assert_eq!(parsed, Ok(frames));
    }

    #[test]
    fn ack_from_ranges_acknowledges_exactly_the_union(
        ranges in vec((0u64..300, 0u64..20), 0..12),
        probes in vec(0u64..330, 16),
    ) {
        let inputs: Vec<RangeInclusive<u64>> = ranges.iter().map(|&(start, len)| start..=start + len).collect();
        match AckFrame::from_ranges(inputs.clone(), 0, EcnCounts::default()) {
            None => prop_assert!(inputs.is_empty()),
            Some(ack) => {
                prop_assert_eq!(Some(ack.largest), inputs.iter().map(|range| *range.end()).max());
                for pair in ack.ranges.windows(2) {
                    prop_assert!(pair[1].end() + 1 < *pair[0].start(), "not descending with gaps: {:?}", ack.ranges);
                }
                for probe in probes {
                    prop_assert_eq!(ack.contains(probe), inputs.iter().any(|range| range.contains(&probe)));
                }
            }
        }
    }
}
