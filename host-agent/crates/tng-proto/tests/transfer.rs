//! The flow and semantic layers end to end: data over several channels with loss and reordering, channel failure,
//! migration, key update, tail-loss probes, policies, closing.

mod common;

use std::time::Duration;

use common::{payload, Pair, PathConfig};
use tng_proto::{
    ChannelState, ConnectionError, EndpointConfig, Event, HostPolicy, SchedulerKind, StreamConfig, TailLossMode,
    TransportConfig,
};

#[test]
fn data_arrives_intact_over_two_lossy_reordering_paths() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::lossy(10, 0.02, 4), PathConfig::lossy(30, 0.02, 10)], 11);
    let (client, server) = pair.connect_and_wait();
    let uploads: Vec<Vec<u8>> = (0..4).map(|i| payload(300_000 + i * 1_000, 100 + i as u64)).collect();
    for upload in &uploads {
        pair.client_send(client, upload.clone());
    }
    let download = payload(500_000, 200);
    pair.server_send(server, download.clone());
    let done = pair.run_until(Duration::from_secs(60), |pair| {
        uploads.iter().all(|upload| pair.server_got(upload)) && pair.client_got(&download)
    });
    assert!(done, "transfer incomplete at {:?}: client {:?}", pair.now, pair.client.connection_stats(client));
    let stats = pair.client.connection_stats(client).expect("client stats");
    assert_eq!(stats.channels.len(), 2);
    for channel in &stats.channels {
        assert_eq!(channel.state, ChannelState::Active);
        assert!(channel.sent_packets > 50, "channel {} carried data: {channel:?}", channel.id);
        assert!(channel.srtt >= Duration::from_millis(2 * 10), "{channel:?}");
    }
    assert!(stats.channels.iter().map(|c| c.lost_packets).sum::<u64>() > 0, "loss was injected");
    assert!(stats.channels.iter().map(|c| c.retransmitted_packets).sum::<u64>() > 0);
    assert_eq!(pair.client.stats().auth_failed + pair.server.stats().auth_failed, 0);
}

#[test]
fn connection_survives_losing_a_channel() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10), PathConfig::clean(25)], 12);
    let (client, _) = pair.connect_and_wait();
    let first = payload(200_000, 1);
    pair.client_send(client, first.clone());
    assert!(pair.run_until(Duration::from_secs(20), |pair| pair.server_got(&first)));
    // Path 0 (the handshake path) dies.
    pair.paths[0].down = true;
    let second = payload(400_000, 2);
    pair.client_send(client, second.clone());
    let down = |pair: &Pair| pair.client_events.contains(&(client, Event::ChannelDown(0)));
    assert!(pair.run_until(Duration::from_secs(60), |pair| pair.server_got(&second) && down(pair)), "transfer stalled");
    let stats = pair.client.connection_stats(client).expect("connection alive");
    assert_eq!(stats.channels.iter().find(|c| c.id == 0).map(|c| c.state), Some(ChannelState::Down));
    assert_eq!(stats.channels.iter().find(|c| c.id == 1).map(|c| c.state), Some(ChannelState::Active));

    // The radio comes back: periodic re-probing brings the channel up again.
    pair.paths[0].down = false;
    assert!(pair.run_until(Duration::from_secs(10), |pair| {
        let stats = pair.client.connection_stats(client);
        stats.is_some_and(|stats| stats.channels.iter().all(|channel| channel.state == ChannelState::Active))
    }));
    let ups = pair.client_events.iter().filter(|(_, event)| *event == Event::ChannelUp(0)).count();
    assert_eq!(ups, 2, "channel 0 up after the handshake and again after the outage");
    let third = payload(100_000, 3);
    pair.client_send(client, third.clone());
    assert!(pair.run_until(Duration::from_secs(20), |pair| pair.server_got(&third)));
}

#[test]
fn connection_continues_after_the_client_moves_to_a_new_address() {
    let mut pair = Pair::default_with_paths(vec![PathConfig { rate: Some(1_000_000), ..PathConfig::clean(15) }], 13);
    let (client, server) = pair.connect_and_wait();
    let data = payload(600_000, 4);
    pair.client_send(client, data.clone());
    pair.run_for(Duration::from_millis(300));
    assert!(!pair.server_got(&data), "still in progress when the address changes");
    let new = common::addr("10.1.50.2:6000");
    pair.move_client_path(0, new);
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.server_got(&data)), "transfer stalled after migration");
    let channel = pair.server.connection_stats(server).map(|stats| stats.channels[0].clone()).expect("server channel");
    assert_eq!(channel.remote, new, "the server moved the channel to the new address");
    assert_eq!(channel.state, ChannelState::Active);
    // And the other direction works at the new address too.
    let reply = payload(50_000, 5);
    pair.server_send(server, reply.clone());
    assert!(pair.run_until(Duration::from_secs(10), |pair| pair.client_got(&reply)));
}

