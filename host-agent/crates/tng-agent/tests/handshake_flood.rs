//! `tng serve` flooded on loopback with stage-1 INITIALs from 200 source sockets on 50 addresses that never answer:
//! it answers with RETRY once its pending handshakes fill up, sends no source address more than three times what
//! that address sent it (anti-amplification), and a legitimate client still connects. The legitimate client's
//! handshake time with and without the flood is measured by the `handshake_flood` bench, not asserted here.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::flood::{handshake, Flood};
use common::{free_port, keygen, wait_tcp, Process};
use tng_proto::Identity;

/// The value of a counter in the Prometheus text at `metrics`.
fn counter(metrics: SocketAddr, name: &str) -> u64 {
    let mut stream = TcpStream::connect(metrics).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let line = text.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("no {name} in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_flooded_server_retries_stays_within_three_times_per_address_and_still_serves() {
    let (key, identity) = keygen("flood");
    let server: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let control = std::env::temp_dir().join(format!("tng-test-{}-flood.sock", std::process::id()));
    let _serve = Process::spawn(&[
        "serve",
        "--listen",
        &server.to_string(),
        "--identity",
        &key,
        "--control",
        control.to_str().unwrap(),
        "--metrics",
        &metrics.to_string(),
    ]);
    wait_tcp(metrics);
    let identity: Identity = identity.parse().expect("tng keygen prints an identity");
    let quiet = handshake(server, identity, 1).expect("a handshake before the flood");
    eprintln!("handshake before the flood: {quiet:?}");

    let flood = Flood::start(server, 50, 4, Duration::from_millis(50));
    std::thread::sleep(Duration::from_millis(500));
    for seed in 2..5 {
        let took = handshake(server, identity, seed).expect("a legitimate client connects during the flood");
        eprintln!("handshake during the flood: {took:?}");
    }
    let report = flood.stop();
    eprintln!("{} INITIALs sent, {} RETRYs received", report.initials_sent, report.retries_received);

    // A RETRY means the flood filled the server's pending handshakes (64): enough to test the budget under load.
    assert!(report.retries_received > 0, "no RETRY under the flood: {report:?}");
    assert!(counter(metrics, "tng_agent_retries_sent") >= report.retries_received);
    for (address, (sent, received)) in &report.per_address {
        assert!(*received <= 3 * sent, "{address} sent {sent} bytes and got {received}: more than three times");
    }
}
