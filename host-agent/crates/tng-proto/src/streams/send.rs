//! The sending half of one stream: buffered bytes by offset, what was sent, what the peer acknowledged end to end,
//! what must go out again, and the FIN or RESET that ends it.
//!
//! Bytes leave the buffer only when a STREAM_ACK from the peer covers them; packet-level acknowledgements from the
//! flow layer never release anything (a middlebox that splits a section acknowledges packets it has not delivered).

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use super::byte_buffer::ByteBuffer;
use super::error::StreamError;
use super::id::StreamId;
use super::range_set::RangeSet;
use crate::time::Time;

#[derive(Debug)]
pub(super) struct SendStream {
    /// Bytes `acked_offset..write_offset`.
    buffer: ByteBuffer,
    /// Every byte below this offset is acknowledged by the peer and released.
    acked_offset: u64,
    write_offset: u64,
    /// When the bytes not yet sent were written: `(end offset, time)` per write, oldest first, so that the first
    /// transmission of a byte tells how long it queued.
    write_times: VecDeque<(u64, Time)>,
    /// One past the highest byte ever sent: new data starts here, and it is what counts against credit.
    sent_end: u64,
    /// Ranges above `acked_offset` the peer acknowledged out of order.
    acked: RangeSet,
    /// Sent ranges to send again: reported lost, or not acknowledged in time.
    retransmit: RangeSet,
    /// The peer's credit for this stream (MAX_STREAM_DATA).
    max_data: u64,
    fin: Option<Fin>,
    reset: Option<Reset>,
    /// Error code of the peer's STOP_SENDING, which made us reset the stream.
    stopped_by_peer: Option<u64>,
    /// A zero-length STREAM frame at `sent_end` should go out to ask the peer to repeat its credit.
    pub probe_pending: bool,
    /// The stream-level credit at which we found ourselves blocked (and armed a probe timer).
    pub blocked_at: Option<u64>,
    /// A write was refused or cut short for lack of room in this stream's buffer.
    pub write_blocked: bool,
}

#[derive(Debug)]
struct Fin {
    /// The final size: FIN occupies this one offset in acknowledgement space (as in TCP), so a STREAM_ACK range
    /// that contains it acknowledges the FIN.
    offset: u64,
    /// The FIN must be put (again) in a frame.
    pending: bool,
    sent: bool,
    acked: bool,
}

#[derive(Debug)]
struct Reset {
    error_code: u64,
    final_size: u64,
    /// A RESET_STREAM frame must go out (again).
    pending: bool,
    /// The peer acknowledged the reset: a STREAM_ACK containing offset `final_size`.
    acked: bool,
}

/// What to put in the next STREAM frame of this stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Chunk {
    pub range: Range<u64>,
    pub fin: bool,
    pub kind: ChunkKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ChunkKind {
    /// Bytes sent before; they use no new credit.
    Retransmission,
    /// Bytes never sent, or a FIN alone.
    New,
    /// A zero-length frame that asks the peer to repeat its credit.
    Probe,
}

/// The start of the next chunk and whether it carries bytes (a FIN alone or a probe does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NextChunk {
    pub offset: u64,
    pub carries_data: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NextKind {
    Retransmission,
    NewData,
    LoneFin,
    Probe,
}

/// Why a stream with unsent bytes cannot send them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Blocked {
    /// The stream's own credit (MAX_STREAM_DATA) is used up at this offset.
    Stream(u64),
    /// The connection's credit (MAX_DATA) is used up.
    Connection,
}

/// Effect of one STREAM_ACK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct AckOutcome {
    /// Bytes acknowledged for the first time.
    pub newly_acked: u64,
    /// Bytes released from the buffer.
    pub released: u64,
    /// The FIN and every byte before it are now acknowledged.
    pub finished: bool,
}

impl SendStream {
    pub fn new(max_data: u64) -> Self {
        SendStream {
            buffer: ByteBuffer::default(),
            acked_offset: 0,
            write_offset: 0,
            write_times: VecDeque::new(),
            sent_end: 0,
            acked: RangeSet::default(),
            retransmit: RangeSet::default(),
            max_data,
            fin: None,
            reset: None,
            stopped_by_peer: None,
            probe_pending: false,
            blocked_at: None,
            write_blocked: false,
        }
    }

