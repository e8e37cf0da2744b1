//! Opening, accepting and freeing streams, and the stream count the sides allow each other.

use super::*;

#[test]
fn request_and_response_complete_end_to_end_and_free_both_sides() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    assert_eq!(pair.client.write(pair.now, id, b"GET /"), Ok(5));
    pair.client.finish(id).unwrap();
    pair.drive();

    assert_eq!(events(&mut pair.server), [StreamEvent::Opened, StreamEvent::Readable(id)]);
    assert_eq!(pair.server.accept(), Some(id));
    assert_eq!(read_available(&mut pair.server, id), (b"GET /".to_vec(), ReadOutcome::Finished));
    assert_eq!(events(&mut pair.client), [StreamEvent::Finished(id)]);

    pair.server.write(pair.now, id, b"200 OK").unwrap();
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
        pair.client.write(pair.now, id, format!("request {i}").as_bytes()).unwrap();
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
fn misuse_and_peer_violations_name_the_problem() {
    let mut pair = Pair::default_configs();
    let never = StreamId::new(Side::Client, 4);
    assert_eq!(pair.client.read(never, &mut [0; 1]).unwrap_err().to_string(), "stream 8 is not open");
    assert_eq!(pair.client.write(pair.now, StreamId::new(Side::Server, 0), b"x"), Err(StreamError::NotOpen(1.into())));
    let id = pair.client.open().unwrap();
    assert_eq!(pair.client.reset(id, u64::MAX), Err(StreamError::ErrorCodeTooLarge(u64::MAX)));
    assert_eq!(pair.client.stop_sending(id, varint::MAX + 1), Err(StreamError::ErrorCodeTooLarge(varint::MAX + 1)));

    pair.client.write(pair.now, id, b"12345").unwrap();
    pair.transmit(Side::Client, MTU).unwrap();
    let err = pair.client.handle_frame(Time::ZERO, &Frame::StreamAck { stream_id: 0, ranges: vec![0..6] }).unwrap_err();
    assert_eq!(err.to_string(), "peer acknowledged stream 0 up to offset 6, but we sent only up to 5");
    let err = pair.client.handle_frame(Time::ZERO, &stream_frame(8, 0, b"x", false)).unwrap_err();
    assert_eq!(err, StreamError::UnopenedStream(never));
    assert!(err.is_peer_violation() && !StreamError::Blocked(id).is_peer_violation());
    // Frames of other layers are not ours.
    assert_eq!(pair.client.handle_frame(Time::ZERO, &Frame::Ping), Ok(()));
}
