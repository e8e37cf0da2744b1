//! A channel (Viscous): one (local address, remote address) pair of a connection with its own flow layer: packet
//! numbers, acknowledgements, RTT, loss detection, congestion controller and pacer.

use std::net::SocketAddr;
use std::time::Duration;

use tng_wire::EcnCounts;

use crate::cc::{self, CcConfig, CcKind, CongestionController, DeliveryForecaster, PathFeedback};
use crate::connection::loss::{LossRecovery, SentPacket};
use crate::connection::pacing::Pacer;
use crate::connection::received::ReceivedPackets;
use crate::connection::replay::ReplayWindow;
use crate::connection::rtt::RttEstimator;
use crate::time::Time;

/// How long after the last data arrived a receiver keeps forecasting: long enough for the sender to learn of an
/// outage (the forecast falls to nothing within a few hundred ms).
const FORECAST_AFTER_LAST_DATA: Duration = Duration::from_secs(1);

/// Where a channel is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChannelState {
    /// Waiting for the answer to a PATH_CHALLENGE: carries only PROBE and ACK packets.
    Validating,
    /// Validated: carries data.
    Active,
    /// Liveness lost (too many probe timeouts, or validation never answered): probed periodically to come back.
    Down,
}

/// A channel as reported by [`crate::Connection::stats`].
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelStats {
    pub id: u8,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: ChannelState,
    /// The peer asked us to keep this channel for backup (PATH_STATUS standby).
    pub standby: bool,
    pub srtt: Duration,
    pub min_rtt: Duration,
    pub rttvar: Duration,
    /// The congestion window in bytes; through a relay, what is in flight plus the section's room.
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    /// Bytes per second; `u64::MAX` through a relay, whose section's window paces the channel.
    pub pacing_rate: u64,
    pub cc: &'static str,
    pub sent_packets: u64,
    /// Packets that carried retransmitted stream data.
    pub retransmitted_packets: u64,
    pub lost_packets: u64,
    /// Probe timeouts that fired on this channel.
    pub probe_timeouts: u64,
    /// Tail-loss probes this channel carried (its own, or another channel's in alternate-path mode).
    pub tail_loss_probes: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    /// The last in-network feedback the peer echoed for this channel.
    pub last_feedback: Option<PathFeedback>,
    /// ECN codepoints of packets received on this channel.
    pub ecn_received: EcnCounts,
    /// ECN counts the peer last reported for our packets.
    pub ecn_reported: EcnCounts,
}

/// Counters kept per channel.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ChannelCounters {
    pub(crate) sent_packets: u64,
    pub(crate) retransmitted_packets: u64,
    pub(crate) lost_packets: u64,
    pub(crate) probe_timeouts: u64,
    pub(crate) tail_loss_probes: u64,
    pub(crate) bytes_sent: u64,
    pub(crate) packets_received: u64,
    pub(crate) bytes_received: u64,
}

/// An outstanding PATH_CHALLENGE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Challenge {
    pub(crate) token: [u8; 8],
    /// The address pair being validated: the channel's own, or a migration target.
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    /// Challenges sent so far for this validation.
    pub(crate) attempts: u32,
    /// For a migration target the peer may not own (an on-path attacker can rewrite source addresses): what we
    /// may send there before it answers.
    pub(crate) budget: Option<AmplificationBudget>,
}

/// A PATH_RESPONSE owed to the peer, sent back where its challenge came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Response {
    pub(crate) token: [u8; 8],
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
}

/// Anti-amplification for an address not validated yet: at most three times the bytes received from it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AmplificationBudget {
    pub(crate) received: u64,
    pub(crate) sent: u64,
}

impl AmplificationBudget {
    pub(crate) fn allows(&self, bytes: u64) -> bool {
        self.sent.saturating_add(bytes) <= self.received.saturating_mul(3)
    }
}

