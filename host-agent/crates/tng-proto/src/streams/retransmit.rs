//! What happened to sent packets, as the flow layer reports it (a loss queues a chunk again, a delivery only cancels
//! such a copy), and the semantic retransmission timer: the safety net that queues again whatever the peer has not
//! acknowledged end to end, and that sends the credit probes.

use std::ops::Range;
use std::time::Duration;

use super::{SentChunk, StreamId, Streams};
use crate::time::Time;

/// A deadline of the semantic retransmission timer, armed when something is sent; it fires `rto` later unless the
/// peer's STREAM_ACK (or new credit) resolved it first.
#[derive(Clone, Debug)]
pub(super) struct Timer {
    pub(super) armed_at: Time,
    pub(super) kind: TimerKind,
}

#[derive(Clone, Debug)]
pub(super) enum TimerKind {
    Data { id: StreamId, range: Range<u64>, fin: bool },
    Reset { id: StreamId },
    StreamProbe { id: StreamId, limit: u64 },
    ConnectionProbe { limit: u64 },
    StreamCountProbe { limit: u64 },
}

impl Streams {
    /// The flow layer declared lost a packet that carried `chunk`: queue what still matters, for any channel.
    pub fn on_chunk_lost(&mut self, chunk: &SentChunk) {
        match chunk {
            SentChunk::Stream { id, range, fin } => {
                if self.streams.get_mut(id).is_some_and(|s| s.send.on_lost(range.clone(), *fin)) {
                    self.schedule_send(*id);
                }
            }
            SentChunk::StreamAck { id } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.recv.ack_pending = true;
                    // The peer has waited a round trip already.
                    self.schedule_ack(*id, true);
                }
            }
            SentChunk::MaxStreamData { id } => {
                if let Some(stream) = self.streams.get_mut(id).filter(|s| s.recv.wants_credit()) {
                    stream.recv.credit_pending = true;
                    self.schedule_control(*id);
                }
            }
            SentChunk::MaxData => self.max_data_pending = true,
            SentChunk::MaxStreams => self.max_streams_pending = true,
            SentChunk::ResetStream { id } => {
                if self.streams.get_mut(id).is_some_and(|s| s.send.on_reset_lost()) {
                    self.schedule_control(*id);
                }
            }
            SentChunk::StopSending { id } => {
                if self.streams.get_mut(id).is_some_and(|s| s.recv.on_stop_lost()) {
                    self.schedule_control(*id);
                }
            }
        }
    }

    /// The flow layer acknowledged a packet that carried `chunk`. Only a hint: it cancels a copy that a (then
    /// spurious) loss report had queued, and never releases bytes.
    pub fn on_chunk_delivered_hint(&mut self, chunk: &SentChunk) {
        match chunk {
            SentChunk::Stream { id, range, fin } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.send.on_delivered_hint(range.clone(), *fin);
                }
            }
            SentChunk::ResetStream { id } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.send.on_reset_delivered_hint();
                }
            }
            SentChunk::StopSending { id } => {
                if let Some(stream) = self.streams.get_mut(id) {
                    stream.recv.on_stop_sent();
                }
            }
            SentChunk::StreamAck { .. }
            | SentChunk::MaxStreamData { .. }
            | SentChunk::MaxData
            | SentChunk::MaxStreams => {}
        }
    }

    /// When the semantic retransmission timer next needs [`Streams::on_timeout`], for timeout `rto`.
    pub fn next_timeout(&self, rto: Duration) -> Option<Time> {
        self.timers.front().map(|timer| timer.armed_at + rto)
    }

    /// Queues again everything sent at least `rto` ago and still not acknowledged by the peer, and sends credit
    /// probes for streams blocked that long. `rto` should comfortably exceed an end-to-end round trip on the slowest
    /// channel (e.g. 3 x the largest smoothed RTT).
    pub fn on_timeout(&mut self, now: Time, rto: Duration) {
        self.clock = self.clock.max(now);
        // Re-armed timers go to the back; bounding the pass keeps a zero `rto` from looping.
        for _ in 0..self.timers.len() {
            match self.timers.front() {
                Some(timer) if timer.armed_at + rto <= now => {}
                _ => break,
            }
            if let Some(timer) = self.timers.pop_front() {
                self.fire(timer.kind, now);
            }
        }
        self.prune_timers();
    }

    fn fire(&mut self, kind: TimerKind, now: Time) {
        match kind {
            // A range that was lost, sent again and is still unacknowledged when its first timer fires goes out
            // once more: the price of one timer per transmission instead of a send time per byte.
            TimerKind::Data { id, range, fin } => {
                if self.streams.get_mut(&id).is_some_and(|s| s.send.on_lost(range, fin)) {
                    self.schedule_send(id);
                }
            }
            TimerKind::Reset { id } => {
                if self.streams.get_mut(&id).is_some_and(|s| s.send.on_reset_lost()) {
                    self.schedule_control(id);
                }
            }
            TimerKind::StreamProbe { id, limit } => {
                let Some(stream) = self.streams.get_mut(&id) else { return };
                if stream.send.blocked_at == Some(limit) && stream.send.sent_end() >= limit {
                    stream.send.probe_pending = true;
                    self.schedule_send(id);
                    self.timers.push_back(Timer { armed_at: now, kind: TimerKind::StreamProbe { id, limit } });
                }
            }
            TimerKind::ConnectionProbe { limit } => {
                if self.connection_blocked_at != Some(limit) || self.data_sent < limit {
                    return;
                }
                let prober = self
                    .connection_blocked
                    .iter()
                    .copied()
                    .find(|id| self.streams.get(id).is_some_and(|s| s.connection_blocked && !s.send.is_reset()));
                if let Some(id) = prober {
                    if let Some(stream) = self.streams.get_mut(&id) {
                        stream.send.probe_pending = true;
                    }
                    self.schedule_send(id);
                }
                self.timers.push_back(Timer { armed_at: now, kind: TimerKind::ConnectionProbe { limit } });
            }
            TimerKind::StreamCountProbe { limit } => {
                if self.open_blocked_at == Some(limit) && self.peer_max_streams == limit {
                    self.stream_count_probe_pending = true;
                    self.timers.push_back(Timer { armed_at: now, kind: TimerKind::StreamCountProbe { limit } });
                }
            }
        }
    }

    /// Drops resolved timers from the front, so `next_timeout` does not wake the caller for nothing.
    pub(super) fn prune_timers(&mut self) {
        while let Some(timer) = self.timers.front() {
            let pending = match &timer.kind {
                TimerKind::Data { id, range, fin } => {
                    matches!(self.streams.get(id), Some(s) if !s.send.is_resolved(range, *fin))
                }
                TimerKind::Reset { id } => matches!(self.streams.get(id), Some(s) if !s.send.is_reset_acked()),
                TimerKind::StreamProbe { id, limit } => {
                    matches!(self.streams.get(id), Some(s) if s.send.blocked_at == Some(*limit))
                }
                TimerKind::ConnectionProbe { limit } => self.connection_blocked_at == Some(*limit),
                TimerKind::StreamCountProbe { limit } => self.open_blocked_at == Some(*limit),
            };
            if pending {
                return;
            }
            self.timers.pop_front();
        }
    }
}
