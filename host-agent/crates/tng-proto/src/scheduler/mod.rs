//! Multipath scheduling: which channel carries the next packet of new data.
//!
//! The flow layer calls [`Scheduler::pick`] when it has a packet to send, with a snapshot of every channel. Stream
//! data that was lost goes through the same choice, since the semantic layer queues it again for any channel.
//!
//! Rules every scheduler shares:
//! - an unvalidated channel never carries data;
//! - a channel is *eligible* when its congestion window has room for the packet and its pacer allows sending now;
//! - standby channels are used only while no active channel is eligible.
//!
//! `None` means no channel should send now (the ACK-clocked scheduler also answers it to wait for a paced channel
//! that delivers sooner than the eligible ones); the flow layer asks again when an ACK frees room or a pacer timer
//! fires.

mod ack_clocked;
mod lowest_rtt;
mod weighted;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::time::Time;

pub use ack_clocked::AckClocked;
pub use lowest_rtt::LowestRtt;
pub use weighted::Weighted;

/// What a scheduler sees of one channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelView {
    pub channel: u8,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Congestion window in bytes.
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    /// When the pacer lets the next packet out.
    pub can_send_at: Time,
    /// The peer answered a PATH_CHALLENGE on this channel.
    pub validated: bool,
    /// Share of the traffic for the weighted scheduler (from the controller's policy).
    pub weight: u32,
    /// Kept as a backup (PATH_STATUS standby).
    pub standby: bool,
}

impl ChannelView {
    /// Whether the congestion window takes a packet of `packet_len` bytes. An idle channel takes one packet even
    /// if its window is smaller, so a window below one packet cannot stall it; a zero window takes nothing.
    pub fn has_room(&self, packet_len: u64) -> bool {
        self.cwnd > 0 && (self.bytes_in_flight == 0 || self.bytes_in_flight.saturating_add(packet_len) <= self.cwnd)
    }

    /// Whether the channel may send a packet of `packet_len` bytes at `now`.
    pub fn can_send(&self, now: Time, packet_len: u64) -> bool {
        self.validated && self.has_room(packet_len) && self.can_send_at <= now
    }
}

/// Chooses the channel for the next packet of new data.
pub trait Scheduler: fmt::Debug + Send {
    /// The channel (its `channel` id) for a packet of `packet_len` bytes, or `None` to send nothing now.
    fn pick(&mut self, now: Time, channels: &[ChannelView], packet_len: u64) -> Option<u8>;

    fn name(&self) -> &'static str;
}

/// The schedulers tng implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// Viscous: send where the window has room, earliest expected arrival first.
    AckClocked,
    /// MPTCP's default: the lowest-RTT channel with room.
    LowestRtt,
    /// Smooth weighted round robin by the channels' weights.
    Weighted,
}

impl SchedulerKind {
    pub const ALL: [SchedulerKind; 3] = [SchedulerKind::AckClocked, SchedulerKind::LowestRtt, SchedulerKind::Weighted];

    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::AckClocked => "ack-clocked",
            SchedulerKind::LowestRtt => "lowest-rtt",
            SchedulerKind::Weighted => "weighted",
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a known scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownScheduler(pub String);

impl fmt::Display for UnknownScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = SchedulerKind::ALL.iter().map(|k| k.name()).collect();
        write!(f, "unknown scheduler {:?} (known: {})", self.0, known.join(", "))
    }
}

impl std::error::Error for UnknownScheduler {}

impl FromStr for SchedulerKind {
    type Err = UnknownScheduler;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchedulerKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| UnknownScheduler(s.to_owned()))
    }
}

pub fn new_scheduler(kind: SchedulerKind) -> Box<dyn Scheduler> {
    match kind {
        SchedulerKind::AckClocked => Box::new(AckClocked),
        SchedulerKind::LowestRtt => Box::new(LowestRtt),
        SchedulerKind::Weighted => Box::new(Weighted::default()),
    }
}

