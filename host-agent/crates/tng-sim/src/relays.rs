//! The relays of a simulated network: where each sits on its path (at either end of the bottleneck), its address,
//! and the relay core the engine runs there with its policy and counters.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tng_relay::{Relay, RelayConfig, RelayStats};

use crate::network::{octet, TNG_PORT};
use crate::topology::{NetworkPlan, RelayPlan};

/// Which end of its path's bottleneck a relay sits at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayEnd {
    /// Where the path's own links end and its bottleneck begins.
    Client,
    /// Where the bottleneck ends, beside the server.
    Server,
}

/// A relay's place: its path and the end of the bottleneck it sits at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelaySite {
    pub path: usize,
    pub end: RelayEnd,
}

impl RelaySite {
    /// The sites of `paths` paths, in a fixed order: [`RelaySite::index`] numbers them.
    pub fn all(paths: usize) -> impl Iterator<Item = RelaySite> {
        (0..paths).flat_map(|path| [RelayEnd::Client, RelayEnd::Server].map(|end| RelaySite { path, end }))
    }

    /// Its position in [`RelaySite::all`].
    pub fn index(self) -> usize {
        2 * self.path + usize::from(self.end == RelayEnd::Server)
    }

    /// Its address: 10.0.`path`.3 at the client end, 10.0.`path`.4 at the server end.
    pub fn address(self) -> SocketAddr {
        let host = match self.end {
            RelayEnd::Client => 3,
            RelayEnd::Server => 4,
        };
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, octet(self.path), host)), TNG_PORT)
    }
}

/// A relay, its policy (to restart it with) and the timeout the agenda holds for it.
pub(crate) struct RelayNode {
    pub(crate) relay: Relay,
    pub(crate) config: RelayConfig,
    /// What the relay counted before its restarts.
    pub(crate) counted_before: RelayStats,
    pub(crate) armed: Option<Duration>,
}

impl RelayNode {
    /// What the relay counted over the whole run.
    pub(crate) fn stats(&self) -> RelayStats {
        let (before, now) = (self.counted_before, self.relay.stats());
        RelayStats {
            forwarded: before.forwarded + now.forwarded,
            queue_full: before.queue_full + now.queue_full,
            dropped: before.dropped + now.dropped,
        }
    }
}

/// The plan of the relay at `site`, if its path has one there.
pub(crate) fn relay_plan(plan: &NetworkPlan, site: RelaySite) -> Option<&RelayPlan> {
    let path = &plan.paths[site.path];
    match site.end {
        RelayEnd::Client => path.relay.as_ref(),
        RelayEnd::Server => path.server_relay.as_ref(),
    }
}

/// The relay at `site`, if its path has one there; a relay where the client's links end sends on through the one
/// beside the server when the path has both (the bottleneck is then a section of its own).
pub(crate) fn relay_node(plan: &NetworkPlan, site: RelaySite) -> Option<RelayNode> {
    let mut config = relay_plan(plan, site)?.config.clone();
    let beside_server = RelaySite { end: RelayEnd::Server, ..site };
    if site.end == RelayEnd::Client && relay_plan(plan, beside_server).is_some() {
        config.next_relay = Some(beside_server.address());
    }
    Some(RelayNode { relay: Relay::new(config.clone()), config, counted_before: RelayStats::default(), armed: None })
}
