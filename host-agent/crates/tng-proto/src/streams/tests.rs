//! Two `Streams` talking through encoded frames: a perfect network for the unit tests, a lossy, reordering,
//! duplicating one (with in-path boxes that acknowledge packets and then drop them) for the property test.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use tng_wire::parse_frames;

use super::*;

const MTU: usize = 1200;
const RTO: Duration = Duration::from_millis(200);

/// One packet's worth of frames and what it carried.
#[derive(Clone, Debug)]
struct Packet {
    from: Side,
    bytes: Vec<u8>,
    chunks: Vec<SentChunk>,
}

struct Pair {
    client: Streams,
    server: Streams,
    now: Time,
}

impl Pair {
    fn new(client: StreamConfig, server: StreamConfig) -> Pair {
        Pair {
            client: Streams::new(Side::Client, client.clone(), server.limits()),
            server: Streams::new(Side::Server, server, client.limits()),
            now: Time::ZERO,
        }
    }

    fn default_configs() -> Pair {
        Pair::new(StreamConfig::default(), StreamConfig::default())
    }

    fn side(&mut self, side: Side) -> &mut Streams {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    /// The next packet `from` would send, if it has anything.
    fn transmit(&mut self, from: Side, max_len: usize) -> Option<Packet> {
        let now = self.now;
        let streams = self.side(from);
        if !streams.has_pending_frames(now) {
            return None;
        }
        let (mut bytes, mut chunks) = (Vec::new(), Vec::new());
        streams.write_frames(now, max_len, &mut bytes, &mut chunks);
        assert!(bytes.len() <= max_len);
        (!bytes.is_empty()).then_some(Packet { from, bytes, chunks })
    }

    /// Hands a packet's frames to the other side; the flow layer then reports the packet acknowledged.
    fn deliver(&mut self, packet: &Packet) -> Result<(), StreamError> {
        self.receive(packet)?;
        self.hint(packet);
        Ok(())
    }

    fn receive(&mut self, packet: &Packet) -> Result<(), StreamError> {
        let now = self.now;
        let receiver = self.side(packet.from.peer());
        for frame in parse_frames(&packet.bytes) {
            receiver.handle_frame(now, &frame.expect("we encode valid frames"))?;
        }
        Ok(())
    }

    fn hint(&mut self, packet: &Packet) {
        let sender = self.side(packet.from);
        for chunk in &packet.chunks {
            sender.on_chunk_delivered_hint(chunk);
        }
    }

    fn lose(&mut self, packet: &Packet) {
        let sender = self.side(packet.from);
        for chunk in &packet.chunks {
            sender.on_chunk_lost(chunk);
        }
    }

    /// Exchanges packets over a perfect network until neither side has anything to send, letting time pass until
    /// delayed STREAM_ACKs are due.
    fn drive(&mut self) {
        for _ in 0..100_000 {
            let mut quiet = true;
            for from in [Side::Client, Side::Server] {
                while let Some(packet) = self.transmit(from, MTU) {
                    quiet = false;
                    self.deliver(&packet).expect("no protocol violation");
                }
            }
            let acks_due = [&self.client, &self.server].into_iter().filter_map(|s| s.stream_ack_deadline()).min();
            match acks_due {
                Some(due) if quiet => self.now = self.now.max(due),
                None if quiet => return,
                _ => {}
            }
        }
        panic!("the pair never went quiet");
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        let now = self.now;
        for side in [Side::Client, Side::Server] {
            self.side(side).on_timeout(now, RTO);
        }
    }
}

/// Reads until `Blocked`, `Finished` or `Reset`: the bytes and how reading ended.
fn read_available(streams: &mut Streams, id: StreamId) -> (Vec<u8>, ReadOutcome) {
    let mut out = Vec::new();
    let mut buf = [0u8; 500];
    loop {
        match streams.read(id, &mut buf).expect("readable stream") {
            ReadOutcome::Data(n) => out.extend_from_slice(&buf[..n]),
            end => return (out, end),
        }
    }
}

fn events(streams: &mut Streams) -> Vec<StreamEvent> {
    std::iter::from_fn(|| streams.poll_event()).collect()
}

fn stream_frame(stream_id: u64, offset: u64, data: &[u8], fin: bool) -> Frame<'_> {
    Frame::Stream { stream_id, offset, fin, data, to_end: false }
}

