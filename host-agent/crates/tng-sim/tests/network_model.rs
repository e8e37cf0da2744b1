//! Routing, shared bottlenecks, address changes and the tail-drop rule of the composed network.

use std::path::Path;
use std::time::Duration;

use tng_sim::datagram::{Datagram, Ecn};
use tng_sim::document::parse_scenario;
use tng_sim::network::{
    client_address, cross_client_address, cross_server_address, server_address, HostId, Network, NetworkChange,
    Progress,
};
use tng_sim::relays::{RelayEnd, RelaySite};
use tng_sim::topology::NetworkPlan;

fn network(text: &str, clients: usize) -> Network {
    let scenario = parse_scenario(Path::new("test.toml"), text, &[]).expect("valid scenario");
    let plan = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect("valid network");
    Network::new(&plan, clients, 1)
}

/// A tng DATA packet (type 0x03) of `len` bytes.
fn data_packet(source: std::net::SocketAddr, destination: std::net::SocketAddr, len: usize) -> Datagram {
    let mut payload = vec![0u8; len];
    payload[0] = 1;
    payload[1] = 0x03;
    Datagram { source, destination, ecn: Ecn::NotEct, payload }
}

/// Where a datagram got to.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Host(HostId),
    Relay(RelaySite),
}

/// Follows a datagram hop by hop from `progress` (sent at `now`); returns where it stopped and when, or `None` if
/// it was lost.
fn travel(network: &mut Network, now: Duration, mut progress: Progress) -> Option<(Stop, Duration)> {
    let mut at = now;
    loop {
        match progress {
            Progress::Travelling { arrives, packet } => {
                at = arrives;
                progress = network.arrive(arrives, packet);
            }
            Progress::Delivered { to, .. } => return Some((Stop::Host(to), at)),
            Progress::AtRelay { site, .. } => return Some((Stop::Relay(site), at)),
            Progress::Held | Progress::Lost => return None,
        }
    }
}

/// Sends a datagram between hosts of a network without relays; returns (receiving host, arrival time) or `None`.
fn carry(network: &mut Network, now: Duration, from: HostId, datagram: Datagram) -> Option<(HostId, Duration)> {
    let progress = network.send(now, from, datagram);
    match travel(network, now, progress)? {
        (Stop::Host(host), at) => Some((host, at)),
        (Stop::Relay(site), _) => panic!("stopped at the relay {site:?} on a network without relays"),
    }
}

const TWO_PATHS: &str = r#"
duration_s = 10
[workload]
kind = "bulk"
[[paths]]
name = "a"
rate_mbps = 8
delay_ms = 10
[[paths]]
name = "b"
rate_mbps = 8
delay_ms = 30
address_changes_s = [2.0]
"#;

#[test]
fn datagrams_follow_the_path_of_their_client_address() {
    let mut network = network(TWO_PATHS, 1);
    let up = carry(
        &mut network,
        Duration::ZERO,
        HostId::Client(0),
        data_packet(client_address(0, 1, 0), server_address(1), 972),
    );
    // 1000 bytes at 8 Mbit/s = 1 ms, plus 30 ms.
    assert_eq!(up, Some((HostId::Server, Duration::from_millis(31))));
    // Cross pair: client address of path 0 towards the server's path-1 address still uses path 0's links.
    let cross = carry(
        &mut network,
        Duration::ZERO,
        HostId::Client(0),
        data_packet(client_address(0, 0, 0), server_address(1), 972),
    );
    assert_eq!(cross, Some((HostId::Server, Duration::from_millis(11))));
    let down = carry(
        &mut network,
        Duration::ZERO,
        HostId::Server,
        data_packet(server_address(0), client_address(0, 0, 0), 972),
    );
    assert_eq!(down, Some((HostId::Client(0), Duration::from_millis(11))));
}

