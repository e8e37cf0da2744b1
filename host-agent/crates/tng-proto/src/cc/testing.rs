//! A deterministic bottleneck for driving any controller on virtual time.
//!
//! One bulk sender, one fixed-rate link with a drop-tail FIFO and a fixed propagation delay each way, one ACK per
//! packet. A cellular-like link can also release what it transmitted only at grant boundaries, a fixed interval
//! apart: same capacity, but a packet that finds the queue empty still waits for the next grant. FIFO order and constant delays fix each packet's fate when it is sent (dropped, or acknowledged at a known
//! time), so the simulation is a loop over sends and ACK arrivals. The sender plays the flow layer: RFC 9002 RTT
//! estimation, delivery-rate samples as in draft-cheng-iccrg-delivery-rate-estimation, pacing, and loss detection
//! that declares a dropped packet lost when a later packet is acknowledged (the link never reorders) or, failing
//! that, after a probe timeout of two smoothed RTTs. For Sprout the receiver can also run a
//! [`DeliveryForecaster`] on the packets' arrivals and send its forecast every tick, one propagation delay away.

use std::collections::VecDeque;
use std::time::Duration;

use super::{AckSample, CongestionController, DeliveryForecast, DeliveryForecaster, LossEvent};
use crate::time::Time;

/// The bottleneck.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    /// Bytes per second.
    pub rate: u64,
    /// Propagation delay each way.
    pub one_way_delay: Duration,
    /// Drop-tail buffer, in bytes.
    pub buffer: u64,
    /// Transmitted packets leave only at multiples of this interval (zero: as soon as they are transmitted), as a
    /// cellular scheduler hands out capacity in grants.
    pub grant_interval: Duration,
}

impl Link {
    fn transmission_time(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.rate as f64)
    }

    /// RTT of a packet of `bytes` that finds the queue empty and a grant starting.
    pub(crate) fn base_rtt(&self, bytes: u64) -> Duration {
        2 * self.one_way_delay + self.transmission_time(bytes)
    }

    /// When a packet transmitted by `transmitted` leaves the link: at the next grant boundary.
    fn release_time(&self, transmitted: Time) -> Time {
        let interval = u64::try_from(self.grant_interval.as_nanos()).unwrap_or(u64::MAX);
        if interval == 0 {
            return transmitted;
        }
        Time::from_nanos(transmitted.as_nanos().div_ceil(interval) * interval)
    }
}

/// What the sender saw when one ACK arrived, after the controller processed it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckRecord {
    pub now: Time,
    pub rtt: Duration,
    /// The part of `rtt` the packet spent waiting in the queue or for a grant.
    pub queue_delay: Duration,
    /// Congestion window after the ACK.
    pub window: u64,
    /// Bytes acknowledged since the start, this ACK included.
    pub delivered: u64,
}

#[derive(Clone, Copy, Debug)]
struct SentPacket {
    sent: Time,
    /// `None`: the queue dropped it.
    acked_at: Option<Time>,
    queue_delay: Duration,
    // Delivery-rate state when the packet left.
    delivered: u64,
    delivered_time: Time,
    first_sent_time: Time,
}

/// The receiver's forecaster and what travels between it and the sender.
struct ForecastingReceiver {
    forecaster: DeliveryForecaster,
    /// Arrival times of the packets on their way, in order (the link is FIFO).
    arrivals: VecDeque<Time>,
    /// Forecasts on their way back, with their arrival time at the sender.
    forecasts: VecDeque<(Time, DeliveryForecast)>,
}

/// One controller sending as fast as it is allowed over one [`Link`].
pub(crate) struct Simulation<C: ?Sized> {
    link: Link,
    mss: u64,
    now: Time,
    pub controller: Box<C>,
    /// Outstanding packets in send order.
    in_flight: VecDeque<SentPacket>,
    bytes_in_flight: u64,
    link_free_at: Time,
    next_send: Time,
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rtt: Duration,
    delivered: u64,
    delivered_time: Time,
    first_sent_time: Time,
    /// Bytes declared lost so far.
    pub lost: u64,
    receiver: Option<ForecastingReceiver>,
}

