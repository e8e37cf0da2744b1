//! Congestion control: one trait, one controller per channel.
//!
//! Every controller outputs both a congestion window and a pacing rate, because rate-driven designs (BBR, Copa)
//! need the pacer and window-driven ones need the window; the flow layer enforces both.
//!
//! In-network feedback (queue sharing, Tng section 4.3) reaches every controller through
//! [`CongestionController::on_feedback`]: loss-based controllers treat a queue above [`CcConfig::queue_threshold`] like
//! an ECN-CE mark, delay-based ones already see the shared queue in their RTT samples, and every controller caps its
//! pacing rate at the smallest rate a switch offered.

mod bbr;
mod copa;
mod cubic;
mod delay_profile;
mod delivery_forecast;
mod delivery_rate;
mod fixed_rate;
mod newreno;
mod pacing;
mod recovery;
mod sprout;
#[cfg(test)]
mod testing;
mod vegas;
mod verus;
mod windowed_filter;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::time::Time;

pub use bbr::Bbr;
pub use copa::Copa;
pub use cubic::Cubic;
pub use delivery_forecast::{DeliveryForecast, DeliveryForecaster, FORECAST_TICKS, TICK as FORECAST_TICK};
pub use delivery_rate::{DeliveryMark, DeliveryRateSampler};
pub use fixed_rate::FixedRate;
pub use newreno::NewReno;
pub use pacing::FALLBACK_RTT;
pub use sprout::Sprout;
pub use vegas::Vegas;
pub use verus::Verus;

/// What the flow layer knows when a packet is newly acknowledged.
#[derive(Clone, Copy, Debug)]
pub struct AckSample {
    /// Bytes newly acknowledged by this ACK.
    pub bytes_acked: u64,
    /// When the largest newly acknowledged packet was sent.
    pub sent_time: Time,
    /// RTT sample from the largest newly acknowledged packet (ack delay subtracted), if it produced one.
    pub rtt: Option<Duration>,
    /// Smoothed RTT after this sample (RFC 9002).
    pub srtt: Duration,
    /// Minimum RTT seen on the channel.
    pub min_rtt: Duration,
    /// Delivery rate sample in bytes per second (BBR-style rate sample), if one could be taken.
    pub delivery_rate: Option<u64>,
    /// The sender had less to send than the window allowed when the acknowledged packet left.
    pub app_limited: bool,
    /// Bytes still in flight after this ACK.
    pub bytes_in_flight: u64,
}

/// Packets declared lost by one loss-detection pass.
#[derive(Clone, Copy, Debug)]
pub struct LossEvent {
    pub bytes_lost: u64,
    /// Send time of the largest lost packet: a loss of a packet sent before the current recovery started does not
    /// cut the window again.
    pub largest_lost_sent_time: Time,
    /// RFC 9002 persistent congestion: the window collapses to the minimum.
    pub persistent: bool,
    pub bytes_in_flight: u64,
}

/// In-network feedback echoed by the receiver (the flow header's rewritable fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathFeedback {
    /// Largest queueing delay a switch reported along the path; `None` = neutral (no information).
    pub queue_delay: Option<Duration>,
    /// Smallest rate a switch offered, in bytes per second; `None` = neutral (no information). Each echo describes
    /// the path as it is now, so `None` lifts a cap an earlier echo set. `Some(0)` asks the sender to pause: see
    /// [`CongestionController::pacing_rate`].
    pub rate_hint: Option<u64>,
}

