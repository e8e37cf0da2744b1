//! Simultaneous mobility with real processes: the Python controller (`tngctl serve`, no switches) and two agents
//! (`tng perf server` and `tng perf client`, both with `--controller`) in two network namespaces. The data path's
//! addresses change at both ends at once (`ip addr del` / `ip addr add` on each side) in the middle of a bulk
//! transfer; the agents register their new addresses, learn each other's from the registry and the transfer goes on
//! over the new addresses, every byte checked. A second link carries only the controller's traffic. Then `tng
//! connect --server-identity` with no address resolves the server through the registry. Registrations last 2 s
//! here, and the agents renew theirs. Needs root; skipped otherwise.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::netns::{ip, is_root, NamespacePair};
use common::{controller_python, keygen, repository, tngctl_serve, Process, TNG};
use serde_json::Value;

/// Data path: client 10.79.0.1, server 10.79.0.2, moving to .11 and .12. Control path: the controller listens on
/// the server side's 10.79.1.2.
const CONTROLLER: &str = "10.79.1.2:50079";
/// Far shorter than the test, so that only renewed registrations resolve at its end.
const REGISTRATION_TTL_S: u64 = 2;

fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", ns]).args(args);
    command
}

/// `tngctl serve` in `ns` on [`CONTROLLER`], its store in a temp file; returns once it serves.
fn start_controller(python: &std::path::Path, ns: &str) -> Process {
    let dir = std::env::temp_dir().join(format!("tng-test-{}-registry", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("controller.toml");
    let store = dir.join("controller.db");
    let _ = std::fs::remove_file(&store);
    std::fs::write(
        &config,
        format!(
            "[api]\nlisten = \"{CONTROLLER}\"\nallow_insecure_remote = true\n[store]\npath = {store:?}\n\
             [hosts]\nregistration_ttl_s = {REGISTRATION_TTL_S}\n"
        ),
    )
    .unwrap();
    let (controller, address) = tngctl_serve(python, &config, Some(ns));
    assert_eq!(address, CONTROLLER);
    controller
}

fn hosts(python: &std::path::Path, ns: &str) -> Value {
    let out = in_ns(ns, &[python.to_str().unwrap(), "-m", "tng_controller.tngctl", "--server", CONTROLLER])
        .args(["--json", "hosts"])
        .current_dir(repository())
        .output()
        .unwrap();
    assert!(out.status.success(), "tngctl hosts: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The live registration of `identity`, as `tngctl hosts --json` lists it.
fn record_of(python: &std::path::Path, ns: &str, identity: &str) -> Option<Value> {
    hosts(python, ns).as_array()?.iter().find(|h| h["identity"] == identity).cloned()
}

/// Waits up to 5 s for `identity`'s live registration to be one address starting with `expected` (an address, or
/// `IP:` for any port).
fn wait_registered(python: &std::path::Path, ns: &str, identity: &str, expected: &str) {
    for _ in 0..50 {
        let listed = hosts(python, ns);
        let record = listed.as_array().into_iter().flatten().find(|h| h["identity"] == identity);
        let addresses = record.and_then(|r| r["addresses"].as_array().cloned()).unwrap_or_default();
        if let [address] = addresses.as_slice() {
            if address.as_str().is_some_and(|a| a == expected || (expected.ends_with(':') && a.starts_with(expected))) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{identity} never registered at {expected}: {}", hosts(python, ns));
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_transfer_survives_both_ends_moving_at_once() {
    if !is_root() {
        eprintln!("SKIP registry: needs root for network namespaces");
        return;
    }
    let python = match controller_python() {
        Ok(python) => python,
        Err(why) => {
            eprintln!("SKIP registry: {why}");
            return;
        }
    };
    let tag = std::process::id() % 100_000;
    let net = NamespacePair::new(format!("registry-c{tag}"), format!("registry-s{tag}"), 79, 2);
    let (c, s) = (&net.client, &net.server);
    let _controller = start_controller(&python, s);
    let (server_key, server_identity) = keygen("registry-server");
    let (client_key, client_identity) = keygen("registry-client");
    let _server = Process(
        in_ns(s, &[TNG, "--log-level", "error", "perf", "server", "--listen", "10.79.0.2:5201"])
            .args(["--identity", &server_key, "--controller", CONTROLLER])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_registered(&python, s, &server_identity, "10.79.0.2:5201");

    let client = in_ns(c, &[TNG, "--log-level", "info", "perf", "client", "--connect", "10.79.0.2:5201"])
        .args(["--local", "10.79.0.1:0", "--identity", &client_key, "--controller", CONTROLLER])
        .args(["--server-identity", &server_identity, "--mode", "bulk", "--duration", "8", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    // Both ends at once: neither ever receives a packet from the other's new address.
    let moves = [(c.clone(), "c0", "10.79.0.1", "10.79.0.11"), (s.clone(), "s0", "10.79.0.2", "10.79.0.12")];
    let threads: Vec<_> = moves
        .into_iter()
        .map(|(ns, dev, old, new)| {
            std::thread::spawn(move || {
                ip(&format!("-n {ns} addr del {old}/24 dev {dev}"));
                ip(&format!("-n {ns} addr add {new}/24 dev {dev}"));
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    // While the client runs: once it has exited its registration runs out REGISTRATION_TTL_S after its last renewal.
    wait_registered(&python, s, &client_identity, "10.79.0.11:");
    let out = client.wait_with_output().unwrap();
    let log = stderr_of(&out);
    assert!(out.status.success(), "perf client failed: {log}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    eprintln!("after the move: {report}");
    for line in log.lines().filter(|line| line.contains("registry") || line.contains("migrating")) {
        eprintln!("client: {line}");
    }
    assert_eq!(report["bytes_corrupted"], 0, "{report}");
    assert!(log.contains("at 10.79.0.12:5201"), "the client never heard of the server's move:\n{log}");
    wait_registered(&python, s, &server_identity, "10.79.0.12:5201");
    // Bytes went over the new addresses (path names are "local->remote").
    let paths = report["paths"].as_array().cloned().unwrap_or_default();
    let over_new: u64 = paths
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|name| name.contains("10.79.0.12:5201")))
        .map(|p| p["bytes"].as_u64().unwrap_or(0))
        .sum();
    assert!(over_new > 0, "no bytes over the new addresses: {report}");

    // Registrations last REGISTRATION_TTL_S: the server's agent renews its own before it runs out.
    let sequence = |record: Option<Value>| record.and_then(|h| h["sequence"].as_str()?.parse::<u64>().ok());
    let before = sequence(record_of(&python, s, &server_identity));
    std::thread::sleep(Duration::from_secs(REGISTRATION_TTL_S + 1));
    let after = sequence(record_of(&python, s, &server_identity));
    assert!(before.is_some() && after > before, "not renewed: sequence {before:?}, then {after:?}");

    // Connect-time mobility: only the identity and the controller, no address.
    let out = in_ns(c, &[TNG, "--log-level", "error", "connect", "--server-identity", &server_identity])
        .args(["--controller", CONTROLLER])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tng connect: {}", stderr_of(&out));
    assert!(stdout.contains("connected to 10.79.0.12:5201"), "{stdout}");
}
