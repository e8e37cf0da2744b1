//! BBR v1 (Cardwell et al., 2016), following Linux `tcp_bbr.c`.

use std::time::Duration;

use super::pacing::{bytes_per_rtt, RateCap};
use super::recovery::RecoveryPeriod;
use super::windowed_filter::{Extremum, WindowedFilter};
use super::{AckSample, CcConfig, CongestionController, LossEvent, PathFeedback};
use crate::time::Time;

/// 2 / ln 2: the smallest gain that doubles the delivery rate every round in Startup.
const HIGH_GAIN: f64 = 2.885;
/// Drain empties the queue Startup built in about one round.
const DRAIN_GAIN: f64 = 1.0 / HIGH_GAIN;
/// Window of two BDPs in ProbeBW: room for delayed and aggregated ACKs.
const CWND_GAIN: f64 = 2.0;
/// ProbeBW: probe for more bandwidth, drain what the probe queued, then cruise six phases.
const PACING_GAIN_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// BtlBw is the largest delivery rate over this many round trips.
const BTL_BW_WINDOW_ROUNDS: u64 = 10;
/// RTprop is the smallest RTT over this long; when it expires, ProbeRTT measures it afresh.
const RT_PROP_WINDOW: Duration = Duration::from_secs(10);
const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// Smallest window, in packets: enough to keep the ACK clock running, also the ProbeRTT window.
const MIN_PIPE_PACKETS: u64 = 4;
/// The pipe is full when the bandwidth estimate grew less than this factor for `FULL_BW_ROUNDS` rounds.
const FULL_BW_GROWTH: f64 = 1.25;
const FULL_BW_ROUNDS: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// Models the path as a bottleneck bandwidth (BtlBw) and a round-trip propagation time (RTprop), and sends at
/// pacing_gain x BtlBw with at most cwnd_gain x BtlBw x RTprop in flight.
///
/// Rounds are counted in bytes: a round ends once every byte in flight at its start was delivered or declared lost.
/// BBR v1 ignores ECN-CE and in-path queue reports: both describe a queue its model already sees as RTT above
/// RTprop; a switch's rate hint caps the pacing rate like for every controller.
#[derive(Clone, Debug)]
pub struct Bbr {
    mss: u64,
    initial_window: u64,
    mode: Mode,
    /// Max filter over rounds of delivery-rate samples, bytes per second.
    btl_bw: WindowedFilter,
    rt_prop: Option<Duration>,
    rt_prop_stamp: Time,
    delivered: u64,
    lost: u64,
    round_count: u64,
    /// Delivered plus lost bytes at which the current round ends.
    round_end: u64,
    round_start: bool,
    full_bw: u64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    pacing_gain: f64,
    cwnd_gain: f64,
    cycle_index: usize,
    cycle_start: Time,
    probe_rtt_done: Option<Time>,
    probe_rtt_round_done: bool,
    /// Window to restore after recovery or ProbeRTT.
    prior_cwnd: u64,
    cwnd: u64,
    /// Set by the first ACK with an SRTT; before that, pacing derives from the caller's SRTT.
    pacing_rate: Option<u64>,
    recovery: RecoveryPeriod,
    in_recovery: bool,
    /// For the first round of recovery, send only as packets leave the network.
    packet_conservation: bool,
    lost_since_last_ack: bool,
    rate_cap: RateCap,
}

impl Bbr {
    pub fn new(config: &CcConfig, now: Time) -> Self {
        let mss = config.datagram_size();
        let initial_window = config.initial_window();
        Bbr {
            mss,
            initial_window,
            mode: Mode::Startup,
            btl_bw: WindowedFilter::new(Extremum::Max),
            rt_prop: None,
            rt_prop_stamp: now,
            delivered: 0,
            lost: 0,
            round_count: 0,
            round_end: 0,
            round_start: false,
            full_bw: 0,
            full_bw_rounds: 0,
            filled_pipe: false,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            cycle_index: 0,
            cycle_start: now,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            prior_cwnd: initial_window,
            cwnd: initial_window,
            pacing_rate: None,
            recovery: RecoveryPeriod::default(),
            in_recovery: false,
            packet_conservation: false,
            lost_since_last_ack: false,
            rate_cap: RateCap::default(),
        }
    }

    fn min_window(&self) -> u64 {
        self.mss.saturating_mul(MIN_PIPE_PACKETS)
    }

