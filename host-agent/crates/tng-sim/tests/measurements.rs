//! Metrics, payload content, workload plans and the event queue.

use std::time::Duration;

use tng_sim::content;
use tng_sim::event_queue::EventQueue;
use tng_sim::metrics::{jain_fairness, CompletionSummary, DeliveryTimeline, GoodputMeter, StallTracker};
use tng_sim::scenario::{SizeSpec, WorkloadSpec};
use tng_sim::workload::{plan_client, UNBOUNDED};

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

#[test]
fn completion_summary_uses_nearest_rank_percentiles() {
    let durations: Vec<Duration> = (1..=100).map(ms).collect();
    let summary = CompletionSummary::of(&durations);
    assert_eq!(summary.count, 100);
    assert!((summary.mean - 50.5).abs() < 1e-9);
    assert_eq!(summary.p50, 50.0);
    assert_eq!(summary.p99, 99.0);
    assert_eq!(CompletionSummary::of(&[]).count, 0);
}

#[test]
fn jain_index_is_one_when_equal_and_one_over_n_when_one_takes_all() {
    assert!((jain_fairness(&[10.0, 10.0]) - 1.0).abs() < 1e-12);
    assert!((jain_fairness(&[20.0, 0.0]) - 0.5).abs() < 1e-12);
    assert!((jain_fairness(&[15.0, 5.0]) - 0.8).abs() < 1e-12);
}

#[test]
fn stall_counts_only_time_with_outstanding_bytes() {
    let mut stall = StallTracker::default();
    stall.on_written(ms(0), 100);
    stall.on_delivered(ms(30), 50);
    stall.on_delivered(ms(40), 50);
    // Idle (nothing outstanding) from 40 to 500 ms: not a stall.
    stall.on_written(ms(500), 10);
    stall.on_delivered(ms(520), 10);
    assert_eq!(stall.longest(ms(1000)), ms(30));
    stall.on_written(ms(1000), 10);
    assert_eq!(stall.longest(ms(1100)), ms(100), "a stall still in progress counts");
}

#[test]
fn goodput_counts_only_the_measurement_window() {
    let mut meter = GoodputMeter::new(Duration::from_secs(1));
    meter.on_delivered(ms(500), 1_000_000);
    meter.on_delivered(ms(1500), 1_250_000);
    assert!((meter.mbps(Duration::from_secs(2)) - 10.0).abs() < 1e-9);
}

#[test]
fn a_timeline_reads_goodput_over_the_intervals_inside_a_span() {
    let mut timeline = DeliveryTimeline::new(ms(100));
    timeline.on_delivered(ms(50), 1_000);
    timeline.on_delivered(ms(150), 2_000);
    timeline.on_delivered(ms(199), 500);
    timeline.on_delivered(ms(1_250), 4_000);
    // [100, 200) holds 2,500 bytes in 0.1 s: 0.2 Mbit/s.
    assert!((timeline.mbps(ms(100), ms(200)) - 0.2).abs() < 1e-9);
    // A span that starts or ends inside an interval leaves that interval out.
    assert!((timeline.mbps(ms(60), ms(250)) - 0.2).abs() < 1e-9);
    assert_eq!(timeline.mbps(ms(110), ms(190)), 0.0);
    // Beyond the last delivery the intervals count as empty.
    assert!((timeline.mbps(ms(1_000), ms(2_000)) - 4_000.0 * 8.0 / 1.0 / 1e6).abs() < 1e-9);
}

#[test]
fn content_detects_shifted_and_altered_bytes() {
    let mut sent = vec![0u8; 4096];
    content::fill(4, 1000, &mut sent);
    assert_eq!(content::count_corrupted(4, 1000, &sent), 0);
    assert!(content::count_corrupted(4, 1001, &sent) > 4000, "a one-byte shift is caught");
    assert!(content::count_corrupted(8, 1000, &sent) > 4000, "another stream's bytes are caught");
    sent[17] ^= 1;
    assert_eq!(content::count_corrupted(4, 1000, &sent), 1);
}

#[test]
fn short_flow_plans_follow_the_size_distribution_and_the_seed() {
    let workload = WorkloadSpec::ShortFlows {
        parallel: 10,
        flows_per_requester: 1000,
        size: SizeSpec::Exponential { mean_bytes: 100_000.0 },
    };
    let plan = plan_client(&workload, 0, 1);
    assert_eq!(plan.requesters.len(), 10);
    let sizes: Vec<u64> = plan.requesters.iter().flatten().copied().collect();
    let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
    // 10 000 draws: standard error of the mean is 1 000 bytes.
    assert!((mean - 100_000.0).abs() < 4_000.0, "mean {mean}");
    assert_eq!(plan, plan_client(&workload, 0, 1));
    assert_ne!(plan, plan_client(&workload, 0, 2));

    let pareto = WorkloadSpec::ShortFlows {
        parallel: 1,
        flows_per_requester: 20_000,
        size: SizeSpec::Pareto { mean_bytes: 50_000.0, shape: 2.5 },
    };
    let sizes: Vec<u64> = plan_client(&pareto, 0, 1).requesters[0].iter().copied().collect();
    assert!(sizes.iter().all(|&size| size >= 30_000), "pareto minimum is mean x (shape-1)/shape");
    let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
    assert!((mean - 50_000.0).abs() < 5_000.0, "mean {mean}");
}

#[test]
fn bulk_and_burst_plans() {
    let bulk = plan_client(&WorkloadSpec::Bulk { bytes: None }, 0, 1);
    assert_eq!(bulk.requesters[0].front(), Some(&UNBOUNDED));
    let bursts = plan_client(&WorkloadSpec::Bursts { burst_bytes: 50_000, interval_ms: 250.0, count: 3 }, 0, 1);
    assert_eq!(bursts.bursts, vec![(ms(250), 50_000), (ms(500), 50_000), (ms(750), 50_000)]);
}

#[test]
fn event_queue_orders_by_time_then_insertion() {
    let mut queue = EventQueue::new();
    queue.schedule(ms(5), "late");
    queue.schedule(ms(1), "first");
    queue.schedule(ms(1), "second");
    queue.schedule(ms(3), "middle");
    let order: Vec<&str> = std::iter::from_fn(|| queue.pop().map(|(_, event)| event)).collect();
    assert_eq!(order, vec!["first", "second", "middle", "late"]);
}

#[test]
fn content_pieces_agree_with_single_bytes_at_any_alignment() {
    for offset in [0u64, 1, 7, 8, 13, 1_000_003] {
        let mut buffer = vec![0u8; 37];
        content::fill(9, offset, &mut buffer);
        for (index, byte) in buffer.iter().enumerate() {
            assert_eq!(*byte, content::byte_at(9, offset + index as u64));
        }
    }
}