/// The channels that may take the packet now: the eligible active ones, or if there are none the eligible standby
/// ones.
fn eligible(now: Time, channels: &[ChannelView], packet_len: u64) -> impl Iterator<Item = &ChannelView> + Clone {
    with_room(now, channels, packet_len).filter(move |c| c.can_send_at <= now)
}

/// The channels that may take the packet now or once their pacers release it: the active ones with window room if
/// any active channel is eligible, else the standby ones with room (standby stays the backup, as in [`eligible`]).
fn with_room(now: Time, channels: &[ChannelView], packet_len: u64) -> impl Iterator<Item = &ChannelView> + Clone {
    let any_active = channels.iter().any(|c| !c.standby && c.can_send(now, packet_len));
    channels.iter().filter(move |c| c.standby != any_active && c.validated && c.has_room(packet_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const PACKET: u64 = 1200;

    /// An idle, validated, active channel with weight 1.
    pub(super) fn channel(channel: u8, srtt_ms: u64, cwnd_packets: u64) -> ChannelView {
        ChannelView {
            channel,
            srtt: Duration::from_millis(srtt_ms),
            cwnd: cwnd_packets * PACKET,
            bytes_in_flight: 0,
            can_send_at: Time::ZERO,
            validated: true,
            weight: 1,
            standby: false,
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for kind in SchedulerKind::ALL {
            assert_eq!(kind.name().parse::<SchedulerKind>(), Ok(kind));
            assert_eq!(new_scheduler(kind).name(), kind.name());
            assert_eq!(kind.to_string(), kind.name());
        }
        let err = "round-robin".parse::<SchedulerKind>().unwrap_err();
        assert_eq!(err.to_string(), r#"unknown scheduler "round-robin" (known: ack-clocked, lowest-rtt, weighted)"#);
    }

    #[test]
    fn room_pacing_and_validation_decide_eligibility() {
        let now = Time::from_millis(10);
        let mut c = channel(0, 10, 2);
        assert!(c.can_send(now, PACKET));
        c.bytes_in_flight = PACKET;
        assert!(c.has_room(PACKET));
        c.bytes_in_flight = PACKET + 1;
        assert!(!c.has_room(PACKET));
        c.bytes_in_flight = 0;
        c.cwnd = 100;
        assert!(c.has_room(PACKET), "an idle channel takes one packet");
        c.cwnd = 0;
        assert!(!c.has_room(PACKET), "a zero window takes nothing");
        c.cwnd = 10 * PACKET;
        c.can_send_at = Time::from_millis(11);
        assert!(!c.can_send(now, PACKET));
        c.can_send_at = now;
        c.validated = false;
        assert!(!c.can_send(now, PACKET));
    }

    #[test]
    fn every_scheduler_skips_unvalidated_full_and_paced_channels_and_prefers_active_ones() {
        let now = Time::from_millis(1);
        for kind in SchedulerKind::ALL {
            let mut scheduler = new_scheduler(kind);
            let mut unvalidated = channel(0, 1, 10);
            unvalidated.validated = false;
            let mut full = channel(1, 1, 10);
            full.bytes_in_flight = full.cwnd;
            let mut paced = channel(2, 1, 10);
            paced.can_send_at = Time::from_millis(1_000); // longer than the slow channel takes to deliver
            let mut standby = channel(3, 1, 10);
            standby.standby = true;
            let slow = channel(4, 300, 10);
            assert_eq!(scheduler.pick(now, &[unvalidated, full, paced, standby, slow], PACKET), Some(4), "{kind}");
            assert_eq!(scheduler.pick(now, &[unvalidated, full, paced, standby], PACKET), Some(3), "{kind}");
            assert_eq!(scheduler.pick(now, &[unvalidated, full, paced], PACKET), None, "{kind}");
            assert_eq!(scheduler.pick(now, &[], PACKET), None, "{kind}");
        }
    }
}
