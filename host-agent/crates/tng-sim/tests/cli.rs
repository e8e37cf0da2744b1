//! The `tng-sim` binary: JSON output, overrides, determinism, error messages.

use std::path::Path;
use std::process::Command;

/// A small lossy two-path bulk run, cheap enough for a debug build.
const SMALL: &str = r#"
duration_s = 1.5
measure_after_s = 0.5
[workload]
kind = "bulk"
[[paths]]
name = "a"
rate_mbps = 2
delay_ms = 10
jitter_ms = 2
loss = 0.01
[[paths]]
name = "b"
rate_mbps = 1
delay_ms = 25
"#;

fn write_scenario(name: &str, text: &str) -> std::path::PathBuf {
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tng-sim-cli");
    std::fs::create_dir_all(&directory).expect("temporary directory");
    let path = directory.join(name);
    std::fs::write(&path, text).expect("scenario written");
    path
}

fn tng_sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tng-sim")).args(args).output().expect("tng-sim runs")
}

fn json_run(path: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["run", path.to_str().expect("utf-8 path"), "--json", "--deterministic"];
    args.extend_from_slice(extra);
    let output = tng_sim(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

#[test]
fn json_output_has_the_promised_fields_and_is_reproducible() {
    let path = write_scenario("small.toml", SMALL);
    let first = tng_sim(&["run", path.to_str().expect("utf-8"), "--json", "--deterministic"]);
    let second = tng_sim(&["run", path.to_str().expect("utf-8"), "--json", "--deterministic"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert_eq!(first.stdout, second.stdout, "same seed, same bytes");
    assert!(first.stderr.is_empty(), "no progress lines with --json");

    let report: serde_json::Value = serde_json::from_slice(&first.stdout).expect("JSON");
    for field in [
        "goodput_mbps",
        "fct_ms",
        "burst_completion_ms",
        "max_stall_ms",
        "app_bytes_sent",
        "app_bytes_delivered",
        "app_bytes_corrupted",
        "paths",
        "jain_fairness",
    ] {
        assert!(report.get(field).is_some(), "missing {field}");
    }
    for machine_dependent in ["events_per_sec", "steady_events_per_cpu_sec"] {
        assert!(report.get(machine_dependent).is_none(), "--deterministic leaves out {machine_dependent}");
    }
    assert_eq!(report["app_bytes_corrupted"], 0);
    assert!(report["goodput_mbps"].as_f64().expect("number") > 0.5);
    assert_eq!(report["paths"][0]["name"], "a");

    let other_seed = json_run(&path, &["--seed", "2"]);
    assert_ne!(other_seed, report, "another seed, other random decisions");
    // Long enough (some 10^4 events) that the thread's CPU time, which the kernel adds up at its ticks and context
    // switches, has moved during the measured part: the 1.5 s run can finish between two ticks on a fast host.
    let timed = tng_sim(&["run", path.to_str().expect("utf-8"), "--json", "--set", "duration_s=20"]);
    let timed: serde_json::Value = serde_json::from_slice(&timed.stdout).expect("JSON");
    assert!(timed["events_per_sec"].as_f64().is_some_and(|rate| rate > 0.0));
    assert!(
        timed["steady_events_per_cpu_sec"].as_f64().is_some_and(|rate| rate > 0.0),
        "the events after measure_after_s have a CPU cost: {timed}"
    );
}

#[test]
fn overrides_change_the_run() {
    let path = write_scenario("override.toml", SMALL);
    let single = json_run(&path, &["--set", "mode=single-path", "--set", "paths.0.loss=0.0"]);
    assert_eq!(single["mode"], "single-path");
    assert_eq!(single["paths"][1]["sent_packets"], 0, "single-path mode never uses path 1");
    let shorter = json_run(&path, &["--duration", "1"]);
    assert!((shorter["simulated_s"].as_f64().expect("number") - 1.0).abs() < 1e-9);
}

#[test]
fn errors_name_the_file_and_the_key() {
    let path = write_scenario("typo.toml", &SMALL.replace("jitter_ms", "jiter_ms"));
    let output = tng_sim(&["run", path.to_str().expect("utf-8"), "--json"]);
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("typo.toml") && message.contains("jiter_ms"), "{message}");

    let path = write_scenario("bad-value.toml", SMALL);
    let output = tng_sim(&["run", path.to_str().expect("utf-8"), "--set", "paths.1.loss=2"]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(message.contains("bad-value.toml") && message.contains("paths.1.loss"), "{message}");

    let output = tng_sim(&["run", path.to_str().expect("utf-8"), "--set", "transport.cc=warp"]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("transport.cc") && message.contains("warp"), "{message}");

    let output = tng_sim(&["run", path.to_str().expect("utf-8"), "--set", "clients=100000"]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(message.contains("clients") && message.contains("at most 62976"), "{message}");
}

#[test]
fn a_timeline_gives_goodput_and_the_servers_rtt_per_interval() {
    let path = write_scenario("timeline.toml", SMALL);
    let report = json_run(&path, &["--timeline", "500"]);
    let timeline = report["timeline"].as_array().expect("a timeline");
    let ends: Vec<f64> = timeline.iter().map(|point| point["t_s"].as_f64().expect("t_s")).collect();
    assert_eq!(ends, [0.5, 1.0, 1.5]);
    // The intervals after the first together carry what the report's goodput counts from 0.5 s on.
    let later: f64 = timeline[1..].iter().map(|point| point["goodput_mbps"].as_f64().expect("goodput")).sum();
    let total = report["goodput_mbps"].as_f64().expect("goodput");
    assert!((later / 2.0 - total).abs() < 1e-6, "{later} / 2 against {total}");
    assert!(timeline.iter().all(|point| point["sender_srtt_ms"].as_f64().is_some_and(|srtt| srtt >= 20.0)));
    assert!(json_run(&path, &[]).get("timeline").is_none(), "no timeline unless asked for");

    let output = tng_sim(&["run", path.to_str().expect("utf-8"), "--timeline", "250"]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(message.contains("--timeline 250") && message.contains("multiple of 100ms"), "{message}");
}

#[test]
fn an_upload_delivers_every_byte_to_the_server_over_the_uplinks() {
    let path = write_scenario("upload.toml", SMALL);
    let upload = ["--set", "direction=\"upload\"", "--set", "workload.bytes=60000", "--set", "paths.0.loss=0.0"];
    // Fast downlinks carry only the server's acknowledgements: what the report calls utilized is the uplinks.
    let fast_downlinks = ["--set", "paths.0.downlink.rate_mbps=100", "--set", "paths.1.downlink.rate_mbps=100"];
    let report = json_run(&path, &[&upload[..], &fast_downlinks[..]].concat());
    assert_eq!(report["workload_completed"], true, "{report}");
    assert_eq!(report["app_bytes_sent"], 60_000);
    assert_eq!(report["app_bytes_delivered"], 60_000);
    assert_eq!(report["app_bytes_corrupted"], 0);
    assert_eq!(report["failed_transfers"], 0);
    for path in 0..2 {
        let utilization = report["paths"][path]["utilization"].as_f64().expect("utilization");
        assert!(utilization > 0.2, "path {path}: {utilization}");
    }
}

#[test]
fn without_relays_runs_every_path_end_to_end() {
    let relayed = format!("{SMALL}bottleneck = \"core\"\nrelay = {{}}\n[bottlenecks.core]\nrate_mbps = 20\n");
    let path = write_scenario("relayed.toml", &relayed);
    assert!(json_run(&path, &[])["paths"][1]["relay"]["forwarded"].as_u64().is_some_and(|n| n > 0));
    assert!(json_run(&path, &["--without-relays"])["paths"][1].get("relay").is_none(), "end to end");
}

#[test]
fn summary_and_progress_without_json() {
    let path = write_scenario("summary.toml", SMALL);
    let output = tng_sim(&["run", path.to_str().expect("utf-8"), "--quiet"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("goodput") && text.contains("path a"), "{text}");
}

#[test]
fn bench_reports_events_per_second() {
    let output = tng_sim(&["bench", "--duration", "0.2", "--json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(result["events_per_sec"].as_f64().is_some_and(|rate| rate > 0.0));
    assert!(result["events"].as_u64().is_some_and(|events| events > 0));
}

#[test]
fn the_channel_log_has_a_line_per_channel_per_relayed_direction_and_per_section_end() {
    let relayed = r#"
duration_s = 1.0
[workload]
kind = "bulk"
[[paths]]
name = "dsl"
rate_mbps = 5
delay_ms = 10
bottleneck = "core"
relay = { toward_client_cc = "vegas", toward_server_cc = "cubic", queue_packets = 32 }
[bottlenecks.core]
rate_mbps = 20
delay_ms = 20
"#;
    let path = write_scenario("relayed.toml", relayed);
    let output = tng_sim(&["run", path.to_str().expect("utf-8"), "--quiet", "--channel-log", "500"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}")))
        .collect();
    let channels = lines.iter().filter(|line| line.get("channel").is_some()).count();
    let relay: Vec<&serde_json::Value> = lines.iter().filter(|line| line.get("relay").is_some()).collect();
    assert!(channels >= 2, "the server's and the client's channel every 500 ms: {channels}");
    for direction in ["toward_server", "toward_client"] {
        let line = relay.iter().find(|line| line["direction"] == direction).expect("a line per direction");
        assert_eq!(line["relay"], "10.0.0.3:4477");
        for field in ["queued", "head_wait_ms", "cc", "cwnd", "bytes_in_flight", "received", "queue_full", "lost"] {
            assert!(line.get(field).is_some(), "{field} in {line}");
        }
    }
    let down = relay.iter().rev().find(|line| line["direction"] == "toward_client").expect("downloading");
    assert_eq!(down["cc"], "vegas");
    assert!(down["forwarded"].as_u64() > Some(0), "{down}");
    // The server's end of its core section: the controller that bounds the download's sender.
    let section_ends: Vec<&serde_json::Value> = lines.iter().filter(|line| line.get("section").is_some()).collect();
    let server = section_ends.iter().rev().find(|line| line["host"] == "server").expect("the server's section end");
    assert_eq!((&server["section"], &server["cc"]), (&serde_json::json!("10.0.0.3:4477"), &serde_json::json!("cubic")));
    assert!(server["cwnd"].as_u64() > Some(0) && server["srtt_ms"].as_f64() > Some(40.0), "{server}");
    for field in ["waiting", "bytes_in_flight", "min_rtt_ms", "lost"] {
        assert!(server.get(field).is_some(), "{field} in {server}");
    }
}
