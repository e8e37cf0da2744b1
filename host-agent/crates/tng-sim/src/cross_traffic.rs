//! Cross traffic: bulk downloads that compete with the workload on a bottleneck without being part of it.
//!
//! Each `[[cross_traffic]]` entry gets a server host whose endpoint runs the entry's congestion controller; each
//! of its flows gets a host of its own that opens one connection at the flow's start time and downloads (or
//! uploads, with the entry's `direction`) until the run ends. They use the workload's applications (so their bytes are checked too) with an accounting of their own.

use std::time::Duration;

use tng_proto::{Endpoint, EndpointConfig, StaticKeypair, TransportConfig};

use crate::apps::{ClientApp, ServerApp};
use crate::engine::Host;
use crate::ledger::Ledger;
use crate::metrics::GoodputMeter;
use crate::network::{cross_client_address, cross_server_address};
use crate::scenario::{Mode, WorkloadSpec};
use crate::topology::CrossFlowPlan;
use crate::workload::plan_client;

/// Keeps cross-traffic hosts' keys and seeds apart from the workload's hosts'.
const CROSS_KEY_SALT: u64 = 0xc055_0000_0000_0000;

pub struct CrossTraffic {
    pub flows: Vec<CrossFlowPlan>,
    /// Per `[[cross_traffic]]` entry.
    pub servers: Vec<Host>,
    pub server_apps: Vec<ServerApp>,
    /// Per flow.
    pub clients: Vec<Host>,
    pub client_apps: Vec<ClientApp>,
    /// Per flow, goodput counted from the flow's start.
    pub ledger: Ledger,
}

impl CrossTraffic {
    /// The hosts of `flows` (all idle until [`CrossTraffic::start`]); `transport` is the workload's, with each
    /// entry's controller put in.
    pub fn new(flows: &[CrossFlowPlan], transport: &TransportConfig, seed: u64) -> CrossTraffic {
        let groups = flows.iter().map(|flow| flow.group + 1).max().unwrap_or(0);
        let mut clients = Vec::new();
        let mut client_apps = Vec::new();
        let mut identities = vec![Vec::new(); groups];
        let bulk = plan_client(&WorkloadSpec::Bulk { bytes: None }, 0, seed);
        for (index, flow) in flows.iter().enumerate() {
            let flow_seed = seed ^ CROSS_KEY_SALT ^ (index as u64 + 1);
            let keypair = StaticKeypair::from_seed(flow_seed);
            identities[flow.group].push((keypair.identity(), index));
            let flow_transport = with_cc(transport, flow);
            let mut config = EndpointConfig::client();
            config.transport = flow_transport.clone();
            clients.push(Host::new(Endpoint::new(config, keypair, flow_seed), &flow_transport));
            let paths = vec![(cross_client_address(index), cross_server_address(flow.group))];
            client_apps.push(ClientApp::new(index, Mode::SinglePath, flow.direction, paths, &bulk));
        }
        let mut servers = Vec::new();
        let mut server_apps = Vec::new();
        for (group, members) in identities.into_iter().enumerate() {
            let server_seed = seed ^ CROSS_KEY_SALT ^ ((group as u64) << 32);
            let mut config = EndpointConfig::server();
            if let Some(flow) = flows.iter().find(|flow| flow.group == group) {
                config.transport = with_cc(transport, flow);
            }
            let host_transport = config.transport.clone();
            servers.push(Host::new(
                Endpoint::new(config, StaticKeypair::from_seed(server_seed), server_seed),
                &host_transport,
            ));
            server_apps.push(ServerApp::with_clients(members));
        }
        let mut ledger = Ledger::new(flows.len(), Duration::ZERO);
        for (meter, flow) in ledger.goodput.iter_mut().zip(flows) {
            *meter = GoodputMeter::new(flow.start);
        }
        CrossTraffic { flows: flows.to_vec(), servers, server_apps, clients, client_apps, ledger }
    }

    /// Flow `flow` opens its connection and asks for its download.
    pub fn start(&mut self, now: Duration, flow: usize) {
        self.client_apps[flow].start(now, &mut self.clients[flow].endpoint, &mut self.ledger);
    }
}

/// The workload's transport with the flow's controller, and not traced: `--qlog` is about the workload.
fn with_cc(transport: &TransportConfig, flow: &CrossFlowPlan) -> TransportConfig {
    TransportConfig { cc: flow.cc, qlog: None, ..transport.clone() }
}