#[test]
fn request_and_response_complete_end_to_end_and_free_both_sides() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    assert_eq!(pair.client.write(id, b"GET /"), Ok(5));
    pair.client.finish(id).unwrap();
    pair.drive();

    assert_eq!(events(&mut pair.server), [StreamEvent::Opened, StreamEvent::Readable(id)]);
    assert_eq!(pair.server.accept(), Some(id));
    assert_eq!(read_available(&mut pair.server, id), (b"GET /".to_vec(), ReadOutcome::Finished));
    assert_eq!(events(&mut pair.client), [StreamEvent::Finished(id)]);

    pair.server.write(id, b"200 OK").unwrap();
    pair.server.finish(id).unwrap();
    pair.drive();
    assert_eq!(events(&mut pair.client), [StreamEvent::Readable(id)]);
    assert_eq!(read_available(&mut pair.client, id), (b"200 OK".to_vec(), ReadOutcome::Finished));
    pair.drive();
    assert_eq!(events(&mut pair.server), [StreamEvent::Finished(id)]);

    for streams in [&pair.client, &pair.server] {
        assert_eq!(streams.stats().streams_open, 0);
        assert!(streams.timers.is_empty() && !streams.has_pending_frames(pair.now));
        assert_eq!(streams.stream_ack_deadline(), None);
    }
    assert_eq!(pair.client.read(id, &mut [0; 4]), Err(StreamError::Closed(id)));
    let stats = pair.client.stats();
    assert_eq!((stats.bytes_written, stats.bytes_acked, stats.bytes_read), (5, 5, 6));
}

#[test]
fn thousands_of_streams_open_without_a_round_trip() {
    let server_config = StreamConfig { max_streams: 5000, ..StreamConfig::default() };
    let mut pair = Pair::new(StreamConfig::default(), server_config);
    for i in 0..3000 {
        let id = pair.client.open().unwrap();
        pair.client.write(id, format!("request {i}").as_bytes()).unwrap();
        pair.client.finish(id).unwrap();
    }
    // Only client-to-server packets: the server needs nothing from us before it sees every stream.
    while let Some(packet) = pair.transmit(Side::Client, MTU) {
        pair.receive(&packet).unwrap();
    }
    let mut accepted = 0;
    while let Some(id) = pair.server.accept() {
        let expected = format!("request {}", id.index());
        assert_eq!(read_available(&mut pair.server, id), (expected.into_bytes(), ReadOutcome::Finished));
        pair.server.finish(id).unwrap();
        accepted += 1;
    }
    assert_eq!(accepted, 3000);

    // The client's STREAM_ACKs were never sent: it retransmits on the semantic timer, and the server acknowledges
    // streams it has already forgotten.
    pair.advance(RTO);
    pair.drive();
    for id in (0..3000).map(|i| StreamId::new(Side::Client, i)) {
        assert_eq!(read_available(&mut pair.client, id), (Vec::new(), ReadOutcome::Finished));
    }
    pair.drive();
    assert_eq!((pair.client.stats().streams_open, pair.server.stats().streams_open), (0, 0));
    assert!(
        std::mem::size_of::<Stream>() <= 512,
        "an idle stream should cost a few hundred bytes, not {}",
        std::mem::size_of::<Stream>()
    );
}

#[test]
fn sender_never_exceeds_stream_or_connection_credit() {
    let server = StreamConfig { stream_receive_window: 1000, receive_window: 2500, ..StreamConfig::default() };
    let mut pair = Pair::new(StreamConfig::default(), server);
    let ids: Vec<StreamId> = (0..3).map(|_| pair.client.open().unwrap()).collect();
    for &id in &ids {
        pair.client.write(id, &[id.index() as u8; 5000]).unwrap();
        pair.client.finish(id).unwrap();
    }
    pair.drive();
    assert!(pair.client.data_sent <= 2500, "connection credit exceeded: {}", pair.client.data_sent);
    for id in &ids {
        assert!(pair.client.streams[id].send.sent_end() <= 1000);
    }

    let mut received: HashMap<StreamId, Vec<u8>> = HashMap::new();
    let mut finished = 0;
    while finished < ids.len() {
        finished = 0;
        for &id in &ids {
            let (data, end) = read_available(&mut pair.server, id);
            received.entry(id).or_default().extend(data);
            finished += usize::from(end == ReadOutcome::Finished);
        }
        pair.drive();
        assert!(pair.client.data_sent <= pair.server.max_data);
    }
    for id in &ids {
        assert_eq!(received[id], vec![id.index() as u8; 5000]);
    }
}

