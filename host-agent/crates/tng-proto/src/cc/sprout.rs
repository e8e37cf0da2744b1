//! Sprout's sender (Winstein, Sivaraman and Balakrishnan, NSDI 2013, section 3.4).
//!
//! The receiver forecasts the channel's deliveries ([`super::DeliveryForecaster`]) and sends the forecast every
//! tick; the sender's window is what the link will deliver, with 95% probability, over the target delay plus the
//! minimum RTT. The flow layer lets out the window minus the bytes in flight, so the bytes sent beyond the pipe (the
//! queue) are those the forecast says the link drains within the target delay: the paper's "forecast minus what
//! is already queued".
//!
//! One addition: the paper's receiver knows from each packet's "time to next" when the sender, not the link, kept
//! the arrivals low, and does not take those ticks as the link's rate (censored observations). tng's packets do not
//! carry that, so a receiver fed by a sender that holds back sees a slow link, forecasts little, and the sender
//! holds back more: the window would stay at its minimum on an idle link. The sender knows when it holds back, as
//! its packets then see no queue: while they do, it grows the window per acknowledged byte as slow start does, so
//! the link fills, its queue forms, and the arrivals the receiver sees are the link's again.

use std::time::Duration;

use super::delivery_forecast::TICK;
use super::pacing::{bytes_per_rtt, RateCap};
use super::{AckSample, CcConfig, CongestionController, DeliveryForecast, LossEvent, PathFeedback};
use crate::time::Time;

/// The paper's target: a packet sent now should be delivered within 100 ms, with 95% probability.
const TARGET_DELAY: Duration = Duration::from_millis(100);
/// Pacing at twice the window per RTT spreads the sends without limiting the window.
const PACING_GAIN: f64 = 2.0;
/// An RTT less than this above the minimum means the packet found no queue: the sender, not the link, limited it.
const NO_QUEUE_MARGIN: Duration = Duration::from_millis(10);

/// Sprout: the window follows the receiver's cautious delivery forecast, and grows as in slow start while the
/// sender's packets find no queue (see the module documentation). Losses do not change it: the forecast already
/// reflects what the link delivers. Until the first forecast it is in slow start, which stops at the first queue;
/// a receiver that never sends forecasts leaves it there.
#[derive(Clone, Debug)]
pub struct Sprout {
    mss: u64,
    min_window: u64,
    /// The forecast's window.
    forecast_window: u64,
    /// The window slow start grew to while the packets found no queue; zero once they do.
    probe_window: u64,
    /// The latest forecast and when it arrived.
    forecast: Option<(Time, DeliveryForecast)>,
    min_rtt: Duration,
    rate_cap: RateCap,
}

impl Sprout {
    pub fn new(config: &CcConfig) -> Self {
        Sprout {
            mss: config.datagram_size(),
            min_window: config.minimum_window(),
            forecast_window: config.minimum_window(),
            probe_window: config.initial_window(),
            forecast: None,
            min_rtt: Duration::ZERO,
            rate_cap: RateCap::default(),
        }
    }

    /// Recomputes the window at `now`: the forecast deliveries from now to now + target delay + minimum RTT.
    fn refresh(&mut self, now: Time) {
        let Some((received_at, forecast)) = &self.forecast else { return };
        let tick = TICK.as_secs_f64();
        let elapsed = now.saturating_since(*received_at).as_secs_f64() / tick;
        let horizon = (TARGET_DELAY + self.min_rtt).as_secs_f64() / tick;
        let packets =
            cumulative_at(&forecast.cumulative, elapsed + horizon) - cumulative_at(&forecast.cumulative, elapsed);
        // `as` saturates, so a huge forecast stays finite.
        self.forecast_window = ((packets * self.mss as f64) as u64).max(self.min_window);
    }

    fn current_window(&self) -> u64 {
        self.forecast_window.max(self.probe_window)
    }
}

/// The forecast's cumulative deliveries after `ticks` (fractional) ticks: linear within a tick, and past the last
/// tick at the last tick's rate.
fn cumulative_at(cumulative: &[u64], ticks: f64) -> f64 {
    let Some(&last) = cumulative.last() else { return 0.0 };
    let at = |index: usize| if index == 0 { 0.0 } else { cumulative[index - 1] as f64 };
    let whole = ticks.floor() as usize;
    if whole >= cumulative.len() {
        let slope = last as f64 - at(cumulative.len() - 1);
        return last as f64 + slope * (ticks - cumulative.len() as f64);
    }
    at(whole) + (at(whole + 1) - at(whole)) * (ticks - whole as f64)
}

