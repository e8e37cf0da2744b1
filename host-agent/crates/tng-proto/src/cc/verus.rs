//! Verus (Zaki et al., SIGCOMM 2015), following the paper and yzaki/verus's `verus_server.cpp`.

use std::collections::VecDeque;
use std::time::Duration;

use super::delay_profile::DelayProfile;
use super::pacing::{bytes_per_rtt, RateCap};
use super::recovery::RecoveryPeriod;
use super::{AckSample, CcConfig, CongestionController, LossEvent, PathFeedback};
use crate::time::Time;

/// Verus decides once per epoch.
const EPOCH: Duration = Duration::from_millis(5);
/// The delay profile is refitted this often.
const PROFILE_REFIT_INTERVAL: Duration = Duration::from_secs(1);
/// Delay estimate step down while the delay rises (delta 1), and up while it does not (delta 2), in ms.
const DELTA_DECREASE_MS: f64 = 1.0;
const DELTA_INCREASE_MS: f64 = 2.0;
/// Above this ratio of the epoch's maximum delay to the minimum delay, Verus lowers its estimate by delta 2
/// whatever the trend (R = 6 as in the project notes on the paper; yzaki/verus ships 2, which left a third of a
/// cellular trace idle in tng-sim, docs/congestion-control.md).
const MAX_DELAY_RATIO: f64 = 6.0;
/// Multiplicative decrease on loss.
const LOSS_DECREASE: f64 = 0.7;
/// Slow start ends once an RTT exceeds this (ms).
const SLOW_START_EXIT_DELAY_MS: f64 = 500.0;
/// Weight of the previous value when the epoch's maximum delay is averaged (the reference: 0.2).
const MAX_DELAY_EWMA_WEIGHT: f64 = 0.2;
/// Verus's windows are in packets; two keep the ACK clock running.
const MIN_WINDOW_PACKETS: f64 = 2.0;
const MAX_WINDOW_PACKETS: f64 = 1e9;
/// The reference sends each epoch's share of the window at once; pacing at twice the window per RTT smooths those
/// bursts without limiting the window.
const PACING_GAIN: f64 = 2.0;

/// Verus learns a delay profile (which RTT each sending window brings) and, every 5 ms epoch, moves a delay
/// estimate: down by delta 1 while the epoch's maximum delay rises, up by delta 2 while it does not, and down by
/// delta 2 whenever that delay exceeds R times the minimum. The window is then the largest one whose profile delay
/// stays within the estimate. It starts in slow start and cuts the window by 0.7 on loss; during that loss phase the
/// window grows by 1/W per ACK and the profile is not updated, since its samples would describe the old window.
#[derive(Clone, Debug)]
pub struct Verus {
    mss: u64,
    min_window: u64,
    /// Congestion window, in packets.
    window: f64,
    slow_start: bool,
    /// The window each outstanding packet left with, in send order: the profile's x axis.
    sent_windows: VecDeque<(Time, f64)>,
    profile: DelayProfile,
    next_refit: Time,
    epoch_end: Time,
    /// Largest RTT (ms) seen in the current epoch.
    epoch_max_delay: Option<f64>,
    /// Averaged maximum delay of the previous epochs (ms); `None` before the first epoch.
    max_delay: Option<f64>,
    /// Smallest RTT seen (ms).
    min_delay: f64,
    /// The most packets in flight lately, to tell whether the window is in use.
    in_flight: InFlightPeak,
    /// The delay estimate (ms).
    delay_estimate: f64,
    last_ack: Time,
    loss_phase: bool,
    recovery: RecoveryPeriod,
    rate_cap: RateCap,
}

impl Verus {
    pub fn new(config: &CcConfig, now: Time) -> Self {
        let mss = config.datagram_size();
        Verus {
            mss,
            min_window: config.minimum_window(),
            window: config.initial_window() as f64 / mss as f64,
            slow_start: true,
            sent_windows: VecDeque::new(),
            profile: DelayProfile::default(),
            next_refit: now,
            epoch_end: now + EPOCH,
            epoch_max_delay: None,
            max_delay: None,
            min_delay: f64::INFINITY,
            in_flight: InFlightPeak::default(),
            delay_estimate: 0.0,
            last_ack: now,
            loss_phase: false,
            recovery: RecoveryPeriod::default(),
            rate_cap: RateCap::default(),
        }
    }