#[test]
fn flow_control_violations_are_detected() {
    let config = StreamConfig { stream_receive_window: 100_000, receive_window: 65_536, ..StreamConfig::default() };
    let mut server = Streams::new(Side::Server, config.clone(), config.limits());
    let err = server.handle_frame(Time::ZERO, &stream_frame(0, 0, &[0; 70_000], false)).unwrap_err();
    assert_eq!(err.to_string(), "peer exceeded connection flow-control limit: 70000 > 65536");
    assert!(err.is_peer_violation());

    let config = StreamConfig { stream_receive_window: 1000, ..StreamConfig::default() };
    let mut server = Streams::new(Side::Server, config.clone(), config.limits());
    let err = server.handle_frame(Time::ZERO, &stream_frame(4, 1, &[0; 1000], false)).unwrap_err();
    assert_eq!(err.to_string(), "peer exceeded flow-control limit of stream 4: 1001 > 1000");
    let err = server.handle_frame(Time::ZERO, &Frame::ResetStream { stream_id: 8, error_code: 0, final_size: 1001 });
    assert!(matches!(err, Err(StreamError::StreamFlowControl { .. })));
}

#[test]
fn a_gap_in_one_stream_does_not_block_another() {
    let mut pair = Pair::default_configs();
    let a = pair.client.open().unwrap();
    let b = pair.client.open().unwrap();
    pair.client.write(a, &[b'a'; 2000]).unwrap();
    pair.client.write(b, &[b'b'; 100]).unwrap();
    let first = pair.transmit(Side::Client, MTU).unwrap();
    assert!(first.chunks.iter().all(|c| matches!(c, SentChunk::Stream { id, .. } if *id == a)));
    let second = pair.transmit(Side::Client, MTU).unwrap();
    pair.deliver(&second).unwrap();

    assert_eq!(read_available(&mut pair.server, a), (Vec::new(), ReadOutcome::Blocked));
    assert_eq!(read_available(&mut pair.server, b), (vec![b'b'; 100], ReadOutcome::Blocked));

    pair.lose(&first);
    pair.drive();
    assert_eq!(read_available(&mut pair.server, a).0.len(), 2000);
    assert!(pair.client.stats().bytes_retransmitted > 0);
}

#[test]
fn stream_data_is_released_only_by_the_end_to_end_ack() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(id, &[7; 500]).unwrap();
    pair.client.finish(id).unwrap();
    let packet = pair.transmit(Side::Client, MTU).unwrap();
    // An in-path box acknowledges the packet and drops it.
    pair.hint(&packet);
    assert_eq!(pair.client.buffered, 500);
    assert!(!pair.client.has_pending_frames(pair.now));
    assert_eq!(pair.client.next_timeout(RTO), Some(Time::ZERO + RTO));

    pair.advance(RTO - Duration::from_millis(1));
    assert!(!pair.client.has_pending_frames(pair.now));
    pair.advance(Duration::from_millis(1));
    pair.drive();
    assert_eq!(pair.client.buffered, 0);
    assert_eq!(events(&mut pair.client), [StreamEvent::Finished(id)]);
    assert_eq!(pair.client.stats().bytes_retransmitted, 500);
    assert_eq!(pair.client.next_timeout(RTO), None);
}

#[test]
fn a_lost_stream_ack_is_repeated() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(id, b"hello").unwrap();
    let data = pair.transmit(Side::Client, MTU).unwrap();
    pair.deliver(&data).unwrap();
    pair.now += StreamConfig::default().ack_delay;
    let ack = pair.transmit(Side::Server, MTU).unwrap();
    assert_eq!(ack.chunks, [SentChunk::StreamAck { id }]);
    pair.lose(&ack);
    assert!(pair.server.has_pending_frames(pair.now), "a lost STREAM_ACK goes out again at once");
    pair.drive();
    assert_eq!(pair.client.buffered, 0);
    assert_eq!(pair.client.stats().bytes_retransmitted, 0);
}

