//! One test per shipped scenario file, asserting the target it states (docs/simulator.md).
//!
//! Heavy: they simulate the files' full durations (up to 60 s of traffic) through the real protocol, so they are
//! ignored in unoptimized builds; `make test` (profile `ci`) and `cargo test --release -p tng-sim` run them (about a
//! minute on two cores). `TNG_SIM_SEED=N` runs every file with seed N instead of its own, so that the targets can be
//! checked beyond the seed they were measured at.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tng_proto::qlog::{QlogConfig, QlogEvent, QlogFactory, QlogSink, TraceStart};
use tng_proto::streams::Side;
use tng_proto::Time;

use tng_sim::document::{load_scenario, parse_scenario, Override};
use tng_sim::engine::{run, RunOptions};
use tng_sim::report::{build_report, LevelReport, Report};
use tng_sim::scenario::Direction;
use tng_sim::topology::NetworkPlan;

fn scenario_path(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(file)
}

/// `overrides` parsed, with `seed=N` last when `TNG_SIM_SEED` is set.
fn parse_overrides(overrides: &[&str]) -> Vec<Override> {
    let seed = std::env::var("TNG_SIM_SEED").ok().map(|seed| {
        let seed: u64 = seed.parse().unwrap_or_else(|_| panic!("TNG_SIM_SEED={seed:?} is not a seed (an integer)"));
        format!("seed={seed}")
    });
    overrides
        .iter()
        .copied()
        .chain(seed.as_deref())
        .map(|text| Override::parse(text).expect("valid override"))
        .collect()
}

fn run_scenario(file: &str, overrides: &[&str]) -> Report {
    run_scenario_with(file, overrides, RunOptions::default())
}

fn run_scenario_with(file: &str, overrides: &[&str], options: RunOptions) -> Report {
    let path = scenario_path(file);
    let overrides = parse_overrides(overrides);
    let scenario = load_scenario(&path, &overrides).unwrap_or_else(|error| panic!("{error}"));
    let base_dir = path.parent().expect("scenario directory").to_path_buf();
    let outcome = run(&scenario, &base_dir, options).unwrap_or_else(|error| panic!("{error}"));
    let report = build_report(file, &outcome, false);
    eprintln!("{file} {overrides:?}:\n{}", report.summary());
    report
}

