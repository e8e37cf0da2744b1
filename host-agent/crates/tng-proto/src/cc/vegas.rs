//! TCP Vegas, as Linux `tcp_vegas.c`: keep between alpha and beta packets queued at the bottleneck.

use std::time::Duration;

use super::pacing::{window_pacing_rate, RateCap};
use super::recovery::RecoveryPeriod;
use super::{AckSample, CcConfig, CongestionController, LossEvent, PathFeedback};
use crate::time::Time;

/// Fewer packets than this queued: grow by one per RTT.
const ALPHA: f64 = 2.0;
/// More packets than this queued: shrink by one per RTT.
const BETA: f64 = 4.0;
/// More packets than this queued during slow start: leave slow start.
const GAMMA: f64 = 1.0;
/// Linux needs more than two RTT samples in a round trip before it trusts their minimum; with fewer (delayed ACKs,
/// a tiny window) the round falls back to Reno.
const MIN_SAMPLES_PER_ROUND: u32 = 3;

/// Once per RTT, Vegas compares the window with what the path carries at the base RTT:
/// diff = cwnd (RTT - baseRTT) / RTT packets, the sender's own packets sitting in the bottleneck queue.
///
/// In-network queue reports are not added to that estimate: the shared queue is on this channel's path, so its
/// delay already shows in the RTT samples, and counting it twice would make Vegas yield to its own queue.
#[derive(Clone, Debug)]
pub struct Vegas {
    config: CcConfig,
    window: u64,
    ssthresh: u64,
    /// Smallest RTT ever seen: the propagation delay of the path.
    base_rtt: Option<Duration>,
    /// The current measurement round ends with the ACK of a packet sent after it began.
    round_start: Time,
    /// Smallest RTT sample of the current round: the minimum filters out delayed-ACK and jitter noise.
    round_min_rtt: Option<Duration>,
    round_samples: u32,
    /// Bytes acknowledged toward the next one-datagram increase, when a round falls back to Reno.
    reno_bytes_acked: u64,
    recovery: RecoveryPeriod,
    rate_cap: RateCap,
}

impl Vegas {
    pub fn new(config: &CcConfig, now: Time) -> Self {
        Vegas {
            window: config.initial_window(),
            ssthresh: u64::MAX,
            base_rtt: None,
            round_start: now,
            round_min_rtt: None,
            round_samples: 0,
            reno_bytes_acked: 0,
            recovery: RecoveryPeriod::default(),
            rate_cap: RateCap::default(),
            config: config.clone(),
        }
    }

    fn in_slow_start(&self) -> bool {
        self.window < self.ssthresh
    }

    fn packets(&self) -> f64 {
        self.window as f64 / self.config.datagram_size() as f64
    }

    /// Reno's congestion avoidance: one datagram per window acknowledged.
    fn reno_increase(&mut self, bytes_acked: u64) {
        self.reno_bytes_acked = self.reno_bytes_acked.saturating_add(bytes_acked);
        if self.reno_bytes_acked >= self.window {
            self.reno_bytes_acked -= self.window;
            self.window = self.window.saturating_add(self.config.datagram_size());
        }
    }

    /// The once-per-RTT adjustment, from the round's smallest RTT.
    fn end_round(&mut self, rtt: Duration, base_rtt: Duration) {
        let mss = self.config.datagram_size();
        let rtt_secs = rtt.as_secs_f64();
        let queued = self.packets() * (rtt_secs - base_rtt.as_secs_f64()) / rtt_secs;
        if self.in_slow_start() {
            if queued > GAMMA {
                // Too fast for slow start: fall back to what the path carries, plus one.
                let expected = self.packets() * base_rtt.as_secs_f64() / rtt_secs;
                let target = ((expected + 1.0) * mss as f64) as u64;
                self.window = self.window.min(target);
                self.ssthresh = self.ssthresh.min(self.window.saturating_sub(mss));
            }
        } else if queued > BETA {
            self.window = self.window.saturating_sub(mss);
            self.ssthresh = self.ssthresh.min(self.window.saturating_sub(mss));
        } else if queued < ALPHA {
            self.window = self.window.saturating_add(mss);
        }
        self.window = self.window.max(self.config.minimum_window());
    }

    fn congestion_event(&mut self, now: Time, sent_time: Time) {
        if !self.recovery.enter(now, sent_time) {
            return;
        }
        // Linux hands loss recovery to Reno: halve.
        self.window = (self.window / 2).max(self.config.minimum_window());
        self.ssthresh = self.window;
        self.reno_bytes_acked = 0;
    }
}

