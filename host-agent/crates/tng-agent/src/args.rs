//! The argument groups several commands share: transport settings, what a server accepts, how a client reaches
//! its server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use tng_proto::{CcKind, EndpointConfig, Identity, SchedulerKind, ServerConfig, TailLossMode};
use tng_qlog::{Clock, QlogDir};

use crate::policy::PolicyFile;
use crate::relay_route::RelayRoute;
use crate::resolver::LocalPolicies;
use crate::subscription::{Controller, TlsFiles};

/// Transport settings shared by every command that runs an endpoint.
#[derive(Args, Clone)]
pub struct TransportArgs {
    /// Congestion controller of every channel: newreno, cubic, vegas, copa, bbr, verus, sprout (kernel names for
    /// tcp/mptcp; sprout needs it at both ends: the receiver forecasts the link).
    #[arg(long)]
    pub cc: Option<String>,
    /// Multipath scheduler: ack-clocked, lowest-rtt, weighted.
    #[arg(long)]
    pub scheduler: Option<SchedulerKind>,
    /// Where tail-loss probes go: same-path, alternate-path.
    #[arg(long)]
    pub tail_loss: Option<TailLossMode>,
    /// Host policies (TOML, the controller API's schema) applied to matching connections.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Traffic class of this agent's connections, for policy matching.
    #[arg(long, default_value = "")]
    pub traffic_class: String,
    /// The controller's policy API (HOST:PORT, or the replicas' as HOST:PORT,HOST:PORT,...: tried in turn when one
    /// fails): its policies apply to matching connections live, ahead of --policy.
    #[arg(long)]
    pub controller: Option<String>,
    /// CA certificate (PEM) that signed the controller's certificate; turns TLS on.
    #[arg(long)]
    pub controller_ca: Option<PathBuf>,
    /// Client certificate (PEM) this agent shows the controller, with --controller-key.
    #[arg(long)]
    pub controller_cert: Option<PathBuf>,
    /// Private key (PEM) of --controller-cert.
    #[arg(long)]
    pub controller_key: Option<PathBuf>,
    /// Seconds without hearing from the peer after which a connection is closed.
    #[arg(long)]
    pub idle_timeout: Option<f64>,
    /// Unsent bytes a connection's streams accept from applications, in congestion windows of each channel (as
    /// TCP_NOTSENT_LOWAT bounds a socket): a writer waits rather than queue more. `off` leaves only the send
    /// buffers. Default 1.
    #[arg(long, value_parser = parse_unsent_windows)]
    pub unsent_windows: Option<UnsentWindows>,
    /// Write a qlog trace of every connection into DIR (JSON-SEQ, `<connection id>-<client|server>.sqlog`; qvis
    /// opens them).
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,
}

/// The value of `--unsent-windows`: a number of windows, or `off` (`None`).
#[derive(Clone, Copy, Debug)]
pub struct UnsentWindows(Option<u32>);

fn parse_unsent_windows(text: &str) -> Result<UnsentWindows, String> {
    if text == "off" {
        return Ok(UnsentWindows(None));
    }
    match text.parse::<u32>() {
        Ok(windows) if windows > 0 => Ok(UnsentWindows(Some(windows))),
        _ => Err(format!("expected a number of congestion windows (1 or more) or off, not {text:?}")),
    }
}

/// What a server accepts.
#[derive(Args, Clone, Copy)]
pub struct AcceptArgs {
    /// Connections (established or handshaking) the server holds at most; further handshakes are dropped
    /// (`refused`). Retry and anti-amplification apply below the limit as always.
    #[arg(long, default_value_t = ServerConfig::default().max_connections)]
    pub max_connections: usize,
}

impl AcceptArgs {
    pub fn server_config(self) -> Result<ServerConfig> {
        if self.max_connections == 0 {
            bail!("--max-connections must be at least 1");
        }
        Ok(ServerConfig { max_connections: self.max_connections, ..ServerConfig::default() })
    }
}

#[derive(Args)]
pub struct ClientArgs {
    /// Local address to open a channel from (repeat for several paths; default: any address).
    #[arg(long)]
    pub local: Vec<SocketAddr>,
    /// Fail unless the server proves this identity (64 hex digits, printed by its `tng keygen`).
    #[arg(long)]
    pub server_identity: Option<Identity>,
    /// Identity key file; a fresh identity for this run if absent.
    #[arg(long)]
    pub identity: Option<PathBuf>,
    /// Reach the server through the `tng relay` at this address (Tng's flow middlebox): every packet travels to it
    /// in a SECTION naming the server, and the relay's sections carry it on. `on-path`: the SECTIONs go to the
    /// server itself, for a `tng relay --on-path` routing between the two to intercept. Without it, a matching
    /// policy's `host_policy.relay` decides.
    #[arg(long, value_name = "ADDR|on-path")]
    pub relay: Option<RelayRoute>,
    #[command(flatten)]
    pub transport: TransportArgs,
}

impl TransportArgs {
    /// The endpoint configuration these flags describe (`server`, if any, adds the accepting side).
    pub fn endpoint_config(&self, server: Option<ServerConfig>) -> Result<EndpointConfig> {
        let mut config = EndpointConfig { server, ..EndpointConfig::client() };
        if let Some(cc) = &self.cc {
            config.transport.cc = cc.parse::<CcKind>()?;
        }
        if let Some(scheduler) = self.scheduler {
            config.transport.scheduler = scheduler;
        }
        if let Some(tail_loss) = self.tail_loss {
            config.transport.tail_loss = tail_loss;
        }
        if let Some(seconds) = self.idle_timeout {
            if !(seconds.is_finite() && seconds > 0.0) {
                bail!("--idle-timeout must be a positive number of seconds, not {seconds}");
            }
            config.transport.idle_timeout = Duration::from_secs_f64(seconds);
        }
        if let Some(UnsentWindows(windows)) = self.unsent_windows {
            config.transport.streams.unsent_windows = windows;
        }
        if let Some(dir) = &self.qlog {
            let traces = QlogDir::new(dir, "tng-agent", Clock::Wall)
                .with_context(|| format!("--qlog: cannot create {}", dir.display()))?;
            config.transport.qlog = Some(traces.into_config());
        }
        Ok(config)
    }

    pub fn local_policies(&self) -> Result<LocalPolicies> {
        let file = self.policy.as_deref().map(PolicyFile::load).transpose()?.unwrap_or_default();
        Ok(LocalPolicies { traffic_class: self.traffic_class.clone(), file })
    }

    pub fn controller(&self) -> Result<Option<Controller>> {
        let tls = TlsFiles {
            ca: self.controller_ca.as_deref(),
            cert: self.controller_cert.as_deref(),
            key: self.controller_key.as_deref(),
        };
        match &self.controller {
            Some(address) => Controller::new(address, &tls).map(Some),
            None if tls.ca.is_some() || tls.cert.is_some() || tls.key.is_some() => {
                bail!("--controller-ca, --controller-cert and --controller-key need --controller")
            }
            None => Ok(None),
        }
    }
}
