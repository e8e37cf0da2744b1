//! The qlog files of a 2-path simulator run (`migration.toml`: the client's address on path 1 changes at 5 s) are
//! JSON-SEQ as qvis loads them, and every record validates against `testdata/qlog/tng-qlog.schema.json`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tng_qlog::{Clock, QlogDir};
use tng_sim::document::{load_scenario, Override};
use tng_sim::engine::{run, RunOptions};

const RECORD_SEPARATOR: u8 = 0x1e;

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").join(relative)
}

fn schema(part: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(repo_path("testdata/qlog/tng-qlog.schema.json")).expect("schema file");
    let mut schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    // Validate against one definition, keeping the others reachable for its references.
    schema["$ref"] = Value::String(format!("#/$defs/{part}"));
    jsonschema::validator_for(&schema).expect("schema compiles")
}

/// Runs migration.toml for 6 simulated seconds at a low rate with qlog into a fresh directory.
fn traced_run(name: &str) -> PathBuf {
    traced(name, "migration.toml", &["duration_s=6", "paths.0.rate_mbps=4", "paths.1.rate_mbps=4"])
}

/// Runs the scenario file `file` with `overrides` and qlog into a fresh directory.
fn traced(name: &str, file: &str, overrides: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tng-qlog-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let qlog = QlogDir::new(&dir, "tng-sim", Clock::Virtual).expect("qlog directory").into_config();
    let path = repo_path(&format!("host-agent/scenarios/{file}"));
    let overrides: Vec<Override> = overrides.iter().map(|text| Override::parse(text).expect("override")).collect();
    let scenario = load_scenario(&path, &overrides).expect("scenario");
    let base_dir = path.parent().expect("scenarios directory").to_path_buf();
    run(&scenario, &base_dir, RunOptions { qlog: Some(qlog), ..RunOptions::default() }).expect("run");
    dir
}

/// The records of a JSON-SEQ file: each starts with RS and ends with LF (RFC 7464).
fn records(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).expect("qlog file");
    assert_eq!(bytes.first(), Some(&RECORD_SEPARATOR), "{}: starts with a record separator", path.display());
    bytes[1..]
        .split(|&byte| byte == RECORD_SEPARATOR)
        .map(|record| {
            assert_eq!(record.last(), Some(&b'\n'), "every record ends with a line feed");
            serde_json::from_slice(record).expect("every record is one JSON text")
        })
        .collect()
}

