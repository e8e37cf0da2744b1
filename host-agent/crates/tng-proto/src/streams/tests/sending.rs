//! The sending halves: end-to-end release, bounded buffers, resets asked for by the peer.

use super::*;

#[test]
fn stream_data_is_released_only_by_the_end_to_end_ack() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(pair.now, id, &[7; 500]).unwrap();
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
    assert_eq!(pair.client.write(pair.now, a, &[1; 120]), Ok(100));
    assert_eq!(pair.client.write(pair.now, a, &[1; 10]), Err(StreamError::Blocked(a)));
    assert_eq!(pair.client.write(pair.now, b, &[2; 80]), Ok(50));
    assert_eq!(pair.client.write(pair.now, b, &[2; 1]), Err(StreamError::Blocked(b)));
    pair.drive();
    let mut woken = events(&mut pair.client);
    woken.sort_by_key(|event| format!("{event:?}"));
    assert_eq!(woken, [StreamEvent::Writable(a), StreamEvent::Writable(b)]);
    assert_eq!(pair.client.write(pair.now, a, &[1; 120]), Ok(100));
}

#[test]
fn stop_sending_makes_the_writer_reset() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(pair.now, id, &[1; 1000]).unwrap();
    pair.drive();
    assert_eq!(pair.server.accept(), Some(id));
    pair.server.stop_sending(id, 7).unwrap();
    assert_eq!(pair.server.read(id, &mut [0; 8]), Err(StreamError::ReadStopped(id)));
    pair.drive();

    assert_eq!(events(&mut pair.client), [StreamEvent::Stopped { id, error_code: 7 }]);
    assert_eq!(pair.client.write(pair.now, id, b"more"), Err(StreamError::Stopped { id, error_code: 7 }));
    assert!(pair.client.streams[&id].send.is_done());
    // Both receiving halves are over once the server's own sending half is finished and acknowledged.
    pair.server.finish(id).unwrap();
    pair.drive();
    assert_eq!(read_available(&mut pair.client, id), (Vec::new(), ReadOutcome::Finished));
    pair.drive();
    assert_eq!((pair.client.stats().streams_open, pair.server.stats().streams_open), (0, 0));
}

#[test]
fn unsent_bytes_are_bounded_and_a_writer_wakes_at_half_the_bound() {
    let mut pair = Pair::default_configs();
    pair.client.set_unsent_limit(Some(3000));
    let id = pair.client.open().unwrap();
    assert_eq!(pair.client.write(pair.now, id, &[1; 10_000]), Ok(3000));
    assert_eq!(pair.client.write(pair.now, id, &[1; 10]), Err(StreamError::Blocked(id)));
    assert_eq!(pair.client.stats().bytes_unsent, 3000);
    // One packet leaves: more than half the bound is still unsent, so the writer sleeps on.
    pair.transmit(Side::Client, MTU).unwrap();
    assert!(events(&mut pair.client).is_empty());
    pair.transmit(Side::Client, MTU).unwrap();
    assert!(pair.client.stats().bytes_unsent <= 1500);
    assert_eq!(events(&mut pair.client), [StreamEvent::Writable(id)]);
    // A larger bound (the windows grew) makes room at once.
    let unsent = pair.client.stats().bytes_unsent;
    pair.client.set_unsent_limit(Some(10_000));
    assert_eq!(pair.client.write(pair.now, id, &[1; 20_000]), Ok(10_000 - unsent as usize));
}

#[test]
fn a_stream_held_back_by_its_reader_does_not_block_the_other_writers() {
    // The server grants 1000 bytes per stream: whatever stream `slow` holds beyond that it cannot send.
    let server = StreamConfig { stream_receive_window: 1000, ..StreamConfig::default() };
    let mut pair = Pair::new(StreamConfig::default(), server);
    pair.client.set_unsent_limit(Some(3000));
    let (slow, other) = (pair.client.open().unwrap(), pair.client.open().unwrap());
    assert_eq!(pair.client.write(pair.now, slow, &[1; 5000]), Ok(3000), "a stream holds at most the bound");
    assert_eq!(pair.client.stats().bytes_unsent, 1000, "what the credit lets out counts on the connection");
    assert_eq!(pair.client.write(pair.now, other, &[2; 5000]), Ok(2000));
    pair.drive();
    assert_eq!(pair.client.stats().bytes_unsent, 0, "what is left waits for credit, not for the network");
    assert_eq!(events(&mut pair.client), [StreamEvent::Writable(other)]);
    // The server reads `other` and not `slow`: `other`'s writer goes on, whatever `slow` holds.
    for _ in 0..4 {
        read_available(&mut pair.server, other);
        pair.drive();
    }
    assert_eq!(pair.client.stats().bytes_acked, 3000);
    assert_eq!(pair.client.write(pair.now, other, &[2; 5000]), Ok(3000));
}

#[test]
fn queueing_delay_runs_from_the_write_to_the_first_transmission() {
    let mut pair = Pair::default_configs();
    let id = pair.client.open().unwrap();
    pair.client.write(pair.now, id, &[1; 1000]).unwrap();
    pair.now += Duration::from_millis(40);
    pair.transmit(Side::Client, MTU).unwrap();
    let stats = pair.client.stats();
    let p50 = stats.queueing_delay_p50.unwrap().as_secs_f64();
    assert!((p50 / 0.040 - 1.0).abs() <= 1.0 / 16.0, "p50 {p50}");
    assert_eq!(stats.queueing_delay_p95, stats.queueing_delay_p50);
    // A retransmission is not a first transmission: the delay stays as it was.
    pair.advance(RTO);
    pair.transmit(Side::Client, MTU).unwrap();
    assert_eq!(pair.client.stats().queueing_delay_p95, stats.queueing_delay_p95);
    assert_eq!(pair.client.stats().bytes_retransmitted, 1000);
}