#[test]
fn an_address_change_strands_packets_for_the_old_address() {
    let mut network = network(TWO_PATHS, 1);
    let changes = network.scheduled_changes().to_vec();
    assert_eq!(changes, vec![(Duration::from_secs(2), NetworkChange::Address { client: 0, path: 1 })]);
    let old = client_address(0, 1, 0);
    let in_flight = network.send(Duration::from_millis(1990), HostId::Server, data_packet(server_address(1), old, 972));
    let (old_reported, new) = network.apply(Duration::from_secs(2), changes[0].1).expect("address change");
    assert_eq!((old_reported, new), (old, client_address(0, 1, 1)));
    assert_eq!(new.to_string(), "10.0.1.101:4477");
    let Progress::Travelling { arrives, packet } = in_flight else { panic!("sent before the change") };
    assert!(matches!(network.arrive(arrives, packet), Progress::Lost));
    assert!(carry(&mut network, Duration::from_secs(3), HostId::Client(0), data_packet(old, server_address(1), 100))
        .is_none());
    assert!(
        carry(&mut network, Duration::from_secs(3), HostId::Server, data_packet(server_address(1), new, 100)).is_some()
    );
    assert_eq!(network.routing_stats().unroutable, 2);
}

#[test]
fn clients_share_a_bottleneck_but_not_their_access_links() {
    let text = r#"
duration_s = 10
clients = 2
[workload]
kind = "bulk"
[[paths]]
name = "access"
rate_mbps = 1000
delay_ms = 1
bottleneck = "shared"
[bottlenecks.shared]
rate_mbps = 8
delay_ms = 4
queue_packets = 1000
"#;
    let mut network = network(text, 2);
    // Both clients' packets queue behind each other at the 8 Mbit/s bottleneck: 1 ms each.
    let first = carry(
        &mut network,
        Duration::ZERO,
        HostId::Server,
        data_packet(server_address(0), client_address(0, 0, 0), 972),
    );
    let second = carry(
        &mut network,
        Duration::ZERO,
        HostId::Server,
        data_packet(server_address(0), client_address(1, 0, 0), 972),
    );
    let (_, first_at) = first.expect("delivered");
    let (to, second_at) = second.expect("delivered");
    assert_eq!(to, HostId::Client(1));
    let gap = second_at - first_at;
    assert!(gap >= Duration::from_micros(999) && gap <= Duration::from_micros(1001), "gap {gap:?}");
}

#[test]
fn tail_drop_removes_the_last_data_packets_still_in_flight_when_the_burst_was_sent() {
    let text = r#"
duration_s = 10
[workload]
kind = "bursts"
burst_bytes = 10000
interval_ms = 1000
count = 1
[[paths]]
name = "a"
rate_mbps = 80
delay_ms = 50
[paths.downlink]
tail_drop_packets = 2
"#;
    let mut network = network(text, 1);
    network.open_tail_windows(0);
    let mut in_flight = Vec::new();
    for index in 0..5u64 {
        let mut datagram = data_packet(server_address(0), client_address(0, 0, 0), 972);
        if index == 2 {
            datagram.payload[1] = 0x04; // an ACK packet never counts
        }
        in_flight.push(network.send(Duration::from_millis(index), HostId::Server, datagram));
    }
    network.close_tail_windows(0);
    // A packet sent after the burst was complete (a retransmission) is not a candidate.
    in_flight.push(network.send(
        Duration::from_millis(10),
        HostId::Server,
        data_packet(server_address(0), client_address(0, 0, 0), 972),
    ));
    let delivered: Vec<bool> = in_flight
        .into_iter()
        .map(|progress| match progress {
            Progress::Travelling { arrives, packet } => {
                matches!(network.arrive(arrives, packet), Progress::Delivered { .. })
            }
            _ => false,
        })
        .collect();
    assert_eq!(delivered, vec![true, true, true, false, false, true]);
    assert_eq!(network.tail_drop_stats().dropped, 2);
    assert_eq!(network.tail_drop_stats().missed, 0);
}

