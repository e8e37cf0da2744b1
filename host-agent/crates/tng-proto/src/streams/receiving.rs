//! The receiving halves across streams: incoming STREAM and RESET_STREAM frames, what the application reads or
//! refuses to read, and the STREAM_ACKs that report it back.

use std::time::Duration;

use tng_wire::varint;

use super::config::MAX_OFFSET;
use super::error::check_error_code;
use super::recv::{ReadOutcome, WindowTuning};
use super::state::Target;
use super::{StreamError, StreamEvent, StreamId, Streams};

/// Most acknowledgements for already-closed streams held at once; beyond that the peer's retransmission asks again.
const MAX_CLOSED_ACKS: usize = 256;

impl Streams {
    /// The connection's longest round trip now: a stream's receive window grows while its grants come less than two
    /// of them apart ([`WindowTuning`]).
    pub fn set_round_trip(&mut self, round_trip: Duration) {
        self.round_trip = Some(round_trip);
    }

    /// Reads in-order bytes into `buf`.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, StreamError> {
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        let outcome = stream.recv.read(id, buf)?;
        match outcome {
            ReadOutcome::Data(n) => {
                let tuning = self.round_trip.map(|round_trip| WindowTuning {
                    now: self.clock,
                    round_trip,
                    max_window: self.config.receive_window,
                });
                let credit_due = stream.recv.grant_credit(MAX_OFFSET, tuning);
                self.stats.bytes_read += n as u64;
                if credit_due {
                    self.schedule_control(id);
                }
                self.consume(n as u64);
            }
            ReadOutcome::Finished | ReadOutcome::Reset { .. } => self.maybe_free(id),
            ReadOutcome::Blocked => {}
        }
        Ok(outcome)
    }

    /// Stops reading: buffered and arriving bytes are discarded and the peer is asked (STOP_SENDING) to reset its
    /// sending half. Does nothing if the receiving half already ended.
    pub fn stop_sending(&mut self, id: StreamId, error_code: u64) -> Result<(), StreamError> {
        check_error_code(error_code)?;
        self.check_opened(id)?;
        let stream = self.streams.get_mut(&id).ok_or(StreamError::Closed(id))?;
        let (discarded, frame_due) = stream.recv.stop(error_code);
        let credit_due = discarded > 0 && stream.recv.grant_credit(MAX_OFFSET, None);
        if frame_due || credit_due {
            self.schedule_control(id);
        }
        self.consume(discarded);
        self.maybe_free(id);
        Ok(())
    }

    pub(super) fn on_stream(&mut self, id: StreamId, offset: u64, fin: bool, data: &[u8]) -> Result<(), StreamError> {
        let end = offset.saturating_add(data.len() as u64);
        let probe = data.is_empty() && !fin;
        let target = self.target(id)?;
        if probe && self.max_remote_streams > self.next_remote {
            self.max_streams_pending = true;
        }
        if let Target::Closed = target {
            self.ack_closed(id, end.saturating_add(u64::from(fin)));
            return Ok(());
        }
        let ack_every = self.config.ack_every();
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        let received = self.data_received.saturating_add(stream.recv.credit_growth(end));
        if received > self.max_data {
            return Err(StreamError::ConnectionFlowControl { received, limit: self.max_data });
        }
        let credit = stream.recv.ingest(id, offset, data, fin, self.config.max_reassembly_gaps)?;
        self.data_received += credit.received;
        if credit.discarded > 0 {
            // Stopped streams keep granting credit, so a peer that missed our STOP_SENDING can still finish.
            stream.recv.grant_credit(MAX_OFFSET, None);
        }
        if probe && stream.recv.wants_credit() && stream.recv.limit() > offset {
            stream.recv.credit_pending = true;
        }
        if probe && self.max_data > self.data_received {
            self.max_data_pending = true;
        }
        let ack_now = stream.recv.bytes_since_ack() >= ack_every;
        if stream.recv.credit_pending {
            self.schedule_control(id);
        }
        self.schedule_ack(id, ack_now);
        self.consume(credit.discarded);
        self.signal_readable(id);
        self.maybe_free(id);
        Ok(())
    }

    pub(super) fn on_reset_stream(
        &mut self,
        id: StreamId,
        error_code: u64,
        final_size: u64,
    ) -> Result<(), StreamError> {
        if let Target::Closed = self.target(id)? {
            self.ack_closed(id, final_size.saturating_add(1));
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else { return Ok(()) };
        let received = self.data_received.saturating_add(stream.recv.credit_growth(final_size));
        if received > self.max_data {
            return Err(StreamError::ConnectionFlowControl { received, limit: self.max_data });
        }
        let was_reset = stream.recv.reset_unread().is_some();
        let credit = stream.recv.on_reset(id, error_code, final_size)?;
        self.data_received += credit.received;
        if !was_reset && stream.recv.reset_unread().is_some() {
            stream.recv.readable_signalled = true;
            self.events.push_back(StreamEvent::Reset { id, error_code });
        }
        self.schedule_ack(id, false);
        self.consume(credit.discarded);
        self.maybe_free(id);
        Ok(())
    }

    fn signal_readable(&mut self, id: StreamId) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if !stream.recv.readable_signalled && stream.recv.is_readable() {
                stream.recv.readable_signalled = true;
                self.events.push_back(StreamEvent::Readable(id));
            }
        }
    }

    /// Queues the stream's STREAM_ACK (its `ack_pending` is set): due [`StreamConfig::ack_delay`] from now, or at
    /// once if `urgent` or when the stream's receiving half is complete or reset, so that the peer can release it
    /// without delay.
    pub(super) fn schedule_ack(&mut self, id: StreamId, urgent: bool) {
        let Some(stream) = self.streams.get_mut(&id) else { return };
        let at_once = urgent || stream.recv.is_complete();
        let due = if at_once { self.clock } else { self.clock + self.config.ack_delay };
        self.acks_due_at = Some(self.acks_due_at.map_or(due, |earlier| earlier.min(due)));
        if !stream.in_ack_queue {
            stream.in_ack_queue = true;
            self.ack_queue.push_back(id);
        }
    }

    /// A closed stream's peer repeats data or a reset because our last STREAM_ACK was lost: everything up to `end`
    /// was received (we close only complete streams), so acknowledge `0..end`.
    pub(super) fn ack_closed(&mut self, id: StreamId, end: u64) {
        if end == 0 || end > varint::MAX {
            return;
        }
        if let Some(entry) = self.closed_acks.iter_mut().find(|(acked, _)| *acked == id) {
            entry.1 = entry.1.max(end);
        } else if self.closed_acks.len() < MAX_CLOSED_ACKS {
            self.closed_acks.push_back((id, end));
        }
    }
}
