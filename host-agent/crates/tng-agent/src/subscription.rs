//! The agent's subscription to the controller: `WatchPolicies` of the policy API (gRPC, optionally TLS with a
//! client certificate), reconnecting with backoff forever. Each complete snapshot and each change after it hands the
//! controller's whole policy set to the driver, which applies it to live connections (see `resolver`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use tokio::sync::{oneshot, watch};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::driver::Agent;
use crate::policy::{HostPolicyEntry, MatchEntry, Policy, PolicyEntry, PortMatchEntry, Source};

/// The policy API's messages and client, generated from `controller/proto/tng/policy/v1/policy.proto` by build.rs.
pub(crate) mod pb {
    tonic::include_proto!("tng.policy.v1");
}

use pb::policy_event::Kind;
use pb::policy_service_client::PolicyServiceClient;

/// First wait before reconnecting; it doubles up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const LAST_RETRY: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 pings notice a controller that vanished without closing the connection.
const KEEPALIVE: Duration = Duration::from_secs(10);

/// The subscription as `tng status` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriptionStatus {
    /// The controller's address (HOST:PORT).
    pub controller: String,
    pub state: SubscriptionState,
    /// The controller's policies in force (those the agent could apply).
    pub policies: usize,
    /// When `state` was entered.
    pub since: SystemTime,
    /// Snapshots received: one per (re)subscription.
    pub subscriptions: u64,
    /// Why the last watch ended or failed, if one did.
    pub last_error: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionState {
    /// No snapshot yet: the policy file applies.
    Connecting,
    /// The controller's policies are in force and its changes arrive.
    Subscribed,
    /// The watch ended after a snapshot: its policies stay in force while the agent reconnects.
    Lost,
}

impl SubscriptionState {
    pub fn name(self) -> &'static str {
        match self {
            SubscriptionState::Connecting => "connecting",
            SubscriptionState::Subscribed => "subscribed",
            SubscriptionState::Lost => "lost",
        }
    }
}

impl SubscriptionStatus {
    /// Before the first watch of `controller`.
    pub fn connecting(controller: &Controller) -> SubscriptionStatus {
        SubscriptionStatus {
            controller: controller.address().to_owned(),
            state: SubscriptionState::Connecting,
            policies: 0,
            since: SystemTime::now(),
            subscriptions: 0,
            last_error: None,
        }
    }

    fn enter(&mut self, state: SubscriptionState) {
        if self.state != state {
            self.state = state;
            self.since = SystemTime::now();
        }
    }
}

/// Where the controller is and how to talk to it: one address, or the replicas of a replicated controller, tried in
/// turn from the one that answered last. Clones share which one that is.
#[derive(Clone)]
pub struct Controller {
    replicas: Arc<[Replica]>,
    current: Arc<AtomicUsize>,
}

struct Replica {
    address: String,
    endpoint: Endpoint,
}

/// PEM files of the controller's TLS: the CA that signed its certificate, and this agent's client certificate.
pub struct TlsFiles<'a> {
    pub ca: Option<&'a Path>,
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
}

