//! The receiving halves: independent reassembly, STREAM_ACKs, resets reaching the reader.

use super::*;

#[test]
fn a_gap_in_one_stream_does_not_block_another() {
    let mut pair = Pair::default_configs();
    let a = pair.client.open().unwrap();
    let b = pair.client.open().unwrap();
    pair.client.write(pair.now, a, &[b'a'; 2000]).unwrap();
    pair.client.write(pair.now, b, &[b'b'; 100]).unwrap();
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
fn a_lost_stream_ack_is_repeated() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(pair.now, id, b"hello").unwrap();
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
    pair.client.write(pair.now, upload, b"partial").unwrap();
    let data = pair.transmit(Side::Client, MTU).unwrap();
    pair.deliver(&data).unwrap();
    // Nothing else to send: the STREAM_ACK waits for `ack_delay`.
    assert!(!pair.server.has_pending_frames(pair.now));
    assert_eq!(pair.server.stream_ack_deadline(), Some(pair.now + delay));
    assert!(pair.transmit(Side::Server, MTU).is_none());
    assert!(pair.server.has_pending_frames(pair.now + delay));

    // A packet that leaves anyway carries it before it is due.
    let download = pair.server.open().unwrap();
    pair.server.write(pair.now, download, b"reply").unwrap();
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
fn a_fast_stream_is_acknowledged_every_eighth_of_its_initial_window() {
    // The sender frees its buffer only on STREAM_ACKs; they must not wait for credit updates, which come only every
    // half of a window that may have grown far beyond the sender's buffer.
    let server = StreamConfig { stream_receive_window: 64_000, ..StreamConfig::default() };
    let every = server.ack_every();
    let delay = server.ack_delay;
    let mut pair = Pair::new(StreamConfig::default(), server);
    let id = pair.client.open().unwrap();
    pair.client.write(pair.now, id, &[7; 30_000]).unwrap();
    let (mut received, mut acknowledged, mut acks) = (0u64, 0u64, 0);
    while let Some(packet) = pair.transmit(Side::Client, MTU) {
        pair.deliver(&packet).unwrap();
        received += packet
            .chunks
            .iter()
            .map(|c| match c {
                SentChunk::Stream { range, .. } => range.end - range.start,
                _ => 0,
            })
            .sum::<u64>();
        if received - acknowledged >= every {
            assert_eq!(pair.server.stream_ack_deadline(), Some(pair.now), "{received} bytes: due at once");
            let ack = pair.transmit(Side::Server, MTU).unwrap();
            assert_eq!(ack.chunks, [SentChunk::StreamAck { id }]);
            (acknowledged, acks) = (received, acks + 1);
        } else {
            assert_eq!(pair.server.stream_ack_deadline(), Some(pair.now + delay), "{received} bytes: waits");
        }
    }
    assert_eq!(received, 30_000);
    assert_eq!(acks, 3, "one STREAM_ACK per {every} bytes");
}

#[test]
fn stream_acks_keep_pace_with_a_send_buffer_smaller_than_the_window() {
    let defaults = StreamConfig::default();
    assert_eq!(defaults.ack_every(), defaults.stream_receive_window / 8);
    let large_window = StreamConfig { stream_receive_window: 8 * defaults.stream_send_buffer, ..defaults.clone() };
    assert_eq!(large_window.ack_every(), defaults.stream_send_buffer / 8, "the peer's buffer is likely ours");
}

#[test]
fn reset_reaches_the_reader_and_is_acknowledged() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(pair.now, id, &[1; 5000]).unwrap();
    let first = pair.transmit(Side::Client, MTU).unwrap();
    pair.deliver(&first).unwrap();
    pair.client.reset(id, 42).unwrap();
    assert_eq!(pair.client.buffered, 0);
    assert_eq!(pair.client.write(pair.now, id, b"x"), Err(StreamError::SendClosed(id)));
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
fn too_many_reassembly_gaps_are_a_violation() {
    let config = StreamConfig { max_reassembly_gaps: 2, ..StreamConfig::default() };
    let mut server = Streams::new(Side::Server, config.clone(), config.limits());
    server.handle_frame(Time::ZERO, &stream_frame(0, 10, b"a", false)).unwrap();
    server.handle_frame(Time::ZERO, &stream_frame(0, 20, b"a", false)).unwrap();
    let err = server.handle_frame(Time::ZERO, &stream_frame(0, 30, b"a", false)).unwrap_err();
    assert_eq!(err.to_string(), "peer left more than 2 gaps in the reassembly of stream 0");
}
