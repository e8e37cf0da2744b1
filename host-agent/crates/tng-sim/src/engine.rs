//! The event loop: virtual time, the network, one real tng-proto endpoint per host (behind its ends of the
//! sections to relays), the relay core of every path that has a relay, and the hosts of the cross traffic.
//!
//! After anything touches an endpoint (a datagram, a timer, an application call) the simulator drains it: every
//! datagram it wants to send enters the network, every event goes to the host's application (which may write and
//! so produce more datagrams), and its next timeout is (re)armed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tng_proto::qlog::QlogConfig;
use tng_proto::{Connection, ConnectionHandle, Endpoint, EndpointConfig, Event, StaticKeypair, TransportConfig};
use tng_relay::{EndpointSections, Relay, RelayStats};

use crate::apps::{to_time, ClientApp, ServerApp, WrittenResponse, READ_CHUNK};
use crate::cpu_clock::{SteadyCost, SteadyMeter};
use crate::cross_traffic::CrossTraffic;
use crate::datagram::Datagram;
use crate::datagram::Ecn;
use crate::event_queue::EventQueue;
use crate::ledger::Ledger;
use crate::loss::LossStep;
use crate::network::{server_address, HostId, InFlight, Network, NetworkChange, Progress};
use crate::observation;
use crate::relays::{relay_node, relay_plan, RelayEnd, RelayNode, RelaySite};
use crate::scenario::{Direction, Mode, Scenario};
use crate::topology::{validate_scenario, CrossFlowPlan, NetworkPlan, ScenarioError};
use crate::transport::{ecn_from_proto, ecn_to_proto, recovery_transmissions, sent_once, transport_config};
use crate::workload::{plan_client, ClientPlan};

/// Keeps the server's key and seed apart from the clients' (which are the run seed plus 1, 2, ...).
const SERVER_KEY_SALT: u64 = 0x5e7e_0000_0000_0000;
/// Packets an endpoint's section to a relay holds while the section's window is full (as the agent's driver).
const SECTION_QUEUE_LIMIT: usize = 256;
/// Simulated time between two progress lines.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Print a line to stderr every 10 simulated seconds.
    pub progress: bool,
    /// Print every channel's state (RTT, window, bytes in flight, pacing rate, counters) to stderr as one JSON
    /// line per channel at this interval, to see what limits a transfer.
    pub channel_log: Option<Duration>,
    /// Trace every connection of the run (qlog; `tng-sim run --qlog DIR`).
    pub qlog: Option<QlogConfig>,
    /// Sample the data sender's smoothed RTT at this interval, for the report's timeline (a multiple of
    /// [`crate::ledger::TIMELINE_INTERVAL`], whose goodput it reports alongside).
    pub timeline: Option<Duration>,
}

/// What a run produced, before formatting.
pub struct Outcome {
    pub scenario: Scenario,
    pub network: Network,
    pub ledger: Ledger,
    pub ended_at: Duration,
    pub workload_completed: bool,
    pub events: u64,
    pub wall_time: Duration,
    /// Events and CPU time from `measure_after_s` on (machine-dependent).
    pub steady_cost: Option<SteadyCost>,
    /// Per path: packets the endpoints sent on it, and those that carried retransmitted data.
    pub path_packets: Vec<(u64, u64)>,
    /// Per relay site ([`RelaySite::index`]): what the relay there counted, if there is one.
    pub relay_stats: Vec<Option<RelayStats>>,
    /// The cross traffic's flows and what they delivered (apart from the workload's `ledger`).
    pub cross_flows: Vec<CrossFlowPlan>,
    /// When the links' random loss rates step ([`NetworkPlan::loss_steps`]).
    pub loss_steps: Vec<LossStep>,
    pub cross_ledger: Ledger,
    /// With [`RunOptions::timeline`]: its interval, and at the end of each interval the largest smoothed RTT of the
    /// workload's data sender's channels (the server's, or the clients' in an upload; none before the first).
    pub timeline: Option<(Duration, Vec<Option<Duration>>)>,
}