#[test]
fn stream_acks_ride_along_or_wait_for_their_delay() {
    let mut pair = Pair::default_configs();
    let delay = StreamConfig::default().ack_delay;
    let upload = pair.client.open().unwrap();
    pair.client.write(upload, b"partial").unwrap();
    let data = pair.transmit(Side::Client, MTU).unwrap();
    pair.deliver(&data).unwrap();
    // Nothing else to send: the STREAM_ACK waits for `ack_delay`.
    assert!(!pair.server.has_pending_frames(pair.now));
    assert_eq!(pair.server.stream_ack_deadline(), Some(pair.now + delay));
    assert!(pair.transmit(Side::Server, MTU).is_none());
    assert!(pair.server.has_pending_frames(pair.now + delay));

    // A packet that leaves anyway carries it before it is due.
    let download = pair.server.open().unwrap();
    pair.server.write(download, b"reply").unwrap();
    let packet = pair.transmit(Side::Server, MTU).unwrap();
    assert!(
        matches!(packet.chunks.as_slice(), [SentChunk::StreamAck { id }, SentChunk::Stream { .. }] if *id == upload)
    );
    assert_eq!(pair.server.stream_ack_deadline(), None);
    pair.deliver(&packet).unwrap();
    assert_eq!(pair.client.buffered, 0);

    // The FIN completes the stream: its STREAM_ACK is due at once, so the sender can release the stream.
    pair.client.finish(upload).unwrap();
    let fin = pair.transmit(Side::Client, MTU).unwrap();
    pair.deliver(&fin).unwrap();
    assert_eq!(pair.server.stream_ack_deadline(), Some(pair.now));
    assert!(pair.server.has_pending_frames(pair.now));
}

#[test]
fn reset_reaches_the_reader_and_is_acknowledged() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(id, &[1; 5000]).unwrap();
    let first = pair.transmit(Side::Client, MTU).unwrap();
    pair.deliver(&first).unwrap();
    pair.client.reset(id, 42).unwrap();
    assert_eq!(pair.client.buffered, 0);
    assert_eq!(pair.client.write(id, b"x"), Err(StreamError::SendClosed(id)));
    pair.drive();

    assert_eq!(
        events(&mut pair.server),
        [StreamEvent::Opened, StreamEvent::Readable(id), StreamEvent::Reset { id, error_code: 42 }]
    );
    assert_eq!(read_available(&mut pair.server, id), (Vec::new(), ReadOutcome::Reset { error_code: 42 }));
    assert!(pair.client.streams[&id].send.is_done());
    assert!(pair.client.timers.is_empty());
    // The server's connection credit came back for the discarded bytes.
    assert_eq!(pair.server.data_consumed, pair.server.data_received);
}

#[test]
fn stop_sending_makes_the_writer_reset() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(id, &[1; 1000]).unwrap();
    pair.drive();
    assert_eq!(pair.server.accept(), Some(id));
    pair.server.stop_sending(id, 7).unwrap();
    assert_eq!(pair.server.read(id, &mut [0; 8]), Err(StreamError::ReadStopped(id)));
    pair.drive();

    assert_eq!(events(&mut pair.client), [StreamEvent::Stopped { id, error_code: 7 }]);
    assert_eq!(pair.client.write(id, b"more"), Err(StreamError::Stopped { id, error_code: 7 }));
    assert!(pair.client.streams[&id].send.is_done());
    // Both receiving halves are over once the server's own sending half is finished and acknowledged.
    pair.server.finish(id).unwrap();
    pair.drive();
    assert_eq!(read_available(&mut pair.client, id), (Vec::new(), ReadOutcome::Finished));
    pair.drive();
    assert_eq!((pair.client.stats().streams_open, pair.server.stats().streams_open), (0, 0));
}

