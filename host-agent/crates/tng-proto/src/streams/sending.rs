//! The sending halves across streams: what the application writes, finishes or abandons, the send buffers and the
//! unsent bound that limit it, and what the peer says about it end to end (STREAM_ACK, STOP_SENDING).

use std::ops::Range;

use super::error::check_error_code;
use super::state::Target;
use super::{StreamError, StreamEvent, StreamId, Streams};
use crate::time::Time;

impl Streams {
    /// Buffers as much of `data`, written by the application at `now`, as the send buffers and the unsent bound
    /// take; returns how many bytes that was. [`StreamError::Blocked`] if none: a [`StreamEvent::Writable`] follows
    /// when room frees up, as a full socket buffer would.
    pub fn write(&mut self, now: Time, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        self.clock = self.clock.max(now);
        self.check_writable(id)?;
        if data.is_empty() {
            return Ok(0);
        }
        let connection_room = self.connection_send_room();
        let unsent_limit = self.unsent_limit.unwrap_or(u64::MAX);
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        let stream_room = self
            .config
            .stream_send_buffer
            .saturating_sub(stream.send.buffered())
            .min(unsent_limit.saturating_sub(stream.send.unsent()));
        let accepted = usize::try_from(stream_room.min(connection_room)).unwrap_or(usize::MAX).min(data.len());
        if accepted < data.len() {
            if stream_room <= connection_room {
                stream.send.write_blocked = true;
            } else if !stream.waiting_for_connection_room {
                stream.waiting_for_connection_room = true;
                self.connection_write_waiters.push(id);
            }
        }
        if accepted == 0 {
            return Err(StreamError::Blocked(id));
        }
        let counted_before = stream.send.unsent_within_credit();
        stream.send.push(&data[..accepted], now);
        self.unsent += stream.send.unsent_within_credit() - counted_before;
        self.buffered += accepted as u64;
        self.stats.bytes_written += accepted as u64;
        self.schedule_send(id);
        Ok(accepted)
    }

    /// Ends the sending half after the bytes written so far. [`StreamEvent::Finished`] follows once the peer
    /// acknowledged all of them and the FIN.
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamError> {
        self.check_writable(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        stream.send.finish();
        self.schedule_send(id);
        Ok(())
    }

    /// Whether `write` and `finish` may go on: the stream is open, and its sending half neither ended nor stopped
    /// by the peer.
    fn check_writable(&self, id: StreamId) -> Result<(), StreamError> {
        self.check_opened(id)?;
        let stream = self.streams.get(&id).ok_or(StreamError::Closed(id))?;
        if let Some(error_code) = stream.send.stopped_by_peer() {
            return Err(StreamError::Stopped { id, error_code });
        }
        if !stream.send.is_writable() {
            return Err(StreamError::SendClosed(id));
        }
        Ok(())
    }

    /// Abandons the sending half: unacknowledged bytes are dropped and the peer is told with RESET_STREAM. Does
    /// nothing if the sending half already ended (reset, or everything acknowledged).
    pub fn reset(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        check_error_code(error_code)?;
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        if stream.send.is_done() || stream.send.is_reset() {
            return Ok(());
        }
        self.unsent -= stream.send.unsent_within_credit();
        let released = stream.send.reset(error_code);
        self.buffered -= released;
        self.schedule_control(id);
        self.on_send_room(id);
        Ok(())
    }

    pub(super) fn on_stream_ack(&mut self, id: StreamId, ranges: &[Range<u64>]) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        let was_done = stream.send.is_done();
        let outcome = stream.send.on_ack(id, ranges)?;
        self.stats.bytes_acked += outcome.newly_acked;
        self.buffered -= outcome.released;
        if outcome.finished && !was_done {
            self.events.push_back(StreamEvent::Finished(id));
        }
        if outcome.released > 0 {
            self.on_send_room(id);
        }
        self.prune_timers();
        self.maybe_free(id);
        Ok(())
    }

    pub(super) fn on_stop_sending(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        if stream.send.is_done() || stream.send.is_reset() {
            return Ok(());
        }
        self.unsent -= stream.send.unsent_within_credit();
        let released = stream.send.stop(error_code);
        self.buffered -= released;
        self.events.push_back(StreamEvent::Stopped { id, error_code });
        self.schedule_control(id);
        self.on_send_room(id);
        Ok(())
    }

    /// Send buffer room was freed on `id` (and so on the connection): wake writers that were refused.
    fn on_send_room(&mut self, id: StreamId) {
        self.wake_stream_writer(id);
        self.wake_connection_writers();
    }

    /// Room for more written bytes on the connection as a whole: in the send buffer, and under the unsent bound.
    fn connection_send_room(&self) -> u64 {
        let buffer_room = self.config.send_buffer.saturating_sub(self.buffered);
        let unsent_room = self.unsent_limit.map_or(u64::MAX, |limit| limit.saturating_sub(self.unsent));
        buffer_room.min(unsent_room)
    }

    /// Whether a writer refused for lack of room should be woken: the buffer has room and the unsent bytes are down
    /// to half the bound, so that it is woken for a batch of bytes rather than each packet's worth (TCP wakes a
    /// TCP_NOTSENT_LOWAT writer the same way).
    fn has_room_to_wake(&self, buffered: u64, buffer_size: u64, unsent: u64) -> bool {
        buffered < buffer_size && self.unsent_limit.is_none_or(|limit| unsent <= limit / 2)
    }

    /// Wakes the writer of `id` if it was refused for lack of room in this stream and has room again.
    pub(super) fn wake_stream_writer(&mut self, id: StreamId) {
        let Some(stream) = self.streams.get(&id) else { return };
        let room = self.has_room_to_wake(stream.send.buffered(), self.config.stream_send_buffer, stream.send.unsent());
        if let Some(stream) = self.streams.get_mut(&id).filter(|s| room && s.send.write_blocked && s.send.is_writable())
        {
            stream.send.write_blocked = false;
            self.events.push_back(StreamEvent::Writable(id));
        }
    }

    /// Wakes the writers refused for lack of room on the connection once it has room again.
    pub(super) fn wake_connection_writers(&mut self) {
        if self.connection_write_waiters.is_empty()
            || !self.has_room_to_wake(self.buffered, self.config.send_buffer, self.unsent)
        {
            return;
        }
        for waiter in self.connection_write_waiters.drain(..) {
            if let Some(stream) = self.streams.get_mut(&waiter) {
                stream.waiting_for_connection_room = false;
                if stream.send.is_writable() {
                    stream.send.write_blocked = false;
                    self.events.push_back(StreamEvent::Writable(waiter));
                }
            }
        }
    }

    /// Bounds the unsent bytes the streams accept ([`super::StreamConfig::unsent_windows`]); the connection follows
    /// its channels' congestion windows with it. `None` lifts the bound.
    pub fn set_unsent_limit(&mut self, limit: Option<u64>) {
        if limit != self.unsent_limit {
            self.unsent_limit = limit;
            self.wake_connection_writers();
        }
    }
}