    /// gain x BtlBw x RTprop in bytes; the initial window until both are measured.
    fn inflight(&self, gain: f64) -> u64 {
        match (self.btl_bw.get(), self.rt_prop) {
            (Some(bw), Some(rt_prop)) => (gain * bw as f64 * rt_prop.as_secs_f64()) as u64,
            _ => self.initial_window,
        }
    }

    fn save_cwnd(&self) -> u64 {
        if self.in_recovery || self.mode == Mode::ProbeRtt {
            self.prior_cwnd.max(self.cwnd)
        } else {
            self.cwnd
        }
    }

    fn start_round_now(&mut self, bytes_in_flight: u64) {
        self.round_end = self.delivered.saturating_add(self.lost).saturating_add(bytes_in_flight);
    }

    fn update_round(&mut self, bytes_in_flight: u64) {
        self.round_start = self.delivered.saturating_add(self.lost) >= self.round_end;
        if self.round_start {
            self.round_count += 1;
            self.start_round_now(bytes_in_flight);
            self.packet_conservation = false;
        }
    }

    fn update_btl_bw(&mut self, ack: &AckSample) {
        let Some(rate) = ack.delivery_rate else { return };
        // An application-limited sample underestimates the path, unless it is already above the estimate.
        if !ack.app_limited || rate >= self.btl_bw.get().unwrap_or(0) {
            self.btl_bw.update(self.round_count, BTL_BW_WINDOW_ROUNDS, rate);
        }
    }

    fn enter_startup(&mut self) {
        self.mode = Mode::Startup;
        self.pacing_gain = HIGH_GAIN;
        self.cwnd_gain = HIGH_GAIN;
    }

    fn enter_probe_bw(&mut self, now: Time) {
        self.mode = Mode::ProbeBw;
        self.cwnd_gain = CWND_GAIN;
        // Start in a random phase other than the draining one, so flows that start together do not probe in step.
        // As Linux does with a PRNG, but derived from the clock to stay deterministic for given inputs.
        let offset = ((now.as_nanos() >> 10) % (PACING_GAIN_CYCLE.len() as u64 - 1)) as usize;
        self.cycle_index = PACING_GAIN_CYCLE.len() - 1 - offset;
        self.advance_cycle_phase(now);
    }

    fn advance_cycle_phase(&mut self, now: Time) {
        self.cycle_index = (self.cycle_index + 1) % PACING_GAIN_CYCLE.len();
        self.cycle_start = now;
        self.pacing_gain = PACING_GAIN_CYCLE[self.cycle_index];
    }

    fn update_cycle_phase(&mut self, now: Time, ack: &AckSample) {
        if self.mode != Mode::ProbeBw {
            return;
        }
        let full_length = now - self.cycle_start > self.rt_prop.unwrap_or_default();
        let prior_in_flight = ack.bytes_in_flight.saturating_add(ack.bytes_acked);
        let next = if self.pacing_gain > 1.0 {
            // Probe until the extra data is in flight (or loss says the pipe is full).
            full_length && (self.lost_since_last_ack || prior_in_flight >= self.inflight(self.pacing_gain))
        } else if self.pacing_gain < 1.0 {
            // Drain until the probe's queue is gone.
            full_length || prior_in_flight <= self.inflight(1.0)
        } else {
            full_length
        };
        if next {
            self.advance_cycle_phase(now);
        }
    }