#[test]
fn stream_limit_is_enforced_and_raised_as_streams_close() {
    let server = StreamConfig { max_streams: 2, ..StreamConfig::default() };
    let mut pair = Pair::new(StreamConfig::default(), server);
    let ids = [pair.client.open().unwrap(), pair.client.open().unwrap()];
    let err = pair.client.open().unwrap_err();
    assert_eq!(err, StreamError::StreamLimit { limit: 2 });
    assert!(err.to_string().contains("at most 2 streams"));

    for id in ids {
        pair.client.finish(id).unwrap();
    }
    pair.drive();
    while let Some(id) = pair.server.accept() {
        assert_eq!(read_available(&mut pair.server, id).1, ReadOutcome::Finished);
        pair.server.finish(id).unwrap();
    }
    pair.drive();
    for id in ids {
        assert_eq!(read_available(&mut pair.client, id).1, ReadOutcome::Finished);
    }
    pair.drive();
    assert!(events(&mut pair.client).contains(&StreamEvent::Available));
    assert_eq!(pair.client.open().map(|id| id.index()), Ok(2));

    // A peer that opens beyond the limit violates the protocol.
    let err =
        pair.server.handle_frame(Time::ZERO, &stream_frame(StreamId::new(Side::Client, 10).as_u64(), 0, b"", true));
    assert_eq!(err, Err(StreamError::StreamLimitViolation { id: StreamId::new(Side::Client, 10), limit: 4 }));
}

#[test]
fn send_buffers_are_bounded_per_stream_and_per_connection() {
    let client = StreamConfig { stream_send_buffer: 100, send_buffer: 150, ..StreamConfig::default() };
    let mut pair = Pair::new(client, StreamConfig::default());
    let a = pair.client.open().unwrap();
    let b = pair.client.open().unwrap();
    assert_eq!(pair.client.write(a, &[1; 120]), Ok(100));
    assert_eq!(pair.client.write(a, &[1; 10]), Err(StreamError::Blocked(a)));
    assert_eq!(pair.client.write(b, &[2; 80]), Ok(50));
    assert_eq!(pair.client.write(b, &[2; 1]), Err(StreamError::Blocked(b)));
    pair.drive();
    let mut woken = events(&mut pair.client);
    woken.sort_by_key(|event| format!("{event:?}"));
    assert_eq!(woken, [StreamEvent::Writable(a), StreamEvent::Writable(b)]);
    assert_eq!(pair.client.write(a, &[1; 120]), Ok(100));
}

#[test]
fn misuse_and_peer_violations_name_the_problem() {
    let mut pair = Pair::default_configs();
    let never = StreamId::new(Side::Client, 4);
    assert_eq!(pair.client.read(never, &mut [0; 1]).unwrap_err().to_string(), "stream 8 is not open");
    assert_eq!(pair.client.write(StreamId::new(Side::Server, 0), b"x"), Err(StreamError::NotOpen(1.into())));
    let id = pair.client.open().unwrap();
    assert_eq!(pair.client.reset(id, u64::MAX), Err(StreamError::ErrorCodeTooLarge(u64::MAX)));
    assert_eq!(pair.client.stop_sending(id, varint::MAX + 1), Err(StreamError::ErrorCodeTooLarge(varint::MAX + 1)));

    pair.client.write(id, b"12345").unwrap();
    pair.transmit(Side::Client, MTU).unwrap();
    let err = pair.client.handle_frame(Time::ZERO, &Frame::StreamAck { stream_id: 0, ranges: vec![0..6] }).unwrap_err();
    assert_eq!(err.to_string(), "peer acknowledged stream 0 up to offset 6, but we sent only up to 5");
    let err = pair.client.handle_frame(Time::ZERO, &stream_frame(8, 0, b"x", false)).unwrap_err();
    assert_eq!(err, StreamError::UnopenedStream(never));
    assert!(err.is_peer_violation() && !StreamError::Blocked(id).is_peer_violation());
    // Frames of other layers are not ours.
    assert_eq!(pair.client.handle_frame(Time::ZERO, &Frame::Ping), Ok(()));
}

