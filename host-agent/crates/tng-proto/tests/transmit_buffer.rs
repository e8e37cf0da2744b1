//! `poll_transmit` writes into the caller's buffer: each datagram is appended after what the buffer holds (a driver
//! gathers a GSO batch in one buffer) and a poll that sends nothing leaves the buffer as it was.

mod common;

use std::time::Duration;

use common::{Pair, PathConfig};
use tng_proto::{Event, ReadOutcome};

const EARLIER: &[u8] = b"datagrams gathered before";

/// A connected client and server over one clean path, settled.
fn established() -> Pair {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(1)], 3);
    pair.connect_and_wait();
    pair.run_for(Duration::from_millis(200));
    pair
}

#[test]
fn datagrams_are_appended_after_what_the_buffer_holds_and_each_is_a_whole_packet() {
    let mut pair = established();
    let (now, path) = (pair.now, pair.path_list()[0]);
    let handle = pair.client.connection_handles()[0];
    let connection = pair.client.connection(handle).expect("held");
    let stream = connection.open_stream().expect("a stream");
    let written = connection.write(now, stream, &[7; 8000]).expect("written");
    let mut buf = EARLIER.to_vec();
    let mut ends = vec![buf.len()];
    while let Some(transmit) = pair.client.poll_transmit(now, &mut buf) {
        assert_eq!((transmit.local, transmit.remote), path);
        assert_eq!(buf.len(), ends[ends.len() - 1] + transmit.size, "the datagram is the buffer's last bytes");
        ends.push(buf.len());
    }
    assert!(ends.len() > 3, "several datagrams in one buffer: {ends:?}");
    assert!(buf.starts_with(EARLIER), "what the buffer held stays");
    for bounds in ends.windows(2) {
        pair.server.handle_datagram(now, path.0, path.1, None, &buf[bounds[0]..bounds[1]]);
    }
    let stats = pair.server.stats();
    assert_eq!((stats.auth_failed, stats.wire_errors.len()), (0, 0), "every datagram opens: {stats:?}");
    let mut read = 0;
    while let Some((conn, event)) = pair.server.poll_event() {
        if let Event::StreamReadable(id) | Event::StreamOpened(id) = event {
            let mut chunk = [0; 4096];
            while let Ok(ReadOutcome::Data(n)) = pair.server.connection(conn).expect("held").read(id, &mut chunk) {
                assert!(chunk[..n].iter().all(|&b| b == 7));
                read += n;
            }
        }
    }
    assert_eq!(read, written, "the server reads what the batch carried");
}

#[test]
fn a_poll_with_nothing_to_send_leaves_the_buffer_as_it_was() {
    let mut pair = established();
    let now = pair.now;
    // What the last step left due (ACKs) goes first.
    while pair.client.poll_datagram(now).or_else(|| pair.server.poll_datagram(now)).is_some() {}
    let mut buf = EARLIER.to_vec();
    assert_eq!(pair.client.poll_transmit(now, &mut buf), None);
    assert_eq!(pair.server.poll_transmit(now, &mut buf), None);
    assert_eq!(buf, EARLIER);
}