    /// The window the packet sent at `sent_time` left with; forgets the packets sent before it.
    fn window_at_send(&mut self, sent_time: Time) -> Option<f64> {
        let mut found = None;
        while let Some(&(time, window)) = self.sent_windows.front() {
            if time > sent_time {
                break;
            }
            found = Some(window);
            self.sent_windows.pop_front();
        }
        found
    }

    /// Leaves slow start the way the reference does: 0.7 of the window, a delay estimate of 0.75 R times the
    /// minimum, and a loss phase until the new window is in flight.
    fn exit_slow_start(&mut self, now: Time) {
        self.slow_start = false;
        self.window *= LOSS_DECREASE;
        self.delay_estimate = 0.75 * MAX_DELAY_RATIO * self.min_delay;
        self.loss_phase = true;
        self.recovery.enter(now, now);
        self.profile.refit();
        self.next_refit = now + PROFILE_REFIT_INTERVAL;
        self.epoch_end = now + EPOCH;
    }

    /// Whether the sender filled its window within the last round trip or so: to within two packets, or to half of
    /// it in slow start, which doubles it per round trip. Verus raises its delay estimate, and slow start its window,
    /// only then. A sender held below its window by something else (the application, or under ALCC the kernel's own
    /// controller) sees no delay rise whatever its window, and would otherwise ratchet the window up without bound,
    /// as RFC 7661 says of any window that is not used: over kernel cubic it reached the profile's cap of 100,000
    /// packets while the kernel held 272 kB.
    fn window_in_use(&self) -> bool {
        let filled = if self.slow_start { self.window / 2.0 } else { self.window - 2.0 };
        self.in_flight.peak() >= filled
    }

    /// Runs the epoch that ended, if one did: the delay estimate moves, and the window follows it on the profile.
    fn run_epoch(&mut self, now: Time) {
        if self.slow_start || now < self.epoch_end {
            return;
        }
        // Without ACKs in the epoch, the time since the last one is a lower bound on the delay.
        let quiet_for = (now - self.last_ack).as_secs_f64() * 1e3;
        let epoch_max =
            self.epoch_max_delay.take().unwrap_or_else(|| self.max_delay.map_or(quiet_for, |last| last.max(quiet_for)));
        let previous = *self.max_delay.get_or_insert(epoch_max);
        if previous / self.min_delay > MAX_DELAY_RATIO {
            self.delay_estimate = (self.delay_estimate - DELTA_INCREASE_MS).max(self.min_delay);
        } else if epoch_max > previous {
            self.delay_estimate = (self.delay_estimate - DELTA_DECREASE_MS).max(self.min_delay);
        } else if self.window_in_use() {
            self.delay_estimate += DELTA_INCREASE_MS;
        }
        if let Some(window) = self.profile.window_for(self.delay_estimate) {
            self.window = window;
        } else if self.profile.is_fitted() {
            self.window = MIN_WINDOW_PACKETS;
        }
        self.window = self.window.clamp(MIN_WINDOW_PACKETS, MAX_WINDOW_PACKETS);
        self.max_delay = Some(MAX_DELAY_EWMA_WEIGHT * previous + (1.0 - MAX_DELAY_EWMA_WEIGHT) * epoch_max);
        // After a long silence, one epoch describes it; the next starts now.
        self.epoch_end = (self.epoch_end + EPOCH).max(now);
        if now >= self.next_refit {
            self.profile.refit();
            self.next_refit = now + PROFILE_REFIT_INTERVAL;
        }
    }
}

/// The most packets in flight at a send over the current and the previous round trip.
#[derive(Clone, Copy, Debug, Default)]
struct InFlightPeak {
    /// The latest RTT sample: how long a period lasts.
    round: Duration,
    started: Time,
    current: f64,
    previous: f64,
}

impl InFlightPeak {
    fn record(&mut self, now: Time, packets: f64) {
        if now.saturating_since(self.started) >= self.round {
            self.previous = self.current;
            self.current = 0.0;
            self.started = now;
        }
        self.current = self.current.max(packets);
    }

