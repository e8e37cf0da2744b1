//! Host policies in the schema of the controller's API (`controller/proto/tng/policy/v1/policy.proto`: `Policy` with
//! `match` and `host_policy`, field names as in the proto), from a policy file or from the controller, and which of
//! them matches a connection.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use tng_proto::{CcKind, HostPolicy, SchedulerKind, TailLossMode, TransportConfig};

use crate::relay_route::RelayRoute;

/// IP protocol number of UDP, which carries every tng connection.
const UDP: u32 = 17;

/// A policy file: `[[policy]]` tables.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub policy: Vec<PolicyEntry>,
}

/// A policy as written (file) or sent (controller), before validation.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    pub name: String,
    /// The controller's revision; what `tngctl policy get` prints, so its output works as a policy file.
    #[serde(default)]
    pub revision: u64,
    #[serde(default, rename = "match")]
    pub matches: MatchEntry,
    #[serde(default)]
    pub host_policy: HostPolicyEntry,
}

/// `Match` of the proto; `connection_id` present means "this connection" (the proto's `has_connection_id`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchEntry {
    #[serde(default)]
    pub priority: u32,
    #[serde(default)]
    pub traffic_class: String,
    #[serde(default)]
    pub src_prefix: String,
    #[serde(default)]
    pub dst_prefix: String,
    #[serde(default)]
    pub ip_protocol: u32,
    #[serde(default)]
    pub src_port: PortMatchEntry,
    #[serde(default)]
    pub dst_port: PortMatchEntry,
    pub connection_id: Option<u64>,
}

/// `PortMatch` of the proto: mask 0 matches any port.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortMatchEntry {
    #[serde(default)]
    pub value: u32,
    #[serde(default)]
    pub mask: u32,
}

/// `HostPolicy` of the proto.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPolicyEntry {
    #[serde(default)]
    pub congestion_control: String,
    #[serde(default)]
    pub congestion_control_per_path: BTreeMap<String, String>,
    #[serde(default)]
    pub scheduler: String,
    #[serde(default)]
    pub tail_loss: String,
    #[serde(default)]
    pub rate_cap_kbps: u64,
    #[serde(default)]
    pub queue_threshold_us: u32,
    #[serde(default)]
    pub copa_delta: f64,
    /// A `tng relay`'s address, "a.b.c.d:port" or "[v6]:port", or "on-path" (a relay on the way to the server
    /// intercepts the SECTIONs sent to it); empty: straight to the server.
    #[serde(default)]
    pub relay: String,
}

/// Where a policy came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    File,
    Controller,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::File => "file",
            Source::Controller => "controller",
        })
    }
}

/// A validated policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub name: String,
    pub revision: u64,
    pub source: Source,
    matcher: Matcher,
    host: HostHalf,
}

/// What a connection is, as far as policies can tell.
pub struct ConnectionFacts<'a> {
    /// The agent's `--traffic-class`.
    pub traffic_class: &'a str,
    /// `None` before the connection exists (when its relay is chosen): then no policy naming a connection matches.
    pub connection_id: Option<u64>,
    /// (local, remote) address of every channel.
    pub paths: &'a [(SocketAddr, SocketAddr)],
}