#[test]
fn too_many_reassembly_gaps_are_a_violation() {
    let config = StreamConfig { max_reassembly_gaps: 2, ..StreamConfig::default() };
    let mut server = Streams::new(Side::Server, config.clone(), config.limits());
    server.handle_frame(Time::ZERO, &stream_frame(0, 10, b"a", false)).unwrap();
    server.handle_frame(Time::ZERO, &stream_frame(0, 20, b"a", false)).unwrap();
    let err = server.handle_frame(Time::ZERO, &stream_frame(0, 30, b"a", false)).unwrap_err();
    assert_eq!(err.to_string(), "peer left more than 2 gaps in the reassembly of stream 0");
}

#[test]
fn lost_credit_update_is_recovered_by_a_probe() {
    let server = StreamConfig { stream_receive_window: 1000, ..StreamConfig::default() };
    let mut pair = Pair::new(StreamConfig::default(), server);
    let id = pair.client.open().unwrap();
    pair.client.write(id, &[3; 3000]).unwrap();
    pair.client.finish(id).unwrap();
    pair.drive();
    assert_eq!(read_available(&mut pair.server, id).0.len(), 1000);
    // The MAX_STREAM_DATA is acknowledged by an in-path box and dropped.
    let update = pair.transmit(Side::Server, MTU).unwrap();
    assert!(update.chunks.contains(&SentChunk::MaxStreamData { id }));
    pair.hint(&update);
    pair.drive();
    assert_eq!(pair.client.streams[&id].send.sent_end(), 1000, "still blocked");

    let mut total = 1000;
    for _ in 0..10 {
        pair.advance(RTO);
        pair.drive();
        total += read_available(&mut pair.server, id).0.len();
        pair.drive();
    }
    assert_eq!(total, 3000);
}

