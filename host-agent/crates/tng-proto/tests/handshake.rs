//! The isolation layer end to end: Noise XX handshake and identities, pinning, stateless retry, anti-amplification.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{addr, Datagram, Pair, PathConfig};
use tng_proto::{
    ConnectionError, Endpoint, EndpointConfig, Event, Identity, RetryPolicy, ServerConfig, StaticKeypair, Time,
};

#[test]
fn handshake_connects_and_both_sides_learn_the_peer_identity() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 1);
    let (client, server) = pair.connect_and_wait();
    pair.run_for(Duration::from_millis(100));
    let client_identity = pair.client_keypair.identity();
    let server_identity = pair.server_keypair.identity();
    assert!(pair.client_events.contains(&(client, Event::Connected { peer: server_identity })));
    assert!(pair.server_events.contains(&(server, Event::Connected { peer: client_identity })));
    assert_eq!(pair.client.connection(client).and_then(|c| c.peer_identity()), Some(server_identity));
    assert_eq!(pair.server.connection(server).and_then(|c| c.peer_identity()), Some(client_identity));
    assert_eq!(pair.server.identity(), server_identity);
    let client_id = pair.client.connection(client).map(|c| c.connection_id());
    let server_id = pair.server.connection(server).map(|c| c.connection_id());
    assert_eq!(client_id, server_id, "the client adopted the server-chosen connection id");
    assert_eq!(pair.client.stats().dropped(), 0, "{:?}", pair.client.stats());
    assert_eq!(pair.server.stats().dropped(), 0, "{:?}", pair.server.stats());
}

#[test]
fn client_data_rides_in_the_third_handshake_message() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 2);
    let client = pair.connect();
    // React to Connected before the next transmit, as a sans-IO application does: the bytes go in stage 3.
    pair.run_until(Duration::from_secs(1), |pair| {
        pair.client_events.iter().any(|(_, event)| matches!(event, Event::Connected { .. }))
    });
    let request = b"GET / one round trip".to_vec();
    pair.client_send(client, request.clone());
    let started = pair.now;
    assert!(pair.run_until(Duration::from_secs(1), |pair| pair.server_got(&request)));
    // One-way delay is 10 ms: stage 3 (with the data) arrives 10 ms after it leaves.
    assert!(pair.now - started <= Duration::from_millis(11), "took {:?}", pair.now - started);
}

#[test]
fn wrong_pinned_identity_fails_with_a_clear_reason() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(5)], 3);
    let pinned = StaticKeypair::from_seed(999).identity();
    let paths = pair.path_list();
    let handle = pair.client.connect(pair.now, &paths, Some(pinned)).expect("connect");
    pair.run_for(Duration::from_millis(200));
    let actual = pair.server_keypair.identity();
    let failure = pair.client_events.iter().find_map(|(h, event)| match event {
        Event::HandshakeFailed { reason } if *h == handle => Some(reason.clone()),
        _ => None,
    });
    let reason = failure.expect("handshake failed");
    assert_eq!(reason, ConnectionError::IdentityMismatch { actual, pinned });
    assert_eq!(reason.to_string(), format!("server identity {actual} does not match pinned {pinned}"));
    assert!(!pair.client_events.iter().any(|(_, event)| matches!(event, Event::Connected { .. })));
    assert!(pair.client.connection(handle).is_none(), "the failed connection is gone");
}

#[test]
fn correct_pin_connects() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(5)], 4);
    let paths = pair.path_list();
    let pin: Identity = pair.server_keypair.identity().to_string().parse().expect("hex identity");
    pair.client.connect(pair.now, &paths, Some(pin)).expect("connect");
    assert!(pair.run_until(Duration::from_secs(1), |pair| {
        pair.server_events.iter().any(|(_, event)| matches!(event, Event::Connected { .. }))
    }));
}

fn server_with_retry(retry: RetryPolicy) -> EndpointConfig {
    EndpointConfig { server: Some(ServerConfig { retry, ..ServerConfig::default() }), ..EndpointConfig::server() }
}

#[test]
fn retry_validates_the_address_then_the_handshake_completes() {
    let mut pair =
        Pair::new(EndpointConfig::client(), server_with_retry(RetryPolicy::Always), vec![PathConfig::clean(10)], 5);
    let (client, _) = pair.connect_and_wait();
    let request = b"after retry".to_vec();
    pair.client_send(client, request.clone());
    assert!(pair.run_until(Duration::from_secs(2), |pair| pair.server_got(&request)));
    let stats = pair.server.stats();
    assert_eq!(stats.retries_sent, 1);
    assert_eq!(stats.invalid_tokens, 0);
    assert_eq!(stats.handshakes_accepted, 1);
}

#[test]
fn handshake_survives_loss_of_every_first_transmission() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(20)], 6);
    // Drop the first datagram in each direction: stage 1, then stage 2.
    let mut dropped = (false, false);
    pair.filter = Some(Box::new(move |datagram: &Datagram| {
        let first = if datagram.to_server { &mut dropped.0 } else { &mut dropped.1 };
        let keep = *first;
        *first = true;
        keep
    }));
    let (client, _) = pair.connect_and_wait();
    let request = b"late but intact".to_vec();
    pair.client_send(client, request.clone());
    assert!(pair.run_until(Duration::from_secs(10), |pair| pair.server_got(&request)));
}

