//! The simulated network: every client host reaches the server over each path through its own access link pair,
//! then, if the path names one, a bottleneck link pair shared by every path and client that names it.
//!
//! Routing follows the client-side address: a datagram travels the path whose client address it carries (as
//! source on the way up, destination on the way down), whatever server address it uses, because the client's
//! radio is what a path stands for. A datagram for an address no host holds any more is lost.
//!
//! A path may have a relay where its own links end and its bottleneck begins, and one where its bottleneck ends
//! beside the server: a datagram between two of client, relays and server crosses only the links between them (the
//! access links, the bottleneck, or none between the server and the relay beside it), and goes to the node its
//! destination address names.
//!
//! Cross traffic crosses only its bottleneck, between hosts of its own (IPv6 addresses, apart from every workload
//! address), and is routed by the host that sends it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::datagram::Datagram;
use crate::link::{Fate, Link, LinkStats};
use crate::relays::{RelayEnd, RelaySite};
use crate::rng::SimRng;
use crate::tail_drop::{ArrivalVerdict, TailDropRule, TailDropStats};
use crate::topology::{LinkPlan, NetworkPlan};

/// UDP port of every tng socket in the simulation.
pub const TNG_PORT: u16 = 4477;

/// The server's address on path `path`: 10.0.`path`.2.
pub fn server_address(path: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, octet(path), 2)), TNG_PORT)
}

/// Most client hosts a simulation can address: the client number takes the first two octets, from 10.0 up.
pub const MAX_CLIENTS: usize = (256 - FIRST_CLIENT_OCTET as usize) * 256;
const FIRST_CLIENT_OCTET: u8 = 10;

/// Client `client`'s address on path `path` after `changes` address changes: 10.`client`.`path`.1, then .101,
/// .102, ... (never the server's .2). From client 256 on, the first octet counts up: client 256 is 11.0.`path`.1.
pub fn client_address(client: usize, path: usize, changes: usize) -> SocketAddr {
    let host = if changes == 0 { 1 } else { octet(100 + changes) };
    let high = octet(usize::from(FIRST_CLIENT_OCTET) + client / 256);
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(high, octet(client % 256), octet(path), host)), TNG_PORT)
}

/// The client and path a client address (current or former) was made for by [`client_address`].
fn client_and_path(address: SocketAddr) -> Option<(usize, usize)> {
    let IpAddr::V4(ip) = address.ip() else {
        return None;
    };
    let [high, low, path, host] = ip.octets();
    let client = usize::from(high.checked_sub(FIRST_CLIENT_OCTET)?) * 256 + usize::from(low);
    (!(2..=4).contains(&host)).then_some((client, usize::from(path)))
}

/// The address of cross-traffic flow `flow`'s own host: fd00:c::`flow`.
pub fn cross_client_address(flow: usize) -> SocketAddr {
    cross_address(0xc, flow)
}

/// The address of the server of the `group`-th `[[cross_traffic]]` entry: fd00:5::`group`.
pub fn cross_server_address(group: usize) -> SocketAddr {
    cross_address(0x5, group)
}

fn cross_address(role: u16, index: usize) -> SocketAddr {
    let index = u32::try_from(index).unwrap_or(u32::MAX);
    let ip = Ipv6Addr::new(0xfd00, role, 0, 0, 0, 0, (index >> 16) as u16, index as u16);
    SocketAddr::new(IpAddr::V6(ip), TNG_PORT)
}

/// The cross-traffic flow whose own host has `address`.
fn cross_flow_of(address: SocketAddr) -> Option<usize> {
    let IpAddr::V6(ip) = address.ip() else {
        return None;
    };
    let segments = ip.segments();
    (segments[..6] == [0xfd00, 0xc, 0, 0, 0, 0]).then(|| (usize::from(segments[6]) << 16) | usize::from(segments[7]))
}