#[derive(Debug)]
pub(crate) struct Channel {
    pub(crate) id: u8,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) state: ChannelState,
    pub(crate) standby: bool,
    /// Reached `Active` at least once: going down is then worth a `ChannelDown` event.
    pub(crate) was_up: bool,
    pub(crate) recovery: LossRecovery,
    pub(crate) rtt: RttEstimator,
    pub(crate) cc: Box<dyn CongestionController>,
    pub(crate) cc_kind: CcKind,
    pub(crate) pacer: Pacer,
    pub(crate) received: ReceivedPackets,
    /// The receiver's side of Sprout: present when this end's controller for the channel uses delivery forecasts.
    pub(crate) forecaster: Option<DeliveryForecaster>,
    /// A tick ended: the next packet on the channel carries a DELIVERY_FORECAST (an ACK packet goes if none does).
    pub(crate) forecast_due: bool,
    /// When the last packet with stream data arrived: forecasts describe a direction that carries data.
    pub(crate) last_data_received: Option<Time>,
    pub(crate) replay: ReplayWindow,
    pub(crate) challenge: Option<Challenge>,
    /// The challenge goes out at the next transmit.
    pub(crate) probe_pending: bool,
    /// When the challenge is repeated (or, on a down channel, the next periodic re-probe).
    pub(crate) probe_at: Option<Time>,
    pub(crate) responses: Vec<Response>,
    /// The channel's remote address is not validated yet (a channel the peer opened): replies are capped.
    pub(crate) unvalidated: Option<AmplificationBudget>,
    /// A PING is owed (keepalive, or the alternate-path probe's companion).
    pub(crate) ping_pending: bool,
    /// Probe timeouts whose probe packet this channel still has to send.
    pub(crate) probes_pending: u32,
    /// A CLOSE packet is owed on this channel.
    pub(crate) close_pending: bool,
    pub(crate) last_sent_eliciting: Time,
    pub(crate) last_received: Time,
    /// When the last two probe timeouts fired, older first: whether the peer was heard since the one before the
    /// last decides whether a series of them puts the channel down.
    pub(crate) probe_timeouts_at: [Time; 2],
    pub(crate) last_feedback: Option<PathFeedback>,
    pub(crate) ecn_reported: EcnCounts,
    pub(crate) counters: ChannelCounters,
    /// Set while the channel's packets go through a relay's section: the data packets the section has room for
    /// now. The section's congestion controller then sets the flow's window and pace (queue sharing, Tng section
    /// 4.3); this channel's own controller would be a second loop probing the same queues.
    pub(crate) section_room: Option<u64>,
}

