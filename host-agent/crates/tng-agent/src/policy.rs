//! Host policies from a file, in the schema of the controller's API (`controller/proto/tng/policy/v1/policy.proto`:
//! `Policy` with `match` and `host_policy`, field names as in the proto).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::time::Duration;

use tng_proto::{CcKind, HostPolicy, SchedulerKind, TailLossMode, TransportConfig};

/// A policy file: `[[policy]]` tables.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub policy: Vec<PolicyEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    pub name: String,
    #[serde(default, rename = "match")]
    pub matches: MatchEntry,
    #[serde(default)]
    pub host_policy: HostPolicyEntry,
}

/// The parts of a policy match a host agent can evaluate for its own connections.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchEntry {
    #[serde(default)]
    pub priority: u32,
    #[serde(default)]
    pub traffic_class: String,
    pub connection_id: Option<u64>,
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
}

impl PolicyFile {
    pub fn load(path: &Path) -> Result<PolicyFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read policy file {}", path.display()))?;
        let file: PolicyFile = toml::from_str(&text).with_context(|| format!("policy file {}", path.display()))?;
        for entry in &file.policy {
            entry.host_policy().with_context(|| format!("policy file {}: policy {:?}", path.display(), entry.name))?;
        }
        Ok(file)
    }

    /// The highest-priority policy matching a connection of `traffic_class` with `connection_id`.
    pub fn select(self, traffic_class: &str, connection_id: u64) -> Option<PolicyEntry> {
        self.policy
            .into_iter()
            .filter(|p| p.matches.traffic_class.is_empty() || p.matches.traffic_class == traffic_class)
            .filter(|p| p.matches.connection_id.is_none_or(|id| id == connection_id))
            .max_by_key(|p| p.matches.priority)
    }
}

impl PolicyEntry {
    /// Makes this policy the default of every connection of an endpoint (the per-channel controllers and the rate
    /// cap need [`PolicyEntry::host_policy`] on each connection).
    pub fn apply_to_transport(&self, transport: &mut TransportConfig) -> Result<()> {
        let policy = self.host_policy()?;
        transport.cc = policy.cc.unwrap_or(transport.cc);
        transport.scheduler = policy.scheduler.unwrap_or(transport.scheduler);
        transport.tail_loss = policy.tail_loss.unwrap_or(transport.tail_loss);
        let h = &self.host_policy;
        if h.queue_threshold_us > 0 {
            transport.cc_config.queue_threshold = Some(Duration::from_micros(u64::from(h.queue_threshold_us)));
        }
        if h.copa_delta > 0.0 {
            transport.cc_config.copa_delta = h.copa_delta;
        }
        Ok(())
    }

    /// The core's view of the host half; empty fields keep the connection's setting.
    pub fn host_policy(&self) -> Result<HostPolicy> {
        let h = &self.host_policy;
        let cc = (!h.congestion_control.is_empty())
            .then(|| h.congestion_control.parse::<CcKind>())
            .transpose()
            .context("host_policy.congestion_control")?;
        let mut cc_per_channel = BTreeMap::new();
        for (path, name) in &h.congestion_control_per_path {
            let channel: u8 = path.parse().with_context(|| {
                format!("host_policy.congestion_control_per_path: key {path:?} is not a channel index 0-255")
            })?;
            let kind =
                name.parse::<CcKind>().with_context(|| format!("host_policy.congestion_control_per_path.{path}"))?;
            cc_per_channel.insert(channel, kind);
        }
        let scheduler = (!h.scheduler.is_empty())
            .then(|| h.scheduler.parse::<SchedulerKind>())
            .transpose()
            .context("host_policy.scheduler")?;
        let tail_loss = (!h.tail_loss.is_empty())
            .then(|| h.tail_loss.parse::<TailLossMode>())
            .transpose()
            .context("host_policy.tail_loss")?;
        if !(h.copa_delta >= 0.0 && h.copa_delta.is_finite()) {
            bail!("host_policy.copa_delta must be a non-negative number, not {}", h.copa_delta);
        }
        Ok(HostPolicy {
            cc,
            cc_per_channel,
            scheduler,
            tail_loss,
            rate_cap: (h.rate_cap_kbps > 0).then_some(h.rate_cap_kbps * 1000 / 8),
            ..HostPolicy::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PolicyFile> {
        let dir = std::env::temp_dir().join(format!("tng-policy-{}-{}", std::process::id(), rand::random::<u32>()));
        std::fs::write(&dir, text)?;
        let result = PolicyFile::load(&dir);
        let _ = std::fs::remove_file(&dir);
        result
    }

    #[test]
    fn highest_priority_matching_policy_wins() {
        let text = r#"
            [[policy]]
            name = "default"
            host_policy = { congestion_control = "cubic", scheduler = "ack-clocked" }
            [[policy]]
            name = "video"
            match = { priority = 10, traffic_class = "video" }
            host_policy = { congestion_control = "copa", tail_loss = "alternate-path", rate_cap_kbps = 8000 }
            "#;
        let select = |class: &str| parse(text).unwrap().select(class, 1).unwrap();
        assert_eq!(select("video").name, "video");
        assert_eq!(select("bulk").name, "default");
        let video = select("video").host_policy().unwrap();
        assert_eq!(video.cc, Some(CcKind::Copa));
        assert_eq!(video.tail_loss, Some(TailLossMode::AlternatePath));
        assert_eq!(video.rate_cap, Some(1_000_000));
        let mut transport = TransportConfig::default();
        let shared =
            parse("[[policy]]\nname = \"q\"\nhost_policy = { queue_threshold_us = 5000, copa_delta = 0.1 }\n").unwrap();
        shared.policy[0].apply_to_transport(&mut transport).unwrap();
        assert_eq!(transport.cc_config.queue_threshold, Some(Duration::from_millis(5)));
        assert_eq!(transport.cc_config.copa_delta, 0.1);
    }

    #[test]
    fn per_path_controllers_are_keyed_by_channel() {
        let file = parse(
            r#"
            [[policy]]
            name = "lte-vegas"
            host_policy = { congestion_control_per_path = { "1" = "vegas" } }
            "#,
        )
        .unwrap();
        let policy = file.policy[0].host_policy().unwrap();
        assert_eq!(policy.cc_per_channel.get(&1), Some(&CcKind::Vegas));
    }

    #[test]
    fn bad_values_name_the_field() {
        let err = parse("[[policy]]\nname = \"x\"\nhost_policy = { congestion_control = \"nope\" }\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("host_policy.congestion_control") && text.contains("nope"), "{text}");
        let err = parse("[[policy]]\nname = \"x\"\nhost_policy = { schedular = \"x\" }\n").unwrap_err();
        assert!(format!("{err:#}").contains("schedular"), "{err:#}");
    }
}
