//! One direction of a link: a drop-tail queue served at a constant rate or by a delivery trace, then propagation
//! delay with optional jitter, random loss, ECN marking and the switch's feedback rewrite.
//!
//! The queue is FIFO and its service schedule depends only on arrivals, so a packet's departure time is known the
//! moment it is queued. The link therefore decides a packet's whole fate at enqueue time and the simulator needs a
//! single event per packet and hop (its arrival at the far end). A link that goes down bumps its generation: packets
//! still queued or on the wire carry the old generation and are discarded when they would arrive.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::datagram::{Datagram, Ecn};
use crate::feedback::{self, SwitchObservation};
use crate::loss::{LossModel, LossProcess, LossStep};
use crate::rng::SimRng;
use crate::trace::{DeliveryTrace, OPPORTUNITY_BYTES};

/// How the link drains its queue.
#[derive(Clone, Debug, PartialEq)]
pub enum Service {
    /// A constant bit rate.
    Rate { bits_per_second: u64 },
    /// Delivery opportunities from a Mahimahi trace, one packet each.
    Trace(Arc<DeliveryTrace>),
}

impl Service {
    /// Average capacity in bits per second.
    pub fn mean_rate_bps(&self) -> f64 {
        match self {
            Service::Rate { bits_per_second } => *bits_per_second as f64,
            Service::Trace(trace) => trace.mean_rate_bps(),
        }
    }
}

/// Drop-tail limit of the queue (the packet being transmitted counts as queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    Unlimited,
    Packets(usize),
    Bytes(u64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct LinkParams {
    pub service: Service,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from [0, jitter] per packet.
    pub jitter: Duration,
    /// Whether jitter may reorder packets; without it a packet never arrives before the one queued ahead of it.
    pub reorder: bool,
    pub loss: LossModel,
    /// Later loss rates, in time order: each replaces `loss` from its time on.
    pub loss_steps: Vec<LossStep>,
    pub queue_limit: QueueLimit,
    /// ECN-capable packets that waited longer than this in the queue are marked CE.
    pub ecn_threshold: Option<Duration>,
    /// Rewrite the tng feedback fields on packets leaving the queue, as a P4 switch at this queue would.
    pub switch_feedback: bool,
    /// Bytes below the UDP payload that occupy the link (IPv4 + UDP headers = 28).
    pub framing_bytes: u32,
}

impl LinkParams {
    /// A lossless constant-rate link with an unlimited queue: the starting point tests and scenarios refine.
    pub fn constant_rate(bits_per_second: u64, delay: Duration) -> LinkParams {
        LinkParams {
            service: Service::Rate { bits_per_second },
            delay,
            jitter: Duration::ZERO,
            reorder: false,
            loss: LossModel::None,
            loss_steps: Vec::new(),
            queue_limit: QueueLimit::Unlimited,
            ecn_threshold: None,
            switch_feedback: false,
            framing_bytes: 28,
        }
    }
}

/// Why a link discarded a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropCause {
    LinkDown,
    QueueFull,
    RandomLoss,
    /// Larger than one trace delivery opportunity.
    Oversized,
}

/// What becomes of a packet handed to the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It reaches the far end at `at`, unless the link goes down first (`generation` no longer current).
    Arrives {
        at: Duration,
        generation: u64,
    },
    Dropped(DropCause),
}

/// Counters of one link direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub offered_packets: u64,
    /// Packets that left the queue (including those then lost at random).
    pub transmitted_packets: u64,
    /// Bytes on the wire (payload + framing) of transmitted packets.
    pub transmitted_bytes: u64,
    pub queue_drops: u64,
    pub random_drops: u64,
    pub down_drops: u64,
    pub ecn_marks: u64,
    pub feedback_rewrites: u64,
}

pub struct Link {
    params: LinkParams,
    rng: SimRng,
    loss: LossProcess,
    /// Departure times and wire sizes of packets still queued or in transmission.
    queue: VecDeque<(Duration, u64)>,
    queued_bytes: u64,
    /// When the last queued packet finishes transmission (constant-rate service).
    busy_until: Duration,
    /// Global index of the next unused trace opportunity.
    next_opportunity: u64,
    last_arrival: Duration,
    up: bool,
    generation: u64,
    stats: LinkStats,
}

impl Link {
    pub fn new(params: LinkParams, rng: SimRng) -> Link {
        let loss = LossProcess::new(params.loss, params.loss_steps.clone());
        Link {
            params,
            rng,
            loss,
            queue: VecDeque::new(),
            queued_bytes: 0,
            busy_until: Duration::ZERO,
            next_opportunity: 0,
            last_arrival: Duration::ZERO,
            up: true,
            generation: 0,
            stats: LinkStats::default(),
        }
    }

    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Whether a packet accepted with `generation` survived every outage since.
    pub fn is_current(&self, generation: u64) -> bool {
        self.up && generation == self.generation
    }

