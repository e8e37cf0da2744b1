//! `tng serve --metrics` exports the counters `tng status` shows (same names, labels and values), and
//! `--qlog DIR` leaves a JSON-SEQ trace of each connection end.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, keygen, wait_tcp, Process, TNG};
use serde_json::Value;

type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// `GET /metrics`: the body of a 200 answer.
fn scrape(address: SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).expect("metrics endpoint");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: tng\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP head");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    body.to_string()
}

/// The samples of a Prometheus text exposition, keyed by name and labels.
fn parse_prometheus(text: &str) -> Samples {
    let mut samples = Samples::new();
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let labels = rest.trim_end_matches('}').split(',').filter(|pair| !pair.is_empty()).map(|pair| {
                    let (key, value) = pair.split_once('=').expect("label");
                    (key.to_string(), value.trim_matches('"').to_string())
                });
                (name, labels.collect())
            }
            None => (series, BTreeMap::new()),
        };
        samples.insert((name.to_string(), labels), value.parse().expect("numeric value"));
    }
    samples
}

/// The samples `tng status --json` reports.
fn status_samples(control: &std::path::Path) -> Samples {
    let out = Command::new(TNG).args(["status", "--json", "--control"]).arg(control).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    let mut samples = Samples::new();
    for sample in status["metrics"].as_array().expect("metrics in status") {
        let labels = sample["labels"]
            .as_object()
            .expect("labels")
            .iter()
            .map(|(key, value)| (key.clone(), value.as_str().expect("label value").to_string()))
            .collect();
        let name = sample["name"].as_str().expect("name").to_string();
        samples.insert((name, labels), sample["value"].as_f64().expect("value"));
    }
    samples
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tng-test-{}-{name}", std::process::id()))
}

/// A server with --metrics and a proxy client holding one connection open; returns what to reach.
struct Served {
    _serve: Process,
    _proxy: Process,
    metrics: SocketAddr,
    control: PathBuf,
}

/// `name` keeps the files of tests running at once apart.
fn serve_with_a_connection(name: &str, extra_serve: &[String], extra_client: &[String]) -> Served {
    let (key, identity) = keygen(name);
    let server = format!("127.0.0.1:{}", free_port());
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let control = temp_path(&format!("{name}.sock"));
    let mut args: Vec<String> = ["serve", "--listen", &server, "--identity", &key, "--metrics", &metrics.to_string()]
        .iter()
        .map(ToString::to_string)
        .collect();
    args.extend(["--control".to_string(), control.to_string_lossy().into_owned()]);
    args.extend(extra_serve.iter().cloned());
    let serve = Process::spawn(&args);
    wait_tcp(metrics);
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args: Vec<String> = ["proxy", "--listen", &listen, "--via", &server, "--to", "127.0.0.1:9"]
        .iter()
        .map(ToString::to_string)
        .collect();
    args.extend(["--server-identity".to_string(), identity]);
    args.extend(extra_client.iter().cloned());
    let proxy = Process::spawn(&args);
    wait_tcp(listen.parse().unwrap());
    // The server holds the connection from the handshake on, but its channel only from the client's first packet
    // after it: wait for the channel to be up, or the samples differ between two reads.
    let deadline = Instant::now() + Duration::from_secs(10);
    let channel_up = |text: &str| {
        parse_prometheus(text).iter().any(|((name, _), value)| name == "tng_agent_channel_up" && *value == 1.0)
    };
    loop {
        let text = scrape(metrics);
        if channel_up(&text) {
            assert!(text.contains("tng_agent_handshakes_accepted_total 1\n"), "one handshake:\n{text}");
            break;
        }
        assert!(Instant::now() < deadline, "no channel up:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Served { _serve: serve, _proxy: proxy, metrics, control }
}

#[test]
fn metrics_endpoint_and_status_show_the_same_counters() {
    let served = serve_with_a_connection("metrics", &[], &[]);
    let before = parse_prometheus(&scrape(served.metrics));
    let status = status_samples(&served.control);
    let after = parse_prometheus(&scrape(served.metrics));

    let names_and_labels = |samples: &Samples| samples.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names_and_labels(&status), names_and_labels(&before), "same samples, same names and labels");
    assert_eq!(names_and_labels(&status), names_and_labels(&after));
    for (key, value) in &status {
        let (name, _) = key;
        if name.ends_with("_total") {
            // Keepalives go on between the three reads: counters only grow.
            assert!(
                before[key] <= *value && *value <= after[key],
                "{key:?}: {} <= {value} <= {}",
                before[key],
                after[key]
            );
        }
    }
    let connections = (String::from("tng_agent_connections"), BTreeMap::new());
    assert_eq!((before[&connections], status[&connections], after[&connections]), (1.0, 1.0, 1.0));
    let channel_sent = status.keys().filter(|(name, _)| name == "tng_agent_channel_sent_packets_total").count();
    assert_eq!(channel_sent, 1, "one channel of one connection");
    let received = (String::from("tng_agent_datagrams_received_total"), BTreeMap::new());
    assert!(status[&received] >= 3.0, "the handshake and the client's first packets were counted");

    // The text form of `tng status` prints the same lines.
    let out = Command::new(TNG).args(["status", "--control"]).arg(&served.control).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("  tng_agent_connections 1\n"), "{text}");
    assert!(text.contains("tng_agent_datagrams_dropped_total{reason=\"auth_failed\"} 0"), "{text}");

    let mut stream = TcpStream::connect(served.metrics).unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 404 Not Found"), "other paths: {response}");
}

