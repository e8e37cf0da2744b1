//! Bench: a legitimate client's handshake time with `tng serve` on loopback, quiet and under a flood of stage-1
//! INITIALs from 200 sockets on 50 addresses (the flood of the `handshake_flood` test). Prints JSON.
//!
//! `handshake_flood [--tng PATH] [--handshakes N]`; PATH defaults to the `tng` next to this example's directory.

#[allow(dead_code)]
#[path = "../tests/common/flood.rs"]
mod flood;

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use flood::{handshake, Flood};
use tng_proto::Identity;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut tng = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("tng");
    let mut handshakes = 200;
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--tng", Some(path)) => tng = path.into(),
            ("--handshakes", Some(n)) => handshakes = n.parse().expect("--handshakes N"),
            _ => panic!("usage: handshake_flood [--tng PATH] [--handshakes N]"),
        }
    }
    let dir = std::env::temp_dir().join(format!("tng-bench-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("server.key");
    let out = Command::new(&tng).args(["keygen", "--force", "--out"]).arg(&key).output().expect("run tng keygen");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let identity: Identity = String::from_utf8(out.stdout).unwrap().trim().parse().expect("an identity");
    let server: SocketAddr = {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let mut serve = Command::new(&tng)
        .args(["serve", "--listen", &server.to_string(), "--identity"])
        .arg(&key)
        .arg("--control")
        .arg(dir.join("tng.sock"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tng serve");
    std::thread::sleep(Duration::from_millis(300));
    let _ = handshake(server, identity, 1); // warms up the server (first allocations, page faults)

    let quiet: Vec<_> = (0..handshakes).map(|i| handshake(server, identity, 100 + i)).collect();
    let flood = Flood::start(server, 50, 4, Duration::from_millis(50));
    std::thread::sleep(Duration::from_millis(500));
    let flooded: Vec<_> = (0..handshakes).map(|i| handshake(server, identity, 1000 + i)).collect();
    let report = flood.stop();
    let _ = serve.kill();
    let _ = serve.wait();
    let _ = std::fs::remove_dir_all(&dir);

    let amplification =
        report.per_address.values().map(|&(sent, received)| received as f64 / sent.max(1) as f64).fold(0.0, f64::max);
    let (quiet_failed, quiet) = millis(quiet);
    let (flood_failed, flooded) = millis(flooded);
    let (quiet_p50, flooded_p50) = (median(&quiet), median(&flooded));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let json = serde_json::json!({
        "bench": "handshake_flood",
        "handshakes": handshakes,
        "quiet_ms": {"p50": quiet_p50, "max": max(&quiet), "failed": quiet_failed},
        "flood_ms": {"p50": flooded_p50, "max": max(&flooded), "failed": flood_failed},
        "flood_over_quiet_p50": flooded_p50.zip(quiet_p50).map(|(flooded, quiet)| flooded / quiet),
        "flood_sources": 200,
        "initials_sent": report.initials_sent,
        "retries_received": report.retries_received,
        "max_bytes_received_per_byte_sent_by_an_address": amplification,
        "load_average_1min": load.split_whitespace().next().and_then(|l| l.parse::<f64>().ok()),
    });
    println!("{json:#}");
}

/// The failed handshakes (each reported on standard error), and the others' times in milliseconds.
fn millis(handshakes: Vec<Result<Duration, String>>) -> (usize, Vec<f64>) {
    let mut times = Vec::new();
    let mut failed = 0;
    for handshake in handshakes {
        match handshake {
            Ok(took) => times.push(took.as_secs_f64() * 1e3),
            Err(why) => {
                eprintln!("handshake_flood: {why}");
                failed += 1;
            }
        }
    }
    (failed, times)
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied()
}

fn max(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::max)
}
