//! The scenario file schema (docs/simulator.md), deserialized from TOML with unknown keys rejected.
//!
//! Link settings are all optional so that a path can state them once for both directions and override single
//! fields per direction (`[paths.downlink]`); `crate::topology` merges and validates them.

use std::collections::BTreeMap;

use serde::de::{self, Error as _};
use serde::{Deserialize, Deserializer};

/// A whole experiment: network, transport knobs and workload.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated time limit; bulk transfers without a size run this long.
    pub duration_s: f64,
    /// Goodput counts bytes delivered after this time (skips the handshake and slow start).
    #[serde(default)]
    pub measure_after_s: f64,
    #[serde(default)]
    pub mode: Mode,
    /// Client hosts, each with its own endpoint running the workload; more than one compete for the paths.
    #[serde(default = "default_clients")]
    pub clients: usize,
    #[serde(default)]
    pub transport: TransportSpec,
    /// Which way the workload's bytes flow.
    #[serde(default)]
    pub direction: Direction,
    pub workload: WorkloadSpec,
    pub paths: Vec<PathSpec>,
    /// Links shared by every path (and client) that names them in `bottleneck`.
    #[serde(default)]
    pub bottlenecks: BTreeMap<String, DuplexSpec>,
    /// Flows that compete with the workload on a bottleneck and are not part of it.
    #[serde(default)]
    pub cross_traffic: Vec<CrossTrafficSpec>,
}

fn default_seed() -> u64 {
    1
}

fn default_clients() -> usize {
    1
}

/// How the workload maps onto tng, for honest comparisons.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One connection over every path; every flow is a stream on it.
    #[default]
    Tng,
    /// One connection on path 0 only.
    SinglePath,
    /// A new connection (handshake, fresh congestion state) per flow on path 0, like one TCP connection per request.
    ConnectionPerFlow,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Tng => "tng",
            Mode::SinglePath => "single-path",
            Mode::ConnectionPerFlow => "connection-per-flow",
        }
    }
}

/// Which way a transfer's bytes flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The server sends what the client asked for.
    #[default]
    Download,
    /// The client sends and the server reads (bulk workloads).
    Upload,
}

/// Transport knobs handed to both endpoints; names are validated against tng-proto's when the run starts.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportSpec {
    /// Congestion controller name (newreno, cubic, vegas, copa, bbr, verus, sprout).
    pub cc: Option<String>,
    /// Multipath scheduler name.
    pub scheduler: Option<String>,
    /// Tail-loss probe placement: same-path or alternate-path.
    pub tlp: Option<String>,
    pub copa_delta: Option<f64>,
    /// In-network queue delay above which loss-based controllers back off.
    pub queue_threshold_ms: Option<f64>,
    /// Send ECN-capable packets.
    pub ecn: Option<bool>,
    /// Flow-control credit per stream, in bytes (the receiver's MAX_STREAM_DATA window).
    pub stream_receive_window: Option<u64>,
    /// Flow-control credit per connection, in bytes (MAX_DATA window).
    pub receive_window: Option<u64>,
}

/// What the applications do. Every transfer is a request on a client-opened stream answered by the server.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// One download per client: `bytes` long, or running until the end of the run when absent.
    Bulk { bytes: Option<u64> },
    /// `parallel` concurrent requesters per client, each fetching `flows_per_requester` responses back to back.
    ShortFlows { parallel: usize, flows_per_requester: usize, size: SizeSpec },
    /// Every `interval_ms` the client requests a `burst_bytes` response, `count` times.
    Bursts { burst_bytes: u64, interval_ms: f64, count: usize },
}

/// Response size distribution of short flows.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(tag = "distribution", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SizeSpec {
    Fixed {
        bytes: u64,
    },
    Exponential {
        mean_bytes: f64,
    },
    /// Pareto with the given mean and tail index (`shape` > 1).
    Pareto {
        mean_bytes: f64,
        shape: f64,
    },
}

/// One path between the client and the server: a link in each direction, optionally followed by a shared one.
///
/// In the file, the link fields sit directly in the path's table (for both directions) next to `name`,
/// `bottleneck`, `address_changes_s` and the tables `relay`, `server_relay`, `uplink` and `downlink`.
#[derive(Clone, Debug)]
pub struct PathSpec {
    pub name: String,
    /// Name of an entry in `[bottlenecks]` this path also traverses.
    pub bottleneck: Option<String>,
    /// Times at which the client's address on this path changes (the simulator moves it and tells the endpoint).
    pub address_changes_s: Vec<f64>,
    /// A relay (`tng relay`) where the path's own links end and its bottleneck begins: clients reach the server
    /// through it.
    pub relay: Option<RelaySpec>,
    /// A relay where the path's bottleneck ends, beside the server (Tng's relay at the far end of a WAN): the
    /// bottleneck is a section of its own between the two relays.
    pub server_relay: Option<RelaySpec>,
    pub links: DuplexSpec,
}

