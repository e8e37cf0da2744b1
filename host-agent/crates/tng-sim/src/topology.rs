//! Validates a scenario's network section and resolves it into concrete link parameters.
//!
//! Per direction, a field set in `uplink`/`downlink` wins over the same field set for both directions, which wins
//! over the default. Every error names the scenario key it is about.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tng_proto::cc::CcConfig;
use tng_proto::CcKind;
use tng_relay::{RelayConfig, SectionControl};

use crate::link::{LinkParams, QueueLimit, Service};
use crate::loss::{GilbertElliott, LossModel, LossStep};
use crate::network::MAX_CLIENTS;
use crate::scenario::{
    CrossTrafficSpec, Direction, DuplexSpec, LinkSpec, Mode, PathSpec, RelaySpec, Scenario, SizeSpec, WorkloadSpec,
};
use crate::trace::DeliveryTrace;

/// IPv4 (20) + UDP (8) header bytes every datagram adds on the wire.
pub const IPV4_UDP_FRAMING: u32 = 28;
/// Smallest queue a BDP-sized queue gets, so that a link with almost no delay can still hold a full packet.
const MIN_BDP_QUEUE_BYTES: u64 = 3000;

/// A value that is present but wrong, with the key it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub key: String,
    pub problem: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

impl std::error::Error for ScenarioError {}

fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
    ScenarioError { key: key.into(), problem: problem.into() }
}

