//! `tng relay` as a process on loopback: a SECTION from a client reaches the server it names with its end-to-end
//! packet unchanged, the client's section is acknowledged once the packet left, and a killed and restarted relay
//! (all soft state lost) relays the next SECTION again. With --trace it writes its state as JSON lines.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::{free_port, Process};
use tng_wire::{parse_frames, Feedback, Flags, Frame, Packet, Payload, Section};

const CONNECTION_ID: u64 = 0x5eed;

fn socket() -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    socket
}

fn datagram(packet_number: u32, payload: Payload<'_>) -> Vec<u8> {
    let packet = Packet {
        flags: Flags::EMPTY,
        channel_id: 0,
        connection_id: CONNECTION_ID,
        packet_number,
        feedback: Feedback::NEUTRAL,
        payload,
    };
    let mut out = Vec::new();
    packet.encode(&mut out).expect("valid packet");
    out
}

/// An end-to-end DATA packet as an endpoint seals it (the relay cannot tell these bytes from ciphertext).
fn inner(seq: u32) -> Vec<u8> {
    let sealed: Vec<u8> = (0..200).map(|i| (i as u32 * 7 + seq) as u8).collect();
    datagram(seq, Payload::Data(&sealed))
}

/// Sends SECTION `number` carrying `inner(seq)` from `client` through `relay` toward `server` until the server gets
/// it (the relay may still be starting); returns the inner packet the server received.
fn relay_one(client: &UdpSocket, server: &UdpSocket, relay: SocketAddr, number: u32, seq: u32) -> Vec<u8> {
    relay_through(client, server, [relay, relay], number, seq)
}

/// As `relay_one`, through a chain of relays: the client sends to `first`, the server hears from `last`.
fn relay_through(
    client: &UdpSocket,
    server: &UdpSocket,
    [first, last]: [SocketAddr; 2],
    number: u32,
    seq: u32,
) -> Vec<u8> {
    let server_addr = server.local_addr().expect("address");
    let section = datagram(number, Payload::Section(Section::new(Some(server_addr), &inner(seq))));
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buffer = [0; 2048];
    loop {
        assert!(Instant::now() < deadline, "the relays never forwarded SECTION {number}");
        client.send_to(&section, first).expect("send");
        if let Ok((len, from)) = server.recv_from(&mut buffer) {
            assert_eq!(from, last);
            let packet = Packet::parse(&buffer[..len]).expect("the relay sends well-formed packets");
            let Payload::Section(section) = packet.payload else { panic!("server got {packet:?}") };
            assert_eq!(packet.connection_id, CONNECTION_ID);
            return section.inner.to_vec();
        }
    }
}

/// The relay's SECTION_ACK to the client acknowledges section packet `number`.
fn expect_section_ack(client: &UdpSocket, number: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buffer = [0; 2048];
    loop {
        assert!(Instant::now() < deadline, "no SECTION_ACK of {number}");
        let Ok((len, _)) = client.recv_from(&mut buffer) else { continue };
        let packet = Packet::parse(&buffer[..len]).expect("well-formed");
        let Payload::SectionAck(frames) = packet.payload else { continue };
        let acked = parse_frames(frames).any(|frame| matches!(frame, Ok(Frame::Ack(ack)) if ack.contains(number)));
        if acked {
            return;
        }
    }
}

#[test]
fn relays_sections_unchanged_and_relearns_them_after_a_restart() {
    let port = free_port();
    let relay: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let args = ["relay", "--listen", &relay.to_string(), "--queue-limit", "8"];
    let (client, server) = (socket(), socket());

    let mut process = Process::spawn(&args);
    assert_eq!(relay_one(&client, &server, relay, 0, 1), inner(1));
    expect_section_ack(&client, 0);

    process.kill();
    let _restarted = Process::spawn(&args);
    // The new process knows nothing of the connection: the SECTION's next hop teaches it again.
    assert_eq!(relay_one(&client, &server, relay, 1, 2), inner(2));
    expect_section_ack(&client, 1);
}

/// The trace's lines so far, parsed (a line is written and flushed whole).
fn trace_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).expect("each trace line is JSON")).collect()
}

