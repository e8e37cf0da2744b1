//! `tng perf` end to end on loopback: the JSON report carries the fields the lab and benchmarks read.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::{free_port, TNG};

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Server {
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(TNG)
            .args(["perf", "server", "--listen", &addr])
            .args(extra)
            .stderr(Stdio::null())
            .spawn()
            .expect("start tng perf server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "perf server did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, addr }
    }

    fn client(&self, extra: &[&str]) -> (bool, Value, String) {
        let out = Command::new(TNG)
            .args(["perf", "client", "--connect", &self.addr, "--json"])
            .args(extra)
            .output()
            .expect("run tng perf client");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.success(), json, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_schema(report: &Value) {
    for key in ["goodput_mbps", "retransmitted_packets", "cpu_percent", "bytes_received", "bytes_corrupted", "run_s"] {
        assert!(report[key].is_number(), "{key} missing in {report}");
    }
    assert!(report["goodput_counts"].as_str().is_some_and(|rule| rule.contains("within duration_s")), "{report}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = report["started_unix_s"].as_f64().expect("started_unix_s");
    assert!(started <= now && now - started < 600.0, "the start is not this run's wall-clock time: {report}");
    let run_s = report["run_s"].as_f64().unwrap();
    assert!(run_s >= report["duration_s"].as_f64().unwrap(), "the run ended before its measured interval: {report}");
    for key in ["mean", "p50", "p99", "count"] {
        assert!(report["fct_ms"][key].is_number(), "fct_ms.{key} missing in {report}");
    }
    assert!(report["rtt_ms"].is_object(), "rtt_ms per path missing in {report}");
    assert!(report.get("connections").is_some_and(Value::is_null), "connections is null outside its mode: {report}");
    let paths = report["paths"].as_array().expect("paths array");
    assert!(!paths.is_empty());
    for path in paths {
        assert!(path["name"].is_string() && path["bytes"].is_number(), "bad path entry {path}");
    }
}

#[test]
fn bulk_over_tcp_reports_goodput_and_intact_bytes() {
    let server = Server::start();
    let (ok, report, stderr) =
        server.client(&["--transport", "tcp", "--mode", "bulk", "--duration", "1", "--cc", "cubic"]);
    assert!(ok, "{stderr}");
    assert_schema(&report);
    assert!(report["goodput_mbps"].as_f64().unwrap() > 1.0, "{report}");
    assert_eq!(report["bytes_corrupted"], 0);
    assert!(report["duration_s"].as_f64().unwrap() <= 1.01, "{report}");
    assert!(report["sender_queueing_ms"].is_null(), "a kernel socket does not tell its queueing: {report}");
    let path_bytes: u64 = report["paths"].as_array().unwrap().iter().map(|p| p["bytes"].as_u64().unwrap()).sum();
    assert!(path_bytes >= report["bytes_received"].as_u64().unwrap(), "{report}");
}

#[test]
fn kernel_data_sender_uses_the_requested_congestion_control() {
    // The server sends the data, so its socket, not only the client's, must use --cc; bbr is this machine's default,
    // reno is not.
    let server = Server::start();
    for transport in ["tcp", "mptcp"] {
        let (ok, report, stderr) =
            server.client(&["--transport", transport, "--mode", "bulk", "--duration", "0.3", "--cc", "reno"]);
        assert!(ok, "{stderr}");
        assert_eq!(report["sender_cc"], "reno", "{transport}: {report}");
        assert_eq!(report["bytes_corrupted"], 0);
    }
}

#[test]
fn shortflows_over_mptcp_complete_flows() {
    let server = Server::start();
    let (ok, report, stderr) =
        server.client(&["--mode", "shortflows", "--transport", "mptcp", "--parallel", "3", "--duration", "1"]);
    assert!(ok, "{stderr}");
    assert_schema(&report);
    let fct = &report["fct_ms"];
    assert!(fct["count"].as_u64().unwrap() > 0, "{report}");
    assert!(fct["p50"].as_f64().unwrap() <= fct["p99"].as_f64().unwrap());
    let samples = report["fct_samples_ms"].as_array().expect("fct_samples_ms array");
    assert_eq!(samples.len() as u64, fct["count"].as_u64().unwrap(), "one sample per completed flow: {report}");
}

#[test]
fn bulk_over_tng_reports_per_channel_paths() {
    let server = Server::start();
    let (ok, report, stderr) = server.client(&["--transport", "tng", "--mode", "bulk", "--duration", "1"]);
    assert!(ok, "{stderr}");
    assert_schema(&report);
    assert_eq!(report["transport"], "tng");
    assert_eq!(report["bytes_corrupted"], 0);
    assert!(report["sender_cc"].is_string(), "the tng server reports its controller: {report}");
    let queueing = &report["sender_queueing_ms"];
    let (p50, p95) = (queueing["p50"].as_f64(), queueing["p95"].as_f64());
    assert!(p50.zip(p95).is_some_and(|(p50, p95)| 0.0 <= p50 && p50 <= p95), "sender queueing: {report}");
    assert!(report["goodput_mbps"].as_f64().unwrap() > 1.0, "{report}");
    let paths = report["paths"].as_array().unwrap();
    assert!(paths[0]["name"].as_str().unwrap().ends_with(&server.addr), "{report}");
}

#[test]
fn shortflows_over_tng_use_one_stream_per_flow() {
    let server = Server::start();
    let (ok, report, stderr) =
        server.client(&["--transport", "tng", "--mode", "shortflows", "--parallel", "4", "--duration", "1"]);
    assert!(ok, "{stderr}");
    assert!(report["fct_ms"]["count"].as_u64().unwrap() > 4, "{report}");
    assert_eq!(report["bytes_corrupted"], 0);
}

#[test]
fn rr_measures_each_exchange() {
    let server = Server::start();
    let (ok, report, stderr) =
        server.client(&["--transport", "tcp", "--mode", "rr", "--response-size", "2000", "--duration", "0.5"]);
    assert!(ok, "{stderr}");
    let count = report["fct_ms"]["count"].as_u64().unwrap();
    assert!(count > 10, "{report}");
    // The deadline may cut one exchange short: its bytes count, its completion does not.
    let received = report["bytes_received"].as_u64().unwrap();
    assert!((count * 2000..(count + 1) * 2000).contains(&received), "{report}");
}

#[test]
fn unknown_congestion_control_is_one_clear_error() {
    let server = Server::start();
    let (ok, _, stderr) = server.client(&["--transport", "tcp", "--cc", "no-such-cc", "--duration", "0.2"]);
    assert!(!ok);
    assert!(stderr.contains("congestion control \"no-such-cc\" is not available"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "expected one line, got {stderr}");
    let (ok, _, stderr) = server.client(&["--transport", "tng", "--cc", "no-such-cc", "--duration", "0.2"]);
    assert!(!ok);
    assert!(stderr.contains("unknown congestion controller \"no-such-cc\""), "{stderr}");
}

#[test]
fn unreachable_server_is_one_clear_error() {
    let port = free_port();
    let out = Command::new(TNG)
        .args(["perf", "client", "--transport", "tcp", "--connect", &format!("127.0.0.1:{port}"), "--duration", "0.2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("tng: error: cannot connect to 127.0.0.1:"), "{stderr}");
}

#[test]
fn connections_mode_holds_every_connection_and_checks_every_response() {
    let server = Server::start();
    let (ok, report, stderr) = server.client(&[
        "--mode",
        "connections",
        "--connections",
        "50",
        "--interval",
        "0.2",
        "--duration",
        "2",
        "--response-size",
        "1500",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(report["mode"], "connections");
    let connections = &report["connections"];
    assert_eq!(connections["requested"], 50, "{report}");
    assert_eq!(connections["established"], 50, "{report}");
    assert_eq!(connections["failed_handshakes"], 0, "{report}");
    assert_eq!(connections["lost"], 0, "{report}");
    assert!(connections["first_error"].is_null(), "{report}");
    assert_eq!(connections["handshake_ms"]["count"], 50, "{report}");
    assert!(connections["handshakes_per_s"].as_f64().unwrap() > 0.0, "{report}");
    // Each connection asks every 0.2 s for 2 s: at most 10 requests each, fewer only if the machine falls behind.
    let requests = connections["requests"].as_u64().unwrap();
    assert!((1..=500).contains(&requests), "{report}");
    assert_eq!(connections["request_ms"]["count"], requests, "{report}");
    assert_eq!(report["bytes_corrupted"], 0, "{report}");
    assert_eq!(report["bytes_received"].as_u64().unwrap(), requests * 1500, "every response whole: {report}");
    assert_eq!(report["duration_s"].as_f64().unwrap(), 2.0, "the measured phase is --duration: {report}");
    assert!(report["sent_packets"].as_u64().unwrap() >= requests, "the server counts every connection: {report}");
}

#[test]
fn a_server_refuses_handshakes_beyond_its_max_connections() {
    // Three connections at most: the client's statistics connection and two of the five it asks for.
    let server = Server::start_with(&["--max-connections", "3"]);
    let (ok, report, stderr) =
        server.client(&["--mode", "connections", "--connections", "5", "--interval", "0.2", "--duration", "0.5"]);
    assert!(ok, "{stderr}");
    let connections = &report["connections"];
    assert_eq!((connections["established"].as_u64(), connections["failed_handshakes"].as_u64()), (Some(2), Some(3)));
    let error = connections["first_error"].as_str().unwrap_or_default();
    assert!(error.starts_with("handshake: "), "{report}");
    assert_eq!(connections["lost"], 0, "{report}");
}

#[test]
fn connections_mode_over_a_kernel_transport_is_one_clear_error() {
    let port = free_port();
    for transport in ["tcp", "mptcp"] {
        let out = Command::new(TNG)
            .args(["perf", "client", "--connect", &format!("127.0.0.1:{port}"), "--mode", "connections"])
            .args(["--transport", transport])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "expected one line, got {stderr}");
        assert!(stderr.contains("--mode connections needs --transport tng"), "{transport}: {stderr}");
    }
}