#[test]
fn streams_take_turns() {
    let mut pair = Pair::default_configs();
    let ids: Vec<StreamId> = (0..3).map(|_| pair.client.open().unwrap()).collect();
    for &id in &ids {
        pair.client.write(id, &[0; 5000]).unwrap();
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
    pair.client.write(first, &[1; 3000]).unwrap();
    pair.client.write(second, &[2; 100]).unwrap();
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

// -------------------------------------------------------------------------------------------------------------------
// Property test: a hostile network.

/// How the simulated network treats each packet.
#[derive(Clone, Copy, Debug)]
struct Network {
    /// Dropped, and the flow layer reports it lost.
    loss: f64,
    /// Dropped after an in-path box acknowledged it: the flow layer reports it delivered.
    black_hole: f64,
    /// Delivered, but the flow layer reports it lost.
    spurious_loss: f64,
    /// Delivered twice.
    duplicate: f64,
}

/// One stream's plan: which side opens it and what it writes.
#[derive(Clone, Debug)]
struct Plan {
    opener: Side,
    writes: Vec<usize>,
}

fn pattern(opener: Side, plan: usize, offset: usize) -> u8 {
    (offset.wrapping_mul(31) ^ plan.wrapping_mul(97) ^ (opener as usize) << 7) as u8
}

struct Simulation {
    pair: Pair,
    rng: ChaCha8Rng,
    network: Network,
    /// Packets in flight: (arrival time, packet).
    in_flight: Vec<(Time, Packet)>,
    /// Flow-layer verdicts to come: (time, packet, lost).
    verdicts: Vec<(Time, Packet, bool)>,
    plans: Vec<Plan>,
    /// Per plan: the stream id once opened, bytes written, finished.
    opened: Vec<Option<StreamId>>,
    written: Vec<usize>,
    finished_writing: Vec<bool>,
    /// What each side read, per stream id, and whether it saw the end.
    read: BTreeMap<(Side, StreamId), (Vec<u8>, bool)>,
    /// Streams the writer saw `Finished` for.
    acked_end_to_end: Vec<(Side, StreamId)>,
}

impl Simulation {
    fn chance(&mut self, p: f64) -> bool {
        (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.rng.next_u64() % (high - low + 1)
    }

    fn total(plan: &Plan) -> usize {
        plan.writes.iter().sum()
    }

    /// The applications: open, write, finish, accept, read.
    fn run_applications(&mut self) {
        for (index, plan) in self.plans.clone().iter().enumerate() {
            let streams = self.pair.side(plan.opener);
            let id = match self.opened[index] {
                Some(id) => id,
                None => match streams.open() {
                    Ok(id) => {
                        self.opened[index] = Some(id);
                        id
                    }
                    Err(StreamError::StreamLimit { .. }) => continue,
                    Err(e) => panic!("open: {e}"),
                },
            };
            let total = Simulation::total(plan);
            while self.written[index] < total {
                let chunk_end = (self.written[index] + 700).min(total);
                let data: Vec<u8> =
                    (self.written[index]..chunk_end).map(|offset| pattern(plan.opener, index, offset)).collect();
                match streams.write(id, &data) {
                    Ok(n) => self.written[index] += n,
                    Err(StreamError::Blocked(_)) => break,
                    Err(e) => panic!("write: {e}"),
                }
            }
            if self.written[index] == total && !self.finished_writing[index] {
                streams.finish(id).unwrap();
                self.finished_writing[index] = true;
            }
        }
        for side in [Side::Client, Side::Server] {
            let streams = self.pair.side(side);
            while let Some(id) = streams.accept() {
                // Peer-opened streams carry data one way: our half ends at once.
                streams.finish(id).unwrap();
                self.read.insert((side, id), (Vec::new(), false));
            }
        }
        self.collect_events();
        for (index, plan) in self.plans.iter().enumerate() {
            if let Some(id) = self.opened[index] {
                self.read.entry((plan.opener, id)).or_default();
            }
        }
        let mut buf = [0u8; 333];
        for ((side, id), (data, ended)) in self.read.iter_mut() {
            let streams = match side {
                Side::Client => &mut self.pair.client,
                Side::Server => &mut self.pair.server,
            };
            while !*ended {
                match streams.read(*id, &mut buf) {
                    Ok(ReadOutcome::Data(n)) => data.extend_from_slice(&buf[..n]),
                    Ok(ReadOutcome::Finished) => *ended = true,
                    Ok(ReadOutcome::Blocked) => break,
                    other => panic!("read {id:?} on {side:?}: {other:?}"),
                }
            }
        }
    }

    fn collect_events(&mut self) {
        for side in [Side::Client, Side::Server] {
            while let Some(event) = self.pair.side(side).poll_event() {
                if let StreamEvent::Finished(id) = event {
                    self.acked_end_to_end.push((side, id));
                }
            }
        }
    }

    fn send_packets(&mut self) {
        let now = self.pair.now;
        for from in [Side::Client, Side::Server] {
            for _ in 0..8 {
                let max_len = self.between(30, MTU as u64) as usize;
                let Some(packet) = self.pair.transmit(from, max_len) else { break };
                let delay = Duration::from_millis(self.between(5, 40));
                if self.chance(self.network.loss) {
                    self.verdicts.push((now + Duration::from_millis(60), packet, true));
                } else if self.chance(self.network.black_hole) {
                    self.verdicts.push((now + 2 * delay, packet, false));
                } else {
                    let lost = self.chance(self.network.spurious_loss);
                    if self.chance(self.network.duplicate) {
                        let again = Duration::from_millis(self.between(5, 80));
                        self.in_flight.push((now + again, packet.clone()));
                    }
                    self.in_flight.push((now + delay, packet.clone()));
                    self.verdicts.push((now + 2 * delay, packet, lost));
                }
            }
        }
    }

    fn deliver_due(&mut self) -> Result<(), TestCaseError> {
        let now = self.pair.now;
        let (due, later): (Vec<_>, Vec<_>) = self.in_flight.drain(..).partition(|(at, _)| *at <= now);
        self.in_flight = later;
        for (_, packet) in due {
            self.pair.receive(&packet).map_err(|e| TestCaseError::fail(format!("protocol violation: {e}")))?;
        }
        let (due, later): (Vec<_>, Vec<_>) = self.verdicts.drain(..).partition(|(at, _, _)| *at <= now);
        self.verdicts = later;
        for (_, packet, lost) in due {
            if lost {
                self.pair.lose(&packet);
            } else {
                self.pair.hint(&packet);
            }
        }
        Ok(())
    }

    /// Credit is never exceeded, and no byte is released before the receiver really has it.
    fn check_invariants(&self) -> Result<(), TestCaseError> {
        for (sender, receiver) in [(&self.pair.client, &self.pair.server), (&self.pair.server, &self.pair.client)] {
            prop_assert!(sender.data_sent <= receiver.max_data, "connection credit exceeded");
            for (id, stream) in &sender.streams {
                let Some(peer) = receiver.streams.get(id) else { continue };
                prop_assert!(stream.send.sent_end() <= peer.recv.limit(), "stream credit exceeded on {id:?}");
                prop_assert!(
                    stream.send.acked_offset() <= peer.recv.contiguous_end(),
                    "{id:?} released {} bytes but the receiver has only {}",
                    stream.send.acked_offset(),
                    peer.recv.contiguous_end()
                );
            }
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.opened.iter().all(Option::is_some)
            && self.read.values().all(|(_, ended)| *ended)
            && self.pair.client.stats().streams_open == 0
            && self.pair.server.stats().streams_open == 0
    }
}

fn plans() -> impl Strategy<Value = Vec<Plan>> {
    let plan = (any::<bool>(), prop::collection::vec(0usize..2500, 0..4))
        .prop_map(|(client, writes)| Plan { opener: if client { Side::Client } else { Side::Server }, writes });
    prop::collection::vec(plan, 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn hostile_network_delivers_exactly_what_was_written(
        seed in any::<u64>(),
        loss in 0.0..0.4f64,
        black_hole in 0.0..0.2f64,
        spurious_loss in 0.0..0.1f64,
        duplicate in 0.0..0.2f64,
        plans in plans(),
    ) {
        // Small windows and buffers, two streams at a time per side: every limit is hit.
        let config = StreamConfig {
            max_streams: 2,
            stream_receive_window: 1500,
            receive_window: 4000,
            stream_send_buffer: 3000,
            send_buffer: 5000,
            ..StreamConfig::default()
        };
        let count = plans.len();
        let mut sim = Simulation {
            pair: Pair::new(config.clone(), config),
            rng: ChaCha8Rng::seed_from_u64(seed),
            network: Network { loss, black_hole, spurious_loss, duplicate },
            in_flight: Vec::new(),
            verdicts: Vec::new(),
            plans,
            opened: vec![None; count],
            written: vec![0; count],
            finished_writing: vec![false; count],
            read: BTreeMap::new(),
            acked_end_to_end: Vec::new(),
        };
        for _ in 0..120_000 {
            sim.run_applications();
            sim.send_packets();
            sim.pair.now += Duration::from_millis(1);
            sim.deliver_due()?;
            let now = sim.pair.now;
            for side in [Side::Client, Side::Server] {
                let streams = sim.pair.side(side);
                if streams.next_timeout(RTO).is_some_and(|at| at <= now) {
                    streams.on_timeout(now, RTO);
                }
            }
            sim.check_invariants()?;
            if sim.done() {
                break;
            }
        }
        sim.collect_events();
        prop_assert!(sim.done(), "not done after 120 s: opened {:?}, read {:?}", sim.opened, sim.read.values().map(|(d, e)| (d.len(), *e)).collect::<Vec<_>>());

        for (index, plan) in sim.plans.iter().enumerate() {
            let id = sim.opened[index].expect("opened");
            let expected: Vec<u8> = (0..Simulation::total(plan)).map(|offset| pattern(plan.opener, index, offset)).collect();
            let (data, ended) = &sim.read[&(plan.opener.peer(), id)];
            prop_assert!(*ended);
            prop_assert_eq!(data, &expected, "stream {:?}", id);
            prop_assert!(sim.acked_end_to_end.contains(&(plan.opener, id)), "no Finished for {:?}", id);
            let (reverse, reverse_ended) = &sim.read[&(plan.opener, id)];
            prop_assert!(reverse.is_empty() && *reverse_ended);
        }
        for streams in [&sim.pair.client, &sim.pair.server] {
            let stats = streams.stats();
            prop_assert_eq!(stats.bytes_written, stats.bytes_acked);
            prop_assert_eq!(streams.buffered, 0);
        }
        prop_assert_eq!(sim.pair.client.stats().bytes_read, sim.pair.server.stats().bytes_written);
        prop_assert_eq!(sim.pair.server.stats().bytes_read, sim.pair.client.stats().bytes_written);
    }
}

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
            streams.write(id, &[9; 3000]).unwrap();
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