#[test]
fn key_update_in_the_middle_of_a_transfer() {
    let transport = TransportConfig { key_update_interval_packets: 100, ..TransportConfig::default() };
    let client_config = EndpointConfig { transport: transport.clone(), ..EndpointConfig::client() };
    let server_config = EndpointConfig { transport, ..EndpointConfig::server() };
    let mut pair = Pair::new(
        client_config,
        server_config,
        vec![PathConfig::lossy(10, 0.01, 3), PathConfig::lossy(20, 0.0, 0)],
        14,
    );
    let (client, server) = pair.connect_and_wait();
    let data = payload(1_500_000, 6);
    pair.client_send(client, data.clone());
    let reply = payload(300_000, 7);
    pair.server_send(server, reply.clone());
    assert!(pair.run_until(Duration::from_secs(60), |pair| pair.server_got(&data) && pair.client_got(&reply)));
    let client_updates = pair.client.connection(client).map(|c| c.stats().key_updates).unwrap_or(0);
    let server_updates = pair.server.connection(server).map(|c| c.stats().key_updates).unwrap_or(0);
    assert!(client_updates >= 2, "client key updates: {client_updates}");
    assert!(server_updates >= 2, "server key updates: {server_updates}");
    assert_eq!(pair.server.stats().auth_failed, 0, "reordered packets opened with the previous key");
    assert_eq!(pair.client.stats().auth_failed, 0);
}

#[test]
fn alternate_path_tail_loss_probe_uses_the_other_channel() {
    for (mode, seed) in [(TailLossMode::SamePath, 15), (TailLossMode::AlternatePath, 16)] {
        let transport = TransportConfig { tail_loss: mode, keepalive: None, ..TransportConfig::default() };
        let client_config = EndpointConfig { transport, ..EndpointConfig::client() };
        let mut pair = Pair::new(
            client_config,
            EndpointConfig::server(),
            vec![PathConfig::clean(10), PathConfig::clean(40)],
            seed,
        );
        let (client, _) = pair.connect_and_wait();
        pair.run_for(Duration::from_millis(500));
        // Policy: data on the fast channel only, so the tail sits on channel 0.
        let policy = HostPolicy { scheduler: Some(SchedulerKind::LowestRtt), ..HostPolicy::default() };
        pair.client.connection(client).expect("connection").set_policy(policy);
        // Lose the tail: every client packet on path 0 for the next 300 ms.
        let lose_until = pair.now + Duration::from_millis(300);
        let client_path0 = pair.client_addrs[0];
        let clock = std::rc::Rc::new(std::cell::Cell::new(pair.now));
        let seen = clock.clone();
        pair.filter = Some(Box::new(move |datagram| {
            !(datagram.to_server && datagram.from == client_path0 && seen.get() < lose_until)
        }));
        let burst = payload(3_000, 8);
        pair.client_send(client, burst.clone());
        let start = pair.now;
        let done = pair.run_until(Duration::from_secs(10), |pair| {
            clock.set(pair.now);
            pair.server_got(&burst)
        });
        assert!(done, "{mode}: burst not delivered");
        let stats = pair.client.connection_stats(client).expect("stats");
        let probes: Vec<u64> = stats.channels.iter().map(|c| c.tail_loss_probes).collect();
        match mode {
            TailLossMode::SamePath => assert!(probes[0] > 0 && probes[1] == 0, "{mode}: probes {probes:?}"),
            TailLossMode::AlternatePath => {
                assert!(probes[1] > 0, "{mode}: probes {probes:?}");
                // The alternate path recovers before the lossy period ends.
                assert!(pair.now - start < Duration::from_millis(300), "{mode}: took {:?}", pair.now - start);
            }
        }
    }
}