impl CongestionController for Sprout {
    fn on_sent(&mut self, now: Time, _bytes: u64, _bytes_in_flight: u64) {
        self.refresh(now);
    }

    fn on_ack(&mut self, now: Time, ack: &AckSample) {
        if !ack.min_rtt.is_zero() {
            self.min_rtt = ack.min_rtt;
        }
        self.refresh(now);
        match ack.rtt {
            Some(rtt) if rtt < self.min_rtt + NO_QUEUE_MARGIN => {
                self.probe_window = self.probe_window.max(self.forecast_window).saturating_add(ack.bytes_acked);
            }
            // Without forecasts (a receiver that does not send them) the window stays where slow start left it.
            Some(_) if self.forecast.is_some() => self.probe_window = 0,
            _ => {}
        }
    }

    fn on_loss(&mut self, _now: Time, _loss: &LossEvent) {}

    fn on_ecn_ce(&mut self, _now: Time, _sent_time: Time) {}

    fn on_feedback(&mut self, _now: Time, _sent_time: Time, feedback: &PathFeedback) {
        self.rate_cap.update(feedback);
    }

    fn on_delivery_forecast(&mut self, now: Time, forecast: &DeliveryForecast) {
        if self.forecast.as_ref().is_some_and(|(_, latest)| latest.tick >= forecast.tick) {
            // Reordered: an older forecast says less than the one in hand.
            return;
        }
        self.forecast = Some((now, forecast.clone()));
        self.refresh(now);
    }

    fn window(&self) -> u64 {
        self.current_window()
    }

    fn pacing_rate(&self, srtt: Duration) -> u64 {
        self.rate_cap.apply(bytes_per_rtt(PACING_GAIN * self.current_window() as f64, srtt))
    }

