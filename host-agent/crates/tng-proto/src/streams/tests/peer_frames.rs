//! Property test: arbitrary frames from a peer.

use super::*;

/// A peer frame with owned data, for generating arbitrary input.
#[derive(Clone, Debug)]
enum PeerFrame {
    Stream { stream_id: u64, offset: u64, fin: bool, data: Vec<u8> },
    StreamAck { stream_id: u64, ranges: Vec<Range<u64>> },
    MaxData(u64),
    MaxStreamData { stream_id: u64, max: u64 },
    MaxStreams(u64),
    ResetStream { stream_id: u64, error_code: u64, final_size: u64 },
    StopSending { stream_id: u64, error_code: u64 },
}

impl PeerFrame {
    fn as_frame(&self) -> Frame<'_> {
        match *self {
            PeerFrame::Stream { stream_id, offset, fin, ref data } => {
                Frame::Stream { stream_id, offset, fin, data, to_end: false }
            }
            PeerFrame::StreamAck { stream_id, ref ranges } => Frame::StreamAck { stream_id, ranges: ranges.clone() },
            PeerFrame::MaxData(max) => Frame::MaxData(max),
            PeerFrame::MaxStreamData { stream_id, max } => Frame::MaxStreamData { stream_id, max },
            PeerFrame::MaxStreams(max) => Frame::MaxStreams(max),
            PeerFrame::ResetStream { stream_id, error_code, final_size } => {
                Frame::ResetStream { stream_id, error_code, final_size }
            }
            PeerFrame::StopSending { stream_id, error_code } => Frame::StopSending { stream_id, error_code },
        }
    }
}

/// Small values near the limits the test uses, and huge ones up to the varint maximum.
fn value() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..12, 1990u64..2010, 0..=varint::MAX]
}

fn peer_frame() -> impl Strategy<Value = PeerFrame> {
    let range = (value(), value()).prop_map(|(start, end)| start..end);
    prop_oneof![
        (value(), value(), any::<bool>(), prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(stream_id, offset, fin, data)| PeerFrame::Stream { stream_id, offset, fin, data }),
        (value(), prop::collection::vec(range, 0..4))
            .prop_map(|(stream_id, ranges)| PeerFrame::StreamAck { stream_id, ranges }),
        value().prop_map(PeerFrame::MaxData),
        (value(), value()).prop_map(|(stream_id, max)| PeerFrame::MaxStreamData { stream_id, max }),
        value().prop_map(PeerFrame::MaxStreams),
        (value(), value(), value()).prop_map(|(stream_id, error_code, final_size)| PeerFrame::ResetStream {
            stream_id,
            error_code,
            final_size
        }),
        (value(), value()).prop_map(|(stream_id, error_code)| PeerFrame::StopSending { stream_id, error_code }),
    ]
}

proptest! {
    /// Whatever a peer sends, the semantic layer answers with errors, never a panic, and keeps producing frames
    /// that fit the packet.
    #[test]
    fn arbitrary_peer_frames_never_panic(frames in prop::collection::vec(peer_frame(), 0..40)) {
        let config = StreamConfig {
            max_streams: 8,
            stream_receive_window: 2000,
            receive_window: 5000,
            max_reassembly_gaps: 4,
            ..StreamConfig::default()
        };
        let mut streams = Streams::new(Side::Server, config.clone(), config.limits());
        for _ in 0..3 {
            let id = streams.open().unwrap();
            streams.write(Time::ZERO, id, &[9; 3000]).unwrap();
        }
        let mut now = Time::ZERO;
        for frame in &frames {
            let _ = streams.handle_frame(Time::ZERO, &frame.as_frame());
            let (mut out, mut sent) = (Vec::new(), Vec::new());
            streams.write_frames(now, 300, &mut out, &mut sent);
            prop_assert!(out.len() <= 300);
            prop_assert!(parse_frames(&out).all(|frame| frame.is_ok()));
            if let Some(chunk) = sent.first() {
                streams.on_chunk_lost(chunk);
            }
            now += Duration::from_millis(50);
            streams.on_timeout(now, RTO);
            let mut buf = [0; 64];
            for index in 0..4 {
                let _ = streams.read(StreamId::new(Side::Client, index), &mut buf);
            }
        }
    }
}