    fn peak(&self) -> f64 {
        self.current.max(self.previous)
    }
}

impl CongestionController for Verus {
    fn on_sent(&mut self, now: Time, _bytes: u64, bytes_in_flight: u64) {
        self.run_epoch(now);
        self.in_flight.record(now, bytes_in_flight as f64 / self.mss as f64);
        self.sent_windows.push_back((now, self.window));
    }

    fn on_ack(&mut self, now: Time, ack: &AckSample) {
        self.run_epoch(now);
        self.last_ack = now;
        let sent_window = self.window_at_send(ack.sent_time).unwrap_or(self.window);
        let Some(rtt) = ack.rtt.filter(|rtt| !rtt.is_zero()) else { return };
        self.in_flight.round = rtt.max(EPOCH);
        let delay = rtt.as_secs_f64() * 1e3;
        self.min_delay = self.min_delay.min(delay);
        self.epoch_max_delay = Some(self.epoch_max_delay.map_or(delay, |max| max.max(delay)));
        let packets = ack.bytes_acked as f64 / self.mss as f64;

        if self.loss_phase && !self.recovery.covers(ack.sent_time) {
            // A packet sent after the cut came back: the window in flight is the new one.
            self.loss_phase = false;
            self.epoch_max_delay = None;
        }
        if self.slow_start {
            self.profile.record(sent_window, delay);
            if self.window_in_use() {
                self.window += packets;
            }
            if delay > SLOW_START_EXIT_DELAY_MS {
                self.exit_slow_start(now);
            }
        } else if self.loss_phase {
            self.window += packets / self.window;
            if let Some(profile_delay) = self.profile.delay_of(self.window) {
                self.delay_estimate = self.delay_estimate.min(profile_delay);
            }
        } else {
            self.profile.record(sent_window, delay);
        }
        self.window = self.window.clamp(MIN_WINDOW_PACKETS, MAX_WINDOW_PACKETS);
    }

    fn on_loss(&mut self, now: Time, loss: &LossEvent) {
        if loss.persistent {
            self.window = MIN_WINDOW_PACKETS;
            self.recovery.reset();
            return;
        }
        if !self.recovery.enter(now, loss.largest_lost_sent_time) {
            return;
        }
        if self.slow_start {
            self.exit_slow_start(now);
            return;
        }
        self.window = (self.window * LOSS_DECREASE).max(MIN_WINDOW_PACKETS);
        self.loss_phase = true;
        if let Some(profile_delay) = self.profile.delay_of(self.window) {
            self.delay_estimate = self.delay_estimate.min(profile_delay);
        }
    }

    fn on_ecn_ce(&mut self, _now: Time, _sent_time: Time) {}

    fn on_feedback(&mut self, _now: Time, _sent_time: Time, feedback: &PathFeedback) {
        self.rate_cap.update(feedback);
    }

    fn window(&self) -> u64 {
        // `as` saturates, so a huge window stays finite.
        ((self.window * self.mss as f64) as u64).max(self.min_window)
    }

    fn pacing_rate(&self, srtt: Duration) -> u64 {
        self.rate_cap.apply(bytes_per_rtt(PACING_GAIN * self.window() as f64, srtt))
    }