#[test]
fn policies_switch_controllers_per_channel() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10), PathConfig::clean(20)], 17);
    let (client, _) = pair.connect_and_wait();
    pair.run_for(Duration::from_millis(300));
    let mut policy = HostPolicy { cc: Some(tng_proto::CcKind::NewReno), ..HostPolicy::default() };
    policy.cc_per_channel.insert(1, tng_proto::CcKind::Vegas);
    policy.tail_loss = Some(TailLossMode::AlternatePath);
    policy.rate_cap = Some(200_000);
    let connection = pair.client.connection(client).expect("connection");
    connection.set_policy(policy);
    let stats = connection.stats();
    assert_eq!(stats.channels[0].cc, "newreno");
    assert_eq!(stats.channels[1].cc, "vegas");
    assert_eq!(stats.tail_loss, TailLossMode::AlternatePath);
    // The rate cap holds the aggregate to about 200 kB/s.
    let data = payload(200_000, 9);
    pair.client_send(client, data.clone());
    let start = pair.now;
    assert!(pair.run_until(Duration::from_secs(10), |pair| pair.server_got(&data)));
    assert!(pair.now - start >= Duration::from_millis(800), "rate cap ignored: {:?}", pair.now - start);
}

#[test]
fn new_controller_parameters_restart_the_controllers_with_them() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 19);
    let (client, _) = pair.connect_and_wait();
    let initial_cwnd = pair.client.connection_stats(client).expect("stats").channels[0].cwnd;
    let data = payload(2_000_000, 10);
    pair.client_send(client, data.clone());
    assert!(pair.run_until(Duration::from_secs(10), |pair| pair.server_got(&data)));
    let grown = pair.client.connection_stats(client).expect("stats").channels[0].cwnd;
    assert!(grown > initial_cwnd, "cwnd did not grow: {grown}");
    let shared_queue = tng_proto::cc::CcConfig {
        queue_threshold: Some(Duration::from_millis(5)),
        copa_delta: 0.1,
        ..tng_proto::cc::CcConfig::default()
    };
    let connection = pair.client.connection(client).expect("connection");
    // Same controller kind, same parameters: the channel keeps its state.
    connection
        .set_policy(HostPolicy { cc_config: Some(TransportConfig::default().cc_config), ..HostPolicy::default() });
    assert_eq!(connection.stats().channels[0].cwnd, grown);
    // New parameters: a fresh controller, so its window starts over.
    connection.set_policy(HostPolicy { cc_config: Some(shared_queue), ..HostPolicy::default() });
    assert_eq!(connection.stats().channels[0].cwnd, initial_cwnd);
    assert_eq!(connection.stats().channels[0].cc, "cubic");
}

#[test]
fn close_reaches_the_peer_and_both_sides_drain() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 18);
    let (client, server) = pair.connect_and_wait();
    pair.client.connection(client).expect("connection").close(pair.now, 42, "bye");
    pair.run_for(Duration::from_secs(5));
    assert!(pair.client_events.iter().any(|(h, event)| *h == client
        && *event == Event::Closed { reason: ConnectionError::LocallyClosed { code: 42, reason: "bye".into() } }));
    assert!(pair.server_events.iter().any(|(h, event)| *h == server
        && *event == Event::Closed { reason: ConnectionError::PeerClosed { code: 42, reason: "bye".into() } }));
    assert!(pair.client.connection(client).is_none(), "drained");
    assert!(pair.server.connection(server).is_none(), "drained");
}

#[test]
fn idle_connections_time_out() {
    let transport = TransportConfig { idle_timeout: Duration::from_secs(3), ..TransportConfig::default() };
    let client_config = EndpointConfig { transport, ..EndpointConfig::client() };
    let mut pair = Pair::new(client_config, EndpointConfig::server(), vec![PathConfig::clean(10)], 19);
    let (client, _) = pair.connect_and_wait();
    pair.run_for(Duration::from_secs(1));
    pair.paths[0].down = true;
    pair.run_for(Duration::from_secs(5));
    assert!(pair
        .client_events
        .iter()
        .any(|(h, event)| *h == client && matches!(event, Event::Closed { reason: ConnectionError::IdleTimeout(_) })));
}

#[test]
fn keepalives_hold_an_idle_connection_open() {
    let transport = TransportConfig { idle_timeout: Duration::from_secs(3), ..TransportConfig::default() };
    let client_config = EndpointConfig { transport: transport.clone(), ..EndpointConfig::client() };
    let server_config = EndpointConfig { transport, ..EndpointConfig::server() };
    let mut pair = Pair::new(client_config, server_config, vec![PathConfig::clean(10)], 20);
    let (client, _) = pair.connect_and_wait();
    pair.run_for(Duration::from_secs(20));
    assert!(pair.client.connection(client).is_some_and(|c| c.is_established()));
}