/// A relay's policy: each section's congestion controller and its queue.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySpec {
    /// Controller of the section toward the server (the core), or `fixed:RATE` (a link of reserved capacity).
    #[serde(default = "default_toward_server_cc")]
    pub toward_server_cc: String,
    /// Controller of the section toward the client (the path's own links: the last mile), or `fixed:RATE`.
    #[serde(default = "default_toward_client_cc")]
    pub toward_client_cc: String,
    /// Packets each direction's queue holds.
    #[serde(default = "default_relay_queue")]
    pub queue_packets: usize,
    /// Times at which the relay restarts: it loses every connection and every packet it held (fate sharing).
    #[serde(default)]
    pub restarts_s: Vec<f64>,
}

fn default_toward_server_cc() -> String {
    "cubic".to_owned()
}

fn default_toward_client_cc() -> String {
    "vegas".to_owned()
}

fn default_relay_queue() -> usize {
    64
}

/// Cross traffic on a bottleneck (Tng's core cross traffic): one bulk download per start time, from a server of its
/// own over that bottleneck only, running until the end of the run with its own congestion controller.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrossTrafficSpec {
    /// The `[bottlenecks]` entry the flows cross.
    pub bottleneck: String,
    /// Their congestion controller (a loss-based one such as cubic or newreno, as in the paper).
    #[serde(default = "default_cross_traffic_cc")]
    pub cc: String,
    /// Which way the flows send (download: from their server, over the bottleneck's downlink).
    #[serde(default)]
    pub direction: Direction,
    /// When each flow starts, in seconds: one flow per entry (a flow due after the run ends never starts).
    pub start_s: Vec<f64>,
}

fn default_cross_traffic_cc() -> String {
    "cubic".to_owned()
}

/// Settings of a pair of links: `both` for both directions, refined per direction.
#[derive(Clone, Debug, Default)]
pub struct DuplexSpec {
    /// Client to server.
    pub uplink: Option<LinkSpec>,
    /// Server to client (the direction data flows in every workload).
    pub downlink: Option<LinkSpec>,
    pub both: LinkSpec,
}

// serde's `flatten` silently ignores unknown keys, so the shared link fields are split off by hand and then
// deserialized with `deny_unknown_fields` in force.
impl<'de> Deserialize<'de> for PathSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(deserializer)?;
        let name = take_field(&mut table, "name")?.ok_or_else(|| D::Error::missing_field("name"))?;
        let bottleneck = take_field(&mut table, "bottleneck")?;
        let address_changes_s = take_field(&mut table, "address_changes_s")?.unwrap_or_default();
        let relay = take_field(&mut table, "relay")?;
        let server_relay = take_field(&mut table, "server_relay")?;
        let links = duplex_from_table(table)?;
        Ok(PathSpec { name, bottleneck, address_changes_s, relay, server_relay, links })
    }
}

impl<'de> Deserialize<'de> for DuplexSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        duplex_from_table(toml::Table::deserialize(deserializer)?)
    }
}

fn duplex_from_table<E: de::Error>(mut table: toml::Table) -> Result<DuplexSpec, E> {
    let uplink = take_field(&mut table, "uplink")?;
    let downlink = take_field(&mut table, "downlink")?;
    let both = LinkSpec::deserialize(toml::Value::Table(table)).map_err(E::custom)?;
    Ok(DuplexSpec { uplink, downlink, both })
}

/// Removes `key` from the table and deserializes it; errors are prefixed with the key.
fn take_field<T: de::DeserializeOwned, E: de::Error>(table: &mut toml::Table, key: &str) -> Result<Option<T>, E> {
    table
        .remove(key)
        .map(|value| T::deserialize(value).map_err(|error| E::custom(format!("{key}: {error}"))))
        .transpose()
}

/// One link direction; every field is optional so it can override a shared setting.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub rate_mbps: Option<f64>,
    /// Mahimahi trace file, relative to the scenario file.
    pub trace: Option<String>,
    /// One-way propagation delay.
    pub delay_ms: Option<f64>,
    pub jitter_ms: Option<f64>,
    pub reorder: Option<bool>,
    /// Independent loss probability per packet.
    pub loss: Option<f64>,
    pub gilbert_elliott: Option<GilbertElliottSpec>,
    /// Loss rates taking over at later times, in time order.
    pub loss_steps: Option<Vec<LossStepSpec>>,
    pub queue_packets: Option<usize>,
    pub queue_bytes: Option<u64>,
    /// Queue size as a multiple of the path's bandwidth-delay product.
    pub queue_bdp: Option<f64>,
    pub ecn_threshold_ms: Option<f64>,
    pub switch_feedback: Option<bool>,
    pub outages: Option<Vec<OutageSpec>>,
    /// Burst workloads: drop the last this-many first-transmission data packets of each burst on this link.
    pub tail_drop_packets: Option<usize>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliottSpec {
    pub good_to_bad: f64,
    pub bad_to_good: f64,
    #[serde(default)]
    pub loss_in_good: f64,
    #[serde(default = "certain_loss")]
    pub loss_in_bad: f64,
}

fn certain_loss() -> f64 {
    1.0
}

/// From `from_s` on, the link loses packets independently with probability `loss`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossStepSpec {
    pub from_s: f64,
    pub loss: f64,
}

/// The link is dark from `from_s` until `until_s` (for the rest of the run when absent).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutageSpec {
    pub from_s: f64,
    pub until_s: Option<f64>,
}
