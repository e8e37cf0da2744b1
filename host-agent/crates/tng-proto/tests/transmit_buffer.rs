//! `poll_transmit` writes into the caller's buffer: each datagram is appended after what the buffer holds (a driver
//! gathers a GSO batch in one buffer) and a poll that sends nothing leaves the buffer as it was.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use tng_proto::{ConnectionHandle, Endpoint, EndpointConfig, Event, ReadOutcome, StaticKeypair, Time};

const EARLIER: &[u8] = b"datagrams gathered before";

struct Established {
    client: Endpoint,
    server: Endpoint,
    handle: ConnectionHandle,
    path: (SocketAddr, SocketAddr),
    now: Time,
}

/// A client connected to a server over one instant path, every datagram delivered.
fn established() -> Established {
    let path = (common::client_addr(0), common::addr(common::SERVER));
    let mut client = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(1), 1);
    let mut server = Endpoint::new(EndpointConfig::server(), StaticKeypair::from_seed(2), 2);
    server.add_local_address(Time::ZERO, path.1);
    let mut now = Time::ZERO;
    let handle = client.connect(now, &[path], None).expect("connect");
    for _ in 0..1000 {
        exchange(&mut client, &mut server, now);
        if client.connection(handle).is_some_and(|c| c.is_established()) {
            return Established { client, server, handle, path, now };
        }
        now += Duration::from_millis(1);
        client.handle_timeout(now);
        server.handle_timeout(now);
    }
    panic!("no connection within a second");
}

fn exchange(client: &mut Endpoint, server: &mut Endpoint, now: Time) {
    loop {
        let mut moved = false;
        while let Some(d) = client.poll_datagram(now) {
            server.handle_datagram(now, d.remote, d.local, d.ecn, &d.payload);
            moved = true;
        }
        while let Some(d) = server.poll_datagram(now) {
            client.handle_datagram(now, d.remote, d.local, d.ecn, &d.payload);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

#[test]
fn datagrams_are_appended_after_what_the_buffer_holds_and_each_is_a_whole_packet() {
    let Established { mut client, mut server, handle, path, now } = established();
    let connection = client.connection(handle).expect("held");
    let stream = connection.open_stream().expect("a stream");
    let written = connection.write(now, stream, &[7; 8000]).expect("written");
    let mut buf = EARLIER.to_vec();
    let mut ends = vec![buf.len()];
    while let Some(transmit) = client.poll_transmit(now, &mut buf) {
        assert_eq!((transmit.local, transmit.remote), path);
        assert_eq!(buf.len(), ends[ends.len() - 1] + transmit.size, "the datagram is the buffer's last bytes");
        ends.push(buf.len());
    }
    assert!(ends.len() > 3, "several datagrams in one buffer: {ends:?}");
    assert!(buf.starts_with(EARLIER), "what the buffer held stays");
    for bounds in ends.windows(2) {
        server.handle_datagram(now, path.0, path.1, None, &buf[bounds[0]..bounds[1]]);
    }
    let stats = server.stats();
    assert_eq!((stats.auth_failed, stats.wire_errors.len()), (0, 0), "every datagram opens: {stats:?}");
    let mut read = 0;
    while let Some((conn, event)) = server.poll_event() {
        if let Event::StreamReadable(id) | Event::StreamOpened(id) = event {
            let mut chunk = [0; 4096];
            while let Ok(ReadOutcome::Data(n)) = server.connection(conn).expect("held").read(id, &mut chunk) {
                assert!(chunk[..n].iter().all(|&b| b == 7));
                read += n;
            }
        }
    }
    assert_eq!(read, written, "the server reads what the batch carried");
}

#[test]
fn a_poll_with_nothing_to_send_leaves_the_buffer_as_it_was() {
    let Established { mut client, mut server, now, .. } = established();
    exchange(&mut client, &mut server, now);
    let mut buf = EARLIER.to_vec();
    assert_eq!(client.poll_transmit(now, &mut buf), None);
    assert_eq!(server.poll_transmit(now, &mut buf), None);
    assert_eq!(buf, EARLIER);
}
