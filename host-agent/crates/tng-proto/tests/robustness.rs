//! Hostile inputs: mutated, replayed and spoofed packets are dropped and counted, change no state, and the
//! connection keeps delivering correctly.

mod common;

use std::time::Duration;

use common::{payload, Datagram, Pair, PathConfig};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use tng_proto::{ConnectionHandle, ConnectionStats, Endpoint, EndpointStats};
use tng_wire::{Packet, Payload};

/// A connection with traffic both ways over two paths, every accepted datagram captured.
fn captured_pair(seed: u64) -> (Pair, ConnectionHandle, ConnectionHandle) {
    let mut pair = Pair::default_with_paths(vec![PathConfig::lossy(10, 0.01, 2), PathConfig::clean(20)], seed);
    pair.capture = true;
    let (client, server) = pair.connect_and_wait();
    let up = payload(150_000, 1);
    let down = payload(150_000, 2);
    pair.client_send(client, up.clone());
    pair.server_send(server, down.clone());
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.server_got(&up) && pair.client_got(&down)));
    pair.capture = false;
    (pair, client, server)
}

/// Client INITIALs are left out: stage 1 is unauthenticated by design (anyone may start a handshake; RETRY is the
/// defence), so a mutation of one can be a valid new handshake; and a stage 3 whose Noise message is intact but
/// whose padding or header changed is a genuine repetition, which the server answers.
fn is_client_initial(datagram: &Datagram) -> bool {
    matches!(Packet::parse(&datagram.payload), Ok(Packet { payload: Payload::Initial(h), .. }) if h.stage.is_client())
}

fn mutate(rng: &mut ChaCha20Rng, original: &[u8]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    let position = |rng: &mut ChaCha20Rng, len: usize| (rng.next_u64() % len.max(1) as u64) as usize;
    match rng.next_u64() % 6 {
        0 => {
            let at = position(rng, bytes.len());
            bytes[at] ^= 1 << (rng.next_u64() % 8);
        }
        1 => {
            let len = position(rng, bytes.len());
            bytes.truncate(len);
        }
        2 => {
            let at = position(rng, bytes.len());
            bytes[at] = bytes[at].wrapping_add(1 + (rng.next_u64() % 255) as u8);
        }
        3 => {
            for _ in 0..1 + rng.next_u64() % 8 {
                let at = position(rng, bytes.len());
                bytes[at] ^= rng.next_u64() as u8;
            }
        }
        4 => bytes.push(rng.next_u64() as u8),
        _ => {
            // Header fields one at a time: packet number, channel, flags, connection id, length.
            let at = [1, 2, 3, 4, 11, 12, 15, 16, 17][position(rng, 9)];
            bytes[at] ^= 1 + (rng.next_u64() % 255) as u8;
        }
    }
    bytes
}

fn snapshot(endpoint: &Endpoint, handle: ConnectionHandle) -> (Vec<(u64, u64)>, tng_proto::streams::StreamStats, u64) {
    let stats: ConnectionStats = endpoint.connection_stats(handle).expect("connection alive");
    let channels = stats.channels.iter().map(|c| (c.packets_received, c.bytes_received)).collect();
    (channels, stats.streams, stats.key_updates)
}

/// Puts everything both endpoints want to send now on the network, so that what they want to send afterwards is
/// caused by what happens next.
fn flush(pair: &mut Pair) {
    while let Some(out) = pair.client.poll_datagram(pair.now) {
        pair.send(Datagram { to_server: true, from: out.local, to: out.remote, ecn: out.ecn, payload: out.payload });
    }
    while let Some(out) = pair.server.poll_datagram(pair.now) {
        pair.send(Datagram { to_server: false, from: out.local, to: out.remote, ecn: out.ecn, payload: out.payload });
    }
}

fn accepted(stats: &EndpointStats) -> u64 {
    stats.datagrams_received - stats.dropped()
}

#[test]
fn ten_thousand_mutations_are_rejected_without_state_change() {
    let (mut pair, client, server) = captured_pair(31);
    let originals: Vec<Datagram> = pair.captured.iter().filter(|d| !is_client_initial(d)).cloned().collect();
    assert!(originals.len() > 100, "captured {}", originals.len());
    flush(&mut pair);
    let client_before = (pair.client.stats(), snapshot(&pair.client, client));
    let server_before = (pair.server.stats(), snapshot(&pair.server, server));
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let mut injected = (0u64, 0u64);
    for _ in 0..10_000 {
        let original = &originals[(rng.next_u64() % originals.len() as u64) as usize];
        let mutated = Datagram { payload: mutate(&mut rng, &original.payload), ..original.clone() };
        if mutated.payload == original.payload {
            continue;
        }
        pair.inject(&mutated);
        if mutated.to_server {
            injected.1 += 1;
        } else {
            injected.0 += 1;
        }
    }
    assert!(injected.0 + injected.1 >= 9_900);
    // Nothing was accepted, and nothing in the connections moved.
    let client_after = (pair.client.stats(), snapshot(&pair.client, client));
    let server_after = (pair.server.stats(), snapshot(&pair.server, server));
    assert_eq!(client_after.0.dropped() - client_before.0.dropped(), injected.0, "{:?}", client_after.0);
    assert_eq!(server_after.0.dropped() - server_before.0.dropped(), injected.1, "{:?}", server_after.0);
    assert_eq!(accepted(&client_after.0), accepted(&client_before.0));
    assert_eq!(client_after.1, client_before.1);
    assert_eq!(server_after.1, server_before.1);
    assert!(server_after.0.auth_failed > server_before.0.auth_failed);
    assert!(server_after.0.replayed > server_before.0.replayed);
    assert!(!server_after.0.wire_errors.is_empty());
    // Nothing to send because of them either (no ACK, no challenge, no response).
    assert!(pair.client.poll_datagram(pair.now).is_none());
    assert!(pair.server.poll_datagram(pair.now).is_none());

    // The connection still delivers, correctly.
    let more = payload(80_000, 3);
    pair.client_send(client, more.clone());
    let reply = payload(80_000, 4);
    pair.server_send(server, reply.clone());
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.server_got(&more) && pair.client_got(&reply)));
}