#[test]
fn the_trace_shows_each_connection_s_queue_section_and_counts_over_time() {
    let relay: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("address");
    let trace = std::env::temp_dir().join(format!("tng-test-{}-relay-trace.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&trace);
    let args =
        ["relay", "--listen", &relay.to_string(), "--trace", trace.to_str().expect("utf-8"), "--trace-interval", "20"];
    let _process = Process::spawn(&args);
    let (client, server) = (socket(), socket());
    assert_eq!(relay_one(&client, &server, relay, 0, 1), inner(1));

    let deadline = Instant::now() + Duration::from_secs(10);
    let connection = loop {
        assert!(Instant::now() < deadline, "no trace line with the connection: {:?}", trace_lines(&trace));
        let lines = trace_lines(&trace);
        let found = lines.iter().rev().find_map(|line| line["connections"].as_array()?.first().cloned());
        if let Some(connection) = found {
            let times: Vec<f64> = lines.iter().map(|line| line["t_s"].as_f64().expect("t_s")).collect();
            assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "times grow: {times:?}");
            let now_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock");
            let unix = lines.last().and_then(|line| line["unix_s"].as_f64()).expect("unix_s");
            assert!((now_unix.as_secs_f64() - unix).abs() < 60.0, "unix_s {unix} is the wall clock");
            assert!(lines.iter().all(|line| line["stats"]["dropped"] == 0), "{lines:?}");
            break connection;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(connection["id"], format!("{CONNECTION_ID:016x}"));
    let toward_server = &connection["toward_server"];
    assert!(toward_server["received"].as_u64() >= Some(1), "{connection}");
    assert_eq!(toward_server["forwarded"], toward_server["received"], "{connection}");
    assert_eq!((&toward_server["queued"], &toward_server["queue_full"]), (&0.into(), &0.into()), "{connection}");
    assert_eq!(toward_server["cc"], "cubic");
    assert!(toward_server["in_flight"].as_u64() > Some(0), "the server socket acknowledges nothing: {connection}");
    assert!(toward_server["window"].as_u64() >= toward_server["in_flight"].as_u64(), "{connection}");
    assert_eq!(connection["toward_client"]["cc"], "vegas");
    assert_eq!(connection["toward_client"]["received"], 0);
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn a_trace_file_that_cannot_be_created_is_refused_naming_it() {
    let out = std::process::Command::new(common::TNG)
        .args(["relay", "--listen", "127.0.0.1:0", "--trace", "/nonexistent-dir/trace.jsonl"])
        .output()
        .expect("run tng");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--trace: cannot create /nonexistent-dir/trace.jsonl"), "{stderr}");
}

#[test]
fn a_zero_queue_limit_is_refused_with_a_clear_error() {
    let out = std::process::Command::new(common::TNG)
        .args(["relay", "--listen", "127.0.0.1:0", "--queue-limit", "0"])
        .output()
        .expect("run tng");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--queue-limit must be at least 1"));
}

#[test]
fn a_fixed_rate_without_a_unit_is_refused_naming_the_option_and_the_form() {
    let out = std::process::Command::new(common::TNG)
        .args(["relay", "--listen", "127.0.0.1:0", "--toward-server-cc", "fixed:20"])
        .output()
        .expect("run tng");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--toward-server-cc"), "{stderr}");
    assert!(stderr.contains("give the unit kbit, mbit or gbit (e.g. fixed:20mbit)"), "{stderr}");
}

#[test]
fn a_relay_with_a_next_relay_sends_on_through_it_naming_the_server() {
    let (near, far): (SocketAddr, SocketAddr) = (
        format!("127.0.0.1:{}", free_port()).parse().expect("address"),
        format!("127.0.0.1:{}", free_port()).parse().expect("address"),
    );
    let _far = Process::spawn(&["relay", "--listen", &far.to_string(), "--toward-client-cc", "fixed:20mbit"]);
    let near_args = ["relay", "--listen", &near.to_string(), "--toward-server-cc", "fixed:20mbit"];
    let _near = Process::spawn(&[&near_args[..], &["--next-relay", &far.to_string()]].concat());
    let (client, server) = (socket(), socket());
    assert_eq!(relay_through(&client, &server, [near, far], 0, 7), inner(7));
    expect_section_ack(&client, 0);
}
