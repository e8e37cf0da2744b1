//! The set of streams: one entry per open stream, opened locally or implicitly by the peer's frames, freed once
//! both halves are over; the stream count the two sides allow each other (MAX_STREAMS); and the queues that hold
//! a stream's turn for frames.

use super::config::MAX_STREAM_COUNT;
use super::recv::RecvStream;
use super::retransmit::{Timer, TimerKind};
use super::send::SendStream;
use super::{StreamError, StreamEvent, StreamId, Streams};

#[derive(Debug)]
pub(super) struct Stream {
    pub(super) send: SendStream,
    pub(super) recv: RecvStream,
    pub(super) in_send_queue: bool,
    pub(super) in_control_queue: bool,
    pub(super) in_ack_queue: bool,
    /// Listed in `Streams::connection_blocked`.
    pub(super) connection_blocked: bool,
    /// Listed in `Streams::connection_write_waiters`.
    pub(super) waiting_for_connection_room: bool,
}

impl Stream {
    pub(super) fn new(send_credit: u64, receive_window: u64) -> Self {
        Stream {
            send: SendStream::new(send_credit),
            recv: RecvStream::new(receive_window),
            in_send_queue: false,
            in_control_queue: false,
            in_ack_queue: false,
            connection_blocked: false,
            waiting_for_connection_room: false,
        }
    }
}

/// Whether a frame's stream still has state.
pub(super) enum Target {
    Live,
    Closed,
}

impl Streams {
    /// Opens a stream; the peer learns of it from the first frame we send on it.
    pub fn open(&mut self) -> Result<StreamId, StreamError> {
        if self.next_local >= self.peer_max_streams {
            self.open_blocked = true;
            let limit = self.peer_max_streams;
            if limit > 0 && self.open_blocked_at != Some(limit) {
                self.open_blocked_at = Some(limit);
                self.timers.push_back(Timer { armed_at: self.clock, kind: TimerKind::StreamCountProbe { limit } });
            }
            return Err(StreamError::StreamLimit { limit });
        }
        let id = StreamId::new(self.side, self.next_local);
        self.next_local += 1;
        self.streams.insert(id, Stream::new(self.peer_max_stream_data, self.config.stream_receive_window));
        self.stats.streams_opened += 1;
        Ok(id)
    }

    /// A stream the peer opened, oldest first.
    pub fn accept(&mut self) -> Option<StreamId> {
        self.accept_queue.pop_front()
    }

    /// Local API calls may name only streams that were opened.
    pub(super) fn check_opened(&self, id: StreamId) -> Result<(), StreamError> {
        let opened = if id.initiator() == self.side { self.next_local } else { self.next_remote };
        if id.index() < opened {
            Ok(())
        } else {
            Err(StreamError::NotOpen(id))
        }
    }

    /// Resolves the stream a peer frame names, opening peer streams implicitly (with every lower-numbered one).
    pub(super) fn target(&mut self, id: StreamId) -> Result<Target, StreamError> {
        if id.initiator() == self.side {
            if id.index() >= self.next_local {
                return Err(StreamError::UnopenedStream(id));
            }
        } else if id.index() >= self.next_remote {
            if id.index() >= self.max_remote_streams {
                return Err(StreamError::StreamLimitViolation { id, limit: self.max_remote_streams });
            }
            let announce = self.accept_queue.is_empty();
            while self.next_remote <= id.index() {
                let opened = StreamId::new(self.side.peer(), self.next_remote);
                self.streams.insert(opened, Stream::new(self.peer_max_stream_data, self.config.stream_receive_window));
                self.accept_queue.push_back(opened);
                self.next_remote += 1;
                self.stats.streams_accepted += 1;
            }
            if announce {
                self.events.push_back(StreamEvent::Opened);
            }
        }
        Ok(if self.streams.contains_key(&id) { Target::Live } else { Target::Closed })
    }

    pub(super) fn on_max_streams(&mut self, max: u64) {
        let max = max.min(MAX_STREAM_COUNT);
        if max <= self.peer_max_streams {
            return;
        }
        self.peer_max_streams = max;
        self.open_blocked_at = None;
        self.stream_count_probe_pending = false;
        self.prune_timers();
        if self.open_blocked {
            self.open_blocked = false;
            self.events.push_back(StreamEvent::Available);
        }
    }

    /// Forgets a stream once both halves are over; a closed peer stream makes room for one more.
    pub(super) fn maybe_free(&mut self, id: StreamId) {
        let Some(stream) = self.streams.get(&id).filter(|s| s.send.is_done() && s.recv.is_done()) else { return };
        // A STREAM_ACK still waiting to ride along must not be forgotten with the stream.
        let unsent_ack = stream.recv.final_size().filter(|_| stream.recv.ack_pending);
        self.streams.remove(&id);
        if let Some(final_size) = unsent_ack {
            self.ack_closed(id, final_size.saturating_add(1));
        }
        if id.initiator() != self.side {
            self.max_remote_streams = (self.max_remote_streams + 1).min(MAX_STREAM_COUNT);
            self.max_streams_pending = true;
        }
    }

    pub(super) fn schedule_send(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if !stream.in_send_queue {
                stream.in_send_queue = true;
                self.send_queue.push_back(id);
            }
        }
    }

    pub(super) fn schedule_control(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if !stream.in_control_queue {
                stream.in_control_queue = true;
                self.control_queue.push_back(id);
            }
        }
    }
}