enum SimEvent {
    /// Boxed: the agenda moves its entries at every push and pop, and a datagram in flight is large.
    Packet(Box<InFlight>),
    Timer(HostId),
    /// The timer of a relay.
    RelayTimer(RelaySite),
    /// A relay restarts with no state.
    RelayRestart(RelaySite),
    Change(NetworkChange),
    Burst {
        client: usize,
        size: u64,
    },
    /// A cross-traffic flow starts.
    CrossStart(usize),
    Progress,
    ChannelLog(Duration),
    Timeline(Duration),
}

pub struct Host {
    pub endpoint: Endpoint,
    /// Its ends of the sections to relays.
    sections: EndpointSections,
    /// The timeout the agenda holds for this endpoint; other timer events for it are stale.
    armed: Option<Duration>,
}

impl Host {
    pub fn new(endpoint: Endpoint, transport: &TransportConfig) -> Host {
        let sections = EndpointSections::new(transport.cc, transport.cc_config.clone(), SECTION_QUEUE_LIMIT);
        Host { endpoint, sections, armed: None }
    }
}

struct Simulation {
    now: Duration,
    end: Duration,
    agenda: EventQueue<SimEvent>,
    network: Network,
    server: Host,
    clients: Vec<Host>,
    /// `[RelaySite::index]`.
    relays: Vec<Option<RelayNode>>,
    server_app: ServerApp,
    client_apps: Vec<ClientApp>,
    ledger: Ledger,
    cross: CrossTraffic,
    /// Responses written in full whose first transmission may not be over, while tail-drop rules watch for it.
    unsent_responses: Vec<WrittenResponse>,
    /// Connections that ended, and their per-path packet counts.
    retired: BTreeSet<(HostId, ConnectionHandle)>,
    retired_path_packets: Vec<(u64, u64)>,
    events: u64,
    /// The cost of the events from `measure_after_s` on.
    steady: SteadyMeter,
    /// Client applications whose workload is complete (only an event can complete one).
    clients_done: usize,
    /// What client applications read into.
    read_buffer: Vec<u8>,
    /// The data sender's SRTT at each timeline tick.
    srtt_timeline: Vec<Option<Duration>>,
    direction: Direction,
}