impl Controller {
    /// Checks the addresses (HOST:PORT, comma-separated for replicas) and reads the TLS files; TLS is on when a CA
    /// is given.
    pub fn new(addresses: &str, tls: &TlsFiles) -> Result<Controller> {
        if tls.cert.is_some() != tls.key.is_some() {
            bail!("--controller-cert and --controller-key go together");
        }
        if tls.cert.is_some() && tls.ca.is_none() {
            bail!("--controller-cert needs --controller-ca (client certificates are part of TLS)");
        }
        let tls_config = match tls.ca {
            None => None,
            Some(ca) => {
                let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem(ca, "ca")?));
                if let (Some(cert), Some(key)) = (tls.cert, tls.key) {
                    config = config
                        .identity(tonic::transport::Identity::from_pem(read_pem(cert, "cert")?, read_pem(key, "key")?));
                }
                Some(config)
            }
        };
        let replicas = addresses
            .split(',')
            .map(|address| replica(address.trim(), tls_config.clone()))
            .collect::<Result<Arc<[Replica]>>>()?;
        Ok(Controller { replicas, current: Arc::new(AtomicUsize::new(0)) })
    }

    /// The address of the replica that answered last (the first before any did).
    pub fn address(&self) -> &str {
        &self.replicas[self.current.load(Ordering::Relaxed)].address
    }

    /// A channel to the first replica that accepts one, from the one that answered last; names each one's error
    /// when none does.
    pub(crate) async fn connect(&self) -> Result<Channel> {
        if let [only] = &self.replicas[..] {
            return Ok(only.endpoint.connect().await?);
        }
        let first = self.current.load(Ordering::Relaxed);
        let mut errors = Vec::new();
        for offset in 0..self.replicas.len() {
            let index = (first + offset) % self.replicas.len();
            let replica = &self.replicas[index];
            match replica.endpoint.connect().await {
                Ok(channel) => {
                    self.current.store(index, Ordering::Relaxed);
                    return Ok(channel);
                }
                Err(error) => errors.push(format!("{}: {:#}", replica.address, anyhow::Error::from(error))),
            }
        }
        bail!(errors.join("; "))
    }
}

fn replica(address: &str, tls: Option<ClientTlsConfig>) -> Result<Replica> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
        .ok()
        .filter(|endpoint| endpoint.uri().port().is_some() && endpoint.uri().path() == "/")
        .with_context(|| format!("--controller {address:?} is not HOST:PORT"))?;
    let endpoint =
        endpoint.connect_timeout(CONNECT_TIMEOUT).http2_keep_alive_interval(KEEPALIVE).keep_alive_while_idle(true);
    let endpoint = match tls {
        None => endpoint,
        Some(config) => endpoint.tls_config(config).context("--controller-ca")?,
    };
    Ok(Replica { address: address.to_owned(), endpoint })
}

fn read_pem(path: &Path, flag: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read --controller-{flag} {}", path.display()))
}

/// Follows the controller's policies for the connections of `traffic_class` until the process ends; `first_snapshot`
/// fires once the agent holds the controller's policies for the first time, and `status` follows the subscription.
pub async fn follow(
    controller: Controller,
    traffic_class: String,
    agent: Agent,
    first_snapshot: oneshot::Sender<()>,
    status: watch::Sender<SubscriptionStatus>,
) {
    let mut subscription = Subscription {
        controller,
        traffic_class,
        agent,
        subscribed: false,
        told_down: false,
        first_snapshot: Some(first_snapshot),
        status,
    };
    let mut retry = FIRST_RETRY;
    loop {
        let error = match subscription.watch().await {
            Ok(()) => anyhow!("the controller ended the watch"),
            Err(error) => error,
        };
        let address = subscription.controller.address().to_owned();
        if subscription.subscribed {
            tracing::warn!("controller {address}: lost ({error:#}); its policies stay in force; reconnecting");
            subscription.subscribed = false;
            retry = FIRST_RETRY;
        } else if !subscription.told_down {
            tracing::warn!("controller {address}: unreachable ({error:#}); retrying until it answers");
        } else {
            tracing::debug!("controller {address}: still unreachable ({error:#})");
        }
        subscription.status.send_modify(|status| {
            if status.state == SubscriptionState::Subscribed {
                status.enter(SubscriptionState::Lost);
            }
            status.last_error = Some(format!("{error:#}"));
        });
        subscription.told_down = true;
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(LAST_RETRY);
    }
}

struct Subscription {
    controller: Controller,
    traffic_class: String,
    agent: Agent,
    /// The current watch delivered its snapshot.
    subscribed: bool,
    /// An outage was logged since the last subscription.
    told_down: bool,
    first_snapshot: Option<oneshot::Sender<()>>,
    status: watch::Sender<SubscriptionStatus>,
}

