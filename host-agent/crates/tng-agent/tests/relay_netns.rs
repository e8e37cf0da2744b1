//! `tng relay` in its own network namespace between a client's and a server's: the client has no route to the
//! server, so a transfer that completes went through the relay, named by `--relay`, by a policy file or by the
//! controller's policy. The relay's side toward the client is a slow link (8 Mbit/s, as a last mile). Needs root;
//! skipped otherwise.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::netns::{ip, is_root, perf_server, tbf};
use common::{controller_python, repository, tngctl_serve, Process, TNG};
use serde_json::Value;

/// Three namespaces in a row: client (10.88.1.1) - relay (10.88.1.2, 10.88.2.1) - server (10.88.2.2), the relay's
/// namespace not forwarding; removed on drop.
struct Chain {
    client: String,
    relay: String,
    server: String,
}

impl Chain {
    /// `name` tells apart the chains of tests that run at once.
    fn new(name: &str) -> Chain {
        let tag = format!("{name}{}", std::process::id() % 100_000);
        let chain =
            Chain { client: format!("tngrc{tag}"), relay: format!("tngrr{tag}"), server: format!("tngrs{tag}") };
        for ns in [&chain.client, &chain.relay, &chain.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            ip(&format!("netns add {ns}"));
            ip(&format!("-n {ns} link set lo up"));
        }
        let (c, r, s) = (&chain.client, &chain.relay, &chain.server);
        ip(&format!("link add c0 netns {c} type veth peer name r0 netns {r}"));
        ip(&format!("link add r1 netns {r} type veth peer name s0 netns {s}"));
        for (ns, dev, address) in
            [(c, "c0", "10.88.1.1/24"), (r, "r0", "10.88.1.2/24"), (r, "r1", "10.88.2.1/24"), (s, "s0", "10.88.2.2/24")]
        {
            ip(&format!("-n {ns} addr add {address} dev {dev}"));
            ip(&format!("-n {ns} link set {dev} up"));
        }
        chain
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        for ns in [&self.client, &self.relay, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// A 3 s bulk transfer from the client's namespace to the server's, with `client_args` added to `tng perf client`;
/// asserts it arrived intact at a goodput the relay's 8 Mbit/s last mile allows.
fn transfer_through_the_relay(chain: &Chain, client_args: &[&str]) {
    let route = Command::new("ip").args(["-n", &chain.client, "route", "get", "10.88.2.2"]).output().expect("ip runs");
    assert!(!route.status.success(), "the client must have no route to the server");
    tbf(&chain.relay, "r0", "8mbit", "100ms");
    let _server = perf_server(&chain.server);
    let relay = Command::new("ip")
        .args(["netns", "exec", &chain.relay, TNG, "--log-level", "error", "relay", "--listen", "0.0.0.0:4477"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tng relay");
    let _relay = Process(relay);
    let out = Command::new("ip")
        .args(["netns", "exec", &chain.client, TNG, "--log-level", "error", "perf", "client"])
        .args(["--connect", "10.88.2.2:5201", "--local", "10.88.1.1:0"])
        .args(client_args)
        .args(["--transport", "tng", "--mode", "bulk", "--duration", "3", "--json"])
        .output()
        .expect("run tng perf client");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    eprintln!("through the relay: {:.2} Mbit/s, rtt {}", report["goodput_mbps"], report["rtt_ms"]);
    assert_eq!(report["bytes_corrupted"], 0, "{report}");
    let goodput = report["goodput_mbps"].as_f64().expect("goodput");
    assert!((3.0..=8.2).contains(&goodput), "goodput {goodput} Mbit/s through an 8 Mbit/s last mile: {report}");
}

/// A policy file (removed when dropped).
struct PolicyFile(std::path::PathBuf);

impl PolicyFile {
    fn new(name: &str, text: &str) -> PolicyFile {
        let path = std::env::temp_dir().join(format!("tng-relay-netns-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        PolicyFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for PolicyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Connections to the server's subnet go through the relay; a higher-priority policy for another subnet goes direct.
const RELAY_POLICIES: &str = "[[policy]]\nname = \"dsl\"\nmatch = { priority = 5, dst_prefix = \"10.88.2.0/24\" }\n\
    host_policy = { relay = \"10.88.1.2:4477\" }\n\
    [[policy]]\nname = \"elsewhere\"\nmatch = { priority = 9, dst_prefix = \"10.99.0.0/16\" }\n";

#[test]
fn a_client_without_a_route_to_the_server_transfers_through_the_relay() {
    if !is_root() {
        eprintln!("SKIP relay netns: needs root for network namespaces");
        return;
    }
    transfer_through_the_relay(&Chain::new("f"), &["--relay", "10.88.1.2:4477"]);
}

#[test]
fn a_policy_file_naming_the_relay_routes_the_connection_through_it() {
    if !is_root() {
        eprintln!("SKIP relay netns: needs root for network namespaces");
        return;
    }
    let policies = PolicyFile::new("file.toml", RELAY_POLICIES);
    transfer_through_the_relay(&Chain::new("p"), &["--policy", policies.path()]);
}

#[test]
fn a_controller_policy_naming_the_relay_routes_the_connection_through_it() {
    if !is_root() {
        eprintln!("SKIP relay netns: needs root for network namespaces");
        return;
    }
    let python = match controller_python() {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("SKIP relay netns (controller): {reason}");
            return;
        }
    };
    let chain = Chain::new("c");
    let store = std::env::temp_dir().join(format!("tng-relay-netns-{}-policies.db", std::process::id()));
    let config =
        PolicyFile::new("controller.toml", &format!("[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = {store:?}\n"));
    // The controller runs in the client's namespace: the agent reaches it there, and the server is out of its reach.
    let (_controller, address) = tngctl_serve(&python, Path::new(config.path()), Some(&chain.client));
    let policies = PolicyFile::new("policies.toml", RELAY_POLICIES);
    let out = Command::new("ip")
        .args(["netns", "exec", &chain.client])
        .arg(&python)
        .args(["-m", "tng_controller.tngctl", "--server", &address, "policy", "set", policies.path()])
        .current_dir(repository())
        .output()
        .expect("run tngctl");
    assert!(out.status.success(), "tngctl policy set: {}", String::from_utf8_lossy(&out.stderr));
    transfer_through_the_relay(&chain, &["--controller", &address]);
    let _ = std::fs::remove_file(store);
}