/// Runs a scenario to completion (or to its duration).
pub fn run(scenario: &Scenario, base_dir: &Path, options: RunOptions) -> Result<Outcome, ScenarioError> {
    validate_scenario(scenario)?;
    let plan = NetworkPlan::from_scenario(scenario, base_dir)?;
    let mut transport = transport_config(&scenario.transport)?;
    transport.qlog = options.qlog.clone();
    let seed = scenario.seed;
    let network = Network::new(&plan, scenario.clients, seed);

    let mut server_config = EndpointConfig::server();
    server_config.transport = transport.clone();
    let server_keypair = StaticKeypair::from_seed(seed ^ SERVER_KEY_SALT);
    let server = Host::new(Endpoint::new(server_config, server_keypair, seed ^ SERVER_KEY_SALT), &transport);
    let mut clients = Vec::new();
    let mut client_apps = Vec::new();
    let mut client_identities = Vec::new();
    let path_count = if scenario.mode == Mode::Tng { plan.paths.len() } else { 1 };
    let plans: Vec<ClientPlan> =
        (0..scenario.clients).map(|client| plan_client(&scenario.workload, client, seed)).collect();
    for (client, client_plan) in plans.iter().enumerate() {
        let mut config = EndpointConfig::client();
        config.transport = transport.clone();
        let client_seed = seed.wrapping_add(client as u64 + 1);
        let keypair = StaticKeypair::from_seed(client_seed);
        client_identities.push(keypair.identity());
        let mut host = Host::new(Endpoint::new(config, keypair, client_seed), &transport);
        for (path, path_plan) in plan.paths.iter().enumerate() {
            // The first relay toward the server: where the client's links end, else beside the server.
            let end = match (&path_plan.relay, &path_plan.server_relay) {
                (Some(_), _) => RelayEnd::Client,
                (None, Some(_)) => RelayEnd::Server,
                (None, None) => continue,
            };
            host.sections.route_through(server_address(path), RelaySite { path, end }.address());
        }
        clients.push(host);
        let paths: Vec<(SocketAddr, SocketAddr)> =
            (0..path_count).map(|path| (network.client_address(client, path), server_address(path))).collect();
        client_apps.push(ClientApp::new(client, scenario.mode, scenario.direction, paths, client_plan));
    }

    let mut simulation = Simulation {
        now: Duration::ZERO,
        end: Duration::from_secs_f64(scenario.duration_s),
        agenda: EventQueue::new(),
        network,
        server,
        clients,
        relays: RelaySite::all(plan.paths.len()).map(|site| relay_node(&plan, site)).collect(),
        server_app: ServerApp::new(client_identities),
        client_apps,
        ledger: Ledger::new(scenario.clients, Duration::from_secs_f64(scenario.measure_after_s)),
        cross: CrossTraffic::new(&plan.cross_flows, &transport, seed),
        unsent_responses: Vec::new(),
        retired: BTreeSet::new(),
        retired_path_packets: vec![(0, 0); plan.paths.len()],
        events: 0,
        steady: SteadyMeter::new(Duration::from_secs_f64(scenario.measure_after_s)),
        clients_done: 0,
        read_buffer: vec![0; READ_CHUNK],
        srtt_timeline: Vec::new(),
        direction: scenario.direction,
    };
    simulation.clients_done = simulation.client_apps.iter().filter(|app| app.is_done()).count();
    for (client, client_plan) in plans.iter().enumerate() {
        for &(at, size) in &client_plan.bursts {
            simulation.agenda.schedule(at, SimEvent::Burst { client, size });
        }
    }
    for (flow, flow_plan) in plan.cross_flows.iter().enumerate() {
        simulation.agenda.schedule(flow_plan.start, SimEvent::CrossStart(flow));
    }
    for &(at, change) in simulation.network.scheduled_changes().to_vec().iter() {
        simulation.agenda.schedule(at, SimEvent::Change(change));
    }
    for site in RelaySite::all(plan.paths.len()) {
        for &at in relay_plan(&plan, site).iter().flat_map(|relay| &relay.restarts) {
            simulation.agenda.schedule(at, SimEvent::RelayRestart(site));
        }
    }
    if let Some(interval) = options.channel_log.filter(|interval| !interval.is_zero()) {
        simulation.agenda.schedule(interval, SimEvent::ChannelLog(interval));
    }
    if options.progress {
        simulation.agenda.schedule(PROGRESS_INTERVAL, SimEvent::Progress);
    }
    let timeline = options.timeline.filter(|interval| !interval.is_zero());
    if let Some(interval) = timeline {
        simulation.agenda.schedule(interval, SimEvent::Timeline(interval));
    }

    let started = Instant::now();
    simulation.start_clients();
    let workload_completed = simulation.run_loop();
    let wall_time = started.elapsed();
    let steady_cost = simulation.steady.finish(simulation.events);
    let path_packets = simulation.path_packets();
    let relay_stats = simulation.relays.iter().map(|node| node.as_ref().map(RelayNode::stats)).collect();
    Ok(Outcome {
        scenario: scenario.clone(),
        ended_at: simulation.now,
        network: simulation.network,
        ledger: simulation.ledger,
        workload_completed,
        events: simulation.events,
        wall_time,
        steady_cost,
        path_packets,
        relay_stats,
        cross_flows: simulation.cross.flows,
        loss_steps: plan.loss_steps(),
        cross_ledger: simulation.cross.ledger,
        timeline: timeline.map(|interval| (interval, simulation.srtt_timeline)),
    })
}

impl Simulation {
    fn start_clients(&mut self) {
        for client in 0..self.clients.len() {
            self.client_apps[client].start(self.now, &mut self.clients[client].endpoint, &mut self.ledger);
            self.drain(HostId::Client(client));
        }
    }

    /// Processes events until the workload completes or the time limit; returns whether the workload completed.
    fn run_loop(&mut self) -> bool {
        while let Some((at, event)) = self.agenda.pop() {
            if at > self.end {
                self.now = self.end;
                return false;
            }
            self.now = at;
            self.steady.on_event(at, self.events);
            self.events += 1;
            self.dispatch(event);
            if self.clients_done == self.client_apps.len() {
                return true;
            }
        }
        false
    }