pub(crate) fn octet(value: usize) -> u8 {
    u8::try_from(value).unwrap_or(u8::MAX)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostId {
    Server,
    Client(usize),
    /// The server of the `usize`-th `[[cross_traffic]]` entry.
    CrossServer(usize),
    /// The host of a cross-traffic flow (the client end of its connection).
    CrossClient(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Uplink,
    Downlink,
}

/// Which links of its path a datagram crosses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leg {
    /// Between the client and the server or the relay beside it: every link.
    Whole,
    /// Between the client and the relay where its links end: the access links.
    Access,
    /// Across the bottleneck, if the path has one: between the relay where the client's links end and the server
    /// or the relay beside it.
    Core,
    /// Between the server and the relay beside it: no link.
    Local,
    /// Cross traffic: its bottleneck only (`client` is the flow, `path` unused).
    Cross,
}

/// A datagram between two hops.
#[derive(Debug)]
pub struct InFlight {
    pub datagram: Datagram,
    client: usize,
    path: usize,
    direction: Direction,
    leg: Leg,
    /// Index of the hop it is crossing.
    hop: usize,
    link: usize,
    generation: u64,
    tag: u64,
}

impl InFlight {
    /// The link it is crossing.
    pub fn link(&self) -> usize {
        self.link
    }
}

/// What happens next to a datagram.
#[derive(Debug)]
pub enum Progress {
    /// On a link until `arrives`; hand it back to [`Network::arrive`] then.
    Travelling {
        arrives: Duration,
        packet: InFlight,
    },
    /// Reached a host.
    Delivered {
        to: HostId,
        datagram: Datagram,
    },
    /// Reached a relay.
    AtRelay {
        site: RelaySite,
        datagram: Datagram,
    },
    /// Held at the far end of a link by a tail-drop rule; [`Network::take_released`] returns it if it goes on.
    Held,
    Lost,
}

/// A change the scenario schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkChange {
    Link {
        link: usize,
        up: bool,
    },
    /// The client's address on the path changes.
    Address {
        client: usize,
        path: usize,
    },
}

/// Counters of losses that are not any link's doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoutingStats {
    /// Sent from or to an address no host holds.
    pub unroutable: u64,
}

/// Link pairs of one path for one client.
#[derive(Clone, Copy, Debug)]
struct LinkPair {
    uplink: usize,
    downlink: usize,
}

pub struct Network {
    links: Vec<Link>,
    tail_rules: Vec<Option<TailDropRule>>,
    /// Whether `tail_rules` holds any rule (asked after every server event).
    any_tail_rule: bool,
    /// `[client][path]`.
    access: Vec<Vec<LinkPair>>,
    /// `[path]`.
    shared: Vec<Option<LinkPair>>,
    /// `[RelaySite::index]`: whether the path has a relay there.
    relays: Vec<bool>,
    /// `[cross flow]`: its bottleneck and its `[[cross_traffic]]` entry.
    cross: Vec<(LinkPair, usize)>,
    /// `[client][path]`: current address and number of changes so far.
    addresses: Vec<Vec<(SocketAddr, usize)>>,
    path_count: usize,
    next_tag: u64,
    /// Packets tail-drop rules hold, and those released and waiting to go on.
    held: Vec<InFlight>,
    released: Vec<InFlight>,
    routing: RoutingStats,
    schedule: Vec<(Duration, NetworkChange)>,
}

impl Network {
    /// Builds the links of `plan` for `clients` client hosts; each link draws randomness from its own stream.
    pub fn new(plan: &NetworkPlan, clients: usize, seed: u64) -> Network {
        let mut network = Network {
            links: Vec::new(),
            tail_rules: Vec::new(),
            any_tail_rule: false,
            access: Vec::new(),
            shared: Vec::new(),
            relays: plan.paths.iter().flat_map(|path| [path.relay.is_some(), path.server_relay.is_some()]).collect(),
            cross: Vec::new(),
            addresses: Vec::new(),
            path_count: plan.paths.len(),
            next_tag: 0,
            held: Vec::new(),
            released: Vec::new(),
            routing: RoutingStats::default(),
            schedule: Vec::new(),
        };
        let bottleneck_pairs: Vec<LinkPair> = plan
            .bottlenecks
            .iter()
            .map(|bottleneck| LinkPair {
                uplink: network.add_link(&bottleneck.uplink, seed, &format!("bottleneck/{}/uplink", bottleneck.name)),
                downlink: network.add_link(
                    &bottleneck.downlink,
                    seed,
                    &format!("bottleneck/{}/downlink", bottleneck.name),
                ),
            })
            .collect();
        network.shared = plan.paths.iter().map(|path| path.bottleneck.map(|index| bottleneck_pairs[index])).collect();
        network.cross = plan.cross_flows.iter().map(|flow| (bottleneck_pairs[flow.bottleneck], flow.group)).collect();
        for client in 0..clients {
            let mut pairs = Vec::new();
            let mut addresses = Vec::new();
            for (index, path) in plan.paths.iter().enumerate() {
                pairs.push(LinkPair {
                    uplink: network.add_link(&path.uplink, seed, &format!("client{client}/path{index}/uplink")),
                    downlink: network.add_link(&path.downlink, seed, &format!("client{client}/path{index}/downlink")),
                });
                addresses.push((client_address(client, index, 0), 0));
                for &at in &path.address_changes {
                    network.schedule.push((at, NetworkChange::Address { client, path: index }));
                }
            }
            network.access.push(pairs);
            network.addresses.push(addresses);
        }
        network.schedule.sort_by_key(|&(at, _)| at);
        network
    }