/// A congestion controller for one channel.
pub trait CongestionController: fmt::Debug + Send {
    /// A packet carrying `bytes` left; `bytes_in_flight` includes it.
    fn on_sent(&mut self, now: Time, bytes: u64, bytes_in_flight: u64);
    /// Packets were newly acknowledged.
    fn on_ack(&mut self, now: Time, ack: &AckSample);
    /// Packets were declared lost.
    fn on_loss(&mut self, now: Time, loss: &LossEvent);
    /// The peer reported new ECN-CE marks; `sent_time` is that of the largest acknowledged packet.
    fn on_ecn_ce(&mut self, now: Time, sent_time: Time);
    /// The peer echoed in-network feedback. Loss-based controllers treat a queue above the policy threshold as a
    /// congestion signal (queue sharing: the in-path queue is the last router of this section).
    fn on_feedback(&mut self, now: Time, sent_time: Time, feedback: &PathFeedback);
    /// The receiver's forecast of this channel's deliveries arrived (the DELIVERY_FORECAST frame, sent only to a
    /// controller whose [`CcKind::uses_delivery_forecast`] holds); the other controllers never see one.
    fn on_delivery_forecast(&mut self, _now: Time, _forecast: &DeliveryForecast) {}
    /// This channel carries `share` (0-1] of its connection's sending rate; 1 on a single path. A delay-based
    /// controller keeps that share of its queue target, so that a multipath connection queues no more in all than
    /// one path would (weighted Vegas, Cao, Xu and Fu, "Delay-based congestion control for multipath TCP", ICNP
    /// 2012): the connection stays fair to single-path flows at a shared bottleneck, and a path that carries little
    /// keeps little queued. The others ignore it.
    fn set_rate_share(&mut self, _share: f64) {}
    /// Congestion window in bytes.
    fn window(&self) -> u64;
    /// Pacing rate in bytes per second, given the channel's smoothed RTT (zero = no estimate yet: controllers then
    /// assume [`FALLBACK_RTT`], so the window rather than the pacer limits the first flight).
    ///
    /// Never zero, except while the latest in-network feedback carries `rate_hint: Some(0)` (a switch asks for a
    /// pause). Callers must treat zero as "send nothing now, probe again after a PTO": only a probe can bring back the
    /// feedback that ends the pause, so a sender that waited for the rate to change would wait forever.
    fn pacing_rate(&self, srtt: Duration) -> u64;
    /// Stable name, as accepted by [`CcKind::from_str`] (`fixed` for [`FixedRate`], which takes a rate).
    fn name(&self) -> &'static str;
    /// The controller's current phase, for traces: `slow_start`, `congestion_avoidance`, `recovery`, or BBR's mode
    /// (`startup`, `drain`, `probe_bw`, `probe_rtt`), `fixed_rate` for [`FixedRate`].
    fn state(&self) -> &'static str;
}

/// Tunables shared by every controller; each uses what applies to it.
#[derive(Clone, Debug, PartialEq)]
pub struct CcConfig {
    /// Maximum datagram payload the channel sends, in bytes.
    pub max_datagram_size: u64,
    /// Queue delay above which in-network feedback counts as congestion for loss-based controllers.
    pub queue_threshold: Option<Duration>,
    /// Copa's delta: the sender keeps about 1/delta packets queued. The default 0.1 is what Copa's authors run on
    /// Pantheon (genericCC `do_ss:auto:0.1`); the paper's 0.5 leaves a cellular link idle (see [`Copa`]). A value
    /// that is not finite and positive falls back to the default.
    pub copa_delta: f64,
}

impl CcConfig {
    /// Datagram size the controllers count in; never zero, so no window or rate can collapse to zero.
    pub fn datagram_size(&self) -> u64 {
        self.max_datagram_size.max(1)
    }

    /// RFC 9002 initial window: min(10 MSS, max(14720, 2 MSS)).
    pub fn initial_window(&self) -> u64 {
        let mss = self.datagram_size();
        14_720u64.clamp(mss.saturating_mul(2), mss.saturating_mul(10))
    }

    /// RFC 9002 minimum window: 2 MSS.
    pub fn minimum_window(&self) -> u64 {
        self.datagram_size().saturating_mul(2)
    }

    /// Whether in-network feedback reports a queue above the policy threshold (never, without a threshold).
    pub fn queue_exceeds_threshold(&self, feedback: &PathFeedback) -> bool {
        matches!((feedback.queue_delay, self.queue_threshold), (Some(delay), Some(threshold)) if delay > threshold)
    }

    fn copa_delta_or_default(&self) -> f64 {
        if self.copa_delta.is_finite() && self.copa_delta > 0.0 {
            self.copa_delta
        } else {
            CcConfig::default().copa_delta
        }
    }
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig { max_datagram_size: 1200, queue_threshold: None, copa_delta: 0.1 }
    }
}

/// The congestion controllers tng implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CcKind {
    NewReno,
    Cubic,
    Vegas,
    Copa,
    Bbr,
    Verus,
    Sprout,
}

impl CcKind {
    pub const ALL: [CcKind; 7] =
        [CcKind::NewReno, CcKind::Cubic, CcKind::Vegas, CcKind::Copa, CcKind::Bbr, CcKind::Verus, CcKind::Sprout];

    /// Whether the controller needs the receiver's delivery forecast: the receiving side of a channel whose
    /// controller is this kind runs a [`DeliveryForecaster`] and sends its forecast every tick.
    pub fn uses_delivery_forecast(self) -> bool {
        self == CcKind::Sprout
    }

    pub fn name(self) -> &'static str {
        match self {
            CcKind::NewReno => "newreno",
            CcKind::Cubic => "cubic",
            CcKind::Vegas => "vegas",
            CcKind::Copa => "copa",
            CcKind::Bbr => "bbr",
            CcKind::Verus => "verus",
            CcKind::Sprout => "sprout",
        }
    }
}

impl fmt::Display for CcKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a known congestion controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCc(pub String);