impl Subscription {
    /// One watch, from connecting to the stream's end.
    async fn watch(&mut self) -> Result<()> {
        let channel = self.controller.connect().await?;
        let mut client = PolicyServiceClient::new(channel);
        // The controller also sends policies for any class; without a class of our own, we need them all.
        let traffic_classes = [self.traffic_class.clone()].into_iter().filter(|c| !c.is_empty()).collect();
        let request = pb::WatchPoliciesRequest { traffic_classes };
        let mut events = client.watch_policies(request).await.map_err(describe)?.into_inner();
        let mut policies: BTreeMap<String, Policy> = BTreeMap::new();
        while let Some(event) = events.message().await.map_err(describe)? {
            let kind = event.kind();
            match (kind, event.policy) {
                (Kind::Snapshot | Kind::Set, Some(policy)) => self.take(&mut policies, policy),
                (Kind::Deleted, Some(policy)) => {
                    policies.remove(&policy.name);
                }
                (Kind::Synced, _) => {
                    tracing::info!("controller {}: subscribed, {} policies", self.controller.address(), policies.len());
                    self.subscribed = true;
                    self.told_down = false;
                    self.status.send_modify(|status| {
                        status.controller = self.controller.address().to_owned();
                        status.enter(SubscriptionState::Subscribed);
                        status.subscriptions += 1;
                    });
                }
                _ => continue,
            }
            if self.subscribed {
                self.status.send_modify(|status| status.policies = policies.len());
                self.agent.set_controller_policies(policies.values().cloned().collect());
                if let Some(first) = self.first_snapshot.take() {
                    // Nobody may be waiting (a server does not); the policies are in force either way.
                    let _ = first.send(());
                }
            }
        }
        Ok(())
    }

    /// Adds or replaces a policy; one the agent cannot apply is logged and left out.
    fn take(&self, policies: &mut BTreeMap<String, Policy>, policy: pb::Policy) {
        let name = policy.name.clone();
        match entry(policy).validate(Source::Controller) {
            Ok(policy) => {
                policies.insert(name, policy);
            }
            Err(error) => {
                tracing::warn!("controller {}: policy {name:?} ignored: {error:#}", self.controller.address());
                policies.remove(&name);
            }
        }
    }
}

/// A gRPC status as one line, with the transport's reason (say, a refused TLS handshake).
pub(crate) fn describe(status: tonic::Status) -> anyhow::Error {
    let mut parts = vec![format!("{:?}", status.code()), status.message().to_owned()];
    let mut cause = std::error::Error::source(&status);
    while let Some(error) = cause {
        let part = error.to_string();
        // Transport errors repeat words already said, next to each other or further up the chain.
        if !parts.iter().any(|said| said.ends_with(&part)) {
            parts.push(part);
        }
        cause = error.source();
    }
    anyhow!(parts.join(": "))
}