    fn dispatch(&mut self, event: SimEvent) {
        match event {
            SimEvent::Packet(packet) => {
                let progress = self.network.arrive(self.now, *packet);
                self.follow(progress);
            }
            SimEvent::Timer(host) => {
                let now = self.now;
                if self.host(host).armed == Some(now) {
                    self.host(host).armed = None;
                    self.host(host).endpoint.handle_timeout(to_time(now));
                    self.host(host).sections.handle_timeout(to_time(now));
                    self.drain(host);
                }
            }
            SimEvent::RelayRestart(site) => {
                if let Some(node) = self.relays[site.index()].as_mut() {
                    // What the old relay counted stays in the report; its connections and queues are gone.
                    node.counted_before = node.stats();
                    node.relay = Relay::new(node.config.clone());
                }
            }
            SimEvent::RelayTimer(site) => {
                let now = self.now;
                if let Some(node) = self.relays[site.index()].as_mut().filter(|node| node.armed == Some(now)) {
                    node.armed = None;
                    node.relay.handle_timeout(to_time(now));
                    self.drain_relay(site);
                }
            }
            SimEvent::Change(change) => {
                if let Some((old, new)) = self.network.apply(self.now, change) {
                    if let NetworkChange::Address { client, path } = change {
                        let now = to_time(self.now);
                        self.clients[client].endpoint.local_address_changed(now, old, new);
                        self.client_apps[client].local_address_changed(path, new);
                        self.drain(HostId::Client(client));
                    }
                }
            }
            SimEvent::Burst { client, size } => {
                self.network.open_tail_windows(client);
                for released in self.network.take_released(self.now) {
                    self.follow(released);
                }
                self.client_apps[client].start_burst(
                    self.now,
                    size,
                    &mut self.clients[client].endpoint,
                    &mut self.ledger,
                );
                self.drain(HostId::Client(client));
            }
            SimEvent::CrossStart(flow) => {
                self.cross.start(self.now, flow);
                self.drain(HostId::CrossClient(flow));
            }
            SimEvent::Progress => {
                eprintln!(
                    "tng-sim: {:>5.0} s simulated, {} events, {:.1} MB delivered",
                    self.now.as_secs_f64(),
                    self.events,
                    self.ledger.bytes_delivered as f64 / 1e6
                );
                self.agenda.schedule(self.now + PROGRESS_INTERVAL, SimEvent::Progress);
            }
            SimEvent::Timeline(interval) => {
                let srtt = match self.direction {
                    Direction::Download => observation::largest_srtt(&mut self.server.endpoint),
                    Direction::Upload => {
                        self.clients.iter_mut().filter_map(|host| observation::largest_srtt(&mut host.endpoint)).max()
                    }
                };
                self.srtt_timeline.push(srtt);
                self.agenda.schedule(self.now + interval, SimEvent::Timeline(interval));
            }
            SimEvent::ChannelLog(interval) => {
                self.log_channels();
                self.agenda.schedule(self.now + interval, SimEvent::ChannelLog(interval));
            }
        }
    }

    fn host(&mut self, host: HostId) -> &mut Host {
        match host {
            HostId::Server => &mut self.server,
            HostId::Client(client) => &mut self.clients[client],
            HostId::CrossServer(group) => &mut self.cross.servers[group],
            HostId::CrossClient(flow) => &mut self.cross.clients[flow],
        }
    }

    fn follow(&mut self, progress: Progress) {
        match progress {
            // A link's lane: packets that arrive in order wait behind its first, which alone sits in the heap.
            Progress::Travelling { arrives, packet } => {
                self.agenda.schedule_in_lane(packet.link(), arrives, SimEvent::Packet(Box::new(packet)))
            }
            Progress::Delivered { to, datagram } => {
                let now = to_time(self.now);
                let Host { endpoint, sections, .. } = self.host(to);
                let path = (datagram.destination, datagram.source);
                sections.deliver(endpoint, now, path, ecn_to_proto(datagram.ecn), &datagram.payload);
                self.drain(to);
            }
            Progress::AtRelay { site, datagram } => {
                if let Some(node) = self.relays[site.index()].as_mut() {
                    node.relay.handle_datagram(
                        to_time(self.now),
                        datagram.destination,
                        datagram.source,
                        &datagram.payload,
                    );
                    self.drain_relay(site);
                }
            }
            Progress::Held | Progress::Lost => {}
        }
        for released in self.network.take_released(self.now) {
            self.follow(released);
        }
    }