impl fmt::Display for UnknownCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = CcKind::ALL.iter().map(|k| k.name()).collect();
        write!(f, "unknown congestion controller {:?} (known: {})", self.0, known.join(", "))
    }
}

impl std::error::Error for UnknownCc {}

/// Builds a controller of `kind` for a channel that starts at `now`.
pub fn new_controller(kind: CcKind, config: &CcConfig, now: Time) -> Box<dyn CongestionController> {
    match kind {
        CcKind::NewReno => Box::new(NewReno::new(config)),
        CcKind::Cubic => Box::new(Cubic::new(config)),
        CcKind::Vegas => Box::new(Vegas::new(config, now)),
        CcKind::Copa => Box::new(Copa::new(config, now)),
        CcKind::Bbr => Box::new(Bbr::new(config, now)),
        CcKind::Verus => Box::new(Verus::new(config, now)),
        CcKind::Sprout => Box::new(Sprout::new(config)),
    }
}

impl FromStr for CcKind {
    type Err = UnknownCc;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CcKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| UnknownCc(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn every_kind_builds_a_controller_whose_name_round_trips() {
        let config = CcConfig::default();
        for kind in CcKind::ALL {
            let controller = new_controller(kind, &config, Time::ZERO);
            assert_eq!(controller.name(), kind.name());
            assert_eq!(controller.name().parse::<CcKind>(), Ok(kind));
            assert_eq!(controller.window(), config.initial_window(), "{kind}");
            assert!(controller.pacing_rate(Duration::ZERO) > 0, "{kind}");
        }
        assert_eq!("reno".parse::<CcKind>(), Err(UnknownCc("reno".to_owned())));
    }

    #[test]
    fn every_controller_fills_a_bottleneck_link() {
        // 10 Mbit/s, 40 ms propagation RTT, a one-BDP drop-tail buffer: enough for Reno-style halving to keep the
        // link busy, small enough that loss-based controllers do lose packets.
        let mss = 1200;
        let link = testing::Link {
            rate: 1_250_000,
            one_way_delay: Duration::from_millis(20),
            buffer: 42 * mss,
            grant_interval: Duration::ZERO,
        };
        let config = CcConfig { max_datagram_size: mss, ..CcConfig::default() };
        for kind in CcKind::ALL {
            let mut sim = testing::Simulation::new(link, mss, new_controller(kind, &config, Time::ZERO));
            if kind.uses_delivery_forecast() {
                sim = sim.with_delivery_forecasts();
            }
            let mut records = Vec::new();
            sim.run_until(Time::from_millis(12_000), |record, _| {
                if record.now >= Time::from_millis(4_000) {
                    records.push(*record);
                }
            });
            let utilization = testing::goodput(&records) / link.rate as f64;
            let mean_queue = records.iter().map(|r| r.queue_delay.as_secs_f64()).sum::<f64>() / records.len() as f64;
            println!(
                "{kind}: utilization {utilization:.3}, mean queueing delay {:.1} ms, lost {} bytes",
                1e3 * mean_queue,
                sim.lost
            );
            assert!(utilization >= 0.9, "{kind}: utilization {utilization:.3}");
        }
    }

    #[test]
    fn config_helpers_never_give_zero() {
        let zero_mss = CcConfig { max_datagram_size: 0, ..CcConfig::default() };
        assert_eq!(zero_mss.datagram_size(), 1);
        assert_eq!(zero_mss.initial_window(), 10);
        assert_eq!(zero_mss.minimum_window(), 2);
        let feedback = |ms| PathFeedback { queue_delay: Some(Duration::from_millis(ms)), rate_hint: None };
        let threshold = CcConfig { queue_threshold: Some(Duration::from_millis(10)), ..CcConfig::default() };
        assert!(!threshold.queue_exceeds_threshold(&feedback(10)));
        assert!(threshold.queue_exceeds_threshold(&feedback(11)));
        assert!(!threshold.queue_exceeds_threshold(&PathFeedback::default()));
        assert!(!CcConfig::default().queue_exceeds_threshold(&feedback(1_000)));
    }

    #[derive(Clone, Debug)]
    enum Event {
        Sent {
            bytes: u64,
            in_flight: u64,
        },
        Ack {
            bytes: u64,
            sent_ago: u64,
            rtt: Option<u64>,
            srtt: u64,
            rate: Option<u64>,
            app_limited: bool,
            in_flight: u64,
        },
        Loss {
            bytes: u64,
            sent_ago: u64,
            persistent: bool,
            in_flight: u64,
        },
        EcnCe {
            sent_ago: u64,
        },
        Feedback {
            sent_ago: u64,
            queue_delay: Option<u64>,
            rate_hint: Option<u64>,
        },
        Forecast {
            tick: u64,
            cumulative: Vec<u64>,
        },
        Advance {
            nanos: u64,
        },
    }

    /// Sizes and delays from zero to extreme, weighted toward plausible values.
    fn amount() -> impl Strategy<Value = u64> {
        prop_oneof![4 => 0..100_000u64, 2 => 0..20_000_000_000u64, 1 => Just(0), 1 => Just(u64::MAX)]
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (amount(), amount()).prop_map(|(bytes, in_flight)| Event::Sent { bytes, in_flight }),
            (
                amount(),
                amount(),
                proptest::option::of(amount()),
                amount(),
                proptest::option::of(amount()),
                any::<bool>(),
                amount()
            )
                .prop_map(|(bytes, sent_ago, rtt, srtt, rate, app_limited, in_flight)| Event::Ack {
                    bytes,
                    sent_ago,
                    rtt,
                    srtt,
                    rate,
                    app_limited,
                    in_flight
                }),
            (amount(), amount(), any::<bool>(), amount()).prop_map(|(bytes, sent_ago, persistent, in_flight)| {
                Event::Loss { bytes, sent_ago, persistent, in_flight }
            }),
            amount().prop_map(|sent_ago| Event::EcnCe { sent_ago }),
            (amount(), proptest::option::of(amount()), proptest::option::of(amount()))
                .prop_map(|(sent_ago, queue_delay, rate_hint)| Event::Feedback { sent_ago, queue_delay, rate_hint }),
            (amount(), proptest::collection::vec(amount(), 0..10))
                .prop_map(|(tick, cumulative)| Event::Forecast { tick, cumulative }),
            amount().prop_map(|nanos| Event::Advance { nanos }),
        ]
    }