/// The proto's policy in the form policy files have, so both are validated alike.
fn entry(policy: pb::Policy) -> PolicyEntry {
    let matches = policy.r#match.unwrap_or_default();
    let host = policy.host_policy.unwrap_or_default();
    let port = |port: Option<pb::PortMatch>| {
        let port = port.unwrap_or_default();
        PortMatchEntry { value: port.value, mask: port.mask }
    };
    PolicyEntry {
        name: policy.name,
        revision: policy.revision,
        matches: MatchEntry {
            priority: matches.priority,
            traffic_class: matches.traffic_class,
            src_prefix: matches.src_prefix,
            dst_prefix: matches.dst_prefix,
            ip_protocol: matches.ip_protocol,
            src_port: port(matches.src_port),
            dst_port: port(matches.dst_port),
            connection_id: matches.has_connection_id.then_some(matches.connection_id),
        },
        host_policy: HostPolicyEntry {
            congestion_control: host.congestion_control,
            congestion_control_per_path: host
                .congestion_control_per_path
                .into_iter()
                .map(|(channel, cc)| (channel.to_string(), cc))
                .collect(),
            scheduler: host.scheduler,
            tail_loss: host.tail_loss,
            rate_cap_kbps: host.rate_cap_kbps,
            queue_threshold_us: host.queue_threshold_us,
            copa_delta: host.copa_delta,
            relay: host.relay,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls<'a>(ca: Option<&'a str>, cert: Option<&'a str>, key: Option<&'a str>) -> TlsFiles<'a> {
        TlsFiles { ca: ca.map(Path::new), cert: cert.map(Path::new), key: key.map(Path::new) }
    }

    fn error(address: &str, files: &TlsFiles) -> String {
        match Controller::new(address, files) {
            Ok(_) => panic!("{address} was accepted"),
            Err(error) => format!("{error:#}"),
        }
    }

    #[test]
    fn bad_addresses_and_tls_files_are_one_clear_error() {
        assert!(Controller::new("127.0.0.1:50051", &tls(None, None, None)).is_ok());
        assert!(Controller::new("controller.example:443", &tls(None, None, None)).is_ok());
        assert!(error("127.0.0.1", &tls(None, None, None)).contains("is not HOST:PORT"));
        assert!(error("http://127.0.0.1:1/x", &tls(None, None, None)).contains("is not HOST:PORT"));
        assert!(error("127.0.0.1:1", &tls(None, Some("c.pem"), None)).contains("go together"));
        assert!(error("127.0.0.1:1", &tls(None, Some("c.pem"), Some("k.pem"))).contains("needs --controller-ca"));
        let missing = error("127.0.0.1:1", &tls(Some("/nonexistent/ca.pem"), None, None));
        assert!(missing.contains("cannot read --controller-ca /nonexistent/ca.pem"), "{missing}");
        let replicas = Controller::new("10.0.0.1:50051, 10.0.0.2:50051", &tls(None, None, None)).unwrap();
        assert_eq!(replicas.address(), "10.0.0.1:50051");
        assert!(error("10.0.0.1:50051,10.0.0.2", &tls(None, None, None)).contains("\"10.0.0.2\" is not HOST:PORT"));
    }

    #[tokio::test]
    async fn a_replica_that_refuses_is_passed_over_for_the_next() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let answering = listener.local_addr().unwrap();
        let refusing = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // closed again
        let controller = Controller::new(&format!("{refusing},{answering}"), &tls(None, None, None)).unwrap();
        // A plain TCP listener accepts the connection; HTTP/2 starts only with the first call.
        controller.connect().await.unwrap();
        assert_eq!(controller.address(), answering.to_string());
        let clone = controller.clone();
        assert_eq!(clone.address(), answering.to_string(), "clones share the replica that answered");
        drop(listener);
        let error = format!("{:#}", controller.connect().await.unwrap_err());
        assert!(error.contains(&refusing.to_string()) && error.contains(&answering.to_string()), "{error}");
    }

    #[test]
    fn controller_policies_convert_like_policy_files() {
        let mut per_path = std::collections::HashMap::new();
        per_path.insert(1, "vegas".to_owned());
        let policy = pb::Policy {
            name: "video".into(),
            revision: 7,
            r#match: Some(pb::Match {
                priority: 3,
                connection_id: 0,
                has_connection_id: true,
                dst_port: Some(pb::PortMatch { value: 4477, mask: 0xffff }),
                ..pb::Match::default()
            }),
            host_policy: Some(pb::HostPolicy {
                scheduler: "lowest-rtt".into(),
                congestion_control_per_path: per_path,
                relay: "10.0.0.1:4477".into(),
                ..pb::HostPolicy::default()
            }),
            ..pb::Policy::default()
        };
        let entry = entry(policy);
        assert_eq!(entry.matches.connection_id, Some(0));
        assert_eq!((entry.matches.dst_port.value, entry.matches.dst_port.mask), (4477, 0xffff));
        assert_eq!(entry.host_policy.congestion_control_per_path.get("1").map(String::as_str), Some("vegas"));
        let policy = entry.validate(Source::Controller).unwrap();
        assert_eq!((policy.name.as_str(), policy.revision, policy.source), ("video", 7, Source::Controller));
        assert_eq!(policy.relay().map(|route| route.to_string()).as_deref(), Some("10.0.0.1:4477"));
    }
}