#[test]
fn tail_drop_holds_the_last_packets_while_another_path_is_still_sending() {
    let text = r#"
duration_s = 10
[workload]
kind = "bursts"
burst_bytes = 10000
interval_ms = 1000
count = 1
[[paths]]
name = "a"
rate_mbps = 80
delay_ms = 5
[paths.downlink]
tail_drop_packets = 1
"#;
    let mut network = network(text, 1);
    let packet = || data_packet(server_address(0), client_address(0, 0, 0), 972);
    network.open_tail_windows(0);
    let Progress::Travelling { arrives, packet: first } = network.send(Duration::ZERO, HostId::Server, packet()) else {
        panic!("accepted")
    };
    // It arrives while the burst is still being sent elsewhere: held, not delivered.
    assert!(matches!(network.arrive(arrives, first), Progress::Held));
    // A newer data packet on the link shows the held one was not the last: it goes on at once.
    let second = network.send(Duration::from_millis(20), HostId::Server, packet());
    let released = network.take_released(Duration::from_millis(20));
    assert_eq!(released.len(), 1);
    assert!(matches!(released[0], Progress::Delivered { to: HostId::Client(0), .. }));
    let Progress::Travelling { arrives, packet: second } = second else { panic!("accepted") };
    assert!(matches!(network.arrive(arrives, second), Progress::Held));
    // The burst is sent in full: the held packet is its tail here and is dropped.
    network.close_tail_windows(0);
    assert!(network.take_released(Duration::from_millis(40)).is_empty());
    let stats = network.tail_drop_stats();
    assert_eq!((stats.dropped, stats.missed, stats.held_then_released), (1, 0, 1));
}

#[test]
fn every_client_of_thousands_has_its_own_address_and_receives_its_own_datagrams() {
    let clients = 1000;
    let mut network = network(TWO_PATHS, clients);
    let mut seen = std::collections::BTreeSet::new();
    for client in 0..clients {
        for path in 0..2 {
            assert!(seen.insert(client_address(client, path, 0)), "client {client} path {path} shares an address");
        }
    }
    assert_eq!(client_address(256, 1, 0).to_string(), "11.0.1.1:4477");
    for client in [0, 255, 256, 999] {
        let down = carry(
            &mut network,
            Duration::ZERO,
            HostId::Server,
            data_packet(server_address(1), client_address(client, 1, 0), 972),
        );
        assert_eq!(down.map(|(to, _)| to), Some(HostId::Client(client)));
    }
}

const RELAYED: &str = r#"
duration_s = 10
[workload]
kind = "bulk"
[[paths]]
name = "dsl"
rate_mbps = 8
delay_ms = 10
bottleneck = "core"
relay = {}
[[paths]]
name = "direct"
rate_mbps = 8
delay_ms = 10
bottleneck = "core"
[bottlenecks.core]
rate_mbps = 80
delay_ms = 20
"#;

#[test]
fn a_relay_splits_its_path_at_the_bottleneck() {
    let mut network = network(RELAYED, 2);
    let site = RelaySite { path: 0, end: RelayEnd::Client };
    let relay = site.address();
    let (client, server) = (client_address(1, 0, 0), server_address(0));
    // 1000 bytes: 1 ms at 8 Mbit/s on the access link plus 10 ms; 0.1 ms at 80 Mbit/s on the core plus 20 ms.
    let up = network.send(Duration::ZERO, HostId::Client(1), data_packet(client, relay, 972));
    assert_eq!(travel(&mut network, Duration::ZERO, up), Some((Stop::Relay(site), Duration::from_millis(11))));
    let onward = network.send_from_relay(Duration::ZERO, site, data_packet(relay, server, 972));
    assert_eq!(
        travel(&mut network, Duration::ZERO, onward),
        Some((Stop::Host(HostId::Server), Duration::from_micros(20_100)))
    );
    let back = network.send(Duration::ZERO, HostId::Server, data_packet(server, relay, 972));
    assert_eq!(travel(&mut network, Duration::ZERO, back), Some((Stop::Relay(site), Duration::from_micros(20_100))));
    let down = network.send_from_relay(Duration::ZERO, site, data_packet(relay, client, 972));
    assert_eq!(
        travel(&mut network, Duration::ZERO, down),
        Some((Stop::Host(HostId::Client(1)), Duration::from_millis(11)))
    );
    // The relay reaches only the clients of its own path; the path without a relay has no relay address.
    let elsewhere = network.send_from_relay(Duration::ZERO, site, data_packet(relay, client_address(1, 1, 0), 972));
    assert_eq!(travel(&mut network, Duration::ZERO, elsewhere), None);
    let other_path_relay = RelaySite { path: 1, end: RelayEnd::Client }.address();
    let no_relay =
        network.send(Duration::ZERO, HostId::Client(0), data_packet(client_address(0, 1, 0), other_path_relay, 972));
    assert_eq!(travel(&mut network, Duration::ZERO, no_relay), None, "delivered nowhere: path 1 has no relay");
    assert_eq!(network.routing_stats().unroutable, 2);
    assert_eq!(network.path_of_address(relay), Some(0), "the relay's packets count for its path");
}