#[test]
fn switch_feedback_and_ecn_marks_are_echoed_to_the_sender() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10)], 22);
    // A switch on the path towards the server reports a 3.2 ms queue and a 4 Mbit/s rate, and marks CE on every
    // tenth ECN-capable packet.
    let mut seen = 0u64;
    pair.switch = Some(Box::new(move |datagram: &mut common::Datagram| {
        if !datagram.to_server {
            return;
        }
        let own = tng_wire::Feedback { queue_level: 100, rate_hint: 4_000 };
        if tng_wire::rewrite_feedback(&mut datagram.payload, own).is_ok() && datagram.ecn.is_some() {
            seen += 1;
            if seen.is_multiple_of(10) {
                datagram.ecn = Some(tng_proto::EcnCodepoint::Ce);
            }
        }
    }));
    let (client, server) = pair.connect_and_wait();
    let data = payload(200_000, 10);
    pair.client_send(client, data.clone());
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.server_got(&data)));
    let sender = pair.client.connection_stats(client).expect("client").channels[0].clone();
    let feedback = sender.last_feedback.expect("feedback echoed");
    assert_eq!(feedback.queue_delay, Some(Duration::from_micros(3_200)));
    assert_eq!(feedback.rate_hint, Some(500_000), "4000 kbit/s is 500 kB/s");
    assert!(sender.ecn_reported.ce > 0, "{sender:?}");
    assert!(sender.ecn_reported.ect0 > 0);
    let receiver = pair.server.connection_stats(server).expect("server").channels[0].clone();
    assert!(receiver.ecn_received.ce >= sender.ecn_reported.ce, "the receiver counted every mark it reported");
}

#[test]
fn channels_come_and_go_with_local_and_server_addresses() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(10), PathConfig::clean(20)], 23);
    let (client, server) = pair.connect_and_wait();
    pair.run_for(Duration::from_millis(300));
    // The client loses its second radio: the channel is abandoned on both sides.
    let second = pair.client_addrs[1];
    pair.client.remove_local_address(pair.now, second);
    pair.run_for(Duration::from_millis(300));
    assert_eq!(pair.client.connection_stats(client).map(|s| s.channels.len()), Some(1));
    assert_eq!(pair.server.connection_stats(server).map(|s| s.channels.len()), Some(1));
    assert!(pair.server_events.contains(&(server, Event::ChannelDown(1))));
    // The server gains an address and advertises it: the client opens a channel to it.
    let extra = common::addr("10.0.0.2:4477");
    pair.extra_server_addrs.push(extra);
    pair.server.add_local_address(pair.now, extra);
    assert!(pair.run_until(Duration::from_secs(5), |pair| {
        pair.client
            .connection_stats(client)
            .is_some_and(|s| s.channels.iter().any(|c| c.remote == extra && c.state == ChannelState::Active))
    }));
    let data = payload(100_000, 11);
    pair.client_send(client, data.clone());
    assert!(pair.run_until(Duration::from_secs(10), |pair| pair.server_got(&data)));
}

#[test]
fn limits_give_clear_errors() {
    let mut pair = Pair::default_with_paths(vec![PathConfig::clean(5)], 21);
    let paths: Vec<_> = (0..9).map(|i| (common::client_addr(i), pair.server_addr)).collect();
    let error = pair.client.connect(pair.now, &paths, None).expect_err("too many paths");
    assert_eq!(error.to_string(), "9 paths given but at most 8 channels are allowed (TransportConfig::max_channels)");
    let duplicate = [paths[0], paths[0]];
    assert!(pair.client.connect(pair.now, &duplicate, None).is_err());
    assert!(pair.client.connect(pair.now, &[], None).is_err());

    // Streams: the peer allows 1024 at once (its StreamConfig::max_streams).
    let (client, _) = pair.connect_and_wait();
    let connection = pair.client.connection(client).expect("connection");
    for _ in 0..1024 {
        connection.open_stream().expect("within the limit");
    }
    let error = connection.open_stream().expect_err("over the limit");
    assert_eq!(error.to_string(), "the peer allows at most 1024 streams opened by us; wait for it to raise the limit");
    // The unsent bound: a write is cut at one congestion window of unsent bytes (TCP_NOTSENT_LOWAT), and the next
    // one is refused until packets leave.
    let stream = tng_proto::StreamId::from(0);
    let accepted = connection.write(pair.now, stream, &vec![0; 1 << 20]).expect("partial write");
    let cwnd = connection.stats().channels[0].cwnd;
    assert_eq!(accepted as u64, cwnd);
    assert_eq!(connection.stats().streams.unsent_limit, Some(cwnd));
    assert!(matches!(connection.write(pair.now, stream, b"more"), Err(tng_proto::StreamError::Blocked(_))));
}