#[derive(Clone, Debug, PartialEq)]
struct Matcher {
    priority: u32,
    traffic_class: String,
    src: Option<Ipv4Prefix>,
    dst: Option<Ipv4Prefix>,
    ip_protocol: u32,
    src_port: PortMatch,
    dst_port: PortMatch,
    connection_id: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Ipv4Prefix {
    network: u32,
    mask: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct PortMatch {
    value: u16,
    mask: u16,
}

/// The host half, parsed; `None` and empty fields leave the agent's own setting.
#[derive(Clone, Debug, PartialEq)]
struct HostHalf {
    cc: Option<CcKind>,
    cc_per_channel: BTreeMap<u8, CcKind>,
    scheduler: Option<SchedulerKind>,
    tail_loss: Option<TailLossMode>,
    /// Bytes per second.
    rate_cap: Option<u64>,
    queue_threshold: Option<Duration>,
    copa_delta: Option<f64>,
    relay: Option<RelayRoute>,
}

impl PolicyFile {
    /// Reads and validates a policy file; every error names the file, the policy and the field.
    pub fn load(path: &Path) -> Result<Vec<Policy>> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read policy file {}", path.display()))?;
        let file: PolicyFile = toml::from_str(&text).with_context(|| format!("policy file {}", path.display()))?;
        file.policy
            .into_iter()
            .map(|entry| {
                let name = entry.name.clone();
                entry.validate(Source::File).with_context(|| format!("policy file {}: policy {name:?}", path.display()))
            })
            .collect()
    }
}

impl PolicyEntry {
    pub fn validate(self, source: Source) -> Result<Policy> {
        let m = &self.matches;
        let matcher = Matcher {
            priority: m.priority,
            traffic_class: m.traffic_class.clone(),
            src: Ipv4Prefix::parse(&m.src_prefix).context("match.src_prefix")?,
            dst: Ipv4Prefix::parse(&m.dst_prefix).context("match.dst_prefix")?,
            ip_protocol: if m.ip_protocol <= 255 {
                m.ip_protocol
            } else {
                bail!("match.ip_protocol: {} is not 0-255", m.ip_protocol)
            },
            src_port: m.src_port.validate().context("match.src_port")?,
            dst_port: m.dst_port.validate().context("match.dst_port")?,
            connection_id: m.connection_id,
        };
        let host = self.host_policy.validate()?;
        Ok(Policy { name: self.name, revision: self.revision, source, matcher, host })
    }
}

impl Ipv4Prefix {
    /// `a.b.c.d/len` without host bits; empty means any address.
    fn parse(text: &str) -> Result<Option<Ipv4Prefix>> {
        if text.is_empty() {
            return Ok(None);
        }
        let parsed = text.split_once('/').and_then(|(addr, len)| {
            let addr: Ipv4Addr = addr.parse().ok()?;
            let len: u32 = len.parse().ok().filter(|len| *len <= 32)?;
            Some((u32::from(addr), u32::MAX.checked_shl(32 - len).unwrap_or(0)))
        });
        let Some((network, mask)) = parsed else { bail!("{text:?} is not an IPv4 prefix a.b.c.d/len") };
        if network & !mask != 0 {
            bail!(
                "{text:?} has host bits set (the prefix is \"{}/{}\")",
                Ipv4Addr::from(network & mask),
                mask.count_ones()
            );
        }
        Ok(Some(Ipv4Prefix { network, mask }))
    }

    fn contains(self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(ip) => u32::from(ip) & self.mask == self.network,
            IpAddr::V6(ip) => ip.to_ipv4_mapped().is_some_and(|ip| u32::from(ip) & self.mask == self.network),
        }
    }
}

impl PortMatchEntry {
    fn validate(&self) -> Result<PortMatch> {
        let (Ok(value), Ok(mask)) = (u16::try_from(self.value), u16::try_from(self.mask)) else {
            bail!("value {} and mask {:#x} must be 16 bits", self.value, self.mask)
        };
        if value & !mask != 0 {
            bail!("value {value} has bits outside the mask {mask:#06x}");
        }
        Ok(PortMatch { value, mask })
    }
}

impl PortMatch {
    fn contains(self, port: u16) -> bool {
        port & self.mask == self.value
    }
}