    /// Bytes held in the buffer: written but not yet acknowledged.
    pub fn buffered(&self) -> u64 {
        self.write_offset - self.acked_offset
    }

    /// Bytes written and never sent.
    pub fn unsent(&self) -> u64 {
        self.write_offset - self.sent_end
    }

    /// The unsent bytes the peer's credit for this stream lets us send: what counts against the connection's unsent
    /// bound, so that a stream whose reader is slow does not hold back the writers of the others.
    pub fn unsent_within_credit(&self) -> u64 {
        self.write_offset.min(self.max_data).saturating_sub(self.sent_end)
    }

    pub fn sent_end(&self) -> u64 {
        self.sent_end
    }

    #[cfg(test)]
    pub fn acked_offset(&self) -> u64 {
        self.acked_offset
    }

    pub fn stopped_by_peer(&self) -> Option<u64> {
        self.stopped_by_peer
    }

    /// Whether the application may still write or finish.
    pub fn is_writable(&self) -> bool {
        self.fin.is_none() && self.reset.is_none()
    }

    pub fn is_reset(&self) -> bool {
        self.reset.is_some()
    }

    /// Nothing more will be sent or acknowledged: everything through the FIN is acknowledged, or the peer
    /// acknowledged our reset.
    pub fn is_done(&self) -> bool {
        match (&self.reset, &self.fin) {
            (Some(reset), _) => reset.acked,
            (None, Some(fin)) => fin.acked && self.acked_offset == fin.offset,
            (None, None) => false,
        }
    }

    /// Appends bytes the application wrote at `now`.
    pub fn push(&mut self, data: &[u8], now: Time) {
        self.buffer.push(data);
        self.write_offset += data.len() as u64;
        match self.write_times.back_mut() {
            Some((end, at)) if *at == now => *end = self.write_offset,
            _ => self.write_times.push_back((self.write_offset, now)),
        }
    }

    /// New bytes `range` left at `now` for the first time: reports how long each part of it waited since its write,
    /// as `(delay, bytes)`.
    pub fn on_first_sent(&mut self, range: &Range<u64>, now: Time, mut waited: impl FnMut(Duration, u64)) {
        let mut start = range.start;
        while start < range.end {
            let Some(&(end, written_at)) = self.write_times.front() else { return };
            let part_end = end.min(range.end);
            waited(now.saturating_since(written_at), part_end.saturating_sub(start));
            start = part_end;
            if end <= range.end {
                self.write_times.pop_front();
            }
        }
    }

    pub fn finish(&mut self) {
        self.fin = Some(Fin { offset: self.write_offset, pending: true, sent: false, acked: false });
    }

    /// Abandons the stream: drops every buffered byte and queues a RESET_STREAM. Returns the bytes released.
    pub fn reset(&mut self, error_code: u64) -> u64 {
        let released = self.buffered();
        // The final size is what the peer may have seen: exactly the bytes we sent, whatever the buffer held.
        self.reset = Some(Reset { error_code, final_size: self.sent_end, pending: true, acked: false });
        self.buffer.clear();
        self.acked.clear();
        self.retransmit.clear();
        self.acked_offset = self.sent_end;
        self.write_offset = self.sent_end;
        self.write_times.clear();
        self.fin = None;
        self.probe_pending = false;
        released
    }

    /// The peer's STOP_SENDING: reset with its error code. Returns the bytes released.
    pub fn stop(&mut self, error_code: u64) -> u64 {
        self.stopped_by_peer = Some(error_code);
        self.reset(error_code)
    }

    /// The RESET_STREAM to (re)send, as `(error_code, final_size)`.
    pub fn pending_reset(&self) -> Option<(u64, u64)> {
        self.reset
            .as_ref()
            .filter(|reset| reset.pending && !reset.acked)
            .map(|reset| (reset.error_code, reset.final_size))
    }

