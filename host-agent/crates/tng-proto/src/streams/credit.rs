//! Flow-control credit, decoupled from congestion control: what we grant as the reader consumes (MAX_DATA; the
//! per-stream MAX_STREAM_DATA lives with each receiving half), what the peer grants us, and the probe timers armed
//! when its credit is what holds a sender back.

use super::config::MAX_OFFSET;
use super::retransmit::{Timer, TimerKind};
use super::send::Blocked;
use super::state::Target;
use super::{StreamError, StreamId, Streams};
use crate::time::Time;

impl Streams {
    /// The application consumed (or we discarded) `n` received bytes: grant connection-level credit once half the
    /// window is used.
    pub(super) fn consume(&mut self, n: u64) {
        self.data_consumed += n;
        let window = self.config.receive_window;
        let new_max = self.data_consumed.saturating_add(window).min(MAX_OFFSET);
        if new_max > self.max_data && new_max - self.max_data >= window / 2 {
            self.max_data = new_max;
            self.max_data_pending = true;
        }
    }

    pub(super) fn on_max_data(&mut self, max: u64) {
        if max <= self.peer_max_data {
            return;
        }
        self.peer_max_data = max;
        self.connection_blocked_at = None;
        while let Some(id) = self.connection_blocked.pop_front() {
            if let Some(stream) = self.streams.get_mut(&id) {
                stream.connection_blocked = false;
                self.schedule_send(id);
            }
        }
        self.prune_timers();
    }

    pub(super) fn on_max_stream_data(&mut self, id: StreamId, max: u64) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        let counted_before = stream.send.unsent_within_credit();
        if stream.send.raise_max_data(max) {
            // Bytes the new credit lets out now count against the unsent bound.
            self.unsent += stream.send.unsent_within_credit() - counted_before;
            self.schedule_send(id);
            self.prune_timers();
        }
        Ok(())
    }

    /// A stream has nothing it may send: if credit is what holds it back, wait for credit and arm a probe.
    pub(super) fn note_blocked(&mut self, id: StreamId, now: Time) {
        let credit = self.peer_max_data.saturating_sub(self.data_sent);
        let Some(stream) = self.streams.get_mut(&id) else { return };
        match stream.send.blocked(credit) {
            Some(Blocked::Stream(limit)) if stream.send.blocked_at != Some(limit) => {
                stream.send.blocked_at = Some(limit);
                self.timers.push_back(Timer { armed_at: now, kind: TimerKind::StreamProbe { id, limit } });
            }
            Some(Blocked::Connection) => {
                if !stream.connection_blocked {
                    stream.connection_blocked = true;
                    self.connection_blocked.push_back(id);
                }
                if self.connection_blocked_at != Some(self.peer_max_data) {
                    self.connection_blocked_at = Some(self.peer_max_data);
                    let kind = TimerKind::ConnectionProbe { limit: self.peer_max_data };
                    self.timers.push_back(Timer { armed_at: now, kind });
                }
            }
            Some(Blocked::Stream(_)) | None => {}
        }
    }
}
