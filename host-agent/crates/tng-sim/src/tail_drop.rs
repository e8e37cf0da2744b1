//! The thesis' tail-loss pattern: a link drops the last K data packets it carries for each burst.
//!
//! Which packets are the last is only known once the burst has been sent in full (by every path), so the rule
//! decides then: while the burst is being sent for the first time (the window, opened when the burst is requested
//! and closed when the sender has sent every byte of it once), the link tracks the last K data-bearing DATA packets it accepted.
//! One of them that reaches the far end while the window is still open is held there rather than delivered; it is
//! released the moment K newer DATA packets have entered the link (so it was not among the last K after all) or the
//! next burst starts. When the window closes, the tracked packets are the burst's tail on this link: those held or
//! still on their way are dropped. Holding delays only the last packets of a flight on this link, and only while
//! another path is still sending the burst.

use std::collections::VecDeque;

/// tng packet type of packets that carry stream data (docs/wire-format.md section 3).
const DATA_PACKET_TYPE: u8 = 0x03;
/// DATA packets also carry control-only payloads (PING, STREAM_ACK, MAX_DATA: a few dozen bytes); the frames are
/// sealed, so size tells them apart from packets carrying a burst's bytes.
const MIN_DATA_BEARING_LEN: usize = 200;

/// Whether a datagram is a tng DATA packet large enough to carry stream data.
pub fn is_data_bearing(payload: &[u8]) -> bool {
    payload.len() >= MIN_DATA_BEARING_LEN && payload[0] == 1 && payload[1] == DATA_PACKET_TYPE
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailDropStats {
    /// Packets dropped by the rule.
    pub dropped: u64,
    /// Packets of a burst's tail that had already been delivered (the pattern was not applied in full).
    pub missed: u64,
    /// Packets held at the far end and then released because they were not in the tail.
    pub held_then_released: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Whereabouts {
    OnTheWire,
    Held,
    Delivered,
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    tag: u64,
    whereabouts: Whereabouts,
}

/// What the link does with a packet reaching its far end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrivalVerdict {
    Deliver,
    Hold,
    Drop,
}

/// The rule on one link.
#[derive(Clone, Debug)]
pub struct TailDropRule {
    packets: usize,
    window_open: bool,
    /// The last `packets` DATA packets accepted while the window is open, oldest first.
    candidates: VecDeque<Candidate>,
    /// Tags of packets still on the wire that must be dropped when they arrive.
    doomed: Vec<u64>,
    stats: TailDropStats,
}

impl TailDropRule {
    pub fn new(packets: usize) -> Self {
        TailDropRule {
            packets,
            window_open: false,
            candidates: VecDeque::new(),
            doomed: Vec::new(),
            stats: TailDropStats::default(),
        }
    }

    pub fn stats(&self) -> TailDropStats {
        self.stats
    }

    /// A burst starts. Returns the tags of held packets to deliver now (left over from a burst whose end was
    /// never seen).
    pub fn open_window(&mut self) -> Vec<u64> {
        let released = self.release_held();
        self.window_open = true;
        self.candidates.clear();
        released
    }

    /// The link accepted a packet. Returns the tag of a held packet to deliver now, if this one pushed it out of
    /// the last K.
    pub fn on_accepted(&mut self, tag: u64, payload: &[u8]) -> Option<u64> {
        if !self.window_open || self.packets == 0 || !is_data_bearing(payload) {
            return None;
        }
        self.candidates.push_back(Candidate { tag, whereabouts: Whereabouts::OnTheWire });
        if self.candidates.len() <= self.packets {
            return None;
        }
        let oldest = self.candidates.pop_front()?;
        (oldest.whereabouts == Whereabouts::Held).then(|| {
            self.stats.held_then_released += 1;
            oldest.tag
        })
    }

    /// Every byte of the burst has been sent once: the tracked packets are its tail on this link. Returns the tags
    /// of held packets, now dropped.
    pub fn close_window(&mut self) -> Vec<u64> {
        if !self.window_open {
            return Vec::new();
        }
        self.window_open = false;
        let mut dropped_now = Vec::new();
        for candidate in self.candidates.drain(..) {
            match candidate.whereabouts {
                Whereabouts::OnTheWire => self.doomed.push(candidate.tag),
                Whereabouts::Held => {
                    self.stats.dropped += 1;
                    dropped_now.push(candidate.tag);
                }
                Whereabouts::Delivered => self.stats.missed += 1,
            }
        }
        dropped_now
    }

    /// A packet reaches the far end of the link.
    pub fn on_arrival(&mut self, tag: u64) -> ArrivalVerdict {
        if let Some(position) = self.doomed.iter().position(|&doomed| doomed == tag) {
            self.doomed.swap_remove(position);
            self.stats.dropped += 1;
            return ArrivalVerdict::Drop;
        }
        let window_open = self.window_open;
        match self.candidates.iter_mut().find(|candidate| candidate.tag == tag) {
            Some(candidate) if window_open => {
                candidate.whereabouts = Whereabouts::Held;
                ArrivalVerdict::Hold
            }
            Some(candidate) => {
                candidate.whereabouts = Whereabouts::Delivered;
                ArrivalVerdict::Deliver
            }
            None => ArrivalVerdict::Deliver,
        }
    }

    fn release_held(&mut self) -> Vec<u64> {
        let mut released = Vec::new();
        for candidate in &mut self.candidates {
            if candidate.whereabouts == Whereabouts::Held {
                candidate.whereabouts = Whereabouts::Delivered;
                self.stats.held_then_released += 1;
                released.push(candidate.tag);
            }
        }
        released
    }
}