impl HostPolicyEntry {
    fn validate(&self) -> Result<HostHalf> {
        let cc = (!self.congestion_control.is_empty())
            .then(|| self.congestion_control.parse::<CcKind>())
            .transpose()
            .context("host_policy.congestion_control")?;
        let mut cc_per_channel = BTreeMap::new();
        for (path, name) in &self.congestion_control_per_path {
            let channel: u8 = path.parse().with_context(|| {
                format!("host_policy.congestion_control_per_path: key {path:?} is not a channel index 0-255")
            })?;
            let kind =
                name.parse::<CcKind>().with_context(|| format!("host_policy.congestion_control_per_path.{path}"))?;
            cc_per_channel.insert(channel, kind);
        }
        let scheduler = (!self.scheduler.is_empty())
            .then(|| self.scheduler.parse::<SchedulerKind>())
            .transpose()
            .context("host_policy.scheduler")?;
        let tail_loss = (!self.tail_loss.is_empty())
            .then(|| self.tail_loss.parse::<TailLossMode>())
            .transpose()
            .context("host_policy.tail_loss")?;
        if !(self.copa_delta >= 0.0 && self.copa_delta.is_finite()) {
            bail!("host_policy.copa_delta must be a non-negative number, not {}", self.copa_delta);
        }
        let relay = (!self.relay.is_empty())
            .then(|| self.relay.parse::<RelayRoute>())
            .transpose()
            .map_err(|problem| anyhow::anyhow!("host_policy.relay: {problem}"))?;
        Ok(HostHalf {
            cc,
            cc_per_channel,
            scheduler,
            tail_loss,
            rate_cap: (self.rate_cap_kbps > 0).then(|| self.rate_cap_kbps.saturating_mul(1000) / 8),
            queue_threshold: (self.queue_threshold_us > 0)
                .then(|| Duration::from_micros(u64::from(self.queue_threshold_us))),
            copa_delta: (self.copa_delta > 0.0).then_some(self.copa_delta),
            relay,
        })
    }
}

impl Matcher {
    fn matches(&self, connection: &ConnectionFacts) -> bool {
        (self.traffic_class.is_empty() || self.traffic_class == connection.traffic_class)
            && self.connection_id.is_none_or(|id| Some(id) == connection.connection_id)
            && (!self.has_five_tuple()
                || connection
                    .paths
                    .iter()
                    .any(|&(local, remote)| self.matches_packet(local, remote) || self.matches_packet(remote, local)))
    }

    fn has_five_tuple(&self) -> bool {
        self.src.is_some()
            || self.dst.is_some()
            || self.ip_protocol != 0
            || self.src_port != PortMatch::default()
            || self.dst_port != PortMatch::default()
    }

    /// Whether a packet of the connection from `src` to `dst` matches, as a switch on its path would see it.
    fn matches_packet(&self, src: SocketAddr, dst: SocketAddr) -> bool {
        self.src.is_none_or(|prefix| prefix.contains(src.ip()))
            && self.dst.is_none_or(|prefix| prefix.contains(dst.ip()))
            && (self.ip_protocol == 0 || self.ip_protocol == UDP)
            && self.src_port.contains(src.port())
            && self.dst_port.contains(dst.port())
    }
}

impl Policy {
    /// The relay this policy routes its connections through, if it names one.
    pub fn relay(&self) -> Option<RelayRoute> {
        self.host.relay
    }
}

/// The matching policy of highest priority (on a tie, the first name in alphabetical order).
pub fn select<'a>(policies: impl IntoIterator<Item = &'a Policy>, connection: &ConnectionFacts) -> Option<&'a Policy> {
    policies
        .into_iter()
        .filter(|policy| policy.matcher.matches(connection))
        .max_by(|a, b| a.matcher.priority.cmp(&b.matcher.priority).then_with(|| b.name.cmp(&a.name)))
}