    fn add_link(&mut self, plan: &LinkPlan, seed: u64, label: &str) -> usize {
        let index = self.links.len();
        self.links.push(Link::new(plan.params.clone(), SimRng::for_component(seed, label)));
        self.tail_rules.push((plan.tail_drop_packets > 0).then(|| TailDropRule::new(plan.tail_drop_packets)));
        self.any_tail_rule |= plan.tail_drop_packets > 0;
        for &(down_at, up_at) in &plan.outages {
            self.schedule.push((down_at, NetworkChange::Link { link: index, up: false }));
            if let Some(up_at) = up_at {
                self.schedule.push((up_at, NetworkChange::Link { link: index, up: true }));
            }
        }
        index
    }

    /// Every change the scenario schedules, in time order.
    pub fn scheduled_changes(&self) -> &[(Duration, NetworkChange)] {
        &self.schedule
    }

    pub fn path_count(&self) -> usize {
        self.path_count
    }

    /// Current address of `client` on `path`.
    pub fn client_address(&self, client: usize, path: usize) -> SocketAddr {
        self.addresses[client][path].0
    }

    /// The path a client-side address (current or former) or a relay's address belongs to.
    pub fn path_of_address(&self, address: SocketAddr) -> Option<usize> {
        if let Some(site) = self.relay_site(address) {
            return Some(site.path);
        }
        let (client, path) = client_and_path(address)?;
        (client < self.addresses.len() && path < self.path_count).then_some(path)
    }

    /// Whether any link drops burst tails (the simulator then watches when bursts are sent in full).
    pub fn has_tail_rules(&self) -> bool {
        self.any_tail_rule
    }

    /// Applies a scheduled change. An address change returns (old address, new address).
    pub fn apply(&mut self, now: Duration, change: NetworkChange) -> Option<(SocketAddr, SocketAddr)> {
        match change {
            NetworkChange::Link { link, up } => {
                self.links[link].set_up(now, up);
                None
            }
            NetworkChange::Address { client, path } => {
                let (old, changes) = self.addresses[client][path];
                let new = client_address(client, path, changes + 1);
                self.addresses[client][path] = (new, changes + 1);
                Some((old, new))
            }
        }
    }

    /// A host sends a datagram at `now`.
    pub fn send(&mut self, now: Duration, from: HostId, datagram: Datagram) -> Progress {
        let to_relay = self.relay_site(datagram.destination);
        let route = match from {
            HostId::Client(client) => self.path_of(client, datagram.source).and_then(|path| {
                let leg = match to_relay {
                    Some(site) if site.path != path => return None,
                    Some(RelaySite { end: RelayEnd::Client, .. }) => Leg::Access,
                    Some(RelaySite { end: RelayEnd::Server, .. }) | None => Leg::Whole,
                };
                Some((client, path, Direction::Uplink, leg))
            }),
            // The bottleneck is the same for every client of the path: the first client's links stand in.
            HostId::Server => match to_relay {
                Some(RelaySite { path, end: RelayEnd::Client }) => Some((0, path, Direction::Downlink, Leg::Core)),
                Some(RelaySite { path, end: RelayEnd::Server }) => Some((0, path, Direction::Downlink, Leg::Local)),
                None => self
                    .owner_of(datagram.destination)
                    .map(|(client, path)| (client, path, Direction::Downlink, Leg::Whole)),
            },
            HostId::CrossServer(group) => cross_flow_of(datagram.destination)
                .filter(|&flow| self.cross.get(flow).is_some_and(|&(_, of)| of == group))
                .map(|flow| (flow, 0, Direction::Downlink, Leg::Cross)),
            HostId::CrossClient(flow) => Some((flow, 0, Direction::Uplink, Leg::Cross)),
        };
        self.route(now, route, datagram)
    }