    pub fn on_reset_sent(&mut self) {
        if let Some(reset) = &mut self.reset {
            reset.pending = false;
        }
    }

    /// Whether a RESET_STREAM must go out again.
    pub fn on_reset_lost(&mut self) -> bool {
        match &mut self.reset {
            Some(reset) if !reset.acked => {
                reset.pending = true;
                true
            }
            _ => false,
        }
    }

    pub fn on_reset_delivered_hint(&mut self) {
        self.on_reset_sent();
    }

    pub fn is_reset_acked(&self) -> bool {
        self.reset.as_ref().is_some_and(|reset| reset.acked)
    }

    /// Raises the peer's credit; whether it grew.
    pub fn raise_max_data(&mut self, max: u64) -> bool {
        if max <= self.max_data {
            return false;
        }
        self.max_data = max;
        self.blocked_at = None;
        true
    }

    /// New bytes the stream may send now, given the connection-level credit left.
    fn new_data_end(&self, connection_credit: u64) -> u64 {
        self.write_offset.min(self.max_data).min(self.sent_end.saturating_add(connection_credit))
    }

    /// What the next chunk is, if there is one: retransmissions first, then new bytes, then a lone FIN, then a
    /// probe.
    fn next_kind(&self, connection_credit: u64) -> Option<NextKind> {
        if self.reset.is_some() {
            None
        } else if !self.retransmit.is_empty() {
            Some(NextKind::Retransmission)
        } else if self.new_data_end(connection_credit) > self.sent_end {
            Some(NextKind::NewData)
        } else if self.fin.as_ref().is_some_and(|fin| fin.pending && fin.offset == self.sent_end) {
            Some(NextKind::LoneFin)
        } else if self.probe_pending {
            Some(NextKind::Probe)
        } else {
            None
        }
    }

    /// Where the next chunk starts and whether it carries bytes, so the caller can size the frame.
    pub fn next_chunk(&self, connection_credit: u64) -> Option<NextChunk> {
        let next = match self.next_kind(connection_credit)? {
            NextKind::Retransmission => NextChunk { offset: self.retransmit.first()?.start, carries_data: true },
            NextKind::NewData => NextChunk { offset: self.sent_end, carries_data: true },
            NextKind::LoneFin | NextKind::Probe => NextChunk { offset: self.sent_end, carries_data: false },
        };
        Some(next)
    }

    /// Takes the chunk [`SendStream::next_chunk`] announced, with at most `max_len` bytes.
    pub fn take_chunk(&mut self, max_len: u64, connection_credit: u64) -> Option<Chunk> {
        let next = self.next_kind(connection_credit)?;
        // A chunk's bytes are one slice of the buffer: it ends where the buffer's segment does.
        let max_len = match next {
            NextKind::Retransmission => {
                self.retransmit.first().map_or(max_len, |r| max_len.min(self.contiguous(r.start)))
            }
            NextKind::NewData => max_len.min(self.contiguous(self.sent_end)),
            NextKind::LoneFin | NextKind::Probe => max_len,
        };
        let (range, kind) = match next {
            NextKind::Retransmission => (self.retransmit.pop_front(max_len)?, ChunkKind::Retransmission),
            NextKind::NewData => {
                let end = self.new_data_end(connection_credit).min(self.sent_end.saturating_add(max_len));
                let range = self.sent_end..end;
                self.sent_end = end;
                (range, ChunkKind::New)
            }
            NextKind::LoneFin => (self.sent_end..self.sent_end, ChunkKind::New),
            NextKind::Probe => {
                self.probe_pending = false;
                return Some(Chunk { range: self.sent_end..self.sent_end, fin: false, kind: ChunkKind::Probe });
            }
        };
        let fin = match &mut self.fin {
            Some(fin) if fin.pending && range.end == fin.offset => {
                fin.pending = false;
                fin.sent = true;
                true
            }
            _ => false,
        };
        Some(Chunk { range, fin, kind })
    }

