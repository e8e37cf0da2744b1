//! ALCC over kernel TCP on a real bottleneck: `tng perf --transport tcp --alcc copa|verus` through a 10 Mbit/s
//! drop-tail queue (tbf; this kernel may lack netem, so no added delay), kernel cubic underneath. Needs root;
//! skipped otherwise.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::netns::{is_root, NamespacePair};
use common::{Process, TNG};
use serde_json::Value;

/// One veth pair (10.78.0.0/24) between a client and a server namespace (names prefixed `alcc`), the server
/// sending at 10 Mbit/s into a 100 ms drop-tail queue; removed on drop.
fn bottleneck() -> NamespacePair {
    let tag = std::process::id() % 100_000;
    let net = NamespacePair::new(format!("alcc-c{tag}"), format!("alcc-s{tag}"), 78, 1);
    tc(&net.server, "qdisc add dev s0 root tbf rate 10mbit burst 16kb latency 100ms");
    net
}

fn tc(ns: &str, args: &str) {
    let out = Command::new("ip").args(["netns", "exec", ns, "tc"]).args(args.split_whitespace()).output().unwrap();
    assert!(out.status.success(), "tc {args}: {}", String::from_utf8_lossy(&out.stderr));
}

fn perf(net: &NamespacePair, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", &net.client, TNG, "--log-level", "error", "perf", "client"])
        .args(["--connect", "10.78.0.2:5201", "--json"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn alcc_controllers_bound_the_kernels_bytes_by_their_window_over_cubic() {
    if !is_root() {
        eprintln!("SKIP alcc: needs root for network namespaces");
        return;
    }
    let net = bottleneck();
    let _server = Process(
        Command::new("ip")
            .args(["netns", "exec", &net.server, TNG, "--log-level", "error", "perf", "server"])
            .args(["--listen", "0.0.0.0:5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(500));
    for alcc in ["copa", "verus", "sprout"] {
        let out =
            perf(&net, &["--transport", "tcp", "--mode", "bulk", "--duration", "4", "--cc", "cubic", "--alcc", alcc]);
        assert!(out.status.success(), "{alcc}: {}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
        eprintln!("{alcc}: goodput {} Mbit/s, alcc {}", report["goodput_mbps"], report["alcc"]);
        assert_eq!(report["bytes_corrupted"], 0, "{report}");
        assert!(report["bytes_received"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(report["sender_cc"], "cubic", "the kernel's controller runs underneath: {report}");
        let stats = &report["alcc"];
        assert_eq!(stats["controller"], alcc, "{report}");
        assert!(stats["samples"].as_u64().unwrap() > 10, "the server read TCP_INFO as it sent: {report}");
        let (window, kernel) =
            (stats["peak_window_bytes"].as_u64().unwrap(), stats["peak_kernel_bytes"].as_u64().unwrap());
        // The allowance is whole segments: the kernel holds less than one (1448 bytes here) beyond the window.
        assert!(
            kernel > 0 && kernel < window + 1448,
            "the kernel held {kernel} bytes, the window peaked at {window}: {report}"
        );
        let forecasts = stats["forecasts"].as_u64().unwrap();
        if alcc == "sprout" {
            // One per 20 ms tick from the client over 4 s.
            assert!(forecasts > 100, "the server's Sprout ran on the client's forecasts: {report}");
        } else {
            assert_eq!(forecasts, 0, "{report}");
        }
    }
    // Bad input: ALCC only over kernel TCP, only for delay-based controllers, Sprout only where this client sends
    // its forecasts alongside a bulk download.
    let tng = perf(&net, &["--duration", "1", "--transport", "tng", "--alcc", "copa"]);
    assert!(String::from_utf8_lossy(&tng.stderr).contains("needs --transport tcp"), "{tng:?}");
    let cubic = perf(&net, &["--transport", "tcp", "--duration", "1", "--alcc", "cubic"]);
    assert!(String::from_utf8_lossy(&cubic.stderr).contains("cubic is not one of the delay-based"), "{cubic:?}");
    let sprout_rr = perf(&net, &["--transport", "tcp", "--duration", "1", "--alcc", "sprout", "--mode", "rr"]);
    assert!(!sprout_rr.status.success());
    assert!(String::from_utf8_lossy(&sprout_rr.stderr).contains("--alcc sprout needs --mode bulk"), "{sprout_rr:?}");
}
