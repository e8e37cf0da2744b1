//! The agent's side of the controller's host registry (Viscous's name server): it registers this host's addresses
//! on start, on every local address change and halfway through each registration's lifetime (the controller
//! expires registrations that are not renewed), signed with its static key, and follows each connected peer's
//! registration so that a peer that moved while we moved too is found again (simultaneous mobility). Failures are
//! logged and retried; they never stop data transfer.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use tng_proto::{ConnectionHandle, Identity, StaticKeypair};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::driver::Agent;
use crate::subscription::pb::policy_service_client::PolicyServiceClient;
use crate::subscription::pb::{HostRecord, RegisterHostRequest, ResolveHostRequest};
use crate::subscription::{describe, Controller};

/// First wait before retrying; it doubles up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const LAST_RETRY: Duration = Duration::from_secs(10);
/// The first line of what a registration's signature covers (controller/tng_controller/registry.py says the same).
const SIGNED_CONTEXT: &str = "tng-register-host-v1";

/// Registers this host and follows its connected peers until the process ends.
pub async fn run(controller: Controller, keypair: StaticKeypair, agent: Agent) {
    tokio::join!(register_forever(&controller, &keypair, agent.local_addresses()), follow_peers(&controller, &agent));
}

/// The addresses a peer of a connection resolved through the registry is reached at (connect-time mobility).
pub async fn resolve(controller: &Controller, identity: Identity) -> Result<Vec<SocketAddr>> {
    let mut client = PolicyServiceClient::new(controller.connect().await?);
    let request = ResolveHostRequest { identity: identity.to_string() };
    let record = client.resolve_host(request).await.map_err(describe)?.into_inner();
    let addresses = parse_addresses(&record);
    if addresses.is_empty() {
        bail!("the registry has no usable address for {identity}: {:?}", record.addresses);
    }
    Ok(addresses)
}

/// What a registration's signature covers.
pub fn signed_message(public_key: &[u8], sequence: u64, addresses: &[String]) -> Vec<u8> {
    let hex: String = public_key.iter().map(|byte| format!("{byte:02x}")).collect();
    let mut text = format!("{SIGNED_CONTEXT}\n{hex}\n{sequence}\n");
    for address in addresses {
        text.push_str(address);
        text.push('\n');
    }
    text.into_bytes()
}

/// A signed registration of `addresses`.
pub fn registration(
    keypair: &StaticKeypair,
    sequence: u64,
    addresses: Vec<String>,
    nonce: &[u8; 64],
) -> RegisterHostRequest {
    let signature = keypair.sign(&signed_message(keypair.public_key(), sequence, &addresses), nonce);
    RegisterHostRequest {
        public_key: keypair.public_key().to_vec(),
        sequence,
        addresses,
        signature: signature.to_vec(),
    }
}

async fn register_forever(
    controller: &Controller,
    keypair: &StaticKeypair,
    mut locals: watch::Receiver<Vec<SocketAddr>>,
) {
    let mut registered: Option<Vec<String>> = None;
    let mut renew_at: Option<Instant> = None;
    let mut sequence = 0;
    let mut retry = FIRST_RETRY;
    loop {
        let addresses = reachable(&locals.borrow_and_update());
        let moved = registered.as_ref() != Some(&addresses);
        let due = renew_at.is_some_and(|at| at <= Instant::now());
        if !addresses.is_empty() && (moved || due) {
            sequence = next_sequence(sequence);
            let mut nonce = [0; 64];
            rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut nonce);
            let request = registration(keypair, sequence, addresses.clone(), &nonce);
            match register(controller, request).await {
                Ok(record) => {
                    let (identity, at, with) = (keypair.identity(), addresses.join(" "), controller.address());
                    if moved {
                        tracing::info!("registered {identity} at {at} with controller {with}");
                    } else {
                        tracing::debug!("renewed the registration of {identity} at {at} with controller {with}");
                    }
                    renew_at = renewal_after(&record).map(|after| Instant::now() + after);
                    registered = Some(addresses);
                    retry = FIRST_RETRY;
                }
                Err(error) => {
                    tracing::warn!(
                        "controller {}: registering {} failed ({error:#}); retrying",
                        controller.address(),
                        addresses.join(" ")
                    );
                    tokio::select! {
                        () = tokio::time::sleep(retry) => {}
                        changed = locals.changed() => if changed.is_err() { return },
                    }
                    retry = (retry * 2).min(LAST_RETRY);
                    continue;
                }
            }
        }
        let renewal = async {
            match renew_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = locals.changed() => if changed.is_err() { return },
            () = renewal => {}
        }
    }
}

/// The record the controller stored.
async fn register(controller: &Controller, request: RegisterHostRequest) -> Result<HostRecord> {
    let mut client = PolicyServiceClient::new(controller.connect().await?);
    let response = client.register_host(request).await.map_err(describe)?.into_inner();
    response.host.context("the controller answered a registration without its record")
}

/// When to register the same addresses again: halfway through the lifetime the controller gave the registration
/// (both of its times are the controller's clock, so a skew of ours does not matter), which leaves the other half
/// for retries. None: it does not expire (a controller from before registrations expired).
fn renewal_after(record: &HostRecord) -> Option<Duration> {
    let lifetime = record.expires_unix_ms.checked_sub(record.registered_unix_ms).filter(|&ms| ms > 0)?;
    Some(Duration::from_millis(lifetime / 2))
}

/// Sequence numbers grow across restarts: microseconds of the wall clock, or one more than the last if the clock
/// stepped back.
fn next_sequence(last: u64) -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_micros());
    u64::try_from(now).unwrap_or(u64::MAX >> 1).max(last + 1)
}

