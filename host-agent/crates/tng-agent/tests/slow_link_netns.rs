//! A run on a slow link ends on time: 5 Mbit/s with a 200 ms drop-tail queue at the server's egress, where the tng
//! sender used to queue megabytes and keep a bulk run going for seconds past its duration. Needs root; skipped
//! otherwise.

mod common;

use std::process::Command;
use std::time::Instant;

use common::netns::{is_root, perf_server, tbf, TwoPaths};
use common::TNG;
use serde_json::Value;

const DURATION_S: f64 = 4.0;
/// The longest round trip the link can have: its queue, and a little for the hosts.
const MAX_RTT_S: f64 = 0.25;

#[test]
fn bulk_on_a_slow_link_ends_within_two_round_trips_of_its_duration() {
    if !is_root() {
        eprintln!("SKIP slow link: needs root for network namespaces");
        return;
    }
    let net = TwoPaths::new("d");
    tbf(&net.server, "s0", "5mbit", "200ms");
    let _server = perf_server(&net.server);
    for transport in ["tng", "tcp"] {
        let started = Instant::now();
        let out = Command::new("ip")
            .args(["netns", "exec", &net.client, TNG, "--log-level", "error", "perf", "client"])
            .args(["--connect", "10.77.0.2:5201", "--local", "10.77.0.1:0", "--transport", transport])
            .args(["--mode", "bulk", "--duration", &DURATION_S.to_string(), "--json"])
            .output()
            .unwrap();
        let wall = started.elapsed().as_secs_f64();
        assert!(out.status.success(), "{transport}: {}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
        let rtt_s = report["rtt_ms"].as_object().unwrap().values().filter_map(Value::as_f64).fold(0.0, f64::max) / 1e3;
        let allowed = DURATION_S + 2.0 * rtt_s.max(MAX_RTT_S) + 1.0;
        let run_s = report["run_s"].as_f64().unwrap();
        let goodput = report["goodput_mbps"].as_f64().unwrap();
        eprintln!(
            "{transport}: run {run_s:.2} s (process {wall:.2} s), goodput {goodput:.2} Mbit/s, rtt {rtt_s:.3} s, \
                   retransmitted {} of {} packets, sender queueing {}",
            report["retransmitted_packets"], report["sent_packets"], report["sender_queueing_ms"]
        );
        assert!(run_s <= allowed, "{transport}: the run took {run_s:.2} s, more than {allowed:.2} s: {report}");
        // The process also connects (tng: a handshake) and starts up.
        assert!(wall <= allowed + 1.0, "{transport}: the client ran {wall:.2} s: {report}");
        assert!((2.5..=5.2).contains(&goodput), "{transport}: goodput {goodput} Mbit/s on a 5 Mbit/s link: {report}");
        assert_eq!(report["bytes_corrupted"], 0);
        if transport == "tng" {
            let p95 = report["sender_queueing_ms"]["p95"].as_f64().expect("tng reports its sender queueing");
            assert!(p95 < 1000.0, "the sender queued {p95} ms at the 95th percentile: {report}");
        }
    }
}
