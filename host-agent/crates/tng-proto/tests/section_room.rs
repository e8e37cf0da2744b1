//! A channel through a relay's section sends what the section has room for, not what its own congestion window
//! allows (`Endpoint::set_section_room`): the section's controller is the flow's, and one that paces the section
//! paces the channel.

mod common;

use std::time::Duration;

use common::{payload, Pair, PathConfig};
use tng_proto::{ConnectionHandle, Datagram};

/// The data packets the client sends now (full ones: the stream has more than a packet waiting); an ACK it owes
/// goes too, whatever the room, and is not counted.
fn drain(pair: &mut Pair) -> Vec<Datagram> {
    std::iter::from_fn(|| pair.client.poll_datagram(pair.now))
        .filter(|transmit| transmit.payload.len() > 1000)
        .collect()
}

/// A connected client with data written on a stream (as much as it takes: about one initial window, ten
/// packets) and nothing sent of it yet.
fn client_with_data() -> (Pair, ConnectionHandle, u64) {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 7);
    let (client, _) = pair.connect_and_wait();
    pair.run_for(Duration::from_millis(200)); // acknowledgements settle: nothing is owed
    let now = pair.now;
    let connection = pair.client.connection(client).expect("client connection");
    let id = connection.connection_id();
    let stream = connection.open_stream().expect("a stream");
    let written = connection.write(now, stream, &payload(200_000, 3)).expect("write");
    assert!(written >= 14_000, "only {written} bytes taken");
    (pair, client, id)
}

#[test]
fn a_channel_sends_as_many_data_packets_as_its_section_has_room_for() {
    let (mut pair, client, id) = client_with_data();
    let server = pair.server_addr;
    assert!(pair.client.set_section_room(id, server, Some(0)));
    assert!(drain(&mut pair).is_empty(), "no room, no data (what it owes besides, a PING or an ACK, goes)");
    assert!(pair.client.set_section_room(id, server, Some(3)));
    assert_eq!(drain(&mut pair).len(), 3, "the section had room for three");
    assert_eq!(drain(&mut pair).len(), 0, "and has none left until it says so");
    let stats = pair.client.connection_stats(client).expect("stats");
    assert_eq!(stats.channels[0].cwnd, stats.channels[0].bytes_in_flight, "the window is what the room allowed");
    assert!(pair.client.set_section_room(id, server, Some(5)));
    assert_eq!(drain(&mut pair).len(), 5, "five more, at once: the section paces, not the channel's pacer");
}

#[test]
fn without_a_section_the_channels_own_window_governs_again() {
    let (mut pair, _, id) = client_with_data();
    let server = pair.server_addr;
    assert!(pair.client.set_section_room(id, server, Some(0)));
    assert!(drain(&mut pair).is_empty());
    assert!(pair.client.set_section_room(id, server, None));
    assert!(!drain(&mut pair).is_empty(), "its own window has room");
    assert!(!pair.client.set_section_room(id, common::addr("10.9.9.9:1"), Some(1)), "no channel goes there");
    assert!(!pair.client.set_section_room(id ^ 1, server, Some(1)), "no such connection");
}