/// A link direction ready to build, with the schedule the simulator applies to it.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkPlan {
    pub params: LinkParams,
    /// (down at, back up at or never).
    pub outages: Vec<(Duration, Option<Duration>)>,
    /// Burst workloads: last first-transmission data packets of each burst this link drops.
    pub tail_drop_packets: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PathPlan {
    pub name: String,
    pub uplink: LinkPlan,
    pub downlink: LinkPlan,
    /// Index into [`NetworkPlan::bottlenecks`].
    pub bottleneck: Option<usize>,
    pub address_changes: Vec<Duration>,
    /// The relay between the path's own links and its bottleneck, if any.
    pub relay: Option<RelayPlan>,
    /// The relay between the path's bottleneck and the server, if any.
    pub server_relay: Option<RelayPlan>,
    /// Propagation round-trip time, shared links included.
    pub base_rtt: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BottleneckPlan {
    pub name: String,
    pub uplink: LinkPlan,
    pub downlink: LinkPlan,
}

/// One flow of cross traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossFlowPlan {
    /// Index into [`NetworkPlan::bottlenecks`].
    pub bottleneck: usize,
    pub cc: CcKind,
    pub start: Duration,
    pub direction: Direction,
    /// Index of its `[[cross_traffic]]` entry: the flows of one entry share a server.
    pub group: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NetworkPlan {
    pub paths: Vec<PathPlan>,
    pub bottlenecks: Vec<BottleneckPlan>,
    /// Ordered by start time (then by entry).
    pub cross_flows: Vec<CrossFlowPlan>,
}

/// Fields that must be checked against the whole scenario, not just the network.
pub fn validate_scenario(scenario: &Scenario) -> Result<(), ScenarioError> {
    finite_at_least("duration_s", scenario.duration_s, f64::MIN_POSITIVE)?;
    finite_at_least("measure_after_s", scenario.measure_after_s, 0.0)?;
    if scenario.measure_after_s >= scenario.duration_s {
        return Err(invalid("measure_after_s", "must be below duration_s"));
    }
    if scenario.clients == 0 {
        return Err(invalid("clients", "must be at least 1"));
    }
    if scenario.clients > MAX_CLIENTS {
        return Err(invalid("clients", format!("at most {MAX_CLIENTS} (the simulated client address space)")));
    }
    if scenario.paths.is_empty() {
        return Err(invalid("paths", "at least one path is needed"));
    }
    if let Some(delta) = scenario.transport.copa_delta {
        finite_at_least("transport.copa_delta", delta, f64::MIN_POSITIVE)?;
    }
    if let Some(threshold) = scenario.transport.queue_threshold_ms {
        finite_at_least("transport.queue_threshold_ms", threshold, 0.0)?;
    }
    match &scenario.workload {
        WorkloadSpec::Bulk { bytes } => {
            if *bytes == Some(0) {
                return Err(invalid("workload.bytes", "must be at least 1"));
            }
        }
        WorkloadSpec::ShortFlows { parallel, flows_per_requester, size } => {
            if *parallel == 0 {
                return Err(invalid("workload.parallel", "must be at least 1"));
            }
            if *flows_per_requester == 0 {
                return Err(invalid("workload.flows_per_requester", "must be at least 1"));
            }
            match *size {
                SizeSpec::Fixed { bytes: 0 } => {
                    return Err(invalid("workload.size.bytes", "must be at least 1"));
                }
                SizeSpec::Fixed { .. } => {}
                SizeSpec::Exponential { mean_bytes } => finite_at_least("workload.size.mean_bytes", mean_bytes, 1.0)?,
                SizeSpec::Pareto { mean_bytes, shape } => {
                    finite_at_least("workload.size.mean_bytes", mean_bytes, 1.0)?;
                    if !(shape.is_finite() && shape > 1.0) {
                        return Err(invalid("workload.size.shape", "must be above 1 (the mean is infinite otherwise)"));
                    }
                }
            }
        }
        WorkloadSpec::Bursts { burst_bytes, interval_ms, count } => {
            if *burst_bytes == 0 {
                return Err(invalid("workload.burst_bytes", "must be at least 1"));
            }
            finite_at_least("workload.interval_ms", *interval_ms, f64::MIN_POSITIVE)?;
            if *count == 0 {
                return Err(invalid("workload.count", "must be at least 1"));
            }
        }
    }
    if scenario.direction == Direction::Upload && !matches!(scenario.workload, WorkloadSpec::Bulk { .. }) {
        return Err(invalid("direction", "upload is for bulk workloads (short flows and bursts are downloads)"));
    }
    if scenario.mode == Mode::ConnectionPerFlow && matches!(scenario.workload, WorkloadSpec::Bulk { bytes: None }) {
        return Err(invalid("mode", "connection-per-flow needs flows of a known size (bulk without workload.bytes)"));
    }
    Ok(())
}

impl NetworkPlan {
    /// Every link's loss steps in time order (of steps at one time, the highest rate): when the run's loss level
    /// changes.
    pub fn loss_steps(&self) -> Vec<LossStep> {
        let links = self.paths.iter().flat_map(|path| [&path.uplink, &path.downlink]);
        let links =
            links.chain(self.bottlenecks.iter().flat_map(|bottleneck| [&bottleneck.uplink, &bottleneck.downlink]));
        let mut steps: Vec<LossStep> = links.flat_map(|link| link.params.loss_steps.iter().copied()).collect();
        steps.sort_by(|a, b| a.from.cmp(&b.from).then(b.probability.total_cmp(&a.probability)));
        steps.dedup_by_key(|step| step.from);
        steps
    }

    /// Resolves the network of `scenario`; trace files are read relative to `base_dir`.
    pub fn from_scenario(scenario: &Scenario, base_dir: &Path) -> Result<NetworkPlan, ScenarioError> {
        let bottleneck_names: Vec<&String> = scenario.bottlenecks.keys().collect();
        let mut path_bottlenecks = Vec::new();
        for (index, path) in scenario.paths.iter().enumerate() {
            let bottleneck = match &path.bottleneck {
                None => None,
                Some(name) => Some(bottleneck_names.iter().position(|known| *known == name).ok_or_else(|| {
                    invalid(format!("paths.{index}.bottleneck"), format!("no [bottlenecks.{name}] is defined"))
                })?),
            };
            path_bottlenecks.push(bottleneck);
        }
        let bottleneck_delays: Vec<Duration> = scenario
            .bottlenecks
            .iter()
            .map(|(name, duplex)| round_trip_delay(duplex, &format!("bottlenecks.{name}")))
            .collect::<Result<_, _>>()?;
        let base_rtts: Vec<Duration> = scenario
            .paths
            .iter()
            .enumerate()
            .map(|(index, path)| {
                let own = round_trip_delay(&path.links, &format!("paths.{index}"))?;
                Ok(own + path_bottlenecks[index].map_or(Duration::ZERO, |b| bottleneck_delays[b]))
            })
            .collect::<Result<_, ScenarioError>>()?;

        let resolver = LinkResolver { base_dir };
        let mut paths = Vec::new();
        for (index, path) in scenario.paths.iter().enumerate() {
            paths.push(resolve_path(&resolver, index, path, path_bottlenecks[index], base_rtts[index])?);
        }
        let mut bottlenecks = Vec::new();
        for (bottleneck_index, (name, duplex)) in scenario.bottlenecks.iter().enumerate() {
            // A shared queue sized in BDPs uses the longest round trip of the paths through it.
            let rtt = (0..paths.len())
                .filter(|&p| path_bottlenecks[p] == Some(bottleneck_index))
                .map(|p| base_rtts[p])
                .max()
                .unwrap_or(bottleneck_delays[bottleneck_index]);
            let key = format!("bottlenecks.{name}");
            let uplink = resolver.resolve(&key, "uplink", duplex, rtt)?;
            let downlink = resolver.resolve(&key, "downlink", duplex, rtt)?;
            if uplink.tail_drop_packets > 0 || downlink.tail_drop_packets > 0 {
                return Err(invalid(format!("{key}.tail_drop_packets"), "only applies to a path's own links"));
            }
            bottlenecks.push(BottleneckPlan { name: name.clone(), uplink, downlink });
        }
        if !matches!(scenario.workload, WorkloadSpec::Bursts { .. }) {
            let any_tail_drop = paths
                .iter()
                .flat_map(|p| [&p.uplink, &p.downlink])
                .chain(bottlenecks.iter().flat_map(|b| [&b.uplink, &b.downlink]))
                .any(|link| link.tail_drop_packets > 0);
            if any_tail_drop {
                return Err(invalid("tail_drop_packets", "only applies to the bursts workload"));
            }
        }
        let mut cross_flows = Vec::new();
        for (group, spec) in scenario.cross_traffic.iter().enumerate() {
            cross_flows.extend(resolve_cross_traffic(group, spec, &bottleneck_names)?);
        }
        cross_flows.sort_by_key(|flow| (flow.start, flow.group));
        Ok(NetworkPlan { paths, bottlenecks, cross_flows })
    }
}

fn resolve_cross_traffic(
    group: usize,
    spec: &CrossTrafficSpec,
    bottleneck_names: &[&String],
) -> Result<Vec<CrossFlowPlan>, ScenarioError> {
    let key = format!("cross_traffic.{group}");
    let bottleneck = bottleneck_names.iter().position(|known| **known == spec.bottleneck).ok_or_else(|| {
        invalid(format!("{key}.bottleneck"), format!("no [bottlenecks.{}] is defined", spec.bottleneck))
    })?;
    let cc = spec.cc.parse::<CcKind>().map_err(|error| invalid(format!("{key}.cc"), error.to_string()))?;
    if spec.start_s.is_empty() {
        return Err(invalid(format!("{key}.start_s"), "at least one start time is needed (one flow per entry)"));
    }
    let mut flows = Vec::new();
    for (index, &at_s) in spec.start_s.iter().enumerate() {
        let start_key = format!("{key}.start_s.{index}");
        finite_at_least(&start_key, at_s, 0.0)?;
        let start = Duration::from_secs_f64(at_s);
        flows.push(CrossFlowPlan { bottleneck, cc, start, direction: spec.direction, group });
    }
    Ok(flows)
}

fn resolve_path(
    resolver: &LinkResolver<'_>,
    index: usize,
    path: &PathSpec,
    bottleneck: Option<usize>,
    base_rtt: Duration,
) -> Result<PathPlan, ScenarioError> {
    let key = format!("paths.{index}");
    let mut address_changes = Vec::new();
    for (change, &at_s) in path.address_changes_s.iter().enumerate() {
        finite_at_least(&format!("{key}.address_changes_s.{change}"), at_s, 0.0)?;
        address_changes.push(Duration::from_secs_f64(at_s));
    }
    if address_changes.windows(2).any(|pair| pair[0] > pair[1]) {
        return Err(invalid(format!("{key}.address_changes_s"), "times must be in increasing order"));
    }
    Ok(PathPlan {
        name: path.name.clone(),
        uplink: resolver.resolve(&key, "uplink", &path.links, base_rtt)?,
        downlink: resolver.resolve(&key, "downlink", &path.links, base_rtt)?,
        bottleneck,
        address_changes,
        relay: path.relay.as_ref().map(|relay| resolve_relay(&format!("{key}.relay"), relay)).transpose()?,
        server_relay: path
            .server_relay
            .as_ref()
            .map(|relay| resolve_relay(&format!("{key}.server_relay"), relay))
            .transpose()?,
        base_rtt,
    })
}

/// A path's relay: its policy and when it restarts.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayPlan {
    pub config: RelayConfig,
    pub restarts: Vec<Duration>,
}