/// What every run must satisfy: intact content, and every byte delivered once the workload completed.
fn assert_integrity(report: &Report) {
    assert_eq!(report.app_bytes_corrupted, 0, "corrupted bytes");
    assert_eq!(report.failed_transfers, 0, "failed transfers");
    if report.workload_completed {
        assert_eq!(report.app_bytes_delivered, report.app_bytes_sent, "delivered != sent");
    }
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn aggregation_reaches_ninety_percent_of_the_summed_capacity() {
    let report = run_scenario("aggregation.toml", &[]);
    assert_integrity(&report);
    assert!(report.goodput_mbps >= 0.90 * 60.0, "goodput {:.2} Mbit/s", report.goodput_mbps);
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn heterogeneous_paths_reach_ninety_percent_of_the_summed_capacity() {
    let report = run_scenario("heterogeneous.toml", &[]);
    assert_integrity(&report);
    assert!(report.goodput_mbps >= 0.90 * 60.0, "goodput {:.2} Mbit/s", report.goodput_mbps);
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn short_flows_finish_in_half_the_time_of_a_connection_per_flow() {
    let tng = run_scenario("shortflows.toml", &[]);
    let per_flow = run_scenario("shortflows.toml", &["mode=connection-per-flow"]);
    for report in [&tng, &per_flow] {
        assert_integrity(report);
        assert!(report.workload_completed);
        assert_eq!(report.fct_ms.count, 1000);
    }
    assert!(
        tng.fct_ms.mean <= 0.5 * per_flow.fct_ms.mean,
        "mean FCT: tng {:.1} ms, connection per flow {:.1} ms",
        tng.fct_ms.mean,
        per_flow.fct_ms.mean
    );
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn one_long_flow_uses_ninety_five_percent_of_one_path() {
    let report = run_scenario("longflow.toml", &[]);
    assert_integrity(&report);
    assert!(report.goodput_mbps >= 0.95 * 50.0, "goodput {:.2} Mbit/s", report.goodput_mbps);
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn a_dead_path_costs_at_most_one_second_of_stall() {
    // As written (the slower path dies), and with the faster one dying beside a 100 ms one: the receiver's credit
    // updates then went to the dead path, whose failure their sends postponed (4.4 s of stall before probe timeouts
    // counted from progress).
    for delays in [[].as_slice(), &["paths.0.delay_ms=50", "paths.1.delay_ms=5"]] {
        let report = run_scenario("path-failure.toml", delays);
        assert_integrity(&report);
        assert!(report.workload_completed, "the transfer did not finish ({delays:?})");
        assert!(report.max_stall_ms <= 1000.0, "stall {:.1} ms ({delays:?})", report.max_stall_ms);
    }
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn an_address_change_stalls_for_at_most_three_rtts_and_a_probe_timeout() {
    let report = run_scenario("migration.toml", &[]);
    assert_integrity(&report);
    assert!(report.workload_completed, "the connection did not carry the transfer to its end");
    assert_eq!(report.handshakes, 1, "the connection must survive, not be replaced");

    // The bound uses the loaded RTT of the migrating path: its propagation RTT plus a full 1-BDP queue (twice the
    // base RTT), and RFC 9002's probe timeout for it: srtt + 4 rttvar (rttvar = srtt/2 as after the first sample)
    // + the peer's 25 ms maximum ACK delay.
    let scenario = load_scenario(&scenario_path("migration.toml"), &[]).expect("valid");
    let plan = NetworkPlan::from_scenario(&scenario, Path::new(".")).expect("valid");
    let rtt = 2 * plan.paths[1].base_rtt;
    let pto = rtt + 4 * (rtt / 2) + Duration::from_millis(25);
    let bound = 3 * rtt + pto;
    assert!(
        report.max_stall_ms <= bound.as_secs_f64() * 1000.0,
        "stall {:.1} ms, bound {:?}",
        report.max_stall_ms,
        bound
    );
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn probing_on_the_alternate_path_cuts_tail_loss_burst_completion() {
    let alternate = run_scenario("tail-loss.toml", &["transport.tlp=alternate-path"]);
    let same = run_scenario("tail-loss.toml", &["transport.tlp=same-path"]);
    for report in [&alternate, &same] {
        assert_integrity(report);
        assert!(report.workload_completed);
        assert_eq!(report.burst_completion_ms.count, 20);
        // The loss pattern was applied in full: two packets of every burst.
        assert_eq!(report.network.tail_drops, 40, "tail drops");
        assert_eq!(report.network.tail_drops_missed, 0);
    }
    assert!(
        alternate.burst_completion_ms.mean <= 0.7 * same.burst_completion_ms.mean,
        "mean burst completion: alternate-path {:.1} ms, same-path {:.1} ms",
        alternate.burst_completion_ms.mean,
        same.burst_completion_ms.mean
    );
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn a_burst_that_fits_the_fast_path_waits_for_its_pacer_not_for_the_slow_path() {
    // The ack-clocked scheduler sends where a packet arrives first, counting the wait for each path's pacer: once
    // B's window holds a burst, no packet of it crosses A (100 ms RTT), so none is lost there, and each burst
    // completes in about B's round trip and its serialization (before the pacer's wait counted: 191.8 ms, the tail
    // of every burst on A).
    let report = run_scenario("tail-loss.toml", &["transport.scheduler=\"ack-clocked\""]);
    assert_integrity(&report);
    assert!(report.workload_completed);
    assert_eq!(report.burst_completion_ms.count, 20);
    assert!(report.network.tail_drops <= 4, "tails on A: {} packets lost", report.network.tail_drops);
    assert!(
        report.burst_completion_ms.mean <= 100.0,
        "mean burst completion {:.1} ms, A's RTT alone is 100 ms",
        report.burst_completion_ms.mean
    );
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn two_connections_share_a_bottleneck_fairly() {
    let report = run_scenario("fairness.toml", &[]);
    assert_integrity(&report);
    assert_eq!(report.client_goodput_mbps.len(), 2);
    assert!(report.jain_fairness >= 0.95, "Jain index {:.3}: {:?}", report.jain_fairness, report.client_goodput_mbps);
}

/// The server's smoothed RTT after each of its metrics updates.
type SrttLog = Arc<Mutex<Vec<(Time, Duration)>>>;

struct SrttRecorder(SrttLog);

impl QlogSink for SrttRecorder {
    fn emit(&mut self, now: Time, event: &QlogEvent<'_>) {
        if let QlogEvent::MetricsUpdated(metrics) = event {
            self.0.lock().expect("log").push((now, metrics.smoothed_rtt));
        }
    }
}

/// Records the smoothed RTT of the connection ends on one side.
struct SideSrtt(Side, SrttLog);

impl QlogFactory for SideSrtt {
    fn start(&self, trace: &TraceStart) -> Option<Box<dyn QlogSink>> {
        (trace.side == self.0).then(|| Box::new(SrttRecorder(self.1.clone())) as Box<dyn QlogSink>)
    }
}

/// The server's smoothed RTT every 20 ms from `from` on (the latest value at each instant), sorted.
fn srtt_samples(log: &SrttLog, from: Duration) -> Vec<Duration> {
    srtt_samples_between(log, from, Duration::MAX)
}

/// The same in [`from`, `to`).
fn srtt_samples_between(log: &SrttLog, from: Duration, to: Duration) -> Vec<Duration> {
    let log = log.lock().expect("log");
    let end = log.last().map_or(Time::ZERO, |(at, _)| *at);
    let mut samples = Vec::new();
    let mut index = 0;
    let mut at = Time::ZERO + from;
    while at <= end && at - Time::ZERO < to {
        while index + 1 < log.len() && log[index + 1].0 <= at {
            index += 1;
        }
        samples.push(log[index].1);
        at += Duration::from_millis(20);
    }
    samples.sort();
    samples
}

fn p95(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() * 95 / 100]
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn sprout_keeps_its_delay_near_the_target_on_a_cellular_trace() {
    let log = SrttLog::default();
    let options =
        RunOptions { qlog: Some(QlogConfig(Arc::new(SideSrtt(Side::Server, log.clone())))), ..RunOptions::default() };
    let report = run_scenario_with("cellular.toml", &["transport.cc=\"sprout\""], options);
    assert_integrity(&report);
    let utilization = report.paths[0].utilization;
    let samples = srtt_samples(&log, Duration::from_secs(2));
    let p95 = p95(&samples);
    eprintln!("sprout: utilization {utilization:.3}, p95 SRTT {p95:?} over {} samples", samples.len());
    assert!(utilization >= 0.9, "sprout used {utilization:.3} of the trace");
    // 40 ms propagation RTT + Sprout's 100 ms queueing target + one 20 ms tick of forecast age.
    assert!(p95 <= Duration::from_millis(160), "p95 SRTT {p95:?}");
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn copa_uses_ninety_percent_of_a_cellular_trace() {
    let report = run_scenario("cellular.toml", &[]);
    assert_integrity(&report);
    let utilization = report.paths[0].utilization;
    assert!(utilization >= 0.9, "copa used {utilization:.3} of the trace");
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn two_copa_channels_through_one_bottleneck_queue_no_more_than_one_path() {
    let queueing = |overrides: &[&str]| {
        let log = SrttLog::default();
        let options = RunOptions {
            qlog: Some(QlogConfig(Arc::new(SideSrtt(Side::Server, log.clone())))),
            ..RunOptions::default()
        };
        let report = run_scenario_with("shared-bottleneck.toml", overrides, options);
        assert_integrity(&report);
        assert!(report.goodput_mbps >= 0.9 * 20.0, "{overrides:?}: goodput {:.2} Mbit/s", report.goodput_mbps);
        let samples = srtt_samples(&log, Duration::from_secs(5));
        // The propagation RTT is 2 x (5 + 10) ms: the rest of the median SRTT is queueing.
        samples[samples.len() / 2].saturating_sub(Duration::from_millis(30))
    };
    let (both, one) = (queueing(&[]), queueing(&["mode=\"single-path\""]));
    eprintln!("median queueing at the bottleneck: two paths {both:?}, one path {one:?}");
    // Uncoupled, the two channels kept twice the single path's queue (15 against 7.6 ms).
    assert!(both <= one * 13 / 10, "two paths queue {both:?}, one path {one:?}");
}

/// Runs `file` as written and without its relay (its `relay = ...` line removed), with the server's SRTT samples
/// from `measure_after_s` on.
fn with_and_without_relay(file: &str) -> [(Report, Vec<Duration>); 2] {
    let scenario = load_scenario(&scenario_path(file), &[]).unwrap_or_else(|error| panic!("{error}"));
    let measure_after = Duration::from_secs_f64(scenario.measure_after_s);
    [true, false].map(|relayed| {
        let (report, log) = run_logged(file, relayed, &[]);
        (report, srtt_samples(&log, measure_after))
    })
}

/// Runs `file` (without its `relay = ...` and `server_relay = ...` lines unless `relayed`) with `overrides`, logging
/// the data sender's SRTT (the server's, or the client's in an upload).
fn run_logged(file: &str, relayed: bool, overrides: &[&str]) -> (Report, SrttLog) {
    let path = scenario_path(file);
    let text = std::fs::read_to_string(&path).expect("scenario file");
    let is_relay = |line: &str| line.starts_with("relay = ") || line.starts_with("server_relay = ");
    let without: String = text.lines().filter(|line| !is_relay(line)).collect::<Vec<_>>().join("\n");
    assert_ne!(without.lines().count(), text.lines().count(), "{file} has a relay line");
    let document = if relayed { text } else { without };
    let overrides = parse_overrides(overrides);
    let base_dir = path.parent().expect("scenario directory").to_path_buf();
    let scenario = parse_scenario(&path, &document, &overrides).unwrap_or_else(|error| panic!("{error}"));
    let log = SrttLog::default();
    let sender = if scenario.direction == Direction::Upload { Side::Client } else { Side::Server };
    let options =
        RunOptions { qlog: Some(QlogConfig(Arc::new(SideSrtt(sender, log.clone())))), ..RunOptions::default() };
    let outcome = run(&scenario, &base_dir, options).unwrap_or_else(|error| panic!("{error}"));
    let report = build_report(file, &outcome, false);
    eprintln!("{file} (relay {relayed}) {overrides:?}:\n{}", report.summary());
    (report, log)
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn a_relay_keeps_the_dsl_buffer_empty_without_costing_goodput() {
    let [(split, split_srtt), (end_to_end, end_to_end_srtt)] = with_and_without_relay("relay-dsl.toml");
    for report in [&split, &end_to_end] {
        assert_integrity(report);
        assert!(report.workload_completed, "the download finished");
    }
    let relay = split.paths[0].relay.expect("the relay's counters");
    assert!(relay.forwarded >= 10_000_000 / 1429, "every data packet crossed the relay: {relay:?}");
    assert!(end_to_end.paths[0].relay.is_none());
    let (split_p95, end_to_end_p95) = (p95(&split_srtt), p95(&end_to_end_srtt));
    eprintln!(
        "split: {:.2} Mbit/s, p95 SRTT {split_p95:?}; end to end: {:.2} Mbit/s, p95 SRTT {end_to_end_p95:?}",
        split.goodput_mbps, end_to_end.goodput_mbps
    );
    // Tng's targets (seed 004's DSL experiment): at least 0.95 x the goodput at no more than 0.2 x the delay.
    assert!(split.goodput_mbps >= 0.95 * end_to_end.goodput_mbps, "split goodput {:.2}", split.goodput_mbps);
    assert!(split_p95 * 5 <= end_to_end_p95, "p95 SRTT split {split_p95:?}, end to end {end_to_end_p95:?}");
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn a_relay_restarted_mid_transfer_loses_nothing() {
    let report = run_scenario("relay-dsl.toml", &["paths.0.relay.restarts_s=[3.0]"]);
    assert_integrity(&report);
    assert!(report.workload_completed, "the download finished through the restarted relay");
    assert_eq!(report.failed_connections, 0, "the connection survived the restart");
    // The restart loses the packets the relay held; the end-to-end layer recovers them within a few round trips.
    assert!(report.max_stall_ms < 1_000.0, "longest stall {:.0} ms", report.max_stall_ms);
}

/// One cross-traffic level of a relayed file's three runs: goodput and the data sender's p95 SRTT.
#[derive(Clone, Copy, Debug)]
struct Level {
    split_mbps: f64,
    split_p95: Duration,
    cubic_mbps: f64,
    cubic_p95: Duration,
    vegas_mbps: f64,
}

/// Runs `file` as written (the split flow), without its relay line with CUBIC and with Vegas (end to end), and
/// returns their levels side by side after checking that every run delivered intact bytes beside four cross flows.
fn split_and_end_to_end_levels(file: &str) -> Vec<Level> {
    let (split, split_log) = run_logged(file, true, &[]);
    let (cubic, cubic_log) = run_logged(file, false, &["transport.cc=\"cubic\""]);
    let (vegas, _) = run_logged(file, false, &["transport.cc=\"vegas\""]);
    for report in [&split, &cubic, &vegas] {
        assert_integrity(report);
        assert_eq!(report.cross_traffic.len(), 4, "four cross-traffic flows ran");
        assert_eq!(report.levels.len(), 5, "no cross traffic, then one to four flows");
    }
    let span = |level: &LevelReport| (Duration::from_secs_f64(level.from_s), Duration::from_secs_f64(level.to_s));
    let mut levels = Vec::new();
    for ((split_level, cubic_level), vegas_level) in split.levels.iter().zip(&cubic.levels).zip(&vegas.levels) {
        assert_eq!(span(split_level), span(cubic_level));
        let (from, to) = span(cubic_level);
        let level = Level {
            split_mbps: split_level.goodput_mbps,
            split_p95: p95(&srtt_samples_between(&split_log, from, to)),
            cubic_mbps: cubic_level.goodput_mbps,
            cubic_p95: p95(&srtt_samples_between(&cubic_log, from, to)),
            vegas_mbps: vegas_level.goodput_mbps,
        };
        eprintln!(
            "{file}, {} cross flow(s): split {:.2} Mbit/s ({:.3} x), p95 SRTT {:?} ({:.3} x); end-to-end cubic {:.2} \
             Mbit/s, p95 SRTT {:?}; end-to-end vegas {:.2} Mbit/s",
            cubic_level.cross_flows,
            level.split_mbps,
            level.split_mbps / level.cubic_mbps,
            level.split_p95,
            level.split_p95.as_secs_f64() / level.cubic_p95.as_secs_f64(),
            level.cubic_mbps,
            level.cubic_p95,
            level.vegas_mbps,
        );
        levels.push(level);
    }
    levels
}

/// What Tng's Figures 5 and 6 show of the end-to-end schemes: CUBIC keeps the DSL's rate at every level, behind a
/// full DSL buffer up to level `cubic_fills_the_dsl_through`; Vegas matches it alone and gives its share up to
/// loss-based cross traffic, to under 0.6 x CUBIC's from level `vegas_gives_up_at` and under 0.5 x beside four flows.
/// Once the cross flows fill the core's queue (from the first, since their receive windows grow to its
/// bandwidth-delay product), Vegas's remainder only wobbles (0.27-0.38 Mbit/s, 3-4 % of the DSL): from one level to
/// the next it must not regain more than a third of it or 2 % of CUBIC's rate, whichever is more.
fn assert_end_to_end_schemes_behave_as_the_papers(
    levels: &[Level],
    cubic_fills_the_dsl_through: usize,
    vegas_gives_up_at: usize,
) {
    for (index, level) in levels.iter().enumerate() {
        assert!(level.cubic_mbps >= 0.95 * levels[0].cubic_mbps, "cubic at level {index}");
        if index <= cubic_fills_the_dsl_through {
            assert!(level.cubic_p95 >= Duration::from_millis(400), "cubic at level {index}: {:?}", level.cubic_p95);
        }
        if index == 0 {
            assert!(level.vegas_mbps >= 0.9 * level.cubic_mbps, "vegas alone");
        } else {
            let before = levels[index - 1].vegas_mbps;
            let regained = level.vegas_mbps - before;
            assert!(
                regained <= (before / 3.0).max(0.02 * level.cubic_mbps),
                "vegas's share regrew at level {index}: {before:.2} -> {:.2} Mbit/s",
                level.vegas_mbps
            );
        }
        if index >= vegas_gives_up_at {
            assert!(level.vegas_mbps <= 0.6 * level.cubic_mbps, "vegas at level {index}");
        }
    }
    let last = levels.last().expect("levels");
    assert!(last.vegas_mbps <= 0.5 * last.cubic_mbps, "vegas beside four flows");
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn core_cross_traffic_takes_end_to_end_vegas_share_but_the_split_download_keeps_rate_and_delay() {
    let levels = split_and_end_to_end_levels("relay-dsl-cross.toml");
    assert_end_to_end_schemes_behave_as_the_papers(&levels, 4, 1);
    assert!(levels[4].vegas_mbps <= 0.1 * levels[4].cubic_mbps, "vegas beside four flows");
    for (index, level) in levels.iter().enumerate() {
        // Tng's targets (0.95 x the goodput, 0.2 x the delay) hold without cross traffic; with it, the core
        // section's back-offs drain the relay's queue (most after the first cross flow's slow start, 0.73 x) and the
        // core queue the cross traffic fills is in both runs' delay (docs/simulator.md). What every level keeps:
        assert!(level.split_mbps >= 0.7 * level.cubic_mbps, "split goodput at level {index}");
        assert!(level.split_p95.as_secs_f64() <= 0.35 * level.cubic_p95.as_secs_f64(), "split delay, level {index}");
        if index == 0 {
            assert!(level.split_mbps >= 0.95 * level.cubic_mbps, "split goodput without cross traffic");
            assert!(level.split_p95 * 5 <= level.cubic_p95, "split p95 SRTT without cross traffic");
        }
    }
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn core_cross_traffic_takes_end_to_end_vegas_share_but_the_split_upload_keeps_rate_and_delay() {
    let levels = split_and_end_to_end_levels("relay-dsl-up-cross.toml");
    assert_end_to_end_schemes_behave_as_the_papers(&levels, 4, 1);
    for (index, level) in levels.iter().enumerate() {
        // The split flow pays for its SECTION framing on the uplink it fills (its end-to-end datagrams are capped
        // at 1,429 bytes to fit a SECTION, against 1,472 end to end), so it stays just under Tng's 0.95 x; its
        // delay is at most 0.2 x end-to-end CUBIC's alone and grows with the core queue the cross traffic fills.
        assert!(level.split_mbps >= 0.9 * level.cubic_mbps, "split goodput at level {index}");
        assert!(level.split_p95.as_secs_f64() <= 0.3 * level.cubic_p95.as_secs_f64(), "split delay, level {index}");
    }
    assert!(levels[0].split_p95 * 5 <= levels[0].cubic_p95, "split p95 SRTT without cross traffic");
}

#[test]
#[cfg_attr(unoptimized, ignore = "heavy: needs an optimized build (make test, or cargo test --release)")]
fn a_fixed_rate_wan_section_keeps_the_split_flow_at_the_wan_rate_as_random_loss_grows() {
    const WAN_MBPS: f64 = 20.0;
    for (cc, direction) in [("newreno", "upload"), ("vegas", "upload"), ("newreno", "download")] {
        // The sending end of the first section runs the transport's controller (the client's in an upload).
        let overrides = [format!("transport.cc=\"{cc}\""), format!("direction=\"{direction}\"")];
        let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
        let (split, _) = run_logged("relay-lossy-wan.toml", true, &overrides);
        let (end_to_end, _) = run_logged("relay-lossy-wan.toml", false, &overrides);
        for report in [&split, &end_to_end] {
            assert_integrity(report);
            assert!(report.network.random_drops > 0, "the WAN lost packets");
            assert_eq!(report.levels.len(), 7, "seven loss rates, 10 s each");
        }
        for relay in [split.paths[0].relay, split.paths[0].server_relay] {
            assert!(relay.expect("both relays' counters").forwarded > 100_000, "{relay:?}");
        }
        for (index, (split_level, end_level)) in split.levels.iter().zip(&end_to_end.levels).enumerate() {
            let loss = split_level.random_loss.expect("every level has a loss rate");
            assert_eq!(Some(loss), end_level.random_loss);
            eprintln!(
                "{cc} {direction}, random loss {:.2} %: split {:.2} Mbit/s, end to end {:.2} Mbit/s ({:.1} x)",
                loss * 100.0,
                split_level.goodput_mbps,
                end_level.goodput_mbps,
                split_level.goodput_mbps / end_level.goodput_mbps
            );
            // The WAN section neither ramps up nor backs off: the split flow keeps the WAN's rate (less framing and
            // what the end-to-end layer resends) at every loss rate. End to end, the client's controller reads
            // each random loss as congestion (Tng's Figure 10). A 10 s step holds only a few dozen of those losses
            // at 100 ms of RTT, so the end-to-end rate of one step is noisy (seeds 1-10: 3.1-7.1 Mbit/s at 0.1 %):
            // it must fall by the time the loss rate has quadrupled (two steps on), and the split flow's lead is
            // asserted at 2 x from 0.1 % (seeds 1-10: at least 2.6 x) and 3 x from 0.2 % (at least 4.4 x).
            assert!(split_level.goodput_mbps >= 0.85 * WAN_MBPS, "split at {loss}");
            if index == 0 {
                assert!(split_level.goodput_mbps >= 0.95 * end_level.goodput_mbps, "split without loss");
            }
            if index >= 2 {
                let before = end_to_end.levels[index - 2].goodput_mbps;
                assert!(
                    end_level.goodput_mbps < before,
                    "end-to-end {cc} at {loss}: {before:.2} Mbit/s two steps before"
                );
            }
            if loss >= 0.001 {
                let lead = if loss < 0.002 { 2.0 } else { 3.0 };
                assert!(split_level.goodput_mbps >= lead * end_level.goodput_mbps, "split against {cc} at {loss}");
            }
        }
        let (first, last) = (&end_to_end.levels[0], end_to_end.levels.last().expect("levels"));
        assert!(last.goodput_mbps <= 0.1 * first.goodput_mbps, "end-to-end {cc} at the highest loss rate");
    }
}