impl<C: CongestionController + ?Sized> Simulation<C> {
    pub(crate) fn new(link: Link, mss: u64, controller: Box<C>) -> Self {
        Simulation {
            link,
            mss,
            now: Time::ZERO,
            controller,
            in_flight: VecDeque::new(),
            bytes_in_flight: 0,
            link_free_at: Time::ZERO,
            next_send: Time::ZERO,
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: Duration::MAX,
            delivered: 0,
            delivered_time: Time::ZERO,
            first_sent_time: Time::ZERO,
            lost: 0,
            receiver: None,
        }
    }

    /// The receiver forecasts deliveries and sends the forecast every tick (what a Sprout sender needs).
    pub(crate) fn with_delivery_forecasts(mut self) -> Self {
        self.receiver = Some(ForecastingReceiver {
            forecaster: DeliveryForecaster::new(self.now),
            arrivals: VecDeque::new(),
            forecasts: VecDeque::new(),
        });
        self
    }

    /// Smoothed RTT as the flow layer would report it (zero before the first sample).
    fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(Duration::ZERO)
    }

    /// Runs until `end`, calling `observe` after every ACK the controller processed.
    pub(crate) fn run_until(&mut self, end: Time, mut observe: impl FnMut(&AckRecord, &C)) {
        loop {
            let next_ack = self.in_flight.iter().find_map(|p| p.acked_at);
            let probe_timeout = self.probe_deadline();
            let next_send = self.may_send().then_some(self.next_send.max(self.now));
            let next_forecast = self.receiver.as_ref().and_then(|r| r.forecasts.front()).map(|(at, _)| *at);
            let next_tick = self.receiver.as_ref().map(|r| r.forecaster.tick_end());
            let candidates = [next_ack, probe_timeout, next_forecast, next_tick, next_send];
            let Some(next) = candidates.into_iter().flatten().min() else {
                self.now = end;
                return;
            };
            if next > end {
                self.now = end;
                return;
            }
            self.now = next;
            if next_ack == Some(next) {
                let record = self.deliver_ack();
                observe(&record, &self.controller);
            } else if probe_timeout == Some(next) {
                self.declare_lost(self.in_flight.len());
            } else if next_forecast == Some(next) {
                if let Some((_, forecast)) = self.receiver.as_mut().and_then(|r| r.forecasts.pop_front()) {
                    self.controller.on_delivery_forecast(next, &forecast);
                }
            } else if next_tick == Some(next) {
                self.receiver_tick();
            } else {
                self.send();
            }
        }
    }

    /// The receiver's tick ends: it takes the arrivals before it, forecasts, and sends the forecast.
    fn receiver_tick(&mut self) {
        let now = self.now;
        let delay = self.link.one_way_delay;
        let Some(receiver) = self.receiver.as_mut() else { return };
        while let Some(at) = receiver.arrivals.front().copied().filter(|&at| at < now) {
            receiver.arrivals.pop_front();
            receiver.forecaster.on_arrival(at);
        }
        receiver.forecaster.advance_to(now);
        receiver.forecasts.push_back((now + delay, receiver.forecaster.forecast()));
    }

    fn may_send(&self) -> bool {
        self.bytes_in_flight + self.mss <= self.controller.window()
    }

    /// A probe timeout fires two smoothed RTTs after the oldest dropped packet, if no later ACK revealed it first.
    fn probe_deadline(&self) -> Option<Time> {
        let oldest_dropped = self.in_flight.iter().find(|p| p.acked_at.is_none())?;
        let pto = self.srtt.map_or(Duration::from_secs(1), |srtt| 2 * srtt);
        Some(oldest_dropped.sent + pto)
    }

    fn send(&mut self) {
        let now = self.now;
        if self.bytes_in_flight == 0 {
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        let queued = self.link_free_at.saturating_since(now);
        let queued_bytes = (queued.as_secs_f64() * self.link.rate as f64) as u64;
        let (acked_at, queue_delay) = if queued_bytes + self.mss > self.link.buffer {
            (None, Duration::ZERO)
        } else {
            let transmitted = self.link_free_at.max(now) + self.link.transmission_time(self.mss);
            self.link_free_at = transmitted;
            let departs = self.link.release_time(transmitted);
            let waited = queued + (departs - transmitted);
            if let Some(receiver) = self.receiver.as_mut() {
                receiver.arrivals.push_back(departs + self.link.one_way_delay);
            }
            (Some(departs + 2 * self.link.one_way_delay), waited)
        };
        self.in_flight.push_back(SentPacket {
            sent: now,
            acked_at,
            queue_delay,
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent_time: self.first_sent_time,
        });
        self.bytes_in_flight += self.mss;
        self.controller.on_sent(now, self.mss, self.bytes_in_flight);
        let rate = self.controller.pacing_rate(self.srtt());
        // Rate zero is a pause: probe again after a PTO, as the trait asks of callers.
        let gap = if rate == 0 {
            2 * self.srtt.unwrap_or(Duration::from_secs(1))
        } else {
            Duration::from_secs_f64(self.mss as f64 / rate as f64)
        };
        self.next_send = now + gap;
    }

    fn deliver_ack(&mut self) -> AckRecord {
        let now = self.now;
        let position = self.in_flight.iter().position(|p| p.acked_at == Some(now)).expect("an ACK is due");
        self.declare_lost(position);
        let packet = self.in_flight.pop_front().expect("the acknowledged packet is outstanding");
        self.bytes_in_flight -= self.mss;

        let rtt = now - packet.sent;
        self.min_rtt = self.min_rtt.min(rtt);
        self.srtt = Some(match self.srtt {
            None => {
                self.rttvar = rtt / 2;
                rtt
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + srtt.max(rtt) - srtt.min(rtt)) / 4;
                (7 * srtt + rtt) / 8
            }
        });

        self.delivered += self.mss;
        self.delivered_time = now;
        let interval = (packet.sent - packet.first_sent_time).max(now - packet.delivered_time);
        // A sample over less than the minimum RTT reflects ACK compression, not the path.
        let delivery_rate = (interval >= self.min_rtt)
            .then(|| ((self.delivered - packet.delivered) as f64 / interval.as_secs_f64()) as u64);
        self.first_sent_time = packet.sent;

        self.controller.on_ack(
            now,
            &AckSample {
                bytes_acked: self.mss,
                sent_time: packet.sent,
                rtt: Some(rtt),
                srtt: self.srtt(),
                min_rtt: self.min_rtt,
                delivery_rate,
                app_limited: false,
                bytes_in_flight: self.bytes_in_flight,
            },
        );
        AckRecord {
            now,
            rtt,
            queue_delay: packet.queue_delay,
            window: self.controller.window(),
            delivered: self.delivered,
        }
    }

    /// Declares the dropped packets among the first `count` outstanding ones lost, in one loss event.
    fn declare_lost(&mut self, count: usize) {
        let mut bytes_lost = 0;
        let mut largest_lost_sent_time = None;
        let mut kept = VecDeque::with_capacity(self.in_flight.len());
        for (index, packet) in self.in_flight.drain(..).enumerate() {
            if index < count && packet.acked_at.is_none() {
                bytes_lost += self.mss;
                largest_lost_sent_time = Some(packet.sent);
            } else {
                kept.push_back(packet);
            }
        }
        self.in_flight = kept;
        let Some(largest_lost_sent_time) = largest_lost_sent_time else { return };
        self.bytes_in_flight -= bytes_lost;
        self.lost += bytes_lost;
        self.controller.on_loss(
            self.now,
            &LossEvent { bytes_lost, largest_lost_sent_time, persistent: false, bytes_in_flight: self.bytes_in_flight },
        );
    }
}

/// Average rate in bytes per second between the first and last of `records`.
pub(crate) fn goodput(records: &[AckRecord]) -> f64 {
    match (records.first(), records.last()) {
        (Some(first), Some(last)) if last.now > first.now => {
            (last.delivered - first.delivered) as f64 / (last.now - first.now).as_secs_f64()
        }
        _ => 0.0,
    }
}
