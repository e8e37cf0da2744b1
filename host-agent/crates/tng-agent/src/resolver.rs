//! Which policy governs each live connection. The driver asks whenever a connection is established or gains a
//! channel, and whenever the policies change; a connection whose governing policy changed gets its new settings at
//! once (congestion controller per channel, scheduler, tail-loss mode, rate cap).
//!
//! The controller's policies win over the policy file's: a connection takes the best controller policy that matches
//! it, and the file's best only when none does. Until the controller's first snapshot arrives (or without a
//! controller) only the file counts; after that the controller's last known set stays in force while it is away.

use std::collections::HashMap;
use std::net::SocketAddr;

use tng_proto::{Connection, ConnectionHandle, TransportConfig};

use crate::policy::{self, ConnectionFacts, Policy, Source};
use crate::relay_route::RelayRoute;

/// The agent's policies and their traffic class.
#[derive(Debug, Default)]
pub struct LocalPolicies {
    pub traffic_class: String,
    pub file: Vec<Policy>,
}

/// Names the policy that governs a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    pub name: String,
    pub revision: u64,
    pub source: Source,
}

impl PolicyRef {
    fn of(policy: &Policy) -> PolicyRef {
        PolicyRef { name: policy.name.clone(), revision: policy.revision, source: policy.source }
    }
}

pub struct PolicyResolver {
    local: LocalPolicies,
    /// `None` until the controller's first complete snapshot.
    controller: Option<Vec<Policy>>,
    /// The agent's own settings, for what policies leave open.
    baseline: TransportConfig,
    /// What each connection was last given; absent means it still runs on the baseline untouched.
    governing: HashMap<ConnectionHandle, Option<PolicyRef>>,
}

impl PolicyResolver {
    pub fn new(local: LocalPolicies, baseline: TransportConfig) -> PolicyResolver {
        PolicyResolver { local, controller: None, baseline, governing: HashMap::new() }
    }

    pub fn set_controller_policies(&mut self, policies: Vec<Policy>) {
        self.controller = Some(policies);
    }

    /// Chooses the policy for an established connection and applies it if it is not the one applied already.
    pub fn resolve(&mut self, handle: ConnectionHandle, connection: &mut Connection) {
        if !connection.is_established() || connection.is_closed() {
            return;
        }
        let stats = connection.stats();
        let paths: Vec<(SocketAddr, SocketAddr)> = stats.channels.iter().map(|c| (c.local, c.remote)).collect();
        let chosen = self.choose(&paths, Some(stats.connection_id));
        let chosen_ref = chosen.map(PolicyRef::of);
        let previous = self.governing.get(&handle);
        // A connection no policy ever matched keeps its settings untouched.
        if previous == Some(&chosen_ref) || (previous.is_none() && chosen_ref.is_none()) {
            return;
        }
        match &chosen_ref {
            Some(p) => tracing::info!("{handle}: policy {:?} (revision {}, {}) applies", p.name, p.revision, p.source),
            None => tracing::info!("{handle}: no policy applies any more; back to the agent's own settings"),
        }
        connection.set_policy(policy::connection_settings(chosen, &self.baseline));
        self.governing.insert(handle, chosen_ref);
    }

    /// The relay a connection about to open over `paths` goes through, if the policy that will govern it names one.
    pub fn relay_for(&self, paths: &[(SocketAddr, SocketAddr)]) -> Option<(RelayRoute, PolicyRef)> {
        let policy = self.choose(paths, None)?;
        Some((policy.relay()?, PolicyRef::of(policy)))
    }

    /// The best matching controller policy, or the file's best when none of the controller's matches.
    fn choose(&self, paths: &[(SocketAddr, SocketAddr)], connection_id: Option<u64>) -> Option<&Policy> {
        let facts = ConnectionFacts { traffic_class: &self.local.traffic_class, connection_id, paths };
        self.controller
            .as_deref()
            .and_then(|policies| policy::select(policies, &facts))
            .or_else(|| policy::select(&self.local.file, &facts))
    }

    /// The policy governing `handle`, if any.
    pub fn governing(&self, handle: ConnectionHandle) -> Option<&PolicyRef> {
        self.governing.get(&handle).and_then(Option::as_ref)
    }