/// The addresses peers reach us at: each bound address, and for a socket bound to the unspecified address every
/// global address of its family on the host, with the socket's port.
fn reachable(locals: &[SocketAddr]) -> Vec<String> {
    let interfaces = crate::ifaddrs::interface_addresses();
    let mut addresses: Vec<SocketAddr> = Vec::new();
    for local in locals {
        if local.ip().is_unspecified() {
            let family = interfaces.iter().filter(|ip| ip.is_ipv4() == local.is_ipv4());
            addresses.extend(family.map(|&ip| SocketAddr::new(ip, local.port())));
        } else if !local.ip().is_loopback() || locals.iter().all(|l| l.ip().is_loopback()) {
            addresses.push(*local);
        }
    }
    addresses.sort();
    addresses.dedup();
    addresses.truncate(16);
    addresses.iter().map(SocketAddr::to_string).collect()
}

/// Follows the registration of every peer that connects, for as long as its connection lives.
async fn follow_peers(controller: &Controller, agent: &Agent) {
    let mut connected = agent.connected_peers();
    loop {
        match connected.recv().await {
            Ok((conn, identity)) => {
                tokio::spawn(follow_peer(controller.clone(), agent.clone(), conn, identity));
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!("{missed} new connections were not followed in the host registry");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

async fn follow_peer(controller: Controller, agent: Agent, conn: ConnectionHandle, identity: Identity) {
    let mut retry = FIRST_RETRY;
    loop {
        match watch_peer(&controller, &agent, conn, identity).await {
            Ok(()) => return,
            Err(error) => tracing::debug!("{conn}: watching {identity} in the registry: {error:#}; retrying"),
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(LAST_RETRY);
        // A connection that ended while the controller was away is not followed any more.
        if !agent.peer_moved(conn, Vec::new()).await.unwrap_or(false) {
            return;
        }
    }
}

/// One WatchHost stream; Ok once the connection is gone.
async fn watch_peer(controller: &Controller, agent: &Agent, conn: ConnectionHandle, identity: Identity) -> Result<()> {
    let mut client = PolicyServiceClient::new(controller.connect().await?);
    let request = ResolveHostRequest { identity: identity.to_string() };
    let mut records = client.watch_host(request).await.map_err(describe)?.into_inner();
    let mut known: Vec<String> = Vec::new();
    while let Some(record) = records.message().await.map_err(describe)? {
        let addresses = parse_addresses(&record);
        // A renewal repeats the addresses: the peer did not move.
        if addresses.is_empty() || record.addresses == known {
            continue;
        }
        known.clone_from(&record.addresses);
        tracing::info!("{conn}: the registry has {identity} at {}", record.addresses.join(" "));
        if !agent.peer_moved(conn, addresses).await.context("the driver")? {
            return Ok(());
        }
    }
    bail!("the controller ended the watch")
}

fn parse_addresses(record: &HostRecord) -> Vec<SocketAddr> {
    record.addresses.iter().filter_map(|address| address.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector `controller/tests/test_registry.py` verifies: what this signer writes, the controller accepts.
    const VECTOR: &str = include_str!("../../../../testdata/registry/register-host.json");

    #[test]
    fn the_registration_vector_is_what_this_signer_writes() {
        let keypair = StaticKeypair::from_seed(1);
        let addresses = vec!["10.0.0.1:4477".to_owned(), "[fd00::1]:4477".to_owned()];
        let request = registration(&keypair, 42, addresses.clone(), &[7; 64]);
        let hex = |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
        let message = String::from_utf8(signed_message(keypair.public_key(), 42, &addresses)).unwrap_or_default();
        let expected = serde_json::json!({
            "identity": keypair.identity().to_string(),
            "public_key": hex(&request.public_key),
            "sequence": 42,
            "addresses": addresses,
            "nonce": hex(&[7; 64]),
            "message": message,
            "signature": hex(&request.signature),
        });
        let committed: serde_json::Value = serde_json::from_str(VECTOR).unwrap_or_default();
        assert_eq!(committed, expected, "testdata/registry/register-host.json should be:\n{expected:#}");
    }

    #[test]
    fn a_registration_is_renewed_halfway_through_its_lifetime() {
        let record = |registered_unix_ms, expires_unix_ms| HostRecord {
            registered_unix_ms,
            expires_unix_ms,
            ..HostRecord::default()
        };
        assert_eq!(renewal_after(&record(1_000, 601_000)), Some(Duration::from_secs(300)));
        assert_eq!(renewal_after(&record(1_000, 0)), None, "a record without an expiry");
        assert_eq!(renewal_after(&record(1_000, 1_000)), None);
    }

    #[test]
    fn sequence_numbers_only_grow() {
        let first = next_sequence(0);
        assert!(first > 1_700_000_000_000_000, "microseconds since 1970: {first}");
        assert_eq!(next_sequence(u64::MAX >> 1), (u64::MAX >> 1) + 1);
        assert!(next_sequence(first) > first);
    }

    #[test]
    fn unspecified_binds_register_the_hosts_addresses() {
        let bound: SocketAddr = "10.9.8.7:4477".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(reachable(&[bound]), vec!["10.9.8.7:4477"]);
        let any: SocketAddr = "0.0.0.0:4477".parse().unwrap_or_else(|_| unreachable!());
        assert!(reachable(&[any]).iter().all(|address| address.ends_with(":4477") && !address.starts_with("0.")));
    }
}