    fn check_full_pipe(&mut self, ack: &AckSample) {
        if self.filled_pipe || !self.round_start || ack.app_limited {
            return;
        }
        let bw = self.btl_bw.get().unwrap_or(0);
        if bw as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
            return;
        }
        self.full_bw_rounds += 1;
        self.filled_pipe = self.full_bw_rounds >= FULL_BW_ROUNDS;
    }

    fn check_drain(&mut self, now: Time, bytes_in_flight: u64) {
        if self.mode == Mode::Startup && self.filled_pipe {
            self.mode = Mode::Drain;
            self.pacing_gain = DRAIN_GAIN;
            self.cwnd_gain = HIGH_GAIN;
        }
        if self.mode == Mode::Drain && bytes_in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
    }

    fn update_rt_prop(&mut self, now: Time, ack: &AckSample) {
        let expired = self.rt_prop.is_some() && now > self.rt_prop_stamp + RT_PROP_WINDOW;
        if let Some(rtt) = ack.rtt {
            if self.rt_prop.is_none_or(|rt_prop| rtt < rt_prop) || expired {
                self.rt_prop = Some(rtt);
                self.rt_prop_stamp = now;
            }
        }
        if expired && self.mode != Mode::ProbeRtt {
            self.prior_cwnd = self.save_cwnd();
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.probe_rtt_done = None;
        }
    }

    /// ProbeRTT holds the window at four packets for 200 ms and at least one round, then restores it.
    fn handle_probe_rtt(&mut self, now: Time, bytes_in_flight: u64) {
        if self.mode != Mode::ProbeRtt {
            return;
        }
        let Some(done) = self.probe_rtt_done else {
            if bytes_in_flight <= self.min_window() {
                self.probe_rtt_done = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.start_round_now(bytes_in_flight);
            }
            return;
        };
        self.probe_rtt_round_done |= self.round_start;
        if self.probe_rtt_round_done && now >= done {
            self.rt_prop_stamp = now;
            self.cwnd = self.cwnd.max(self.prior_cwnd);
            if self.filled_pipe {
                self.enter_probe_bw(now);
            } else {
                self.enter_startup();
            }
        }
    }

    fn update_pacing_rate(&mut self, srtt: Duration) {
        let rate = match self.btl_bw.get() {
            Some(bw) => ((self.pacing_gain * bw as f64) as u64).max(1),
            // Linux's initial rate, which early low samples must not undercut: the window per SRTT at Startup's gain.
            None if !srtt.is_zero() => bytes_per_rtt(HIGH_GAIN * self.cwnd as f64, srtt),
            None => return,
        };
        // Until the pipe is full, a low early sample must not slow Startup down.
        if self.filled_pipe || rate > self.pacing_rate.unwrap_or(0) {
            self.pacing_rate = Some(rate);
        }
    }

    fn update_cwnd(&mut self, ack: &AckSample) {
        let acked = ack.bytes_acked;
        if self.in_recovery && !self.recovery.covers(ack.sent_time) {
            self.in_recovery = false;
            self.packet_conservation = false;
            self.cwnd = self.cwnd.max(self.prior_cwnd);
        }
        if self.packet_conservation {
            self.cwnd = self.cwnd.max(ack.bytes_in_flight.saturating_add(acked));
        } else {
            let target = self.inflight(self.cwnd_gain);
            if self.filled_pipe {
                self.cwnd = self.cwnd.saturating_add(acked).min(target);
            } else if self.cwnd < target || self.delivered < self.initial_window {
                self.cwnd = self.cwnd.saturating_add(acked);
            }
        }
        self.cwnd = self.cwnd.max(self.min_window());
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.min_window());
        }
    }
}

impl CongestionController for Bbr {
    fn on_sent(&mut self, _now: Time, _bytes: u64, _bytes_in_flight: u64) {}

    fn on_ack(&mut self, now: Time, ack: &AckSample) {
        self.delivered = self.delivered.saturating_add(ack.bytes_acked);
        self.update_round(ack.bytes_in_flight);
        self.update_btl_bw(ack);
        self.update_cycle_phase(now, ack);
        self.check_full_pipe(ack);
        self.check_drain(now, ack.bytes_in_flight);
        self.update_rt_prop(now, ack);
        self.handle_probe_rtt(now, ack.bytes_in_flight);
        self.update_pacing_rate(ack.srtt);
        self.update_cwnd(ack);
        self.lost_since_last_ack = false;
    }

    fn on_loss(&mut self, now: Time, loss: &LossEvent) {
        self.lost = self.lost.saturating_add(loss.bytes_lost);
        self.lost_since_last_ack = true;
        let new_episode = self.recovery.enter(now, loss.largest_lost_sent_time);
        if new_episode || loss.persistent {
            self.prior_cwnd = self.save_cwnd();
            self.in_recovery = true;
        }
        if loss.persistent {
            // As Linux after a retransmission timeout: restart from the minimum window (restored once recovered)
            // and restart Startup's plateau detection.
            self.cwnd = self.min_window();
            self.packet_conservation = false;
            self.full_bw = 0;
        } else if new_episode {
            self.packet_conservation = true;
            self.start_round_now(loss.bytes_in_flight);
            self.cwnd = loss.bytes_in_flight.saturating_add(self.mss).max(self.min_window());
        } else {
            self.cwnd = self.cwnd.saturating_sub(loss.bytes_lost).max(self.min_window());
        }
    }