/// Every host setting of a connection under `policy`: what the policy leaves open, and everything when no policy
/// applies, comes from the agent's own settings (`baseline`), so a connection a policy stops matching returns to them.
pub fn connection_settings(policy: Option<&Policy>, baseline: &TransportConfig) -> HostPolicy {
    let host = policy.map(|p| &p.host);
    let mut cc_config = baseline.cc_config.clone();
    if let Some(host) = host {
        cc_config.queue_threshold = host.queue_threshold.or(cc_config.queue_threshold);
        cc_config.copa_delta = host.copa_delta.unwrap_or(cc_config.copa_delta);
    }
    HostPolicy {
        cc: Some(host.and_then(|h| h.cc).unwrap_or(baseline.cc)),
        cc_per_channel: host.map(|h| h.cc_per_channel.clone()).unwrap_or_default(),
        scheduler: Some(host.and_then(|h| h.scheduler).unwrap_or(baseline.scheduler)),
        weights: BTreeMap::new(),
        tail_loss: Some(host.and_then(|h| h.tail_loss).unwrap_or(baseline.tail_loss)),
        rate_cap: host.and_then(|h| h.rate_cap),
        cc_config: Some(cc_config),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Policy>> {
        let path = std::env::temp_dir().join(format!("tng-policy-{}-{}", std::process::id(), rand::random::<u32>()));
        std::fs::write(&path, text)?;
        let result = PolicyFile::load(&path);
        let _ = std::fs::remove_file(&path);
        result
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    const PATHS: [(&str, &str); 2] = [("10.1.0.2:5000", "192.0.2.1:4477"), ("10.2.0.2:5001", "192.0.2.1:4477")];

    fn selected<'a>(policies: &'a [Policy], class: &str, id: impl Into<Option<u64>>) -> Option<&'a str> {
        let paths: Vec<_> = PATHS.iter().map(|(l, r)| (addr(l), addr(r))).collect();
        let id = id.into();
        let facts = ConnectionFacts { traffic_class: class, connection_id: id, paths: &paths };
        select(policies, &facts).map(|p| p.name.as_str())
    }

    #[test]
    fn highest_priority_matching_policy_wins() {
        let policies = parse(
            r#"
            [[policy]]
            name = "default"
            host_policy = { congestion_control = "cubic", scheduler = "ack-clocked" }
            [[policy]]
            name = "video"
            match = { priority = 10, traffic_class = "video" }
            host_policy = { congestion_control = "copa", tail_loss = "alternate-path", rate_cap_kbps = 8000 }
            [[policy]]
            name = "this-connection"
            match = { priority = 20, connection_id = 7 }
            "#,
        )
        .unwrap();
        assert_eq!(selected(&policies, "video", 1), Some("video"));
        assert_eq!(selected(&policies, "bulk", 1), Some("default"));
        assert_eq!(selected(&policies, "video", 7), Some("this-connection"));
        // Before a connection exists (choosing its relay), no policy naming a connection can match it.
        assert_eq!(selected(&policies, "video", None), Some("video"));
        let video = connection_settings(Some(&policies[1]), &TransportConfig::default());
        assert_eq!(video.cc, Some(CcKind::Copa));
        assert_eq!(video.scheduler, Some(TransportConfig::default().scheduler));
        assert_eq!(video.tail_loss, Some(TailLossMode::AlternatePath));
        assert_eq!(video.rate_cap, Some(1_000_000));
    }

    #[test]
    fn five_tuples_match_either_direction_of_any_channel() {
        let policies = parse(
            r#"
            [[policy]]
            name = "lte-uplink"
            match = { src_prefix = "10.2.0.0/16", ip_protocol = 17, dst_port = { value = 4477, mask = 65535 } }
            [[policy]]
            name = "from-server"
            match = { src_prefix = "192.0.2.0/24", src_port = { value = 4477, mask = 65535 } }
            [[policy]]
            name = "tcp"
            match = { priority = 5, ip_protocol = 6 }
            [[policy]]
            name = "elsewhere"
            match = { priority = 5, dst_prefix = "10.9.0.0/16" }
            "#,
        )
        .unwrap();
        let only = |name: &str| policies.iter().filter(|p| p.name == name).cloned().collect::<Vec<_>>();
        assert_eq!(selected(&only("lte-uplink"), "", 1), Some("lte-uplink"));
        assert_eq!(selected(&only("from-server"), "", 1), Some("from-server"));
        // tng runs over UDP, and no channel goes to 10.9/16.
        assert_eq!(selected(&only("tcp"), "", 1), None);
        assert_eq!(selected(&only("elsewhere"), "", 1), None);
        // Equal priority: the first name wins.
        assert_eq!(selected(&policies, "", 1), Some("from-server"));
    }

    #[test]
    fn settings_fall_back_to_the_agent_s_own() {
        let policies = parse(
            r#"
            [[policy]]
            name = "lte-vegas"
            host_policy = { congestion_control_per_path = { "1" = "vegas" }, queue_threshold_us = 5000, copa_delta = 0.1 }
            "#,
        )
        .unwrap();
        let baseline = TransportConfig { cc: CcKind::Bbr, ..TransportConfig::default() };
        let settings = connection_settings(Some(&policies[0]), &baseline);
        assert_eq!(settings.cc, Some(CcKind::Bbr));
        assert_eq!(settings.cc_per_channel.get(&1), Some(&CcKind::Vegas));
        let cc_config = settings.cc_config.unwrap();
        assert_eq!(cc_config.queue_threshold, Some(Duration::from_millis(5)));
        assert_eq!(cc_config.copa_delta, 0.1);
        let none = connection_settings(None, &baseline);
        assert_eq!(none.cc, Some(CcKind::Bbr));
        assert!(none.cc_per_channel.is_empty() && none.rate_cap.is_none());
        assert_eq!(none.cc_config, Some(baseline.cc_config));
    }

    #[test]
    fn bad_values_name_the_field() {
        let error = |text: &str| format!("{:#}", parse(text).unwrap_err());
        let text = error("[[policy]]\nname = \"x\"\nhost_policy = { congestion_control = \"nope\" }\n");
        assert!(text.contains("host_policy.congestion_control") && text.contains("nope"), "{text}");
        let text = error("[[policy]]\nname = \"x\"\nhost_policy = { schedular = \"x\" }\n");
        assert!(text.contains("schedular"), "{text}");
        let text = error("[[policy]]\nname = \"x\"\nmatch = { src_prefix = \"10.0.1.7/24\" }\n");
        assert!(text.contains("match.src_prefix") && text.contains("10.0.1.0/24"), "{text}");
        let text = error("[[policy]]\nname = \"x\"\nmatch = { dst_port = { value = 80, mask = 15 } }\n");
        assert!(text.contains("match.dst_port") && text.contains("outside the mask"), "{text}");
        for relay in ["relay.example:4477", "10.0.0.1", "fd00::1:4477", "10.0.0.1:0", "0.0.0.0:4477"] {
            let text = error(&format!("[[policy]]\nname = \"x\"\nhost_policy = {{ relay = \"{relay}\" }}\n"));
            assert!(text.contains("host_policy.relay") && text.contains(relay), "{text}");
        }
    }

    #[test]
    fn a_policy_names_its_relay_by_address() {
        let policies = parse(
            "[[policy]]\nname = \"v4\"\nhost_policy = { relay = \"10.0.0.1:4477\" }\n\
             [[policy]]\nname = \"v6\"\nhost_policy = { relay = \"[fd00::1]:4477\" }\n\
             [[policy]]\nname = \"direct\"\n",
        )
        .unwrap();
        let relays: Vec<_> = policies.iter().map(Policy::relay).collect();
        let at = |text| Some(RelayRoute::At(addr(text)));
        assert_eq!(relays, [at("10.0.0.1:4477"), at("[fd00::1]:4477"), None]);
        let on_path = parse("[[policy]]\nname = \"dsl\"\nhost_policy = { relay = \"on-path\" }\n").unwrap();
        assert_eq!(on_path[0].relay(), Some(RelayRoute::OnPath));
    }
}
