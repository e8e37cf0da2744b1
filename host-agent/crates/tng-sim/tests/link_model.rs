//! The link model against the numbers it promises.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tng_sim::datagram::{Datagram, Ecn};
use tng_sim::feedback::{queue_level_units, QUEUE_LEVEL_OFFSET, RATE_HINT_OFFSET};
use tng_sim::link::{DropCause, Fate, Link, LinkParams, QueueLimit, Service};
use tng_sim::loss::{GilbertElliott, LossModel, LossStep};
use tng_sim::rng::SimRng;
use tng_sim::trace::DeliveryTrace;

fn address(text: &str) -> SocketAddr {
    text.parse().expect("valid address")
}

/// A tng-looking datagram: version 1, neutral feedback fields, `len` bytes in total.
fn datagram(len: usize) -> Datagram {
    let mut payload = vec![0xAB; len];
    payload[0] = 1;
    payload[QUEUE_LEVEL_OFFSET..QUEUE_LEVEL_OFFSET + 2].copy_from_slice(&0u16.to_be_bytes());
    payload[RATE_HINT_OFFSET..RATE_HINT_OFFSET + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    Datagram { source: address("10.0.0.1:4477"), destination: address("10.0.0.2:4477"), ecn: Ecn::NotEct, payload }
}

fn link(params: LinkParams) -> Link {
    Link::new(params, SimRng::for_component(7, "link-under-test"))
}

fn arrival(fate: Fate) -> Duration {
    match fate {
        Fate::Arrives { at, .. } => at,
        Fate::Dropped(cause) => panic!("unexpectedly dropped: {cause:?}"),
    }
}

#[test]
fn constant_rate_serializes_back_to_back_packets_at_the_configured_rate() {
    let mut link = link(LinkParams::constant_rate(10_000_000, Duration::ZERO));
    let mut last = Duration::ZERO;
    for _ in 0..1000 {
        last = arrival(link.transmit(Duration::ZERO, &mut datagram(1222)));
    }
    // 1000 packets of 1250 bytes on the wire (1222 + 28 framing) at 10 Mbit/s take exactly 1 s.
    let error = (last.as_secs_f64() - 1.0).abs();
    assert!(error < 1e-6, "last departure at {last:?}");
    assert!((link.utilization(Duration::from_secs(1)) - 1.0).abs() < 1e-6);
}

#[test]
fn propagation_delay_is_added_after_serialization() {
    let mut link = link(LinkParams::constant_rate(8_000_000, Duration::from_millis(25)));
    // 972 + 28 = 1000 bytes at 8 Mbit/s = 1 ms of serialization.
    let at = arrival(link.transmit(Duration::from_millis(3), &mut datagram(972)));
    assert_eq!(at, Duration::from_millis(3 + 1 + 25));
}

#[test]
fn trace_replays_repeated_timestamps_and_loops() {
    let trace = Arc::new(DeliveryTrace::parse("2\n2\n5\n").expect("valid trace"));
    let mut params = LinkParams::constant_rate(1, Duration::ZERO);
    params.service = Service::Trace(trace);
    let mut link = link(params);
    let arrivals: Vec<u64> =
        (0..7).map(|_| arrival(link.transmit(Duration::ZERO, &mut datagram(1000))).as_millis() as u64).collect();
    // Two opportunities at 2 ms, one at 5 ms, then the trace loops with a 5 ms period.
    assert_eq!(arrivals, vec![2, 2, 5, 7, 7, 10, 12]);
}

#[test]
fn trace_opportunities_pass_unused_while_the_queue_is_empty() {
    let trace = Arc::new(DeliveryTrace::parse("1\n2\n3\n4\n").expect("valid trace"));
    let mut params = LinkParams::constant_rate(1, Duration::from_millis(10));
    params.service = Service::Trace(trace);
    let mut link = link(params);
    assert_eq!(arrival(link.transmit(Duration::from_micros(10_500), &mut datagram(100))), Duration::from_millis(21));
    assert_eq!(arrival(link.transmit(Duration::from_micros(10_500), &mut datagram(100))), Duration::from_millis(22));
}

#[test]
fn trace_rejects_packets_larger_than_an_opportunity_and_bad_files() {
    let mut params = LinkParams::constant_rate(1, Duration::ZERO);
    params.service = Service::Trace(Arc::new(DeliveryTrace::parse("1").expect("valid")));
    let mut link = link(params);
    assert_eq!(link.transmit(Duration::ZERO, &mut datagram(1473)), Fate::Dropped(DropCause::Oversized));
    assert!(DeliveryTrace::parse("5\n3\n").is_err());
    assert!(DeliveryTrace::parse("0\n").is_err());
    assert!(DeliveryTrace::parse("x\n").is_err());
    let trace = DeliveryTrace::parse("1\n1\n2\n2\n").expect("valid");
    // 4 opportunities of 1500 bytes every 2 ms = 24 Mbit/s.
    assert!((trace.mean_rate_bps() - 24e6).abs() < 1.0);
}

#[test]
fn jitter_delays_packets_without_reordering_them() {
    let mut params = LinkParams::constant_rate(100_000_000, Duration::from_millis(10));
    params.jitter = Duration::from_millis(5);
    let mut link = link(params);
    let mut previous = Duration::ZERO;
    let mut spread = Vec::new();
    for index in 0..2000u64 {
        let sent = Duration::from_micros(index * 200);
        let at = arrival(link.transmit(sent, &mut datagram(100)));
        assert!(at >= previous, "packet {index} overtook its predecessor");
        assert!(at >= sent + Duration::from_millis(10));
        spread.push((at - sent).as_secs_f64());
        previous = at;
    }
    let max = spread.iter().cloned().fold(0.0, f64::max);
    assert!(max > 0.014 && max < 0.0151, "jitter not applied: max one-way delay {max}");
}

#[test]
fn jitter_with_reordering_allowed_does_reorder() {
    let mut params = LinkParams::constant_rate(100_000_000, Duration::from_millis(10));
    params.jitter = Duration::from_millis(5);
    params.reorder = true;
    let mut link = link(params);
    let arrivals: Vec<Duration> =
        (0..200u64).map(|i| arrival(link.transmit(Duration::from_micros(i * 100), &mut datagram(100)))).collect();
    assert!(arrivals.windows(2).any(|pair| pair[1] < pair[0]));
}

#[test]
fn bernoulli_loss_stays_within_the_binomial_interval() {
    let mut params = LinkParams::constant_rate(1_000_000_000, Duration::ZERO);
    params.loss = LossModel::Bernoulli(0.05);
    let mut link = link(params);
    let trials = 20_000u64;
    let lost = (0..trials)
        .filter(|&i| {
            link.transmit(Duration::from_micros(i * 10), &mut datagram(100)) == Fate::Dropped(DropCause::RandomLoss)
        })
        .count() as f64;
    // Mean 1000, standard deviation sqrt(20000 x 0.05 x 0.95) = 30.8; allow 4 sigma.
    assert!((lost - 1000.0).abs() < 4.0 * 30.8, "lost {lost} of {trials}");
}

#[test]
fn loss_steps_replace_the_loss_rate_from_their_times_on() {
    let mut params = LinkParams::constant_rate(1_000_000_000, Duration::ZERO);
    params.loss = LossModel::Bernoulli(1.0);
    params.loss_steps = vec![
        LossStep { from: Duration::from_secs(1), probability: 0.0 },
        LossStep { from: Duration::from_secs(2), probability: 0.05 },
    ];
    let mut link = link(params);
    let mut lost_in = [0u64; 3];
    for i in 0..30_000u64 {
        let now = Duration::from_micros(i * 100);
        if link.transmit(now, &mut datagram(100)) == Fate::Dropped(DropCause::RandomLoss) {
            lost_in[now.as_secs() as usize] += 1;
        }
    }
    assert_eq!(lost_in[0], 10_000, "the model before the first step: everything lost");
    assert_eq!(lost_in[1], 0, "the first step: nothing lost");
    // The second: mean 500 of 10,000, standard deviation sqrt(10000 x 0.05 x 0.95) = 21.8; allow 4 sigma.
    assert!((lost_in[2] as f64 - 500.0).abs() < 4.0 * 21.8, "lost {} after the second step", lost_in[2]);
}

#[test]
fn gilbert_elliott_loss_matches_the_stationary_mean_and_comes_in_bursts() {
    let chain = GilbertElliott { good_to_bad: 0.01, bad_to_good: 0.2, loss_in_good: 0.0, loss_in_bad: 0.8 };
    let mut params = LinkParams::constant_rate(1_000_000_000, Duration::ZERO);
    params.loss = LossModel::GilbertElliott(chain);
    let mut link = link(params);
    let trials = 200_000u64;
    let outcomes: Vec<bool> = (0..trials)
        .map(|i| {
            link.transmit(Duration::from_micros(i * 10), &mut datagram(100)) == Fate::Dropped(DropCause::RandomLoss)
        })
        .collect();
    let rate = outcomes.iter().filter(|&&lost| lost).count() as f64 / trials as f64;
    let expected = chain.mean_loss();
    assert!((expected - 0.0381).abs() < 1e-3);
    assert!((rate - expected).abs() < 0.15 * expected, "loss rate {rate}, expected {expected}");
    // Bursty: a loss is followed by another far more often than the mean rate.
    let pairs = outcomes.windows(2).filter(|pair| pair[0]).count() as f64;
    let followed = outcomes.windows(2).filter(|pair| pair[0] && pair[1]).count() as f64;
    assert!(followed / pairs > 0.5, "conditional loss {}", followed / pairs);
}

#[test]
fn drop_tail_limits_the_queue_in_packets_and_in_bytes() {
    let mut params = LinkParams::constant_rate(1_000_000, Duration::ZERO);
    params.queue_limit = QueueLimit::Packets(5);
    let mut by_packets = link(params.clone());
    let fates: Vec<Fate> = (0..8).map(|_| by_packets.transmit(Duration::ZERO, &mut datagram(972))).collect();
    assert!(fates[..5].iter().all(|f| matches!(f, Fate::Arrives { .. })));
    assert!(fates[5..].iter().all(|f| *f == Fate::Dropped(DropCause::QueueFull)));
    // Each packet takes 8 ms: after 8 ms one has left and one more fits.
    assert!(matches!(by_packets.transmit(Duration::from_millis(8), &mut datagram(972)), Fate::Arrives { .. }));
    assert_eq!(by_packets.transmit(Duration::from_millis(8), &mut datagram(972)), Fate::Dropped(DropCause::QueueFull));

    params.queue_limit = QueueLimit::Bytes(2500);
    let mut by_bytes = link(params);
    let accepted = (0..5)
        .filter(|_| matches!(by_bytes.transmit(Duration::ZERO, &mut datagram(972)), Fate::Arrives { .. }))
        .count();
    assert_eq!(accepted, 2);
    assert_eq!(by_bytes.stats().queue_drops, 3);
}

#[test]
fn ecn_capable_packets_are_marked_above_the_queue_delay_threshold() {
    let mut params = LinkParams::constant_rate(8_000_000, Duration::ZERO);
    params.ecn_threshold = Some(Duration::from_micros(2500));
    let mut link = link(params);
    let mut marks = Vec::new();
    for index in 0..6 {
        let mut packet = datagram(972);
        packet.ecn = if index == 5 { Ecn::NotEct } else { Ecn::Ect0 };
        link.transmit(Duration::ZERO, &mut packet);
        marks.push(packet.ecn);
    }
    // Packets wait 0, 1, 2, 3, 4 ms: the ones waiting 3 and 4 ms are marked; a non-ECT packet never is.
    assert_eq!(marks, vec![Ecn::Ect0, Ecn::Ect0, Ecn::Ect0, Ecn::Ce, Ecn::Ce, Ecn::NotEct]);
    assert_eq!(link.stats().ecn_marks, 2);
}

#[test]
fn switch_feedback_rewrites_only_the_feedback_bytes_with_max_and_min() {
    let mut params = LinkParams::constant_rate(8_000_000, Duration::ZERO);
    params.switch_feedback = true;
    let mut link = link(params);
    let mut first = datagram(972);
    let original = first.payload.clone();
    link.transmit(Duration::ZERO, &mut first);
    // Empty queue: level 0, rate 8000 kbit/s.
    assert_eq!(&first.payload[18..20], &0u16.to_be_bytes());
    assert_eq!(&first.payload[20..24], &8000u32.to_be_bytes());
    assert_eq!(first.payload[..18], original[..18]);
    assert_eq!(first.payload[24..], original[24..]);

    // Waits 1 ms behind the first packet: 1000 us / 32 = 31 units; a larger existing level is kept.
    let mut second = datagram(972);
    link.transmit(Duration::ZERO, &mut second);
    assert_eq!(&second.payload[18..20], &31u16.to_be_bytes());
    let mut third = datagram(972);
    third.payload[18..20].copy_from_slice(&500u16.to_be_bytes());
    third.payload[20..24].copy_from_slice(&1234u32.to_be_bytes());
    link.transmit(Duration::ZERO, &mut third);
    assert_eq!(&third.payload[18..20], &500u16.to_be_bytes());
    assert_eq!(&third.payload[20..24], &1234u32.to_be_bytes());
    assert_eq!(queue_level_units(Duration::from_secs(10)), 65534);
}

#[test]
fn a_dark_link_loses_what_it_holds_and_what_is_offered() {
    let mut link = link(LinkParams::constant_rate(8_000_000, Duration::from_millis(20)));
    let Fate::Arrives { generation, .. } = link.transmit(Duration::ZERO, &mut datagram(972)) else {
        panic!("accepted while up")
    };
    link.set_up(Duration::from_millis(5), false);
    assert!(!link.is_current(generation), "in-flight packet must be lost");
    assert_eq!(link.transmit(Duration::from_millis(6), &mut datagram(972)), Fate::Dropped(DropCause::LinkDown));
    link.set_up(Duration::from_millis(7), true);
    let at = arrival(link.transmit(Duration::from_millis(7), &mut datagram(972)));
    assert_eq!(at, Duration::from_millis(7 + 1 + 20));
}

#[test]
fn same_seed_gives_the_same_random_decisions() {
    let run = |seed: u64| -> Vec<Fate> {
        let mut params = LinkParams::constant_rate(50_000_000, Duration::from_millis(5));
        params.loss = LossModel::Bernoulli(0.1);
        params.jitter = Duration::from_millis(3);
        let mut link = Link::new(params, SimRng::for_component(seed, "path-0-downlink"));
        (0..500u64).map(|i| link.transmit(Duration::from_micros(i * 150), &mut datagram(1200))).collect()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}