    /// A relay sends a datagram at `now`: toward the server, the path's other relay, or a client of the path.
    pub fn send_from_relay(&mut self, now: Duration, site: RelaySite, datagram: Datagram) -> Progress {
        let path = site.path;
        let route = if self.is_server_address(datagram.destination) {
            let leg = if site.end == RelayEnd::Client { Leg::Core } else { Leg::Local };
            Some((0, path, Direction::Uplink, leg))
        } else if let Some(other) = self.relay_site(datagram.destination).filter(|other| other.path == path) {
            match (site.end, other.end) {
                (RelayEnd::Client, RelayEnd::Server) => Some((0, path, Direction::Uplink, Leg::Core)),
                (RelayEnd::Server, RelayEnd::Client) => Some((0, path, Direction::Downlink, Leg::Core)),
                _ => None,
            }
        } else {
            let leg = if site.end == RelayEnd::Client { Leg::Access } else { Leg::Whole };
            self.owner_of(datagram.destination)
                .filter(|&(_, owner_path)| owner_path == path)
                .map(|(client, _)| (client, path, Direction::Downlink, leg))
        };
        self.route(now, route, datagram)
    }

    fn route(&mut self, now: Duration, route: Option<(usize, usize, Direction, Leg)>, datagram: Datagram) -> Progress {
        let Some((client, path, direction, leg)) = route else {
            self.routing.unroutable += 1;
            return Progress::Lost;
        };
        let tag = self.next_tag;
        self.next_tag += 1;
        let packet = InFlight { datagram, client, path, direction, leg, hop: 0, link: 0, generation: 0, tag };
        self.enter_hop(now, packet)
    }

    /// The relay that has `address`, if one does.
    fn relay_site(&self, address: SocketAddr) -> Option<RelaySite> {
        RelaySite::all(self.path_count).find(|site| self.relays[site.index()] && site.address() == address)
    }

    /// A datagram reaches the end of the link it was crossing.
    pub fn arrive(&mut self, now: Duration, packet: InFlight) -> Progress {
        if !self.links[packet.link].is_current(packet.generation) {
            return Progress::Lost;
        }
        if let Some(rule) = &mut self.tail_rules[packet.link] {
            match rule.on_arrival(packet.tag) {
                ArrivalVerdict::Deliver => {}
                ArrivalVerdict::Drop => return Progress::Lost,
                ArrivalVerdict::Hold => {
                    self.held.push(packet);
                    return Progress::Held;
                }
            }
        }
        let next = InFlight { hop: packet.hop + 1, ..packet };
        self.enter_hop(now, next)
    }

    /// Packets a tail-drop rule held and has now let go, continuing from the link that held them.
    pub fn take_released(&mut self, now: Duration) -> Vec<Progress> {
        std::mem::take(&mut self.released)
            .into_iter()
            .map(|packet| {
                let next = InFlight { hop: packet.hop + 1, ..packet };
                self.enter_hop(now, next)
            })
            .collect()
    }

    fn release(&mut self, tags: &[u64]) {
        for tag in tags {
            if let Some(position) = self.held.iter().position(|packet| packet.tag == *tag) {
                self.released.push(self.held.swap_remove(position));
            }
        }
    }

    /// Opens the tail-drop window of every rule on `client`'s links (a burst starts).
    pub fn open_tail_windows(&mut self, client: usize) {
        for link in self.client_links(client) {
            if let Some(rule) = &mut self.tail_rules[link] {
                let released = rule.open_window();
                self.release(&released);
            }
        }
    }

    /// Closes them (the burst has been sent once): their last data packets are doomed.
    pub fn close_tail_windows(&mut self, client: usize) {
        for link in self.client_links(client) {
            if let Some(rule) = &mut self.tail_rules[link] {
                for tag in rule.close_window() {
                    self.held.retain(|packet| packet.tag != tag);
                }
            }
        }
    }

    pub fn tail_drop_stats(&self) -> TailDropStats {
        self.tail_rules.iter().flatten().fold(TailDropStats::default(), |total, rule| TailDropStats {
            dropped: total.dropped + rule.stats().dropped,
            missed: total.missed + rule.stats().missed,
            held_then_released: total.held_then_released + rule.stats().held_then_released,
        })
    }

    pub fn routing_stats(&self) -> RoutingStats {
        self.routing
    }

    /// Access links of `client` on `path`: (uplink, downlink).
    pub fn access_links(&self, client: usize, path: usize) -> (&Link, &Link) {
        let pair = self.access[client][path];
        (&self.links[pair.uplink], &self.links[pair.downlink])
    }