    /// Takes the link down (everything queued or on the wire is lost) or brings it back up.
    pub fn set_up(&mut self, now: Duration, up: bool) {
        if self.up == up {
            return;
        }
        self.up = up;
        if !up {
            self.generation += 1;
            self.queue.clear();
            self.queued_bytes = 0;
            self.busy_until = now;
            self.last_arrival = now;
            if let Service::Trace(trace) = &self.params.service {
                self.next_opportunity = self.next_opportunity.max(trace.first_opportunity_at_or_after(now));
            }
        }
    }

    /// Packets currently queued or in transmission.
    pub fn queued_packets(&mut self, now: Duration) -> usize {
        self.release_departed(now);
        self.queue.len()
    }

    /// Hands a datagram to the link at `now`; may mark its ECN bits and rewrite its feedback fields.
    pub fn transmit(&mut self, now: Duration, datagram: &mut Datagram) -> Fate {
        self.stats.offered_packets += 1;
        if !self.up {
            self.stats.down_drops += 1;
            return Fate::Dropped(DropCause::LinkDown);
        }
        self.release_departed(now);
        let wire_bytes = datagram.payload.len() as u64 + u64::from(self.params.framing_bytes);
        if self.queue_would_overflow(wire_bytes) {
            self.stats.queue_drops += 1;
            return Fate::Dropped(DropCause::QueueFull);
        }
        let Some((service_start, departure)) = self.schedule_departure(now, wire_bytes) else {
            self.stats.queue_drops += 1;
            return Fate::Dropped(DropCause::Oversized);
        };
        self.queue.push_back((departure, wire_bytes));
        self.queued_bytes += wire_bytes;
        self.stats.transmitted_packets += 1;
        self.stats.transmitted_bytes += wire_bytes;

        // Random loss strikes after the queue: the lost packet still used its share of the capacity.
        if self.loss.next_is_lost(now, &mut self.rng) {
            self.stats.random_drops += 1;
            return Fate::Dropped(DropCause::RandomLoss);
        }
        let queue_delay = service_start.saturating_sub(now);
        if datagram.ecn.is_ect() && self.params.ecn_threshold.is_some_and(|threshold| queue_delay > threshold) {
            datagram.ecn = Ecn::Ce;
            self.stats.ecn_marks += 1;
        }
        if self.params.switch_feedback {
            let observation = SwitchObservation { queue_delay, rate_kbps: self.rate_kbps() };
            if feedback::rewrite(&mut datagram.payload, observation) {
                self.stats.feedback_rewrites += 1;
            }
        }
        let mut arrival = departure + self.params.delay + self.rng.duration_up_to(self.params.jitter);
        if !self.params.reorder {
            arrival = arrival.max(self.last_arrival);
        }
        self.last_arrival = self.last_arrival.max(arrival);
        Fate::Arrives { at: arrival, generation: self.generation }
    }

    /// Fraction of the capacity offered between time zero and `end` that carried packets.
    pub fn utilization(&self, end: Duration) -> f64 {
        let capacity_bytes = match &self.params.service {
            Service::Rate { bits_per_second } => *bits_per_second as f64 * end.as_secs_f64() / 8.0,
            Service::Trace(trace) => (trace.first_opportunity_at_or_after(end) * OPPORTUNITY_BYTES) as f64,
        };
        if capacity_bytes <= 0.0 {
            return 0.0;
        }
        (self.stats.transmitted_bytes as f64 / capacity_bytes).min(1.0)
    }

    /// The rate a switch at this queue advertises in `rate_hint`.
    fn rate_kbps(&self) -> u32 {
        u32::try_from((self.params.service.mean_rate_bps() / 1000.0) as u64).unwrap_or(u32::MAX)
    }

    fn release_departed(&mut self, now: Duration) {
        while let Some(&(departure, bytes)) = self.queue.front() {
            if departure > now {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes -= bytes;
        }
    }

    fn queue_would_overflow(&self, wire_bytes: u64) -> bool {
        match self.params.queue_limit {
            QueueLimit::Unlimited => false,
            QueueLimit::Packets(limit) => self.queue.len() >= limit,
            QueueLimit::Bytes(limit) => self.queued_bytes + wire_bytes > limit,
        }
    }

    /// When the packet starts being served and when it has left, or `None` if it can never be served.
    fn schedule_departure(&mut self, now: Duration, wire_bytes: u64) -> Option<(Duration, Duration)> {
        match &self.params.service {
            Service::Rate { bits_per_second } => {
                let start = now.max(self.busy_until);
                let nanos =
                    (u128::from(wire_bytes) * 8 * 1_000_000_000).div_ceil(u128::from((*bits_per_second).max(1)));
                let departure = start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
                self.busy_until = departure;
                Some((start, departure))
            }
            Service::Trace(trace) => {
                if wire_bytes > OPPORTUNITY_BYTES {
                    return None;
                }
                let index = self.next_opportunity.max(trace.first_opportunity_at_or_after(now));
                self.next_opportunity = index + 1;
                let departure = trace.opportunity_time(index);
                Some((departure, departure))
            }
        }
    }
}