    /// Sends what the endpoint wants to send (through its sections), hands its events to the application, re-arms
    /// its timer.
    fn drain(&mut self, host: HostId) {
        loop {
            let now = to_time(self.now);
            loop {
                let Host { endpoint, sections, .. } = self.host(host);
                // Each datagram gets a buffer of its own: it travels alone through the simulated network.
                let mut payload = Vec::new();
                let Some(transmit) = sections.poll_transmit(endpoint, now, &mut payload) else { break };
                if host == HostId::Server && !self.unsent_responses.is_empty() {
                    // A loss-recovery packet ends the first transmission: it must not count as part of a tail.
                    self.close_windows_where(|connection, response| {
                        recovery_transmissions(connection) > response.recovery_mark
                    });
                }
                self.send(host, transmit, payload);
            }
            let mut handled_any = false;
            while let Some((handle, event)) = self.host(host).endpoint.poll_event() {
                handled_any = true;
                if matches!(event, Event::Closed { .. } | Event::HandshakeFailed { .. }) {
                    self.retire(host, handle);
                }
                match host {
                    HostId::Server => {
                        self.server_app.on_event(self.now, handle, event, &mut self.server.endpoint, &mut self.ledger);
                        let written = self.server_app.take_written();
                        if self.network.has_tail_rules() {
                            self.unsent_responses.extend(written);
                        }
                    }
                    HostId::Client(client) => {
                        let app = &mut self.client_apps[client];
                        let was_done = app.is_done();
                        let endpoint = &mut self.clients[client].endpoint;
                        app.on_event(self.now, handle, event, endpoint, &mut self.ledger, &mut self.read_buffer);
                        if app.is_done() && !was_done {
                            self.clients_done += 1;
                        }
                    }
                    HostId::CrossServer(group) => {
                        let CrossTraffic { servers, server_apps, ledger, .. } = &mut self.cross;
                        server_apps[group].on_event(self.now, handle, event, &mut servers[group].endpoint, ledger);
                    }
                    HostId::CrossClient(flow) => {
                        let CrossTraffic { clients, client_apps, ledger, .. } = &mut self.cross;
                        let endpoint = &mut clients[flow].endpoint;
                        client_apps[flow].on_event(self.now, handle, event, endpoint, ledger, &mut self.read_buffer);
                    }
                }
            }
            if !handled_any {
                break;
            }
        }
        if host == HostId::Server && !self.unsent_responses.is_empty() {
            self.close_windows_where(|connection, response| sent_once(connection, response.bytes_written_mark));
        }
        self.arm_timer(host);
    }

    /// Puts a datagram `host` sent on the network.
    fn send(&mut self, host: HostId, transmit: tng_proto::Transmit, payload: Vec<u8>) {
        let datagram = Datagram {
            source: transmit.local,
            destination: transmit.remote,
            ecn: ecn_from_proto(transmit.ecn),
            payload,
        };
        let progress = self.network.send(self.now, host, datagram);
        self.follow(progress);
    }

    /// Sends what the relay at `site` has ready and re-arms its timer.
    fn drain_relay(&mut self, site: RelaySite) {
        let now = self.now;
        let Some(node) = self.relays[site.index()].as_mut() else { return };
        let mut outgoing = Vec::new();
        while let Some(sent) = node.relay.poll_transmit(to_time(now)) {
            let source = sent.source.unwrap_or_else(|| site.address());
            outgoing.push(Datagram { source, destination: sent.destination, ecn: Ecn::NotEct, payload: sent.datagram });
        }
        let next = node.relay.poll_timeout().map(|at| (at - to_time(Duration::ZERO)).max(now));
        if next != node.armed {
            node.armed = next;
            if let Some(at) = next {
                self.agenda.schedule(at, SimEvent::RelayTimer(site));
            }
        }
        for datagram in outgoing {
            let progress = self.network.send_from_relay(now, site, datagram);
            self.follow(progress);
        }
    }

