//! The sending halves across streams: what the application writes, finishes or abandons, the send buffers that
//! bound it, and what the peer says about it end to end (STREAM_ACK, STOP_SENDING).

use std::ops::Range;

use super::error::check_error_code;
use super::state::Target;
use super::{StreamError, StreamEvent, StreamId, Streams};

impl Streams {
    /// Buffers as much of `data` as the send buffers take; returns how many bytes that was.
    /// [`StreamError::Blocked`] if none: a [`StreamEvent::Writable`] follows when room frees up.
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        self.check_writable(id)?;
        if data.is_empty() {
            return Ok(0);
        }
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        let stream_room = self.config.stream_send_buffer.saturating_sub(stream.send.buffered());
        let connection_room = self.config.send_buffer.saturating_sub(self.buffered);
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
        stream.send.push(&data[..accepted]);
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
        let released = stream.send.stop(error_code);
        self.buffered -= released;
        self.events.push_back(StreamEvent::Stopped { id, error_code });
        self.schedule_control(id);
        self.on_send_room(id);
        Ok(())
    }

    /// Send buffer room was freed on `id` (and so on the connection): wake writers that were refused.
    fn on_send_room(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if stream.send.write_blocked && stream.send.is_writable() {
                stream.send.write_blocked = false;
                self.events.push_back(StreamEvent::Writable(id));
            }
        }
        if self.buffered >= self.config.send_buffer {
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
}