impl CongestionController for Vegas {
    fn on_sent(&mut self, _now: Time, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, now: Time, ack: &AckSample) {
        if let Some(rtt) = ack.rtt.filter(|rtt| !rtt.is_zero()) {
            self.base_rtt = Some(self.base_rtt.map_or(rtt, |base| base.min(rtt)));
            self.round_min_rtt = Some(self.round_min_rtt.map_or(rtt, |min| min.min(rtt)));
            self.round_samples = self.round_samples.saturating_add(1);
        }
        if ack.app_limited || self.recovery.covers(ack.sent_time) {
            return;
        }
        if ack.sent_time >= self.round_start {
            match (self.round_min_rtt, self.base_rtt) {
                (Some(rtt), Some(base_rtt)) if self.round_samples >= MIN_SAMPLES_PER_ROUND => {
                    self.end_round(rtt, base_rtt);
                }
                _ if !self.in_slow_start() => self.reno_increase(ack.bytes_acked),
                _ => {}
            }
            self.round_start = now;
            self.round_min_rtt = None;
            self.round_samples = 0;
        }
        if self.in_slow_start() {
            self.window = self.window.saturating_add(ack.bytes_acked);
        }
    }

    fn on_loss(&mut self, now: Time, loss: &LossEvent) {
        self.congestion_event(now, loss.largest_lost_sent_time);
        if loss.persistent {
            self.window = self.config.minimum_window();
            self.recovery.reset();
        }
    }

    fn on_ecn_ce(&mut self, now: Time, sent_time: Time) {
        self.congestion_event(now, sent_time);
    }

    fn on_feedback(&mut self, _now: Time, _sent_time: Time, feedback: &PathFeedback) {
        self.rate_cap.update(feedback);
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn pacing_rate(&self, srtt: Duration) -> u64 {
        self.rate_cap.apply(window_pacing_rate(self.window, srtt))
    }

    fn name(&self) -> &'static str {
        "vegas"
    }