impl Channel {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        now: Time,
        id: u8,
        local: SocketAddr,
        remote: SocketAddr,
        state: ChannelState,
        cc_kind: CcKind,
        cc_config: &CcConfig,
        initial_rtt: Duration,
    ) -> Channel {
        Channel {
            id,
            local,
            remote,
            state,
            standby: false,
            was_up: state == ChannelState::Active,
            recovery: LossRecovery::default(),
            rtt: RttEstimator::new(initial_rtt),
            cc: cc::new_controller(cc_kind, cc_config, now),
            cc_kind,
            pacer: Pacer::new(now, cc_config.max_datagram_size),
            received: ReceivedPackets::default(),
            forecaster: cc_kind.uses_delivery_forecast().then(|| DeliveryForecaster::new(now)),
            forecast_due: false,
            last_data_received: None,
            replay: ReplayWindow::default(),
            challenge: None,
            probe_pending: false,
            probe_at: None,
            responses: Vec::new(),
            unvalidated: None,
            ping_pending: false,
            probes_pending: 0,
            close_pending: false,
            last_sent_eliciting: now,
            last_received: now,
            probe_timeouts_at: [now; 2],
            last_feedback: None,
            ecn_reported: EcnCounts::default(),
            counters: ChannelCounters::default(),
            section_room: None,
        }
    }

    /// When the forecaster's tick ends, if it forecasts now: only while data keeps arriving (an idle channel, or
    /// one that brings only acknowledgements, sends nothing every tick; a sender that stopped needs no forecast).
    pub(crate) fn forecast_tick_end(&self, now: Time) -> Option<Time> {
        let forecaster = self.forecaster.as_ref()?;
        let last = self.last_data_received?;
        (now.saturating_since(last) <= FORECAST_AFTER_LAST_DATA).then(|| forecaster.tick_end())
    }

    /// Whether the scheduler may give this channel new data.
    pub(crate) fn carries_data(&self) -> bool {
        self.state == ChannelState::Active && !self.standby
    }

    /// Whether a full datagram of `mtu` bytes fits in the congestion window (or, through a relay, the section's
    /// room).
    pub(crate) fn window_allows(&self, mtu: u64) -> bool {
        self.recovery.bytes_in_flight().saturating_add(mtu) <= self.window(mtu)
    }

    /// The congestion window in bytes: the controller's, or through a relay what is in flight plus the section's
    /// room in datagrams of `mtu` bytes.
    pub(crate) fn window(&self, mtu: u64) -> u64 {
        match self.section_room {
            Some(room) => self.recovery.bytes_in_flight().saturating_add(room.saturating_mul(mtu)),
            None => self.cc.window(),
        }
    }

    /// The controller's pacing rate, never below one datagram per smoothed RTT so that a paused path (rate hint
    /// 0) is still probed and timers stay finite.
    pub(crate) fn pacing_rate(&self, max_datagram_size: u64) -> u64 {
        if self.section_room.is_some() {
            return u64::MAX; // the section's window paces: its packets leave as its acknowledgements come
        }
        let srtt = self.rtt.smoothed().max(Duration::from_millis(1));
        // In u64: asked for several times per packet, and a 128-bit division costs several times a 64-bit one.
        let srtt_nanos = u64::try_from(srtt.as_nanos()).unwrap_or(u64::MAX);
        let floor = (max_datagram_size.saturating_mul(1_000_000_000) / srtt_nanos).max(1);
        self.cc.pacing_rate(self.rtt.smoothed()).max(floor)
    }

    /// A fresh controller of `kind`; the receiver's forecaster runs while this end's controller uses it (one that
    /// goes on keeps its ticks, which the peer's controller orders forecasts by).
    pub(crate) fn set_controller(&mut self, kind: CcKind, cc_config: &CcConfig, now: Time) {
        self.cc_kind = kind;
        self.cc = cc::new_controller(kind, cc_config, now);
        if !kind.uses_delivery_forecast() {
            self.forecaster = None;
            self.forecast_due = false;
        } else if self.forecaster.is_none() {
            self.forecaster = Some(DeliveryForecaster::new(now));
        }
    }

    /// A fresh flow layer for a path that changed (revived, or moved to new addresses): new controller, RTT and
    /// pacer. What was in flight went the old way and is returned as lost, without a congestion response (it says
    /// nothing about the new path). Packet numbers, replay state and acknowledgement ranges go on.
    pub(crate) fn restart_flow(&mut self, now: Time, cc_config: &CcConfig, initial_rtt: Duration) -> Vec<SentPacket> {
        self.cc = cc::new_controller(self.cc_kind, cc_config, now);
        self.rtt = RttEstimator::new(initial_rtt);
        self.pacer = Pacer::new(now, cc_config.max_datagram_size);
        self.probes_pending = 0;
        let lost = self.recovery.drain_all();
        self.counters.lost_packets += lost.len() as u64;
        lost
    }

    /// The anti-amplification budget that applies to sending on `path`, if any.
    pub(crate) fn budget_for(&mut self, path: (SocketAddr, SocketAddr)) -> Option<&mut AmplificationBudget> {
        match self.challenge.as_mut() {
            Some(challenge) if challenge.budget.is_some() && (challenge.local, challenge.remote) == path => {
                challenge.budget.as_mut()
            }
            _ => self.unvalidated.as_mut(),
        }
    }

    /// Interval before the next PATH_CHALLENGE of the current validation: three RTTs, doubling per attempt.
    pub(crate) fn challenge_interval(&self, attempts: u32) -> Duration {
        (self.rtt.smoothed() * 3).max(Duration::from_millis(10)) * (1u32 << attempts.min(6))
    }

    pub(crate) fn stats(&self, max_datagram_size: u64) -> ChannelStats {
        ChannelStats {
            id: self.id,
            local: self.local,
            remote: self.remote,
            state: self.state,
            standby: self.standby,
            srtt: self.rtt.smoothed(),
            min_rtt: self.rtt.min(),
            rttvar: self.rtt.variance(),
            cwnd: self.window(max_datagram_size),
            bytes_in_flight: self.recovery.bytes_in_flight(),
            pacing_rate: self.pacing_rate(max_datagram_size),
            cc: self.cc.name(),
            sent_packets: self.counters.sent_packets,
            retransmitted_packets: self.counters.retransmitted_packets,
            lost_packets: self.counters.lost_packets,
            probe_timeouts: self.counters.probe_timeouts,
            tail_loss_probes: self.counters.tail_loss_probes,
            bytes_sent: self.counters.bytes_sent,
            packets_received: self.counters.packets_received,
            bytes_received: self.counters.bytes_received,
            last_feedback: self.last_feedback,
            ecn_received: self.received.ecn_counts(),
            ecn_reported: self.ecn_reported,
        }
    }
}
