//! Flow-control credit: never exceeded, violations detected, a lost update recovered.

use super::*;

#[test]
fn sender_never_exceeds_stream_or_connection_credit() {
    let server = StreamConfig { stream_receive_window: 1000, receive_window: 2500, ..StreamConfig::default() };
    let mut pair = Pair::new(StreamConfig::default(), server);
    let ids: Vec<StreamId> = (0..3).map(|_| pair.client.open().unwrap()).collect();
    for &id in &ids {
        pair.client.write(pair.now, id, &[id.index() as u8; 5000]).unwrap();
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
fn lost_credit_update_is_recovered_by_a_probe() {
    let server = StreamConfig { stream_receive_window: 1000, ..StreamConfig::default() };
    let mut pair = Pair::new(StreamConfig::default(), server);
    let id = pair.client.open().unwrap();
    pair.client.write(pair.now, id, &[3; 3000]).unwrap();
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