    /// Sum of the counters of every link.
    pub fn total_link_stats(&self) -> LinkStats {
        self.links.iter().map(Link::stats).fold(LinkStats::default(), |total, stats| LinkStats {
            offered_packets: total.offered_packets + stats.offered_packets,
            transmitted_packets: total.transmitted_packets + stats.transmitted_packets,
            transmitted_bytes: total.transmitted_bytes + stats.transmitted_bytes,
            queue_drops: total.queue_drops + stats.queue_drops,
            random_drops: total.random_drops + stats.random_drops,
            down_drops: total.down_drops + stats.down_drops,
            ecn_marks: total.ecn_marks + stats.ecn_marks,
            feedback_rewrites: total.feedback_rewrites + stats.feedback_rewrites,
        })
    }

    fn client_links(&self, client: usize) -> Vec<usize> {
        self.access[client].iter().flat_map(|pair| [pair.uplink, pair.downlink]).collect()
    }

    fn path_of(&self, client: usize, address: SocketAddr) -> Option<usize> {
        self.addresses[client].iter().position(|&(current, _)| current == address)
    }

    fn owner_of(&self, address: SocketAddr) -> Option<(usize, usize)> {
        let (client, path) = client_and_path(address)?;
        let &(current, _) = self.addresses.get(client)?.get(path)?;
        (current == address).then_some((client, path))
    }

    fn is_server_address(&self, address: SocketAddr) -> bool {
        (0..self.path_count).any(|path| server_address(path) == address)
    }

    /// Links a datagram crosses, in order.
    fn hops(&self, packet: &InFlight) -> ([usize; 2], usize) {
        // Cross traffic crosses its bottleneck as a relay's core leg crosses the path's.
        let (leg, shared) = match packet.leg {
            Leg::Cross => (Leg::Core, Some(self.cross[packet.client].0)),
            leg => (leg, self.shared[packet.path]),
        };
        let access = || self.access[packet.client][packet.path];
        match (leg, packet.direction, shared) {
            (Leg::Whole, Direction::Uplink, Some(shared)) => ([access().uplink, shared.uplink], 2),
            (Leg::Whole, Direction::Downlink, Some(shared)) => ([shared.downlink, access().downlink], 2),
            (Leg::Whole | Leg::Access, Direction::Uplink, _) => ([access().uplink, 0], 1),
            (Leg::Whole | Leg::Access, Direction::Downlink, _) => ([access().downlink, 0], 1),
            (Leg::Core | Leg::Cross, Direction::Uplink, Some(shared)) => ([shared.uplink, 0], 1),
            (Leg::Core | Leg::Cross, Direction::Downlink, Some(shared)) => ([shared.downlink, 0], 1),
            (Leg::Core | Leg::Cross, _, None) | (Leg::Local, _, _) => ([0, 0], 0),
        }
    }

    fn enter_hop(&mut self, now: Duration, mut packet: InFlight) -> Progress {
        let (hops, hop_count) = self.hops(&packet);
        if packet.hop == hop_count {
            return self.deliver(packet);
        }
        let link = hops[packet.hop];
        match self.links[link].transmit(now, &mut packet.datagram) {
            Fate::Dropped(_) => Progress::Lost,
            Fate::Arrives { at, generation } => {
                if let Some(rule) = &mut self.tail_rules[link] {
                    if let Some(released) = rule.on_accepted(packet.tag, &packet.datagram.payload) {
                        self.release(&[released]);
                    }
                }
                packet.link = link;
                packet.generation = generation;
                Progress::Travelling { arrives: at, packet }
            }
        }
    }

    fn deliver(&mut self, packet: InFlight) -> Progress {
        if packet.leg == Leg::Cross {
            let to = match packet.direction {
                Direction::Downlink => HostId::CrossClient(packet.client),
                Direction::Uplink => HostId::CrossServer(self.cross[packet.client].1),
            };
            return Progress::Delivered { to, datagram: packet.datagram };
        }
        if let Some(site) = self.relay_site(packet.datagram.destination).filter(|site| site.path == packet.path) {
            return Progress::AtRelay { site, datagram: packet.datagram };
        }
        let delivered = match packet.direction {
            // The host must still hold the address it is sent to.
            Direction::Downlink if self.client_address(packet.client, packet.path) == packet.datagram.destination => {
                Some(HostId::Client(packet.client))
            }
            Direction::Uplink if self.is_server_address(packet.datagram.destination) => Some(HostId::Server),
            _ => None,
        };
        match delivered {
            Some(to) => Progress::Delivered { to, datagram: packet.datagram },
            None => {
                self.routing.unroutable += 1;
                Progress::Lost
            }
        }
    }
}
