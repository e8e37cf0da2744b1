//! A tng connection through `tng relay`, all three as processes on loopback: `tng perf client --relay` sends every
//! packet through the relay, and when the relay is killed mid-transfer and started again on its address, the
//! transfer goes on through the fresh relay with every byte intact; the sender's qlog traces its section.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Process, TNG};
use serde_json::Value;

/// `tng relay` on `address` with its log on stderr, so that its closing counters can be read.
fn start_relay(address: &str) -> std::process::Child {
    Command::new(TNG)
        .args(["--log-level", "info", "relay", "--listen", address])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tng relay")
}

/// Interrupts the relay and returns the number of SECTIONs it says it forwarded.
fn stop_relay(mut relay: std::process::Child) -> u64 {
    let pid = relay.id().to_string();
    let signalled = Command::new("kill").args(["-INT", &pid]).status().expect("kill");
    assert!(signalled.success());
    let mut log = String::new();
    relay.stderr.take().expect("stderr").read_to_string(&mut log).expect("relay log");
    relay.wait().expect("relay exit");
    let counted = log.split("forwarded: ").nth(1).and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next());
    counted.and_then(|digits| digits.parse().ok()).unwrap_or_else(|| panic!("no forwarded count in:\n{log}"))
}

#[test]
fn a_transfer_through_a_killed_and_restarted_relay_arrives_intact() {
    let (_server, server) = start_server(&[]);
    let relay_address = format!("127.0.0.1:{}", free_port());
    let mut relay = start_relay(&relay_address);
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new(TNG)
        .args(["perf", "client", "--transport", "tng", "--connect", &server, "--relay", &relay_address])
        .args(["--mode", "bulk", "--duration", "5", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tng perf client");
    // Mid-transfer the relay dies with everything it held; a fresh one takes its address half a second later.
    std::thread::sleep(Duration::from_secs(2));
    relay.kill().expect("kill the relay");
    relay.wait().expect("relay gone");
    std::thread::sleep(Duration::from_millis(500));
    let fresh = start_relay(&relay_address);
    let out = client.wait_with_output().expect("perf client");
    let forwarded_by_fresh = stop_relay(fresh);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["bytes_corrupted"], 0, "{report}");
    assert!(report["bytes_received"].as_u64().is_some_and(|bytes| bytes > 1_000_000), "{report}");
    assert!(forwarded_by_fresh > 100, "the fresh relay forwarded {forwarded_by_fresh} SECTIONs");
}

/// Starts `tng perf server` on a free port with `args` added; its address once it listens.
fn start_server(args: &[&str]) -> (Process, String) {
    let server = format!("127.0.0.1:{}", free_port());
    let process = Process::spawn(&[&["perf", "server", "--listen", &server], args].concat());
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&server).is_err() {
        assert!(Instant::now() < deadline, "perf server did not listen on {server}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (process, server)
}

/// The `tng:section_updated` events of the traces in `dir`.
fn section_events(dir: &Path) -> Vec<Value> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(dir).expect("qlog dir") {
        let bytes = std::fs::read(entry.expect("entry").path()).expect("trace");
        for record in bytes.split(|&b| b == 0x1e).filter(|record| record.ends_with(b"\n")) {
            let event: Value = serde_json::from_slice(record).expect("JSON");
            if event["name"] == "tng:section_updated" {
                events.push(event["data"].clone());
            }
        }
    }
    events
}

#[test]
fn the_sender_s_qlog_traces_the_section_to_the_relay() {
    let qlog = std::env::temp_dir().join(format!("tng-relayed-qlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&qlog);
    let (_server, address) = start_server(&["--qlog", qlog.to_str().expect("utf-8")]);
    let relay_address = format!("127.0.0.1:{}", free_port());
    let relay = start_relay(&relay_address);
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(TNG)
        .args(["perf", "client", "--transport", "tng", "--connect", &address, "--relay", &relay_address])
        .args(["--mode", "bulk", "--duration", "2", "--json"])
        .output()
        .expect("tng perf client");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    stop_relay(relay);
    // The server flushes a trace at least every second while events come; the transfer gave two seconds of them.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sections = section_events(&qlog);
    while sections.len() <= 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        sections = section_events(&qlog);
    }
    assert!(sections.len() > 10, "the server's section to the relay, as it changed: {} events", sections.len());
    for section in &sections {
        assert_eq!(section["remote"], relay_address.as_str(), "{section}");
        assert!(section["controller"].as_str().is_some_and(|name| !name.is_empty()), "{section}");
    }
    let windows = sections.iter().filter_map(|section| section["congestion_window"].as_u64());
    assert!(windows.max() > Some(0), "{sections:?}");
    assert!(sections.iter().any(|section| section["smoothed_rtt"].as_f64().is_some()), "an RTT sampled");
    let _ = std::fs::remove_dir_all(&qlog);
}