#[test]
fn replayed_packets_are_rejected() {
    let (mut pair, client, server) = captured_pair(32);
    let sealed: Vec<Datagram> = pair
        .captured
        .iter()
        .filter(|d| Packet::parse(&d.payload).is_ok_and(|p| p.payload.sealed().is_some()))
        .cloned()
        .collect();
    let before = (pair.client.stats().replayed, pair.server.stats().replayed);
    let snapshots = (snapshot(&pair.client, client), snapshot(&pair.server, server));
    for datagram in &sealed {
        pair.inject(datagram);
    }
    let replayed = (pair.client.stats().replayed - before.0) + (pair.server.stats().replayed - before.1);
    assert_eq!(replayed, sealed.len() as u64);
    assert_eq!((snapshot(&pair.client, client), snapshot(&pair.server, server)), snapshots);
    // No byte was delivered twice: every stream holds exactly what was sent once.
    assert!(pair.server_got(&payload(150_000, 1)));
    assert!(pair.client_got(&payload(150_000, 2)));
    assert_eq!(pair.server_received.values().map(|r| r.data.len()).sum::<usize>(), 150_000);
}

#[test]
fn packets_for_unknown_connections_and_garbage_are_counted() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(5)], 33);
    pair.connect_and_wait();
    let server_addr = pair.server_addr;
    let from = common::client_addr(0);
    let before = pair.server.stats();
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    for len in 0..2_000 {
        let mut garbage = vec![0u8; len % 1_500];
        rng.fill_bytes(&mut garbage);
        if garbage.len() > 1 {
            garbage[0] = 1;
        }
        pair.server.handle_datagram(pair.now, server_addr, from, None, &garbage);
    }
    let after = pair.server.stats();
    assert_eq!(after.dropped() - before.dropped(), 2_000);
    assert_eq!(after.connections, 1);
}

#[test]
fn a_spoofed_source_address_gets_at_most_three_times_what_it_sent() {
    // An on-path attacker rewrites the source of a genuine packet to a victim's address: the server must validate
    // the victim before moving the channel there, and send it at most 3x the bytes it received from it.
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 34);
    let (client, server) = pair.connect_and_wait();
    let victim = common::addr("10.66.0.9:4444");
    // Take a fresh client packet and deliver it as if it came from the victim.
    let data = payload(20_000, 5);
    pair.client_send(client, data.clone());
    let transmit = pair.client.poll_datagram(pair.now).expect("a data packet");
    let spoofed_len = transmit.payload.len() as u64;
    pair.server.handle_datagram(pair.now, pair.server_addr, victim, None, &transmit.payload);
    let mut to_victim = 0u64;
    for _ in 0..1_000 {
        let Some(out) = pair.server.poll_datagram(pair.now) else { break };
        if out.remote == victim {
            to_victim += out.payload.len() as u64;
        } else {
            pair.send(Datagram {
                to_server: false,
                from: out.local,
                to: out.remote,
                ecn: out.ecn,
                payload: out.payload,
            });
        }
    }
    assert!(to_victim > 0, "the server challenges the new address");
    assert!(to_victim <= 3 * spoofed_len, "{to_victim} bytes to the victim for {spoofed_len} received");
    // The victim never answers; the genuine client keeps the connection going on its real address.
    let more = payload(50_000, 6);
    pair.client_send(client, more.clone());
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.server_got(&data) && pair.server_got(&more)));
    let channel = pair.server.connection_stats(server).map(|s| s.channels[0].clone()).expect("channel");
    assert_eq!(channel.remote, common::client_addr(0), "the channel did not move to the spoofed address");
}

#[test]
fn the_same_seed_replays_the_same_bytes() {
    let run = |seed| {
        let mut pair = Pair::default_with_paths(vec![PathConfig::lossy(10, 0.05, 3), PathConfig::clean(30)], seed);
        pair.capture = true;
        let (client, _) = pair.connect_and_wait();
        pair.client_send(client, payload(50_000, 9));
        pair.run_for(Duration::from_secs(2));
        pair.captured.iter().map(|d| d.payload.clone()).collect::<Vec<_>>()
    };
    assert_eq!(run(35), run(35));
    assert_ne!(run(35), run(36));
}