    fn arm_timer(&mut self, host: HostId) {
        // A deadline already past fires now; the armed time is what the agenda holds, so it matches on arrival.
        let now = self.now;
        let Host { endpoint, sections, .. } = self.host(host);
        let next = [endpoint.poll_timeout(), sections.poll_timeout()].into_iter().flatten().min();
        let next = next.map(|at| (at - to_time(Duration::ZERO)).max(now));
        if next != self.host(host).armed {
            self.host(host).armed = next;
            if let Some(at) = next {
                self.agenda.schedule(at, SimEvent::Timer(host));
            }
        }
    }

    /// Closes the tail-drop windows of the clients whose written response satisfies `done` (or whose connection is
    /// gone): the burst's first transmission is over.
    fn close_windows_where(&mut self, done: impl Fn(&Connection, &WrittenResponse) -> bool) {
        let endpoint = &mut self.server.endpoint;
        let network = &mut self.network;
        self.unsent_responses.retain(|response| {
            let over = endpoint.connection(response.connection).is_none_or(|connection| done(connection, response));
            if over {
                network.close_tail_windows(response.client);
            }
            !over
        });
    }

    fn log_channels(&mut self) {
        let hosts: Vec<HostId> = std::iter::once(HostId::Server)
            .chain((0..self.clients.len()).map(HostId::Client))
            .chain((0..self.cross.servers.len()).map(HostId::CrossServer))
            .chain((0..self.cross.clients.len()).map(HostId::CrossClient))
            .collect();
        let now = self.now;
        for host in hosts {
            let name = match host {
                HostId::Server => "server".to_owned(),
                HostId::Client(c) => format!("client{c}"),
                HostId::CrossServer(g) => format!("cross-server{g}"),
                HostId::CrossClient(f) => format!("cross{f}"),
            };
            observation::log_channels(now, &name, &mut self.host(host).endpoint);
            observation::log_sections(now, &name, &self.host(host).sections);
        }
        for site in RelaySite::all(self.relays.len() / 2) {
            if let Some(node) = &self.relays[site.index()] {
                observation::log_relay(now, &site.address().to_string(), &node.relay);
            }
        }
    }

    /// A connection ended: its counters are kept, since the endpoint forgets it after draining.
    fn retire(&mut self, host: HostId, handle: ConnectionHandle) {
        if !self.retired.insert((host, handle)) {
            return;
        }
        let counts = self.connection_path_packets(host, handle);
        for (total, count) in self.retired_path_packets.iter_mut().zip(counts) {
            total.0 += count.0;
            total.1 += count.1;
        }
    }

    /// Packets a connection sent on each path and those that carried retransmitted data, from its channel
    /// counters (a channel belongs to the path of its client-side address).
    fn connection_path_packets(&mut self, host: HostId, handle: ConnectionHandle) -> Vec<(u64, u64)> {
        let mut counts = vec![(0, 0); self.network.path_count()];
        let Some(connection) = self.host(host).endpoint.connection(handle) else {
            return counts;
        };
        for channel in connection.stats().channels {
            let client_side = if host == HostId::Server { channel.remote } else { channel.local };
            if let Some(path) = self.network.path_of_address(client_side) {
                counts[path].0 += channel.sent_packets;
                counts[path].1 += channel.retransmitted_packets;
            }
        }
        counts
    }

    /// Per path, over every connection of the run, ended or not.
    fn path_packets(&mut self) -> Vec<(u64, u64)> {
        let mut totals = self.retired_path_packets.clone();
        let hosts: Vec<HostId> =
            std::iter::once(HostId::Server).chain((0..self.clients.len()).map(HostId::Client)).collect();
        for host in hosts {
            for handle in self.host(host).endpoint.connection_handles() {
                if self.retired.contains(&(host, handle)) {
                    continue;
                }
                for (total, count) in totals.iter_mut().zip(self.connection_path_packets(host, handle)) {
                    total.0 += count.0;
                    total.1 += count.1;
                }
            }
        }
        totals
    }
}