#[test]
fn qlog_flag_writes_a_json_seq_trace_at_each_end() {
    let server_dir = temp_path("qlog-server");
    let client_dir = temp_path("qlog-client");
    let served = serve_with_a_connection(
        "qlog",
        &["--qlog".to_string(), server_dir.to_string_lossy().into_owned()],
        &["--qlog".to_string(), client_dir.to_string_lossy().into_owned()],
    );
    // Traces are flushed when the handshake completes and then at least every second (keepalives keep events
    // coming), so the expected events show up within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    for (dir, vantage) in [(&server_dir, "server"), (&client_dir, "client")] {
        loop {
            match check_trace(dir, vantage) {
                Ok(()) => break,
                Err(problem) if Instant::now() > deadline => panic!("{vantage}: {problem}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
    drop(served);
    let _ = std::fs::remove_dir_all(&server_dir);
    let _ = std::fs::remove_dir_all(&client_dir);
}

/// The one trace in `dir` is a JSON-SEQ qlog of the `vantage` end with packets both ways; else what is wrong.
fn check_trace(dir: &std::path::Path, vantage: &str) -> Result<(), String> {
    let files: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(|error| error.to_string())?.map(|entry| entry.expect("entry").path()).collect();
    let [file] = files.as_slice() else { return Err(format!("not one file: {files:?}")) };
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.ends_with(&format!("-{vantage}.sqlog")), "{name}");
    let bytes = std::fs::read(file).unwrap();
    if bytes.is_empty() {
        return Err("nothing flushed yet".into());
    }
    assert_eq!(bytes.first(), Some(&0x1e), "JSON-SEQ: a record separator first");
    let records: Vec<Value> = bytes
        .split(|&b| b == 0x1e)
        .skip(1)
        .filter(|record| record.ends_with(b"\n"))
        .map(|record| serde_json::from_slice(record).expect("JSON"))
        .collect();
    assert_eq!(records[0]["qlog_format"], "JSON-SEQ");
    assert_eq!(records[0]["trace"]["vantage_point"]["type"], vantage);
    assert_eq!(records[0]["trace"]["vantage_point"]["name"], "tng-agent");
    let reference = records[0]["trace"]["common_fields"]["reference_time"].as_f64().unwrap();
    assert!(reference > 1.7e12, "wall-clock reference time in ms since the epoch: {reference}");
    let names: Vec<&str> = records[1..].iter().filter_map(|record| record["name"].as_str()).collect();
    for expected in ["transport:packet_sent", "transport:packet_received", "connectivity:connection_state_updated"] {
        if !names.contains(&expected) {
            return Err(format!("no {expected} in {names:?}"));
        }
    }
    Ok(())
}