#[test]
fn a_window_held_back_by_flow_control_does_not_grow() {
    // The server grants 64 kB of credit: with 2 x 10 ms of delay the client can use at most that much of a
    // 10 MB/s path, so its window stops growing once credit rather than the window limits it. (Grown by every
    // ACK, as before, it reached the size of the whole upload.)
    let mut server_config = EndpointConfig::server();
    server_config.transport.streams =
        StreamConfig { stream_receive_window: 64 * 1024, receive_window: 64 * 1024, ..StreamConfig::default() };
    let mut pair = Pair::new(EndpointConfig::client(), server_config, vec![PathConfig::clean(10)], 31);
    let (client, _) = pair.connect_and_wait();
    let upload = payload(4_000_000, 32);
    pair.client_send(client, upload.clone());
    assert!(pair.run_until(Duration::from_secs(60), |pair| pair.server_got(&upload)), "upload incomplete");
    let channel = pair.client.connection_stats(client).expect("client stats").channels[0].clone();
    assert!(channel.cwnd < 256 * 1024, "window grew beyond what flow control let it use: {channel:?}");
}

#[test]
fn a_stream_window_smaller_than_the_path_grows_until_the_path_is_the_limit() {
    // 256 kB of stream credit at first against 10 MB/s over 100 ms of round trip (1 MB in flight to fill it): held
    // to that window, 10 MB took 7.8 s (a window per round trip, the queue included); grown, 1.8 s: what the path
    // needs plus slow start.
    let upload_time = |receive_window: u64| {
        let mut server_config = EndpointConfig::server();
        server_config.transport.streams =
            StreamConfig { stream_receive_window: 256 * 1024, receive_window, ..StreamConfig::default() };
        let mut pair = Pair::new(EndpointConfig::client(), server_config, vec![PathConfig::clean(50)], 33);
        let (client, _) = pair.connect_and_wait();
        let start = pair.now;
        let upload = payload(10_000_000, 34);
        pair.client_send(client, upload.clone());
        assert!(pair.run_until(Duration::from_secs(60), |pair| pair.server_got(&upload)), "upload incomplete");
        pair.now.saturating_since(start)
    };
    let held = upload_time(256 * 1024); // the connection's window caps the stream's growth at its first size
    let grown = upload_time(16 * 1024 * 1024);
    assert!(held > Duration::from_millis(3500), "held to 256 kB: {held:?}");
    assert!(grown < Duration::from_millis(2500), "grown: {grown:?}");
}

#[test]
fn a_receiver_whose_acks_wait_behind_the_senders_queue_keeps_its_channel() {
    // 5 Mbit/s with a 200 ms drop-tail queue and a 0.4 ms round trip: the server's slow start fills the queue, so
    // the ACKs it sends for the client's STREAM_ACKs arrive up to 200 ms late, many of the client's (tiny) probe
    // timeouts after. Data keeps arriving on the channel all the while: it is not down.
    let path = PathConfig {
        delay: Duration::from_micros(200),
        rate: Some(625_000),
        queue: Some(Duration::from_millis(200)),
        burst: Duration::from_millis(100), // 64 kB, as the agent's netns test's tbf
        ..PathConfig::clean(0)
    };
    let mut pair = Pair::default_with_paths(vec![path], 6);
    let (client, server) = pair.connect_and_wait();
    let data = payload(2_000_000, 4);
    pair.server_send(server, data.clone());
    let started = pair.now;
    assert!(pair.run_until(Duration::from_secs(30), |pair| pair.client_got(&data)), "transfer stalled");
    // The link needs 3.2 s for it; with the channel taken down, the sender repeated what had arrived (4.8 s).
    let took = pair.now.saturating_since(started);
    assert!(took < Duration::from_millis(3500), "2 MB took {took:?} on a 5 Mbit/s link");
    let downs =
        pair.client_events.iter().filter(|(handle, event)| *handle == client && *event == Event::ChannelDown(0));
    assert_eq!(downs.count(), 0, "the client took its only channel for down while data arrived on it");
    let stats = pair.server.connection_stats(server).expect("connection alive");
    assert_eq!(stats.channels[0].state, ChannelState::Active);
}