    /// Buffered bytes from stream offset `offset` that one slice of the buffer holds.
    fn contiguous(&self, offset: u64) -> u64 {
        let start = usize::try_from(offset.saturating_sub(self.acked_offset)).unwrap_or(usize::MAX);
        self.buffer.slice(start, usize::MAX).len() as u64
    }

    /// The bytes of `range`, which [`SendStream::take_chunk`] just returned.
    pub fn chunk_data(&self, range: &Range<u64>) -> &[u8] {
        let start = range.start.saturating_sub(self.acked_offset);
        let end = range.end.saturating_sub(self.acked_offset);
        self.buffer.slice(usize::try_from(start).unwrap_or(usize::MAX), usize::try_from(end).unwrap_or(usize::MAX))
    }

    /// Why unsent bytes wait, if they do.
    pub fn blocked(&self, connection_credit: u64) -> Option<Blocked> {
        if self.reset.is_some() || self.write_offset == self.sent_end {
            return None;
        }
        if self.sent_end >= self.max_data {
            Some(Blocked::Stream(self.max_data))
        } else if connection_credit == 0 {
            Some(Blocked::Connection)
        } else {
            None
        }
    }

    /// The peer's STREAM_ACK. Ranges that reach beyond what we sent are a protocol violation.
    pub fn on_ack(&mut self, id: StreamId, ranges: &[Range<u64>]) -> Result<AckOutcome, StreamError> {
        let ack_limit = match (&self.reset, &self.fin) {
            (Some(reset), _) => reset.final_size + 1,
            (None, Some(fin)) if fin.sent => fin.offset + 1,
            _ => self.sent_end,
        };
        for range in ranges {
            if range.start > range.end {
                return Err(StreamError::InvalidAckRange { id, start: range.start, end: range.end });
            }
            if range.end > ack_limit {
                return Err(StreamError::AckOfUnsentData { id, end: range.end, sent: ack_limit });
            }
        }
        let mut outcome = AckOutcome::default();
        if let Some(reset) = &mut self.reset {
            if !reset.acked && ranges.iter().any(|range| range.contains(&reset.final_size)) {
                reset.acked = true;
            }
            return Ok(outcome);
        }
        for range in ranges {
            let bytes = range.start.max(self.acked_offset)..range.end.min(self.sent_end);
            outcome.newly_acked += self.acked.insert(bytes.clone());
            self.retransmit.remove(bytes);
            if let Some(fin) = &mut self.fin {
                if fin.sent && range.contains(&fin.offset) {
                    fin.acked = true;
                    fin.pending = false;
                }
            }
        }
        if let Some(first) = self.acked.first().filter(|first| first.start == self.acked_offset) {
            outcome.released = first.end - self.acked_offset;
            self.acked.remove_below(first.end);
            self.buffer.release(usize::try_from(outcome.released).unwrap_or(usize::MAX));
            self.acked_offset = first.end;
        }
        outcome.finished = self.is_done();
        if outcome.finished {
            // The spare segments the buffer kept for more writes: none will come.
            self.buffer.clear();
        }
        Ok(outcome)
    }

    /// Whether `range` (and the FIN, if `fin`) no longer needs the sender: acknowledged, or abandoned by a reset.
    pub fn is_resolved(&self, range: &Range<u64>, fin: bool) -> bool {
        if self.reset.is_some() {
            return true;
        }
        let bytes_done =
            range.end <= self.acked_offset || self.acked.covers(range.start.max(self.acked_offset)..range.end);
        bytes_done && (!fin || self.fin.as_ref().is_some_and(|fin| fin.acked))
    }

    /// A packet carrying `range` (and the FIN, if `fin`) was lost, or the range was not acknowledged in time: queue
    /// what is still unacknowledged. Returns whether anything was queued.
    pub fn on_lost(&mut self, range: Range<u64>, fin: bool) -> bool {
        if self.reset.is_some() {
            return false;
        }
        let mut queued = false;
        let unacked = range.start.max(self.acked_offset)..range.end.min(self.sent_end);
        if !unacked.is_empty() {
            let (acked, retransmit) = (&self.acked, &mut self.retransmit);
            acked.for_each_gap(unacked, |gap| {
                retransmit.insert(gap);
                queued = true;
            });
        }
        if let Some(stream_fin) = &mut self.fin {
            if fin && !stream_fin.acked {
                stream_fin.pending = true;
                queued = true;
            }
        }
        queued
    }

