//! Two paths between two network namespaces: a transfer uses both, and survives the client losing its address on
//! one path mid-transfer (`ip addr del` / `ip addr add`) with every byte intact. Needs root; skipped otherwise.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::TNG;
use serde_json::Value;

fn is_root() -> bool {
    // SAFETY-free check: /proc/self/status carries the effective uid.
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

fn ip(args: &str) -> Output {
    let out = Command::new("ip").args(args.split_whitespace()).output().expect("ip runs");
    assert!(out.status.success(), "ip {args}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn sysctl(ns: &str, key: &str, value: &str) {
    let out =
        Command::new("ip").args(["netns", "exec", ns, "sysctl", "-qw", &format!("{key}={value}")]).output().unwrap();
    assert!(out.status.success(), "sysctl {key}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Two namespaces joined by two veth pairs; removed on drop.
struct TwoPaths {
    client: String,
    server: String,
}

impl TwoPaths {
    fn new() -> TwoPaths {
        let tag = std::process::id() % 100_000;
        let (client, server) = (format!("tngc{tag}"), format!("tngs{tag}"));
        let _ = Command::new("ip").args(["netns", "del", &client]).output();
        let _ = Command::new("ip").args(["netns", "del", &server]).output();
        ip(&format!("netns add {client}"));
        ip(&format!("netns add {server}"));
        let net = TwoPaths { client, server };
        let (c, s) = (&net.client, &net.server);
        for path in 0..2 {
            ip(&format!("link add c{path} netns {c} type veth peer name s{path} netns {s}"));
            ip(&format!("-n {c} addr add 10.77.{path}.1/24 dev c{path}"));
            ip(&format!("-n {s} addr add 10.77.{path}.2/24 dev s{path}"));
            ip(&format!("-n {c} link set c{path} up"));
            ip(&format!("-n {s} link set s{path} up"));
        }
        ip(&format!("-n {c} link set lo up"));
        ip(&format!("-n {s} link set lo up"));
        // The client reaches the server's path-0 address from both of its addresses: traffic from 10.77.1.1 leaves
        // by c1 (policy routing), and the server answers it by s1; reverse-path filtering would drop that.
        ip(&format!("-n {c} rule add from 10.77.1.1 table 101"));
        ip(&format!("-n {c} route add 10.77.0.2/32 dev c1 table 101"));
        for ns in [c, s] {
            sysctl(ns, "net.ipv4.conf.all.rp_filter", "0");
            sysctl(ns, "net.ipv4.conf.default.rp_filter", "0");
            for path in 0..2 {
                let dev = if ns == c { format!("c{path}") } else { format!("s{path}") };
                sysctl(ns, &format!("net.ipv4.conf.{dev}.rp_filter"), "0");
            }
        }
        net
    }
}

impl Drop for TwoPaths {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.client]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.server]).output();
    }
}

#[test]
fn two_path_transfer_uses_both_paths_and_survives_address_removal() {
    if !is_root() {
        eprintln!("SKIP two_path_transfer: needs root for network namespaces");
        return;
    }
    let net = TwoPaths::new();
    let mut server = Command::new("ip")
        .args(["netns", "exec", &net.server, TNG, "--log-level", "error", "perf", "server", "--listen", "0.0.0.0:5201"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let client = Command::new("ip")
        .args(["netns", "exec", &net.client, TNG, "--log-level", "error", "perf", "client"])
        .args(["--connect", "10.77.0.2:5201", "--local", "10.77.0.1:0", "--local", "10.77.1.1:0"])
        .args(["--mode", "bulk", "--duration", "8", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-transfer, path 1 loses the client's address for 1.5 s, then gets it back.
    std::thread::sleep(Duration::from_secs(3));
    ip(&format!("-n {} addr del 10.77.1.1/24 dev c1", net.client));
    std::thread::sleep(Duration::from_millis(1500));
    ip(&format!("-n {} addr add 10.77.1.1/24 dev c1", net.client));
    ip(&format!("-n {} route replace 10.77.0.2/32 dev c1 table 101", net.client));
    let out = client.wait_with_output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf client failed: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["bytes_corrupted"], 0, "{report}");
    let total = report["bytes_received"].as_u64().unwrap();
    assert!(total > 0, "{report}");
    let paths = report["paths"].as_array().unwrap();
    let bytes_from = |local: &str| -> u64 {
        paths
            .iter()
            .filter(|p| p["name"].as_str().unwrap().starts_with(local))
            .map(|p| p["bytes"].as_u64().unwrap())
            .sum()
    };
    let (path0, path1) = (bytes_from("10.77.0.1:"), bytes_from("10.77.1.1:"));
    eprintln!("path 0: {path0} bytes, path 1: {path1} bytes, goodput {} Mbit/s", report["goodput_mbps"]);
    assert!(path0 > total / 10 && path1 > total / 10, "both paths must carry data: {report}");
}
