//! The sending halves: end-to-end release, bounded buffers, resets asked for by the peer.

use super::*;

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