    fn state(&self) -> &'static str {
        if self.in_slow_start() {
            "slow_start"
        } else {
            "congestion_avoidance"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{goodput, AckRecord, Link, Simulation};

    const MSS: u64 = 1200;
    const BASE_RTT: Duration = Duration::from_millis(100);

    fn config() -> CcConfig {
        CcConfig { max_datagram_size: MSS, queue_threshold: Some(Duration::from_millis(1)), ..CcConfig::default() }
    }

    /// One measurement round starting at `start`: `acks` datagrams acknowledged evenly over `rtt`, each sent `rtt`
    /// earlier, so the last one (sent at `start`) closes the round. Returns when the next round starts.
    fn round(vegas: &mut Vegas, start: Time, rtt: Duration, acks: u32) -> Time {
        let mut now = start;
        for i in 1..=acks {
            now = start + rtt * i / acks;
            let sample = AckSample {
                bytes_acked: MSS,
                sent_time: now - rtt,
                rtt: Some(rtt),
                srtt: rtt,
                min_rtt: BASE_RTT,
                delivery_rate: None,
                app_limited: false,
                bytes_in_flight: vegas.window(),
            };
            vegas.on_ack(now, &sample);
        }
        now
    }

    /// RTT at which `packets` of a window of `window` packets sit in the queue: diff = window (RTT - base) / RTT.
    fn rtt_for_diff(window: u64, packets: f64) -> Duration {
        BASE_RTT.mul_f64(window as f64 / (window as f64 - packets))
    }

    #[test]
    fn slow_start_doubles_until_more_than_gamma_packets_queue() {
        let start = Time::from_millis(1_000);
        let mut vegas = Vegas::new(&config(), start);
        let mut now = round(&mut vegas, start, BASE_RTT, 10);
        assert_eq!(vegas.window(), 20 * MSS);
        // Less than a packet queued (counting the window the round's ACKs grew to) is not more than gamma.
        now = round(&mut vegas, now, rtt_for_diff(39, 0.9), 20);
        assert_eq!(vegas.window(), 40 * MSS);
        assert!(vegas.in_slow_start());
        // Eight queued: leave slow start at the rate the ACKs show, plus one packet. The window already grew by the
        // 39 ACKs before the one that closed the round, as in Linux.
        let rtt = BASE_RTT.mul_f64(1.25);
        round(&mut vegas, now, rtt, 40);
        let grown = 79.0;
        let expected = ((grown / 1.25 + 1.0) * MSS as f64) as u64;
        assert_eq!(vegas.window(), expected);
        assert!(!vegas.in_slow_start());
    }

    #[test]
    fn avoidance_moves_one_packet_per_rtt_toward_alpha_to_beta() {
        let start = Time::from_millis(1_000);
        let mut vegas = Vegas::new(&config(), start);
        vegas.ssthresh = 0;
        vegas.window = 30 * MSS;
        let mut now = start;
        let mut step = |vegas: &mut Vegas, queued: f64| {
            let window = vegas.window() / MSS;
            now = round(vegas, now, rtt_for_diff(window, queued), window as u32);
            vegas.window() / MSS
        };
        assert_eq!(step(&mut vegas, 0.0), 31, "below alpha: grow");
        assert_eq!(step(&mut vegas, 1.9), 32, "below alpha: grow");
        assert_eq!(step(&mut vegas, 2.0), 32, "alpha..beta: hold");
        assert_eq!(step(&mut vegas, 4.0), 32, "alpha..beta: hold");
        assert_eq!(step(&mut vegas, 4.5), 31, "above beta: shrink");
        assert_eq!(step(&mut vegas, 10.0), 30, "above beta: shrink one packet only");
    }

    #[test]
    fn keeps_alpha_to_beta_packets_queued_at_full_rate() {
        // 10 Mbit/s, 40 ms propagation RTT, a buffer of 200 packets (4.8 BDP) that holds slow start's overshoot.
        let link = Link {
            rate: 1_250_000,
            one_way_delay: Duration::from_millis(20),
            buffer: 200 * MSS,
            grant_interval: Duration::ZERO,
        };
        let mut sim = Simulation::new(link, MSS, Box::new(Vegas::new(&config(), Time::ZERO)));
        let mut records = Vec::new();
        sim.run_until(Time::from_millis(40_000), |record, _| records.push(*record));

        // One diff per base RTT, from that RTT's smallest sample and the window at its end, as Vegas computes it.
        let base_rtt = link.base_rtt(MSS);
        let rtt_index = |record: &AckRecord| u128::from(record.now.as_nanos()) / base_rtt.as_nanos();
        let mut diffs = Vec::new();
        for rtt in records.chunk_by(|a, b| rtt_index(a) == rtt_index(b)) {
            let min_rtt = rtt.iter().map(|r| r.rtt).min().unwrap_or(base_rtt).as_secs_f64();
            let window = rtt.last().map_or(0, |r| r.window) as f64 / MSS as f64;
            diffs.push((rtt[0].now, window * (min_rtt - base_rtt.as_secs_f64()) / min_rtt));
        }
        let in_bounds = |&(_, diff): &(Time, f64)| (ALPHA..=BETA).contains(&diff);
        // Slow start overshoots (as in Linux) and avoidance drains one packet per RTT: converged once in bounds for
        // ten RTTs in a row.
        let first = diffs.windows(10).position(|w| w.iter().all(in_bounds)).expect("diff settles in [alpha, beta]");
        let converged_at = diffs[first].0;
        let settled = &diffs[first..];
        let within = settled.iter().filter(|d| in_bounds(d)).count() as f64 / settled.len() as f64;
        let steady: Vec<AckRecord> = records.into_iter().filter(|r| r.now >= converged_at).collect();
        let utilization = goodput(&steady) / link.rate as f64;
        println!(
            "vegas: in bounds from {converged_at:?}, then diff in [alpha, beta] for {:.1}% of {} RTTs, \
             utilization {utilization:.3}, lost {} bytes",
            100.0 * within,
            settled.len(),
            sim.lost
        );
        assert!(converged_at < Time::from_millis(15_000));
        assert!(within >= 0.9);
        assert!(utilization >= 0.95);
        assert_eq!(sim.lost, 0);
    }

    #[test]
    fn halves_once_per_episode_on_loss_and_ce_and_ignores_queue_reports() {
        let mut vegas = Vegas::new(&config(), Time::ZERO);
        let loss = LossEvent {
            bytes_lost: MSS,
            largest_lost_sent_time: Time::from_millis(50),
            persistent: false,
            bytes_in_flight: 0,
        };
        vegas.on_loss(Time::from_millis(100), &loss);
        assert_eq!(vegas.window(), 5 * MSS);
        vegas.on_ecn_ce(Time::from_millis(110), Time::from_millis(90));
        assert_eq!(vegas.window(), 5 * MSS);
        vegas.on_ecn_ce(Time::from_millis(210), Time::from_millis(150));
        assert_eq!(vegas.window(), 5 * MSS / 2);
        let queue = PathFeedback { queue_delay: Some(Duration::from_secs(1)), rate_hint: Some(1_000) };
        vegas.on_feedback(Time::from_millis(300), Time::from_millis(250), &queue);
        assert_eq!(vegas.window(), 5 * MSS / 2);
        assert_eq!(vegas.pacing_rate(Duration::from_millis(40)), 1_000);
    }
}