    pub fn forget(&mut self, handle: ConnectionHandle) {
        self.governing.remove(&handle);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rand::SeedableRng;
    use tng_proto::{CcKind, Endpoint, EndpointConfig, SchedulerKind, StaticKeypair, Time};

    use super::*;
    use crate::policy::PolicyEntry;

    fn policy(source: Source, text: &str) -> Policy {
        toml::from_str::<PolicyEntry>(text).unwrap().validate(source).unwrap()
    }

    /// A client endpoint with one established connection, handshaken in memory with a server endpoint.
    fn established_connection() -> (Endpoint, ConnectionHandle) {
        let keys = |seed| StaticKeypair::generate(&mut rand::rngs::StdRng::seed_from_u64(seed));
        let mut client = Endpoint::new(EndpointConfig::client(), keys(1), 1);
        let mut server = Endpoint::new(EndpointConfig::server(), keys(2), 2);
        let (client_addr, server_addr): (SocketAddr, SocketAddr) =
            ("10.1.0.2:5000".parse().unwrap(), "192.0.2.1:4477".parse().unwrap());
        server.add_local_address(Time::from_nanos(0), server_addr);
        let mut now = Time::from_nanos(0);
        let handle = client.connect(now, &[(client_addr, server_addr)], None).unwrap();
        for _ in 0..1000 {
            now += Duration::from_millis(1);
            while let Some(t) = client.poll_datagram(now) {
                server.handle_datagram(now, t.remote, t.local, t.ecn, &t.payload);
            }
            while let Some(t) = server.poll_datagram(now) {
                client.handle_datagram(now, t.remote, t.local, t.ecn, &t.payload);
            }
            client.handle_timeout(now);
            server.handle_timeout(now);
            if client.connection(handle).is_some_and(|c| c.is_established() && !c.stats().channels.is_empty()) {
                return (client, handle);
            }
        }
        panic!("the in-memory handshake did not finish");
    }

    fn settings(endpoint: &mut Endpoint, handle: ConnectionHandle) -> (SchedulerKind, &'static str) {
        let stats = endpoint.connection(handle).unwrap().stats();
        (stats.scheduler, stats.channels[0].cc)
    }

    #[test]
    fn a_new_connection_s_relay_comes_from_the_policy_that_will_govern_it() {
        let paths = [("10.1.0.2:5000".parse().unwrap(), "192.0.2.1:4477".parse().unwrap())];
        let file = policy(Source::File, "name = \"dsl\"\nhost_policy = { relay = \"10.1.0.1:4477\" }\n");
        let local = LocalPolicies { traffic_class: String::new(), file: vec![file] };
        let mut resolver = PolicyResolver::new(local, TransportConfig::default());
        let relay =
            |resolver: &PolicyResolver| resolver.relay_for(&paths).map(|(relay, p)| (relay.to_string(), p.name));
        assert_eq!(relay(&resolver), Some(("10.1.0.1:4477".into(), "dsl".into())));

        // The controller's policy governs, and it names no relay: straight to the server. One for a connection id
        // cannot match a connection that does not exist yet.
        let direct = policy(Source::Controller, "name = \"direct\"\nmatch = { dst_prefix = \"192.0.2.0/24\" }\n");
        let this_one = policy(
            Source::Controller,
            "name = \"this-one\"\nmatch = { priority = 9, connection_id = 7 }\nhost_policy = { relay = \"10.1.0.9:1\" }\n",
        );
        resolver.set_controller_policies(vec![direct, this_one]);
        assert_eq!(relay(&resolver), None);
        let core = policy(Source::Controller, "name = \"core\"\nhost_policy = { relay = \"10.1.0.3:4477\" }\n");
        resolver.set_controller_policies(vec![core]);
        assert_eq!(relay(&resolver), Some(("10.1.0.3:4477".into(), "core".into())));
    }

    #[test]
    fn controller_policies_win_and_released_connections_return_to_the_agent_s_settings() {
        let (mut endpoint, handle) = established_connection();
        let baseline = endpoint.config().transport.clone();
        let untouched = settings(&mut endpoint, handle);
        let file = policy(
            Source::File,
            "name = \"local\"\nmatch = { priority = 10 }\nhost_policy = { congestion_control = \"newreno\", \
             scheduler = \"weighted\" }\n",
        );
        let central = policy(
            Source::Controller,
            "name = \"central\"\nrevision = 4\nhost_policy = { congestion_control = \"vegas\", scheduler = \
             \"lowest-rtt\" }\n",
        );
        let video = policy(Source::Controller, "name = \"video\"\nmatch = { traffic_class = \"video\" }\n");
        let mut resolver = PolicyResolver::new(LocalPolicies::default(), baseline.clone());
        let resolve = |resolver: &mut PolicyResolver, endpoint: &mut Endpoint| {
            resolver.resolve(handle, endpoint.connection(handle).unwrap());
            resolver.governing(handle).map(|p| (p.name.clone(), p.revision, p.source))
        };

        // No policy anywhere: the connection is left as it is.
        assert_eq!(resolve(&mut resolver, &mut endpoint), None);
        assert_eq!(settings(&mut endpoint, handle), untouched);

        let local = LocalPolicies { traffic_class: "bulk".into(), file: vec![file] };
        let mut resolver = PolicyResolver::new(local, baseline.clone());
        assert_eq!(resolve(&mut resolver, &mut endpoint), Some(("local".into(), 0, Source::File)));
        assert_eq!(settings(&mut endpoint, handle), (SchedulerKind::Weighted, "newreno"));

        // Any matching controller policy beats the file's, whatever the priorities.
        resolver.set_controller_policies(vec![central, video.clone()]);
        assert_eq!(resolve(&mut resolver, &mut endpoint), Some(("central".into(), 4, Source::Controller)));
        assert_eq!(settings(&mut endpoint, handle), (SchedulerKind::LowestRtt, "vegas"));

        // None of the controller's matches: the file's applies again.
        resolver.set_controller_policies(vec![video]);
        assert_eq!(resolve(&mut resolver, &mut endpoint), Some(("local".into(), 0, Source::File)));
        assert_eq!(settings(&mut endpoint, handle), (SchedulerKind::Weighted, "newreno"));

        // No policy at all any more: the agent's own settings.
        let mut resolver = PolicyResolver::new(LocalPolicies::default(), baseline.clone());
        resolver.set_controller_policies(vec![policy(
            Source::Controller,
            "name = \"all\"\nhost_policy = { congestion_control = \"bbr\" }\n",
        )]);
        assert_eq!(resolve(&mut resolver, &mut endpoint), Some(("all".into(), 0, Source::Controller)));
        assert_eq!(settings(&mut endpoint, handle).1, CcKind::Bbr.name());
        resolver.set_controller_policies(Vec::new());
        assert_eq!(resolve(&mut resolver, &mut endpoint), None);
        assert_eq!(settings(&mut endpoint, handle), (baseline.scheduler, baseline.cc.name()));
    }
}