    fn name(&self) -> &'static str {
        "verus"
    }

    fn state(&self) -> &'static str {
        if self.slow_start {
            "slow_start"
        } else if self.loss_phase {
            "recovery"
        } else {
            "congestion_avoidance"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{goodput, Link, Simulation};

    const MSS: u64 = 1200;

    fn config() -> CcConfig {
        CcConfig { max_datagram_size: MSS, ..CcConfig::default() }
    }

    fn ack(now: Time, sent: Time) -> AckSample {
        AckSample {
            bytes_acked: MSS,
            sent_time: sent,
            rtt: Some(now - sent),
            srtt: now - sent,
            min_rtt: now - sent,
            delivery_rate: None,
            app_limited: false,
            bytes_in_flight: 0,
        }
    }

    /// A Verus past slow start with a linear profile (40 ms plus 1 ms per packet, windows 1 to 60) and a delay
    /// estimate of 60 ms, at `now`.
    fn settled(now: Time) -> Verus {
        let mut verus = Verus::new(&config(), Time::ZERO);
        for window in 1..=60 {
            verus.profile.record(f64::from(window), 40.0 + f64::from(window));
        }
        verus.profile.refit();
        verus.slow_start = false;
        verus.min_delay = 40.0;
        verus.delay_estimate = 60.0;
        verus.max_delay = Some(60.0);
        verus.last_ack = now;
        verus.epoch_end = now + EPOCH;
        verus.next_refit = now + PROFILE_REFIT_INTERVAL;
        // It fills its window.
        verus.in_flight =
            InFlightPeak { round: Duration::from_millis(60), started: now, current: 60.0, previous: 60.0 };
        verus
    }

    /// One epoch in which every ACK saw `delay_ms`; returns the estimate and window after it.
    fn epoch_with_delay(verus: &mut Verus, now: &mut Time, delay_ms: u64) -> (f64, f64) {
        let delay = Duration::from_millis(delay_ms);
        *now += EPOCH;
        verus.epoch_max_delay = Some(delay.as_secs_f64() * 1e3);
        verus.run_epoch(*now);
        (verus.delay_estimate, verus.window)
    }

    #[test]
    fn each_epoch_moves_the_estimate_by_the_delay_trend_and_the_window_follows_the_profile() {
        let mut now = Time::from_millis(10_000);
        let mut verus = settled(now);
        // Delay not rising (60 after an average of 60): +2 ms, and the window is read off the profile.
        assert_eq!(epoch_with_delay(&mut verus, &mut now, 60), (62.0, 22.0));
        // Rising (70 after 60): -1 ms.
        assert_eq!(epoch_with_delay(&mut verus, &mut now, 70), (61.0, 21.0));
        // The average is now 0.2 x 60 + 0.8 x 70 = 68; 65 is a fall: +2 ms.
        assert!((verus.max_delay.expect("averaged") - 68.0).abs() < 1e-9);
        assert_eq!(epoch_with_delay(&mut verus, &mut now, 65), (63.0, 23.0));
    }

    #[test]
    fn a_delay_above_r_times_the_minimum_lowers_the_estimate_whatever_the_trend() {
        let mut now = Time::from_millis(10_000);
        let mut verus = settled(now);
        verus.max_delay = Some(6.5 * 40.0);
        // Falling delay, which alone would raise the estimate: the ratio lowers it by delta 2.
        assert_eq!(epoch_with_delay(&mut verus, &mut now, 100).0, 58.0);
        // The estimate never goes below the minimum delay.
        verus.delay_estimate = 41.0;
        verus.max_delay = Some(6.5 * 40.0);
        assert_eq!(epoch_with_delay(&mut verus, &mut now, 100).0, 40.0);
    }

    #[test]
    fn an_epoch_without_acks_counts_the_silence_as_delay() {
        let mut now = Time::from_millis(10_000);
        let mut verus = settled(now);
        // 100 ms without an ACK: more than the 60 ms average, so the delay is rising.
        now += Duration::from_millis(100);
        verus.run_epoch(now);
        assert_eq!(verus.delay_estimate, 59.0);
    }

    #[test]
    fn loss_cuts_once_per_episode_and_the_loss_phase_grows_by_one_over_w_without_learning() {
        let mut now = Time::from_millis(10_000);
        let mut verus = settled(now);
        verus.window = 20.0;
        verus.on_sent(now, MSS, MSS);
        let before_loss = now;
        now += Duration::from_millis(1);
        let loss =
            LossEvent { bytes_lost: MSS, largest_lost_sent_time: before_loss, persistent: false, bytes_in_flight: 0 };
        verus.on_loss(now, &loss);
        assert!((verus.window - 14.0).abs() < 1e-9);
        verus.on_loss(now, &loss);
        assert!((verus.window - 14.0).abs() < 1e-9);
        // The estimate drops to the profile's delay of the new window.
        assert!((verus.delay_estimate - 54.0).abs() < 1e-9);
        // An ACK for a packet sent before the cut: +1/W, and the profile does not learn from it.
        let curve_before = verus.profile.delay_of(20.0);
        verus.on_ack(now, &ack(now, before_loss));
        assert!((verus.window - (14.0 + 1.0 / 14.0)).abs() < 1e-9);
        assert!(verus.loss_phase);
        assert_eq!(verus.profile.delay_of(20.0), curve_before);
        // The first ACK of a packet sent after the cut ends the loss phase.
        now += Duration::from_millis(1);
        let sent = now;
        verus.on_sent(sent, MSS, MSS);
        now += Duration::from_millis(45);
        verus.on_ack(now, &ack(now, sent));
        assert!(!verus.loss_phase);
    }

    #[test]
    fn a_window_the_sender_does_not_fill_neither_grows_nor_raises_the_estimate() {
        // Slow start: two packets in flight of a ten-packet window (something else holds the sender back).
        let mut verus = Verus::new(&config(), Time::ZERO);
        let initial = verus.window;
        verus.on_sent(Time::ZERO, MSS, 2 * MSS);
        let now = Time::from_millis(40);
        verus.on_ack(now, &ack(now, Time::ZERO));
        assert_eq!(verus.window, initial, "an unused window does not grow");
        verus.on_sent(now, MSS, initial as u64 * MSS);
        verus.on_ack(now, &ack(now, Time::ZERO));
        assert_eq!(verus.window, initial + 1.0, "a used one does");

        // Past slow start: a steady delay raises the estimate only while the window is in flight.
        let mut now = Time::from_millis(10_000);
        let mut verus = settled(now);
        verus.in_flight = InFlightPeak::default();
        verus.on_sent(now, MSS, 5 * MSS);
        assert_eq!(epoch_with_delay(&mut verus, &mut now, 60).0, 60.0, "5 packets in flight of about 20");
        verus.on_sent(now, MSS, 20 * MSS);
        assert_eq!(epoch_with_delay(&mut verus, &mut now, 60).0, 62.0);
    }

    #[test]
    fn slow_start_grows_per_ack_and_ends_above_half_a_second() {
        let mut verus = Verus::new(&config(), Time::ZERO);
        let initial = verus.window;
        verus.on_sent(Time::ZERO, MSS, initial as u64 * MSS);
        let mut now = Time::from_millis(100);
        verus.on_ack(now, &ack(now, Time::ZERO));
        assert_eq!(verus.window, initial + 1.0);
        assert!(verus.slow_start);
        now = Time::from_millis(700);
        verus.on_ack(now, &ack(now, Time::from_millis(150)));
        assert!(!verus.slow_start);
        assert!((verus.window - 0.7 * (initial + 2.0)).abs() < 1e-9);
        // The estimate restarts at 0.75 R times the minimum delay (100 ms).
        assert_eq!(verus.delay_estimate, 450.0);
    }

    #[test]
    fn fills_a_varying_cellular_like_link_at_moderate_delay() {
        // Grants every 10 ms on a 10 Mbit/s, 40 ms link with a deep buffer: Verus keeps it busy without filling
        // the buffer.
        let link = Link {
            rate: 1_250_000,
            one_way_delay: Duration::from_millis(20),
            buffer: 1000 * MSS,
            grant_interval: Duration::from_millis(10),
        };
        let mut sim = Simulation::new(link, MSS, Box::new(Verus::new(&config(), Time::ZERO)));
        let mut records = Vec::new();
        sim.run_until(Time::from_millis(30_000), |record, _| {
            if record.now >= Time::from_millis(5_000) {
                records.push(*record);
            }
        });
        let utilization = goodput(&records) / link.rate as f64;
        let mut delays: Vec<Duration> = records.iter().map(|r| r.queue_delay).collect();
        delays.sort();
        let p95 = delays[delays.len() * 95 / 100];
        println!("verus: utilization {utilization:.3}, p95 queueing delay {p95:?}");
        assert!(utilization >= 0.9, "utilization {utilization:.3}");
        // A full buffer would be 960 ms of queue.
        assert!(p95 <= Duration::from_millis(300), "p95 queueing delay {p95:?}");
    }
}