#[test]
fn relays_at_both_ends_make_the_bottleneck_a_hop_of_its_own() {
    let both = RELAYED.replace("relay = {}", "relay = {}\nserver_relay = {}");
    let mut both = network(&both, 2);
    let near = RelaySite { path: 0, end: RelayEnd::Client };
    let far = RelaySite { path: 0, end: RelayEnd::Server };
    let (client, server) = (client_address(1, 0, 0), server_address(0));
    let core = Duration::from_micros(20_100); // 1000 bytes at 80 Mbit/s plus 20 ms
    let mut hop = |from: Option<RelaySite>, host: HostId, source, destination| {
        let packet = data_packet(source, destination, 972);
        let progress = match from {
            Some(site) => both.send_from_relay(Duration::ZERO, site, packet),
            None => both.send(Duration::ZERO, host, packet),
        };
        travel(&mut both, Duration::ZERO, progress)
    };
    assert_eq!(hop(Some(near), HostId::Server, near.address(), far.address()), Some((Stop::Relay(far), core)));
    assert_eq!(
        hop(Some(far), HostId::Server, far.address(), server),
        Some((Stop::Host(HostId::Server), Duration::ZERO)),
        "beside the server: no link"
    );
    assert_eq!(hop(None, HostId::Server, server, far.address()), Some((Stop::Relay(far), Duration::ZERO)));
    assert_eq!(hop(Some(far), HostId::Server, far.address(), near.address()), Some((Stop::Relay(near), core)));
    // Without the relay where the client's links end, the client reaches the far one across every link.
    let far_only = RELAYED.replace("relay = {}", "server_relay = {}");
    let mut far_only = network(&far_only, 2);
    let up = far_only.send(Duration::ZERO, HostId::Client(1), data_packet(client, far.address(), 972));
    assert_eq!(travel(&mut far_only, Duration::ZERO, up), Some((Stop::Relay(far), Duration::from_millis(11) + core)));
    let down = far_only.send_from_relay(Duration::ZERO, far, data_packet(far.address(), client, 972));
    assert_eq!(
        travel(&mut far_only, Duration::ZERO, down),
        Some((Stop::Host(HostId::Client(1)), Duration::from_millis(11) + core))
    );
}

#[test]
fn cross_traffic_crosses_only_its_bottleneck_and_reaches_its_own_hosts() {
    let cross_traffic = format!("{RELAYED}[[cross_traffic]]\nbottleneck = \"core\"\nstart_s = [1.0, 2.0]\n");
    let mut network = network(&cross_traffic, 1);
    let mut send = |from: HostId, source, destination| {
        carry(&mut network, Duration::ZERO, from, data_packet(source, destination, 1_000))
    };
    // 1,000 bytes + 28 of framing at 80 Mbit/s: 102.8 us, then the core's 20 ms.
    let core_only = Duration::from_nanos(102_800) + Duration::from_millis(20);
    let down = send(HostId::CrossServer(0), cross_server_address(0), cross_client_address(1));
    assert_eq!(down, Some((HostId::CrossClient(1), core_only)));
    let up = send(HostId::CrossClient(0), cross_client_address(0), cross_server_address(0));
    assert_eq!(up, Some((HostId::CrossServer(0), core_only)));
    // The workload's hosts are not reachable from cross-traffic addresses, nor a flow that does not exist.
    assert_eq!(send(HostId::CrossServer(0), cross_server_address(0), client_address(0, 0, 0)), None);
    assert_eq!(send(HostId::CrossServer(0), cross_server_address(0), cross_client_address(2)), None);
    assert_eq!(network.routing_stats().unroutable, 2);
}