#[test]
fn two_path_run_writes_schema_valid_json_seq_for_both_ends() {
    let dir = traced_run("schema");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).expect("qlog dir").map(|entry| entry.expect("entry").path()).collect();
    files.sort();
    let names: Vec<String> =
        files.iter().map(|file| file.file_name().expect("name").to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "one trace per connection end: {names:?}");
    assert!(names[0].ends_with("-client.sqlog") && names[1].ends_with("-server.sqlog"), "{names:?}");
    assert_eq!(names[0].split('-').next(), names[1].split('-').next(), "both named by the original connection id");

    let header_schema = schema("header");
    let event_schema = schema("event");
    for (file, vantage) in files.iter().zip(["client", "server"]) {
        let records = records(file);
        let header = &records[0];
        let errors: Vec<String> = header_schema.iter_errors(header).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: header: {errors:?}", file.display());
        // What qvis reads first to accept a JSON-SEQ file.
        assert_eq!(header["qlog_format"], "JSON-SEQ");
        assert_eq!(header["qlog_version"], "0.3");
        assert_eq!(header["trace"]["vantage_point"]["type"], vantage);
        assert!(header["trace"]["common_fields"].is_object());

        let mut names = BTreeSet::new();
        let mut channels_sent = BTreeSet::new();
        let mut previous_time = 0.0;
        for event in &records[1..] {
            let errors: Vec<String> = event_schema.iter_errors(event).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{}: {event}: {errors:?}", file.display());
            let time = event["time"].as_f64().expect("time");
            assert!(time >= previous_time, "events in time order: {time} after {previous_time}");
            previous_time = time;
            let name = event["name"].as_str().expect("name");
            if name == "transport:packet_sent" {
                channels_sent.insert(event["data"]["channel"].as_u64().expect("channel"));
            }
            names.insert(name.to_string());
        }
        assert!(previous_time > 5_000.0, "the trace covers the run past the address change at 5 s");
        assert_eq!(channels_sent, BTreeSet::from([0, 1]), "{vantage}: packets on both channels");
        for expected in [
            "connectivity:connection_started",
            "connectivity:connection_state_updated",
            "connectivity:migration_state_updated",
            "transport:packet_sent",
            "transport:packet_received",
            "recovery:metrics_updated",
            "recovery:congestion_state_updated",
            "tng:channel_updated",
        ] {
            assert!(names.contains(expected), "{vantage}: no {expected} in {names:?}");
        }
        if vantage == "server" {
            // The server sends the download: it sees its losses, and the client's move as a migration.
            assert!(names.contains("recovery:packet_lost"), "{names:?}");
            let migrated = records.iter().any(|event| event["data"]["state"] == "migration_complete");
            assert!(migrated, "the server moved channel 1 to the client's new address");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_split_download_traces_the_section_that_bounds_its_sender() {
    let dir = traced("section", "relay-dsl.toml", &["duration_s=4", "workload.bytes=2000000"]);
    let server = std::fs::read_dir(&dir)
        .expect("qlog dir")
        .map(|entry| entry.expect("entry").path())
        .find(|path| path.to_string_lossy().ends_with("-server.sqlog"))
        .expect("the server's trace");
    let event_schema = schema("event");
    let sections: Vec<Value> =
        records(&server).into_iter().filter(|event| event["name"] == "tng:section_updated").collect();
    assert!(sections.len() > 100, "the server's core section, traced as it changes: {} events", sections.len());
    for event in &sections {
        let errors: Vec<String> = event_schema.iter_errors(event).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{event}: {errors:?}");
        assert_eq!(
            (&event["data"]["remote"], &event["data"]["controller"]),
            (&"10.0.0.3:4477".into(), &"cubic".into())
        );
    }
    let windows: Vec<u64> =
        sections.iter().map(|event| event["data"]["congestion_window"].as_u64().expect("u64")).collect();
    let grown = windows.iter().max().expect("events") > windows.first().expect("events");
    assert!(grown, "the section's slow start shows: {:?}", &windows[..windows.len().min(20)]);
    let repeated = sections.windows(2).filter(|pair| pair[0]["data"] == pair[1]["data"]).count();
    assert_eq!(repeated, 0, "only changes are events");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_schema_rejects_what_the_writer_must_not_produce() {
    let event_schema = schema("event");
    let sent = serde_json::json!({
        "time": 1.5,
        "name": "transport:packet_sent",
        "data": {
            "channel": 1,
            "header": { "packet_type": "data", "packet_number": 7 },
            "raw": { "length": 1200 },
            "frames": [{ "frame_type": "stream", "stream_id": 0, "offset": 0, "length": 1150, "fin": false }],
        },
    });
    assert!(event_schema.is_valid(&sent));
    let mut no_channel = sent.clone();
    no_channel["data"].as_object_mut().expect("data").remove("channel");
    assert!(!event_schema.is_valid(&no_channel), "channel is required");
    let mut unknown = sent.clone();
    unknown["name"] = "transport:packet_teleported".into();
    assert!(!event_schema.is_valid(&unknown), "unknown event names are rejected");
    let mut bad_frame = sent.clone();
    bad_frame["data"]["frames"][0]["fin"] = "yes".into();
    assert!(!event_schema.is_valid(&bad_frame), "frame fields are typed");
    assert!(!schema("header").is_valid(&serde_json::json!({ "qlog_version": "0.3", "qlog_format": "JSON" })));
}