    fn name(&self) -> &'static str {
        "sprout"
    }

    fn state(&self) -> &'static str {
        if self.forecast.is_none() {
            "startup"
        } else if self.probe_window > self.forecast_window {
            "slow_start"
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

    fn forecast(tick: u64, cumulative: Vec<u64>) -> DeliveryForecast {
        DeliveryForecast { tick, received: 0, cumulative }
    }

    /// An ACK whose packet saw `rtt_ms`, on a path of minimum RTT `min_rtt_ms`.
    fn ack(now: Time, rtt_ms: u64, min_rtt_ms: u64) -> AckSample {
        AckSample {
            bytes_acked: MSS,
            sent_time: now,
            rtt: Some(Duration::from_millis(rtt_ms)),
            srtt: Duration::from_millis(min_rtt_ms),
            min_rtt: Duration::from_millis(min_rtt_ms),
            delivery_rate: None,
            app_limited: false,
            bytes_in_flight: 0,
        }
    }

    #[test]
    fn the_window_is_the_forecast_over_the_target_delay_plus_the_minimum_rtt() {
        let mut sprout = Sprout::new(&config());
        let now = Time::from_millis(1_000);
        // 10 packets per tick; no RTT measured yet: 100 ms is 5 ticks, 50 packets.
        sprout.on_delivery_forecast(now, &forecast(5, (1..=8).map(|tick| 10 * tick).collect()));
        assert_eq!(sprout.window(), 50 * MSS);
        // A packet that found a queue on a 40 ms path: 140 ms is 7 ticks, 70 packets.
        sprout.on_ack(now, &ack(now, 90, 40));
        assert_eq!(sprout.window(), 70 * MSS);
        assert_eq!(sprout.state(), "congestion_avoidance");
        // A forecast that slows down over the horizon: 7 ticks deliver 5 * 3 + 10 * 4 packets.
        sprout.on_delivery_forecast(now, &forecast(6, vec![10, 20, 30, 40, 45, 50, 55, 60]));
        assert_eq!(sprout.window(), 55 * MSS);
        // An older forecast arriving late changes nothing.
        sprout.on_delivery_forecast(now, &forecast(4, vec![1; 8]));
        assert_eq!(sprout.window(), 55 * MSS);
    }

    #[test]
    fn the_window_moves_along_the_forecast_as_it_ages_and_extrapolates_past_its_end() {
        let mut sprout = Sprout::new(&config());
        let start = Time::from_millis(1_000);
        sprout.on_ack(start, &ack(start, 90, 60));
        // 160 ms horizon = 8 ticks; from 2 ticks on, the forecast runs out and continues at its last rate.
        sprout.on_delivery_forecast(start, &forecast(1, vec![20, 40, 60, 70, 80, 90, 100, 110]));
        assert_eq!(sprout.window(), 110 * MSS);
        let later = start + 2 * TICK;
        sprout.on_sent(later, MSS, MSS);
        // Ticks 3 to 10: 70 packets from ticks 3-8 and 20 extrapolated for ticks 9 and 10.
        assert_eq!(sprout.window(), 90 * MSS);
    }

    #[test]
    fn an_outage_forecast_closes_the_window_to_the_minimum_and_losses_do_not_move_it() {
        let mut sprout = Sprout::new(&config());
        let now = Time::from_millis(1_000);
        sprout.on_delivery_forecast(now, &forecast(1, vec![0; 8]));
        sprout.on_ack(now, &ack(now, 90, 40));
        assert_eq!(sprout.window(), config().minimum_window());
        sprout.on_delivery_forecast(now, &forecast(2, (1..=8).map(|tick| 10 * tick).collect()));
        let window = sprout.window();
        let loss = LossEvent { bytes_lost: MSS, largest_lost_sent_time: now, persistent: true, bytes_in_flight: 0 };
        sprout.on_loss(now, &loss);
        assert_eq!(sprout.window(), window);
    }

    #[test]
    fn grows_as_slow_start_while_its_packets_find_no_queue() {
        let mut sprout = Sprout::new(&config());
        assert_eq!(sprout.window(), config().initial_window());
        assert_eq!(sprout.state(), "startup");
        let now = Time::from_millis(1_000);
        // The receiver saw only what the sender sent: the forecast is small.
        sprout.on_delivery_forecast(now, &forecast(1, vec![1, 2, 3, 4, 5, 6, 7, 8]));
        for _ in 0..20 {
            sprout.on_ack(now, &ack(now, 45, 40));
        }
        assert_eq!(sprout.window(), config().initial_window() + 20 * MSS);
        assert_eq!(sprout.state(), "slow_start");
        // A queue formed: the forecast describes the link again and the window is the forecast's.
        sprout.on_ack(now, &ack(now, 60, 40));
        assert_eq!(sprout.window(), 7 * MSS);
        assert_eq!(sprout.state(), "congestion_avoidance");
    }

    #[test]
    fn without_forecasts_slow_start_stops_at_the_first_queue() {
        let mut sprout = Sprout::new(&config());
        let now = Time::from_millis(1_000);
        for _ in 0..10 {
            sprout.on_ack(now, &ack(now, 45, 40));
        }
        sprout.on_ack(now, &ack(now, 90, 40));
        sprout.on_ack(now, &ack(now, 45, 40));
        assert_eq!(sprout.window(), config().initial_window() + 11 * MSS);
        sprout.on_ack(now, &ack(now, 90, 40));
        assert_eq!(sprout.window(), config().initial_window() + 11 * MSS);
        assert_eq!(sprout.state(), "startup");
    }

    #[test]
    fn keeps_the_queue_near_the_target_on_a_busy_link() {
        // 10 Mbit/s, 40 ms, a buffer of a second: Sprout's forecast keeps the queue near its 100 ms target
        // instead of filling the buffer.
        let link = Link {
            rate: 1_250_000,
            one_way_delay: Duration::from_millis(20),
            buffer: 1000 * MSS,
            grant_interval: Duration::from_millis(10),
        };
        let mut sim = Simulation::new(link, MSS, Box::new(Sprout::new(&config()))).with_delivery_forecasts();
        let mut records = Vec::new();
        sim.run_until(Time::from_millis(20_000), |record, _| {
            if record.now >= Time::from_millis(5_000) {
                records.push(*record);
            }
        });
        let utilization = goodput(&records) / link.rate as f64;
        let mut delays: Vec<Duration> = records.iter().map(|r| r.queue_delay).collect();
        delays.sort();
        let p95 = delays[delays.len() * 95 / 100];
        println!("sprout: utilization {utilization:.3}, p95 queueing delay {p95:?}");
        assert!(utilization >= 0.7, "utilization {utilization:.3}");
        assert!(p95 <= Duration::from_millis(150), "p95 queueing delay {p95:?}");
    }
}