fn resolve_relay(key: &str, relay: &RelaySpec) -> Result<RelayPlan, ScenarioError> {
    let control = |field: &str, text: &str| {
        text.parse::<SectionControl>().map_err(|error| invalid(format!("{key}.{field}"), error.to_string()))
    };
    if relay.queue_packets == 0 {
        return Err(invalid(format!("{key}.queue_packets"), "must be at least 1"));
    }
    let mut restarts = Vec::new();
    for (index, &at_s) in relay.restarts_s.iter().enumerate() {
        finite_at_least(&format!("{key}.restarts_s.{index}"), at_s, 0.0)?;
        restarts.push(Duration::from_secs_f64(at_s));
    }
    let config = RelayConfig {
        toward_server: control("toward_server_cc", &relay.toward_server_cc)?,
        toward_client: control("toward_client_cc", &relay.toward_client_cc)?,
        cc: CcConfig::default(),
        queue_limit: relay.queue_packets,
        next_relay: None,
    };
    Ok(RelayPlan { config, restarts })
}

fn direction<'a>(duplex: &'a DuplexSpec, name: &str) -> Option<&'a LinkSpec> {
    match name {
        "uplink" => duplex.uplink.as_ref(),
        _ => duplex.downlink.as_ref(),
    }
}

/// The value of one field for one direction and the key it was read from.
fn pick<'a, T>(
    key: &str,
    direction_name: &str,
    duplex: &'a DuplexSpec,
    field: &str,
    get: impl Fn(&'a LinkSpec) -> Option<T>,
) -> Option<(T, String)> {
    if let Some(value) = direction(duplex, direction_name).and_then(&get) {
        return Some((value, format!("{key}.{direction_name}.{field}")));
    }
    get(&duplex.both).map(|value| (value, format!("{key}.{field}")))
}