/// Stage-1 INITIALs a real client would send, but from a spoofed source: the victim's address.
fn spoofed_hellos(count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let mut attacker =
                Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(100 + i as u64), i as u64);
            let paths = [(addr("10.9.9.9:1000"), addr(common::SERVER))];
            attacker.connect(Time::ZERO, &paths, None).expect("connect");
            attacker.poll_datagram(Time::ZERO).expect("stage 1").payload
        })
        .collect()
}

fn flood(retry: RetryPolicy) -> (Endpoint, u64, u64) {
    let victim: SocketAddr = addr("10.7.7.7:53");
    let server_addr = addr(common::SERVER);
    let mut server = Endpoint::new(server_with_retry(retry), StaticKeypair::from_seed(7), 7);
    let hellos = spoofed_hellos(20);
    let (mut received, mut sent) = (0u64, 0u64);
    let mut now = Time::ZERO;
    // Each hello arrives five times (an attacker replaying it to multiply the answers).
    for round in 0..5 {
        for hello in &hellos {
            server.handle_datagram(now, server_addr, victim, None, hello);
            received += hello.len() as u64;
            while let Some(transmit) = server.poll_datagram(now) {
                assert_eq!(transmit.remote, victim);
                sent += transmit.payload.len() as u64;
            }
        }
        now += Duration::from_millis(100 * (round + 1));
        server.handle_timeout(now);
        while let Some(transmit) = server.poll_datagram(now) {
            sent += transmit.payload.len() as u64;
        }
    }
    (server, received, sent)
}

#[test]
fn spoofed_flood_gets_at_most_three_times_amplification() {
    let (server, received, sent) = flood(RetryPolicy::Never);
    assert!(sent <= 3 * received, "sent {sent} for {received} received");
    assert_eq!(server.stats().handshakes_accepted, 20);
    // Stage 2 is small: the budget is not even needed here, but every answer stays within it.
    let (server, received, sent) = flood(RetryPolicy::Always);
    assert!(sent * 10 < received, "retries are tiny: sent {sent} for {received}");
    assert_eq!(server.stats().connections, 0, "a retrying server keeps no state");
    assert_eq!(server.stats().retries_sent, 100);
    let (server, _, _) = flood(RetryPolicy::WhenBusy { max_pending: 5 });
    assert_eq!(server.stats().handshakes_accepted, 5, "state only up to the pending limit");
}

#[test]
fn forged_or_expired_tokens_are_counted_and_answered_with_a_fresh_retry() {
    let server_addr = addr(common::SERVER);
    let client_addr = addr("10.1.0.2:5000");
    let mut server = Endpoint::new(server_with_retry(RetryPolicy::Always), StaticKeypair::from_seed(8), 8);
    let mut client = Endpoint::new(EndpointConfig::client(), StaticKeypair::from_seed(9), 9);
    client.connect(Time::ZERO, &[(client_addr, server_addr)], None).expect("connect");
    let hello = client.poll_datagram(Time::ZERO).expect("stage 1");
    server.handle_datagram(Time::ZERO, server_addr, client_addr, None, &hello.payload);
    let retry = server.poll_datagram(Time::ZERO).expect("retry");
    client.handle_datagram(Time::ZERO, client_addr, server_addr, None, &retry.payload);
    let with_token = client.poll_datagram(Time::ZERO).expect("stage 1 with token");
    // Eleven seconds later the token has expired.
    let late = Time::ZERO + Duration::from_secs(11);
    server.handle_datagram(late, server_addr, client_addr, None, &with_token.payload);
    assert_eq!(server.stats().invalid_tokens, 1);
    assert_eq!(server.stats().handshakes_accepted, 0);
    assert!(server.poll_datagram(late).is_some(), "a fresh retry");
    // From another address the token does not verify either.
    server.handle_datagram(Time::ZERO, server_addr, addr("10.1.0.3:5000"), None, &with_token.payload);
    assert_eq!(server.stats().invalid_tokens, 2);
    // In time and from the right address it does.
    server.handle_datagram(Time::ZERO, server_addr, client_addr, None, &with_token.payload);
    assert_eq!(server.stats().handshakes_accepted, 1);
}

#[test]
fn endpoints_without_a_server_config_refuse_handshakes() {
    let mut pair = Pair::new(EndpointConfig::client(), EndpointConfig::client(), vec![PathConfig::clean(5)], 10);
    let handle = pair.connect();
    pair.run_for(Duration::from_secs(12));
    assert!(pair.server.stats().not_a_server > 0);
    assert!(pair.client_events.iter().any(|(h, event)| *h == handle
        && matches!(event, Event::HandshakeFailed { reason: ConnectionError::HandshakeTimeout(_) })));
}