    /// The flow layer acknowledged the packet that carried `range`: if a loss report had queued it again, the
    /// report was spurious, so the copy need not go out. This never releases bytes: only STREAM_ACK does.
    pub fn on_delivered_hint(&mut self, range: Range<u64>, fin: bool) {
        self.retransmit.remove(range);
        if let Some(stream_fin) = &mut self.fin {
            if fin {
                stream_fin.pending = false;
            }
        }
    }
}

#[cfg(test)]
// One-range lists of offsets are data here, not a mistaken `(a..b).collect()`.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    use crate::streams::id::Side;

    const ID: StreamId = StreamId::new(Side::Client, 0);

    fn take(s: &mut SendStream, max_len: u64) -> Option<Chunk> {
        s.take_chunk(max_len, u64::MAX)
    }

    #[test]
    fn sends_new_data_within_stream_and_connection_credit() {
        let mut s = SendStream::new(10);
        s.push(&[7; 30], Time::ZERO);
        assert_eq!(s.next_chunk(4), Some(NextChunk { offset: 0, carries_data: true }));
        assert_eq!(s.take_chunk(100, 4), Some(Chunk { range: 0..4, fin: false, kind: ChunkKind::New }));
        assert_eq!(take(&mut s, 100).map(|c| c.range), Some(4..10));
        assert_eq!(s.next_chunk(u64::MAX), None);
        assert_eq!(s.blocked(5), Some(Blocked::Stream(10)));
        assert!(s.raise_max_data(20));
        assert_eq!(s.blocked(0), Some(Blocked::Connection));
        assert_eq!(s.chunk_data(&(4..10)), [7; 6]);
    }

    #[test]
    fn fin_rides_on_the_last_chunk_or_alone() {
        let mut s = SendStream::new(100);
        s.push(b"abc", Time::ZERO);
        s.finish();
        assert!(!s.is_writable());
        assert_eq!(take(&mut s, 100), Some(Chunk { range: 0..3, fin: true, kind: ChunkKind::New }));
        assert_eq!(take(&mut s, 100), None);
        assert!(s.on_lost(0..3, true));
        assert_eq!(take(&mut s, 2), Some(Chunk { range: 0..2, fin: false, kind: ChunkKind::Retransmission }));
        assert_eq!(take(&mut s, 2), Some(Chunk { range: 2..3, fin: true, kind: ChunkKind::Retransmission }));

        let mut empty = SendStream::new(0);
        empty.finish();
        assert_eq!(take(&mut empty, 0), Some(Chunk { range: 0..0, fin: true, kind: ChunkKind::New }));
    }

    #[test]
    fn bytes_are_released_only_by_stream_ack_and_fin_counts_as_one_offset() {
        let mut s = SendStream::new(100);
        s.push(b"0123456789", Time::ZERO);
        s.finish();
        take(&mut s, 100);
        s.on_delivered_hint(0..10, true);
        assert_eq!(s.buffered(), 10, "a flow-layer acknowledgement releases nothing");
        let out = s.on_ack(ID, &[5..8]).unwrap();
        assert_eq!((out.newly_acked, out.released, out.finished), (3, 0, false));
        let out = s.on_ack(ID, &[0..5]).unwrap();
        assert_eq!((out.newly_acked, out.released), (5, 8));
        assert_eq!(s.buffered(), 2);
        let out = s.on_ack(ID, &[0..10]).unwrap();
        assert!(!out.finished, "FIN not yet acknowledged");
        let out = s.on_ack(ID, &[9..11]).unwrap();
        assert!(out.finished && s.is_done());
    }

    #[test]
    fn acks_beyond_what_was_sent_are_violations() {
        let mut s = SendStream::new(100);
        s.push(b"0123456789", Time::ZERO);
        take(&mut s, 4);
        assert_eq!(s.on_ack(ID, &[0..5]), Err(StreamError::AckOfUnsentData { id: ID, end: 5, sent: 4 }));
        assert!(matches!(
            s.on_ack(ID, &[std::ops::Range { start: 3, end: 2 }]),
            Err(StreamError::InvalidAckRange { .. })
        ));
        assert_eq!(s.buffered(), 10);
    }

    #[test]
    fn loss_requeues_only_unacknowledged_parts_and_hint_cancels() {
        let mut s = SendStream::new(100);
        s.push(&[1; 20], Time::ZERO);
        take(&mut s, 20);
        s.on_ack(ID, &[5..10]).unwrap();
        assert!(s.on_lost(0..20, false));
        assert_eq!(s.retransmit.iter().collect::<Vec<_>>(), [0..5, 10..20]);
        s.on_delivered_hint(10..20, false);
        assert_eq!(take(&mut s, 100).map(|c| c.range), Some(0..5));
        assert_eq!(take(&mut s, 100), None);
        assert!(s.is_resolved(&(5..10), false) && !s.is_resolved(&(0..10), false));
    }

    #[test]
    fn reset_drops_the_buffer_and_is_acknowledged_at_the_final_size() {
        let mut s = SendStream::new(100);
        s.push(&[1; 20], Time::ZERO);
        take(&mut s, 8);
        assert_eq!(s.reset(3), 20);
        assert_eq!((s.buffered(), s.next_chunk(u64::MAX)), (0, None));
        assert_eq!(s.pending_reset(), Some((3, 8)));
        s.on_reset_sent();
        assert!(s.on_reset_lost());
        s.on_ack(ID, &[0..8]).unwrap();
        assert!(!s.is_done());
        s.on_ack(ID, &[0..9]).unwrap();
        assert!(s.is_done() && s.pending_reset().is_none() && !s.on_reset_lost());
    }

    #[test]
    fn probe_is_a_zero_length_chunk_at_the_credit_edge() {
        let mut s = SendStream::new(4);
        s.push(&[1; 10], Time::ZERO);
        take(&mut s, 100);
        s.probe_pending = true;
        assert_eq!(s.next_chunk(u64::MAX), Some(NextChunk { offset: 4, carries_data: false }));
        assert_eq!(take(&mut s, 100), Some(Chunk { range: 4..4, fin: false, kind: ChunkKind::Probe }));
        assert!(!s.probe_pending);
        s.finish();
        s.probe_pending = true;
        assert_eq!(take(&mut s, 100), Some(Chunk { range: 4..4, fin: false, kind: ChunkKind::Probe }));
        assert_eq!(take(&mut s, 100), None, "the FIN waits for the bytes before it");
    }

    #[test]
    fn first_transmissions_report_how_long_each_write_waited() {
        let mut s = SendStream::new(100);
        s.push(&[1; 10], Time::from_millis(0));
        s.push(&[2; 10], Time::from_millis(5));
        s.push(&[3; 5], Time::from_millis(5));
        assert_eq!(s.unsent(), 25);
        let mut waited = Vec::new();
        let chunk = take(&mut s, 15).unwrap();
        s.on_first_sent(&chunk.range, Time::from_millis(20), |delay, bytes| waited.push((delay.as_millis(), bytes)));
        assert_eq!(waited, [(20, 10), (15, 5)]);
        assert_eq!(s.unsent(), 10);
        waited.clear();
        let chunk = take(&mut s, 100).unwrap();
        s.on_first_sent(&chunk.range, Time::from_millis(30), |delay, bytes| waited.push((delay.as_millis(), bytes)));
        assert_eq!(waited, [(25, 10)], "the two writes at 5 ms are one");
        assert_eq!(s.unsent(), 0);
    }

    #[test]
    fn reset_forgets_unsent_bytes() {
        let mut s = SendStream::new(100);
        s.push(&[1; 20], Time::ZERO);
        take(&mut s, 8);
        assert_eq!(s.unsent(), 12);
        s.reset(1);
        assert_eq!(s.unsent(), 0);
    }
}
