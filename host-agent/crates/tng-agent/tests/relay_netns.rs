//! `tng relay` in its own network namespace between a client's and a server's: the client has no route to the
//! server, so a transfer that completes went through the relay. The relay's side toward the client is a slow link
//! (8 Mbit/s, as a last mile). Needs root; skipped otherwise.

mod common;

use std::process::{Command, Stdio};

use common::netns::{ip, is_root, perf_server, tbf};
use common::{Process, TNG};
use serde_json::Value;

/// Three namespaces in a row: client (10.88.1.1) - relay (10.88.1.2, 10.88.2.1) - server (10.88.2.2), the relay's
/// namespace not forwarding; removed on drop.
struct Chain {
    client: String,
    relay: String,
    server: String,
}

impl Chain {
    fn new() -> Chain {
        let tag = std::process::id() % 100_000;
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

#[test]
fn a_client_without_a_route_to_the_server_transfers_through_the_relay() {
    if !is_root() {
        eprintln!("SKIP relay netns: needs root for network namespaces");
        return;
    }
    let chain = Chain::new();
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
        .args(["--connect", "10.88.2.2:5201", "--local", "10.88.1.1:0", "--relay", "10.88.1.2:4477"])
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