    fn on_ecn_ce(&mut self, _now: Time, _sent_time: Time) {}

    fn on_feedback(&mut self, _now: Time, _sent_time: Time, feedback: &PathFeedback) {
        self.rate_cap.update(feedback);
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn pacing_rate(&self, srtt: Duration) -> u64 {
        let rate = self.pacing_rate.unwrap_or_else(|| bytes_per_rtt(HIGH_GAIN * self.cwnd as f64, srtt));
        self.rate_cap.apply(rate)
    }

    fn name(&self) -> &'static str {
        "bbr"
    }

    fn state(&self) -> &'static str {
        match self.mode {
            Mode::Startup => "startup",
            Mode::Drain => "drain",
            Mode::ProbeBw => "probe_bw",
            Mode::ProbeRtt => "probe_rtt",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{Link, Simulation};

    const MSS: u64 = 1200;

    /// 10 Mbit/s, 40 ms propagation RTT, a 200-packet buffer that Startup's 2.9 BDP never overflows.
    fn link() -> Link {
        Link {
            rate: 1_250_000,
            one_way_delay: Duration::from_millis(20),
            buffer: 200 * MSS,
            grant_interval: Duration::ZERO,
        }
    }

    fn simulation() -> Simulation<Bbr> {
        let config = CcConfig { max_datagram_size: MSS, ..CcConfig::default() };
        Simulation::new(link(), MSS, Box::new(Bbr::new(&config, Time::ZERO)))
    }

    #[test]
    fn estimates_the_link_after_startup_and_enters_probe_bw() {
        let mut sim = simulation();
        let mut modes = vec![Mode::Startup];
        sim.run_until(Time::from_millis(3_000), |_, bbr| {
            if modes.last() != Some(&bbr.mode) {
                modes.push(bbr.mode);
            }
        });
        assert_eq!(modes, [Mode::Startup, Mode::Drain, Mode::ProbeBw]);
        let bbr = &sim.controller;
        let bw_error = bbr.btl_bw.get().unwrap_or(0) as f64 / link().rate as f64 - 1.0;
        let rt_prop = bbr.rt_prop.unwrap_or_default().as_secs_f64();
        let rt_prop_error = rt_prop / 0.040 - 1.0;
        println!(
            "bbr: BtlBw error {:+.2}%, RTprop {:.2} ms ({:+.2}%)",
            100.0 * bw_error,
            1e3 * rt_prop,
            100.0 * rt_prop_error
        );
        assert!(bw_error.abs() <= 0.05);
        assert!(rt_prop_error.abs() <= 0.03);
        assert_eq!(sim.lost, 0);
    }

    #[test]
    fn probe_bw_cycles_through_the_pacing_gains() {
        let mut sim = simulation();
        // (gain, phase start) for every phase entered in ProbeBW.
        let mut phases: Vec<(usize, Time)> = Vec::new();
        sim.run_until(Time::from_millis(6_000), |record, bbr| {
            if bbr.mode == Mode::ProbeBw && phases.last().is_none_or(|&(index, _)| index != bbr.cycle_index) {
                phases.push((bbr.cycle_index, record.now));
            }
        });
        assert!(phases.len() >= 24, "three full cycles in {} phases", phases.len());
        assert_ne!(phases[0].0, 1, "ProbeBW never starts in the draining phase");
        let rt_prop = sim.controller.rt_prop.unwrap_or_default();
        for pair in phases.windows(2) {
            let ((index, start), (next, end)) = (pair[0], pair[1]);
            assert_eq!(next, (index + 1) % 8);
            // Every phase but the draining one lasts at least RTprop (draining may end early once the queue is gone).
            if index != 1 {
                assert!(end - start >= rt_prop, "phase {index} lasted {:?}", end - start);
            }
        }
        let gains: Vec<f64> = phases.iter().map(|&(index, _)| PACING_GAIN_CYCLE[index]).collect();
        assert!(gains.windows(3).any(|w| w == [1.25, 0.75, 1.0]));
        // The probing phase puts more data in flight than the cruising ones.
        let pacing = |index| PACING_GAIN_CYCLE[index] * sim.controller.btl_bw.get().unwrap_or(0) as f64;
        assert!(pacing(0) > pacing(2) && pacing(2) > pacing(1));
    }

    #[test]
    fn probe_rtt_after_ten_seconds_without_a_new_minimum() {
        let mut sim = simulation();
        let mut last_new_min = Time::ZERO;
        let mut rt_prop = None;
        let mut entered = None;
        let mut exited = None;
        let mut max_window_in_probe_rtt = 0;
        sim.run_until(Time::from_millis(11_000), |record, bbr| {
            // The ACK that enters ProbeRTT also replaces the expired estimate: that is not a new minimum.
            if bbr.mode != Mode::ProbeRtt && entered.is_none() && bbr.rt_prop != rt_prop {
                rt_prop = bbr.rt_prop;
                last_new_min = record.now;
            }
            match (bbr.mode, entered, exited) {
                (Mode::ProbeRtt, None, _) => entered = Some(record.now),
                (Mode::ProbeRtt, Some(_), None) => max_window_in_probe_rtt = max_window_in_probe_rtt.max(bbr.cwnd),
                (Mode::ProbeBw, Some(_), None) => exited = Some((record.now, bbr.cwnd)),
                _ => {}
            }
        });
        let entered = entered.expect("ProbeRTT entered");
        let (exited, cwnd_after) = exited.expect("ProbeRTT left");
        let quiet = entered - last_new_min;
        println!("bbr: ProbeRTT {:?} after the last new minimum, for {:?}", quiet, exited - entered);
        assert!(quiet >= RT_PROP_WINDOW && quiet <= RT_PROP_WINDOW + Duration::from_millis(100));
        assert!(exited - entered >= PROBE_RTT_DURATION);
        assert!(max_window_in_probe_rtt <= MIN_PIPE_PACKETS * MSS);
        // Back in ProbeBW with the window from before ProbeRTT.
        assert!(cwnd_after >= sim.controller.inflight(1.0));
    }

    #[test]
    fn loss_conserves_packets_then_restores_the_window() {
        let config = CcConfig { max_datagram_size: MSS, ..CcConfig::default() };
        let mut bbr = Bbr::new(&config, Time::ZERO);
        bbr.cwnd = 100 * MSS;
        let loss = LossEvent {
            bytes_lost: MSS,
            largest_lost_sent_time: Time::from_millis(50),
            persistent: false,
            bytes_in_flight: 20 * MSS,
        };
        bbr.on_loss(Time::from_millis(100), &loss);
        assert_eq!(bbr.window(), 21 * MSS);
        let ack = |sent_ms, in_flight| AckSample {
            bytes_acked: MSS,
            sent_time: Time::from_millis(sent_ms),
            rtt: Some(Duration::from_millis(40)),
            srtt: Duration::from_millis(40),
            min_rtt: Duration::from_millis(40),
            delivery_rate: None,
            app_limited: false,
            bytes_in_flight: in_flight,
        };
        // Conservation: the window follows what is in flight plus what was just acknowledged.
        bbr.on_ack(Time::from_millis(110), &ack(60, 30 * MSS));
        assert_eq!(bbr.window(), 31 * MSS);
        // An ACK of a packet sent after recovery began ends it and restores the window.
        bbr.on_ack(Time::from_millis(150), &ack(101, 30 * MSS));
        assert!(bbr.window() >= 100 * MSS);
    }

    #[test]
    fn rate_hint_caps_pacing_and_queue_reports_do_not_change_the_window() {
        let mut sim = simulation();
        sim.run_until(Time::from_millis(2_000), |_, _| {});
        let bbr = &mut sim.controller;
        let window = bbr.window();
        let uncapped = bbr.pacing_rate(Duration::from_millis(40));
        let hint = PathFeedback { queue_delay: Some(Duration::from_secs(1)), rate_hint: Some(uncapped / 2) };
        bbr.on_feedback(Time::from_millis(2_000), Time::from_millis(1_900), &hint);
        assert_eq!(bbr.pacing_rate(Duration::from_millis(40)), uncapped / 2);
        assert_eq!(bbr.window(), window);
        bbr.on_feedback(Time::from_millis(2_000), Time::from_millis(1_900), &PathFeedback::default());
        assert_eq!(bbr.pacing_rate(Duration::from_millis(40)), uncapped);
    }
}
