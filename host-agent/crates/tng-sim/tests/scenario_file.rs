//! Scenario files: schema errors name the key, `--set` overrides reach any value.

use std::path::Path;

use tng_proto::CcKind;
use tng_relay::SectionControl;
use tng_sim::document::{parse_scenario, DocumentError, Override};
use tng_sim::link::QueueLimit;
use tng_sim::scenario::{Mode, WorkloadSpec};
use tng_sim::topology::NetworkPlan;

const BASE: &str = r#"
duration_s = 10
measure_after_s = 1
[workload]
kind = "bulk"
[[paths]]
name = "wifi"
rate_mbps = 20
delay_ms = 15
queue_bdp = 1.0
[[paths]]
name = "lte"
rate_mbps = 40
delay_ms = 5
[paths.downlink]
loss = 0.01
"#;

fn parse(text: &str, overrides: &[&str]) -> Result<tng_sim::scenario::Scenario, DocumentError> {
    let overrides: Vec<Override> = overrides.iter().map(|o| Override::parse(o).expect("override parses")).collect();
    parse_scenario(Path::new("test.toml"), text, &overrides)
}

#[test]
fn unknown_key_in_a_path_names_the_file_and_the_key() {
    let text = BASE.replace("rate_mbps = 20", "rat_mbps = 20");
    let message = parse(&text, &[]).expect_err("unknown key rejected").to_string();
    assert!(message.starts_with("test.toml: "), "{message}");
    assert!(message.contains("paths[0]") && message.contains("rat_mbps"), "{message}");
}

#[test]
fn unknown_top_level_and_workload_keys_are_rejected() {
    let message = parse(&format!("colour = 1\n{BASE}"), &[]).expect_err("rejected").to_string();
    assert!(message.contains("colour"), "{message}");
    let message =
        parse(&BASE.replace("kind = \"bulk\"", "kind = \"bulk\"\nsize = 3"), &[]).expect_err("rejected").to_string();
    assert!(message.contains("workload") && message.contains("size"), "{message}");
    let message = parse(&BASE.replace("loss = 0.01", "los = 0.01"), &[]).expect_err("rejected").to_string();
    assert!(message.contains("los"), "{message}");
}

#[test]
fn wrong_type_names_the_key() {
    let message = parse(BASE, &["duration_s=\"long\""]).expect_err("rejected").to_string();
    assert!(message.contains("duration_s"), "{message}");
}

#[test]
fn overrides_reach_nested_values_and_array_entries() {
    let scenario = parse(
        BASE,
        &["paths.0.rate_mbps=15", "mode=connection-per-flow", "transport.tlp=same-path", "workload.bytes=5"],
    )
    .expect("parses");
    assert_eq!(scenario.paths[0].links.both.rate_mbps, Some(15.0));
    assert_eq!(scenario.mode, Mode::ConnectionPerFlow);
    assert_eq!(scenario.transport.tlp.as_deref(), Some("same-path"));
    assert!(matches!(scenario.workload, WorkloadSpec::Bulk { bytes: Some(5) }));
}

#[test]
fn override_out_of_range_index_is_an_error() {
    let message = Override::parse("paths.7.rate_mbps=1")
        .expect("parses")
        .apply(&mut BASE.parse().expect("toml"))
        .expect_err("no path 7")
        .to_string();
    assert!(message.contains("paths.7") && message.contains("out of range"), "{message}");
}

#[test]
fn direction_overrides_win_and_bdp_queue_uses_the_path_rtt() {
    let scenario = parse(BASE, &[]).expect("parses");
    let plan = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect("valid");
    // 20 Mbit/s x 30 ms = 75 000 bytes.
    assert_eq!(plan.paths[0].downlink.params.queue_limit, QueueLimit::Bytes(75_000));
    assert_eq!(plan.paths[0].base_rtt, std::time::Duration::from_millis(30));
    assert_eq!(plan.paths[1].downlink.params.loss, tng_sim::loss::LossModel::Bernoulli(0.01));
    assert_eq!(plan.paths[1].uplink.params.loss, tng_sim::loss::LossModel::None);
}

