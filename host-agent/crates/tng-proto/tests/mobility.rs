//! Simultaneous mobility: both ends change address at the same moment, so no packet from either old address
//! reaches the other; each learns the other's new address from outside the connection (the controller's host
//! registry, played here by calling `peer_addresses_changed` after a registry round trip) and the connection goes
//! on over the new addresses with every byte delivered once and intact.

mod common;

use std::time::Duration;

use common::{Pair, PathConfig};
use tng_proto::{ChannelState, ConnectionHandle, Time};

/// What it takes the agents to hear of the move from the registry: the mover's registration and the watcher's
/// notification, a round trip to the controller each.
const REGISTRY_DELAY: Duration = Duration::from_millis(60);

struct Moved {
    pair: Pair,
    client: ConnectionHandle,
    server: ConnectionHandle,
    data: Vec<u8>,
    moved_at: Time,
}

/// A 600 kB upload on one 1 MB/s path with 15 ms one-way delay, both ends moved 300 ms into it.
fn move_both_ends_mid_transfer(seed: u64) -> Moved {
    let mut pair = Pair::default_with_paths(vec![PathConfig { rate: Some(1_000_000), ..PathConfig::clean(15) }], seed);
    let (client, server) = pair.connect_and_wait();
    let data = common::payload(600_000, seed);
    pair.client_send(client, data.clone());
    pair.run_for(Duration::from_millis(300));
    assert!(!pair.server_got(&data), "still in progress when the addresses change");
    let moved_at = pair.now;
    pair.client_addrs[0] = common::addr("10.1.50.2:6000");
    pair.client.local_address_changed(pair.now, common::client_addr(0), pair.client_addrs[0]);
    pair.move_server(common::addr("10.0.9.1:4477"));
    Moved { pair, client, server, data, moved_at }
}

#[test]
fn both_ends_move_at_once_and_find_each_other_through_the_registry() {
    let Moved { mut pair, client, server, data, moved_at } = move_both_ends_mid_transfer(31);
    let before = pair.server_bytes_read();
    pair.run_for(REGISTRY_DELAY);
    let (new_client, new_server) = (pair.client_addrs[0], pair.server_addr);
    let now = pair.now;
    pair.client.peer_addresses_changed(now, client, &[new_server]);
    pair.server.peer_addresses_changed(now, server, &[new_client]);

    let mut resumed_at = None;
    let done = pair.run_until(Duration::from_secs(30), |pair| {
        if resumed_at.is_none() && pair.server_bytes_read() > before {
            resumed_at = Some(pair.now);
        }
        pair.server_got(&data)
    });
    assert!(done, "the transfer did not finish after both ends moved");
    let stall = resumed_at.expect("delivery resumed").saturating_since(moved_at);
    println!(
        "simultaneous move: no delivery for {:.1} ms (registry delay {REGISTRY_DELAY:?})",
        stall.as_secs_f64() * 1e3
    );
    // The registry delay, a challenge round trip (30 ms) and the retransmission of what was lost on the old path.
    assert!(stall < Duration::from_millis(500), "stall {stall:?}");
    let client_channel = pair.client.connection_stats(client).expect("client").channels[0].clone();
    let server_channel = pair.server.connection_stats(server).expect("server").channels[0].clone();
    assert_eq!((client_channel.local, client_channel.remote), (new_client, new_server));
    assert_eq!((server_channel.local, server_channel.remote), (new_server, new_client));
    assert_eq!(client_channel.state, ChannelState::Active);
    // The other direction works over the new addresses too.
    let reply = common::payload(50_000, 99);
    pair.server_send(server, reply.clone());
    assert!(pair.run_until(Duration::from_secs(10), |pair| pair.client_got(&reply)));
}

#[test]
fn without_the_registry_neither_end_finds_the_other() {
    let Moved { mut pair, data, .. } = move_both_ends_mid_transfer(32);
    let before = pair.server_bytes_read();
    pair.run_for(Duration::from_secs(5));
    assert_eq!(pair.server_bytes_read(), before, "nothing arrives: each end probes the other's old address");
    assert!(!pair.server_got(&data));
}

#[test]
fn an_address_the_peer_does_not_answer_from_moves_nothing() {
    let Moved { mut pair, client, data, .. } = move_both_ends_mid_transfer(33);
    let now = pair.now;
    // A registry answer naming an address where nobody is: challenged, never answered, the channel stays put.
    pair.client.peer_addresses_changed(now, client, &[common::addr("10.0.66.6:4477")]);
    pair.run_for(Duration::from_secs(3));
    let channel = pair.client.connection_stats(client).expect("client").channels[0].clone();
    assert_ne!(channel.remote, common::addr("10.0.66.6:4477"));
    assert!(!pair.server_got(&data));
}