fn round_trip_delay(duplex: &DuplexSpec, key: &str) -> Result<Duration, ScenarioError> {
    let mut total = Duration::ZERO;
    for direction_name in ["uplink", "downlink"] {
        if let Some((delay_ms, field_key)) = pick(key, direction_name, duplex, "delay_ms", |l| l.delay_ms) {
            finite_at_least(&field_key, delay_ms, 0.0)?;
            total += Duration::from_secs_f64(delay_ms / 1000.0);
        }
    }
    Ok(total)
}

struct LinkResolver<'a> {
    base_dir: &'a Path,
}

impl LinkResolver<'_> {
    fn resolve(&self, key: &str, dir: &str, duplex: &DuplexSpec, rtt: Duration) -> Result<LinkPlan, ScenarioError> {
        let rate = pick(key, dir, duplex, "rate_mbps", |l| l.rate_mbps);
        let trace = pick(key, dir, duplex, "trace", |l| l.trace.clone());
        let service = match (rate, trace) {
            (Some(_), Some((_, trace_key))) => {
                return Err(invalid(trace_key, "set either rate_mbps or trace, not both"));
            }
            (None, None) => return Err(invalid(format!("{key}.rate_mbps"), "missing: set rate_mbps or trace")),
            (Some((mbps, rate_key)), None) => {
                finite_at_least(&rate_key, mbps, f64::MIN_POSITIVE)?;
                Service::Rate { bits_per_second: ((mbps * 1e6).round() as u64).max(1) }
            }
            (None, Some((file, trace_key))) => {
                let full = self.base_dir.join(&file);
                let text = std::fs::read_to_string(&full)
                    .map_err(|error| invalid(&trace_key, format!("cannot read {}: {error}", full.display())))?;
                let parsed = DeliveryTrace::parse(&text)
                    .map_err(|error| invalid(&trace_key, format!("{}: {error}", full.display())))?;
                Service::Trace(Arc::new(parsed))
            }
        };

        let delay = duration_ms(pick(key, dir, duplex, "delay_ms", |l| l.delay_ms))?;
        let jitter = duration_ms(pick(key, dir, duplex, "jitter_ms", |l| l.jitter_ms))?;
        let reorder = pick(key, dir, duplex, "reorder", |l| l.reorder).is_some_and(|(value, _)| value);
        let bernoulli = pick(key, dir, duplex, "loss", |l| l.loss);
        let gilbert = pick(key, dir, duplex, "gilbert_elliott", |l| l.gilbert_elliott);
        let loss = match (bernoulli, gilbert) {
            (Some(_), Some((_, gilbert_key))) => {
                return Err(invalid(gilbert_key, "set either loss or gilbert_elliott, not both"));
            }
            (Some((probability, loss_key)), None) => {
                probability_at(&loss_key, probability)?;
                LossModel::Bernoulli(probability)
            }
            (None, Some((chain, chain_key))) => {
                probability_at(&format!("{chain_key}.good_to_bad"), chain.good_to_bad)?;
                probability_at(&format!("{chain_key}.bad_to_good"), chain.bad_to_good)?;
                probability_at(&format!("{chain_key}.loss_in_good"), chain.loss_in_good)?;
                probability_at(&format!("{chain_key}.loss_in_bad"), chain.loss_in_bad)?;
                LossModel::GilbertElliott(GilbertElliott {
                    good_to_bad: chain.good_to_bad,
                    bad_to_good: chain.bad_to_good,
                    loss_in_good: chain.loss_in_good,
                    loss_in_bad: chain.loss_in_bad,
                })
            }
            (None, None) => LossModel::None,
        };
        let mut loss_steps: Vec<LossStep> = Vec::new();
        if let Some((specs, steps_key)) = pick(key, dir, duplex, "loss_steps", |l| l.loss_steps.clone()) {
            for (index, step) in specs.iter().enumerate() {
                let step_key = format!("{steps_key}.{index}");
                finite_at_least(&format!("{step_key}.from_s"), step.from_s, 0.0)?;
                probability_at(&format!("{step_key}.loss"), step.loss)?;
                let from = Duration::from_secs_f64(step.from_s);
                if loss_steps.last().is_some_and(|previous| previous.from >= from) {
                    return Err(invalid(format!("{step_key}.from_s"), "must be after the step before"));
                }
                loss_steps.push(LossStep { from, probability: step.loss });
            }
        }

        let queue_limit = self.queue_limit(key, dir, duplex, service.mean_rate_bps(), rtt)?;
        let ecn_threshold = pick(key, dir, duplex, "ecn_threshold_ms", |l| l.ecn_threshold_ms)
            .map(|value| duration_ms(Some(value)))
            .transpose()?;
        let switch_feedback = pick(key, dir, duplex, "switch_feedback", |l| l.switch_feedback).is_some_and(|(v, _)| v);

        let mut outages = Vec::new();
        if let Some((specs, outages_key)) = pick(key, dir, duplex, "outages", |l| l.outages.clone()) {
            for (index, outage) in specs.iter().enumerate() {
                let outage_key = format!("{outages_key}.{index}");
                finite_at_least(&format!("{outage_key}.from_s"), outage.from_s, 0.0)?;
                let until = match outage.until_s {
                    Some(until_s) if until_s.is_finite() && until_s > outage.from_s => {
                        Some(Duration::from_secs_f64(until_s))
                    }
                    Some(_) => return Err(invalid(format!("{outage_key}.until_s"), "must be after from_s")),
                    None => None,
                };
                outages.push((Duration::from_secs_f64(outage.from_s), until));
            }
        }
        let tail_drop_packets = pick(key, dir, duplex, "tail_drop_packets", |l| l.tail_drop_packets).map_or(0, |v| v.0);
        Ok(LinkPlan {
            params: LinkParams {
                service,
                delay,
                jitter,
                reorder,
                loss,
                loss_steps,
                queue_limit,
                ecn_threshold,
                switch_feedback,
                framing_bytes: IPV4_UDP_FRAMING,
            },
            outages,
            tail_drop_packets,
        })
    }

    fn queue_limit(
        &self,
        key: &str,
        dir: &str,
        duplex: &DuplexSpec,
        rate_bps: f64,
        rtt: Duration,
    ) -> Result<QueueLimit, ScenarioError> {
        let packets = pick(key, dir, duplex, "queue_packets", |l| l.queue_packets);
        let bytes = pick(key, dir, duplex, "queue_bytes", |l| l.queue_bytes);
        let bdp = pick(key, dir, duplex, "queue_bdp", |l| l.queue_bdp);
        let set: Vec<&String> =
            [packets.as_ref().map(|p| &p.1), bytes.as_ref().map(|b| &b.1), bdp.as_ref().map(|b| &b.1)]
                .into_iter()
                .flatten()
                .collect();
        if set.len() > 1 {
            return Err(invalid(set[1].clone(), "set only one of queue_packets, queue_bytes and queue_bdp"));
        }
        if let Some((limit, limit_key)) = packets {
            if limit == 0 {
                return Err(invalid(limit_key, "must be at least 1"));
            }
            return Ok(QueueLimit::Packets(limit));
        }
        if let Some((limit, limit_key)) = bytes {
            if limit == 0 {
                return Err(invalid(limit_key, "must be at least 1"));
            }
            return Ok(QueueLimit::Bytes(limit));
        }
        let (multiple, multiple_key) = bdp.unwrap_or((1.0, format!("{key}.queue_bdp")));
        finite_at_least(&multiple_key, multiple, f64::MIN_POSITIVE)?;
        let bdp_bytes = rate_bps / 8.0 * rtt.as_secs_f64();
        Ok(QueueLimit::Bytes(((multiple * bdp_bytes) as u64).max(MIN_BDP_QUEUE_BYTES)))
    }
}

fn duration_ms(value: Option<(f64, String)>) -> Result<Duration, ScenarioError> {
    match value {
        None => Ok(Duration::ZERO),
        Some((ms, key)) => {
            finite_at_least(&key, ms, 0.0)?;
            Ok(Duration::from_secs_f64(ms / 1000.0))
        }
    }
}

fn finite_at_least(key: &str, value: f64, minimum: f64) -> Result<(), ScenarioError> {
    if !value.is_finite() {
        return Err(invalid(key, format!("{value} is not a finite number")));
    }
    if value < minimum {
        let bound = if minimum == f64::MIN_POSITIVE { "above 0".to_owned() } else { format!("at least {minimum}") };
        return Err(invalid(key, format!("{value} is out of range: must be {bound}")));
    }
    Ok(())
}

fn probability_at(key: &str, value: f64) -> Result<(), ScenarioError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(invalid(key, format!("{value} is not a probability in [0, 1]")));
    }
    Ok(())
}