#[test]
fn bad_values_name_the_key_and_the_problem() {
    let scenario = parse(BASE, &["paths.1.downlink.loss=1.5"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.1.downlink.loss");
    assert!(error.problem.contains("probability"), "{}", error.problem);

    let scenario = parse(BASE, &["paths.0.loss_steps=[{ from_s = 2.0, loss = 0.1 }, { from_s = 1.0, loss = 0.2 }]"])
        .expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.loss_steps.1.from_s");
    assert!(error.problem.contains("after the step before"), "{}", error.problem);
    let scenario = parse(BASE, &["paths.0.loss_steps=[{ from_s = 2.0, loss = 1.5 }]"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.loss_steps.0.loss");

    let scenario = parse(BASE, &["paths.0.rate_mbps=-3"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.rate_mbps");

    let scenario = parse(BASE, &["paths.0.relay={ toward_client_cc = \"vgeas\" }"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.relay.toward_client_cc");
    assert!(error.problem.contains("vgeas"), "{}", error.problem);
    let scenario = parse(BASE, &["paths.0.relay={ toward_server_cc = \"fixed:20\" }"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.relay.toward_server_cc");
    assert!(error.problem.contains("unit kbit, mbit or gbit"), "{}", error.problem);
    let scenario = parse(BASE, &["paths.0.relay={ queue_packets = 0 }"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.relay.queue_packets");
    let scenario = parse(BASE, &["paths.0.relay={ restarts_s = [2.0, -1.0] }"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.relay.restarts_s.1");
}

#[test]
fn a_relay_takes_its_defaults_and_rejects_unknown_keys() {
    let scenario = parse(BASE, &["paths.0.relay={}"]).expect("parses");
    let plan = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect("valid");
    let relay = plan.paths[0].relay.clone().expect("a relay on path 0").config;
    assert_eq!(
        (relay.toward_client, relay.toward_server, relay.queue_limit),
        (CcKind::Vegas.into(), CcKind::Cubic.into(), 64)
    );
    assert!(plan.paths[1].relay.is_none());
    let scenario = parse(BASE, &["paths.0.relay={ toward_server_cc = \"fixed:20mbit\" }"]).expect("parses");
    let plan = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect("valid");
    let relay = plan.paths[0].relay.clone().expect("a relay on path 0").config;
    assert_eq!(relay.toward_server, SectionControl::FixedRate(2_500_000));
    assert!(plan.paths[0].server_relay.is_none());
    let scenario = parse(BASE, &["paths.0.server_relay={ toward_client_cc = \"fixed:20mbit\" }"]).expect("parses");
    let plan = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect("valid");
    let beside_server = plan.paths[0].server_relay.clone().expect("a relay beside the server").config;
    assert_eq!(beside_server.toward_client, SectionControl::FixedRate(2_500_000));
    let scenario = parse(BASE, &["paths.0.server_relay={ queue_packets = 0 }"]).expect("parses");
    let error = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid");
    assert_eq!(error.key, "paths.0.server_relay.queue_packets");
    let error = parse(BASE, &["paths.0.relay={ queue = 3 }"]).expect_err("unknown key");
    assert!(error.to_string().contains("unknown field `queue`"), "{error}");
}

#[test]
fn cross_traffic_needs_a_known_bottleneck_controller_and_start_times() {
    let with_core = format!("{BASE}\n[bottlenecks.core]\nrate_mbps = 50\ndelay_ms = 10\n");
    let plan_error = |overrides: &[&str]| {
        let scenario = parse(&with_core, overrides).expect("parses");
        NetworkPlan::from_scenario(&scenario, Path::new(".")).expect_err("invalid")
    };
    let error = plan_error(&["cross_traffic=[{ bottleneck = \"edge\", start_s = [1.0] }]"]);
    assert_eq!(
        (error.key.as_str(), error.problem.as_str()),
        ("cross_traffic.0.bottleneck", "no [bottlenecks.edge] is defined")
    );
    let error = plan_error(&["cross_traffic=[{ bottleneck = \"core\", cc = \"reno2\", start_s = [1.0] }]"]);
    assert_eq!(error.key, "cross_traffic.0.cc");
    let error = plan_error(&["cross_traffic=[{ bottleneck = \"core\", start_s = [] }]"]);
    assert_eq!(error.key, "cross_traffic.0.start_s");
    let error = plan_error(&["cross_traffic=[{ bottleneck = \"core\", start_s = [1.0, -2.0] }]"]);
    assert_eq!(error.key, "cross_traffic.0.start_s.1");
    let error = parse(&with_core, &["cross_traffic=[{ bottleneck = \"core\", start_s = [1.0], rtt = 3 }]"])
        .expect_err("unknown key");
    assert!(error.to_string().contains("unknown field `rtt`"), "{error}");
}

#[test]
fn cross_flows_are_planned_in_start_order_with_their_entry() {
    let with_core = format!("{BASE}\n[bottlenecks.core]\nrate_mbps = 50\ndelay_ms = 10\n");
    let entries = "cross_traffic=[{ bottleneck = \"core\", cc = \"newreno\", start_s = [5.0, 1.0] }, \
                   { bottleneck = \"core\", start_s = [2.0] }]";
    let scenario = parse(&with_core, &[entries]).expect("parses");
    let plan = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect("valid");
    let flows: Vec<(u64, CcKind, usize)> =
        plan.cross_flows.iter().map(|flow| (flow.start.as_secs(), flow.cc, flow.group)).collect();
    assert_eq!(flows, [(1, CcKind::NewReno, 0), (2, CcKind::Cubic, 1), (5, CcKind::NewReno, 0)]);
}

#[test]
fn an_upload_needs_a_bulk_workload() {
    let short = "workload={ kind = \"short-flows\", parallel = 1, flows_per_requester = 1, size = \
                 { distribution = \"fixed\", bytes = 10 } }";
    let scenario = parse(BASE, &["direction=\"upload\"", short]).expect("parses");
    let error = tng_sim::topology::validate_scenario(&scenario).expect_err("invalid");
    assert_eq!(error.key, "direction");
    let scenario = parse(BASE, &["direction=\"upload\""]).expect("parses");
    tng_sim::topology::validate_scenario(&scenario).expect("a bulk upload is valid");
    let error = parse(BASE, &["direction=\"sideways\""]).expect_err("unknown direction");
    assert!(error.to_string().contains("sideways"), "{error}");
}

#[test]
fn every_shipped_scenario_file_is_valid() {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut checked = 0;
    for entry in std::fs::read_dir(&directory).expect("scenario directory") {
        let file = entry.expect("directory entry").path();
        if file.extension().is_none_or(|extension| extension != "toml") {
            continue;
        }
        let scenario = tng_sim::document::load_scenario(&file, &[]).unwrap_or_else(|error| panic!("{error}"));
        tng_sim::topology::validate_scenario(&scenario).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        NetworkPlan::from_scenario(&scenario, &directory).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        checked += 1;
    }
    // A floor, not an exact count, so adding a scenario does not break the test, yet a wrong directory does.
    assert!(checked >= 14, "only {checked} scenario files found in {}", directory.display());
}