    fn apply(controller: &mut dyn CongestionController, now: &mut Time, event: &Event) {
        let at = *now;
        let before = |nanos: u64| at - Duration::from_nanos(nanos);
        match *event {
            Event::Sent { bytes, in_flight } => controller.on_sent(at, bytes, in_flight),
            Event::Ack { bytes, sent_ago, rtt, srtt, rate, app_limited, in_flight } => controller.on_ack(
                at,
                &AckSample {
                    bytes_acked: bytes,
                    sent_time: before(sent_ago),
                    rtt: rtt.map(Duration::from_nanos),
                    srtt: Duration::from_nanos(srtt),
                    min_rtt: Duration::from_nanos(srtt / 2),
                    delivery_rate: rate,
                    app_limited,
                    bytes_in_flight: in_flight,
                },
            ),
            Event::Loss { bytes, sent_ago, persistent, in_flight } => controller.on_loss(
                at,
                &LossEvent {
                    bytes_lost: bytes,
                    largest_lost_sent_time: before(sent_ago),
                    persistent,
                    bytes_in_flight: in_flight,
                },
            ),
            Event::EcnCe { sent_ago } => controller.on_ecn_ce(at, before(sent_ago)),
            Event::Feedback { sent_ago, queue_delay, rate_hint } => controller.on_feedback(
                at,
                before(sent_ago),
                &PathFeedback { queue_delay: queue_delay.map(Duration::from_nanos), rate_hint },
            ),
            Event::Forecast { tick, ref cumulative } => controller
                .on_delivery_forecast(at, &DeliveryForecast { tick, received: 0, cumulative: cumulative.clone() }),
            Event::Advance { nanos } => *now = at + Duration::from_nanos(nanos),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn no_controller_panics_or_closes_its_window(
            events in proptest::collection::vec(event(), 0..100),
            mss in prop_oneof![Just(1200u64), 0..70_000u64],
            threshold in proptest::option::of(0..100_000_000u64),
            copa_delta in prop_oneof![Just(0.1), any::<f64>()],
        ) {
            let config = CcConfig {
                max_datagram_size: mss,
                queue_threshold: threshold.map(Duration::from_nanos),
                copa_delta,
            };
            for kind in CcKind::ALL {
                let mut controller = new_controller(kind, &config, Time::from_millis(1_000));
                let mut now = Time::from_millis(1_000);
                let mut paused = false;
                for event in &events {
                    apply(controller.as_mut(), &mut now, event);
                    if let Event::Feedback { rate_hint, .. } = event {
                        paused = *rate_hint == Some(0);
                    }
                    let window = controller.window();
                    prop_assert!(window >= config.minimum_window(), "{}: window {}", kind, window);
                    for srtt in [Duration::ZERO, Duration::from_nanos(1), Duration::from_millis(40), Duration::MAX] {
                        let rate = controller.pacing_rate(srtt);
                        prop_assert_eq!(rate == 0, paused, "{}: pacing {} with srtt {:?}", kind, rate, srtt);
                    }
                }
            }
        }
    }
}
