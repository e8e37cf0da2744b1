//! The receiving half of one stream: reassembly of chunks that arrive out of order or twice, in-order reads, the
//! final size, stream-level credit, and the end-to-end acknowledgement state the peer's sender waits for.
//!
//! Chunks are written straight into a buffer indexed by offset, so overlapping and duplicate chunks cost no extra
//! memory and the buffer never holds more than the credit we granted.

use std::ops::Range;
use std::time::Duration;

use super::byte_buffer::ByteBuffer;
use super::error::StreamError;
use super::id::StreamId;
use super::range_set::RangeSet;
use crate::time::Time;

#[derive(Debug)]
pub(super) struct RecvStream {
    /// Bytes from `read_offset` on; holes are zero until their chunk arrives.
    buffer: ByteBuffer,
    read_offset: u64,
    /// Every offset received, including the part already read.
    received: RangeSet,
    /// One past the highest offset received: what this stream charged to the connection-level credit.
    highest: u64,
    final_size: Option<u64>,
    /// Our latest MAX_STREAM_DATA.
    limit: u64,
    window: u64,
    /// When the reader's progress last raised `limit` (with a round trip known: see [`WindowTuning`]).
    last_grant: Option<Time>,
    state: RecvState,
    /// Error code of our STOP_SENDING: the application reads no more, arriving bytes are discarded.
    stopped: Option<u64>,
    stop_pending: bool,
    /// A STREAM_ACK must go out: something arrived since the last one, or the last one was lost.
    pub ack_pending: bool,
    /// `highest` when our last STREAM_ACK was written.
    highest_acknowledged: u64,
    /// A MAX_STREAM_DATA must go out.
    pub credit_pending: bool,
    /// A Readable event was emitted and the application has not yet drained the stream.
    pub readable_signalled: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvState {
    Receiving,
    /// The application read every byte and the FIN.
    Finished,
    /// The peer reset the stream; the application has not been told yet.
    Reset {
        error_code: u64,
    },
    /// The application was told of the reset (or did not care, having stopped reading).
    ResetRead {
        error_code: u64,
    },
}

/// What one application read produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were copied into the buffer.
    Data(usize),
    /// Every byte was read and the peer finished the stream.
    Finished,
    /// The peer abandoned the stream with this error code.
    Reset { error_code: u64 },
    /// Nothing to read now; a Readable event announces more.
    Blocked,
}

/// What growing a stream's window takes: the time of a grant, the connection's longest round trip, and the most the
/// window may become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowTuning {
    pub now: Time,
    pub round_trip: Duration,
    pub max_window: u64,
}

/// Connection-level effect of a frame on this stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Credit {
    /// Growth of the highest offset received: charged to the connection-level credit.
    pub received: u64,
    /// Bytes dropped without being read (stopped or reset): they give their connection-level credit back.
    pub discarded: u64,
}

impl RecvStream {
    pub fn new(window: u64) -> Self {
        RecvStream {
            buffer: ByteBuffer::default(),
            read_offset: 0,
            received: RangeSet::default(),
            highest: 0,
            final_size: None,
            limit: window,
            window,
            last_grant: None,
            state: RecvState::Receiving,
            stopped: None,
            stop_pending: false,
            ack_pending: false,
            highest_acknowledged: 0,
            credit_pending: false,
            readable_signalled: false,
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How much a frame ending at `end` would add to the connection-level credit used.
    pub fn credit_growth(&self, end: u64) -> u64 {
        end.saturating_sub(self.highest)
    }

    /// One past the last byte received in order.
    pub fn contiguous_end(&self) -> u64 {
        self.received.first().filter(|first| first.start == 0).map_or(0, |first| first.end)
    }

    /// A STREAM frame. Validates credit, final size and the reassembly limit before changing anything.
    pub fn ingest(
        &mut self,
        id: StreamId,
        offset: u64,
        data: &[u8],
        fin: bool,
        max_gaps: usize,
    ) -> Result<Credit, StreamError> {
        let end = offset.saturating_add(data.len() as u64);
        if end > self.limit {
            return Err(StreamError::StreamFlowControl { id, received: end, limit: self.limit });
        }
        match self.final_size {
            Some(final_size) if end > final_size || (fin && end != final_size) => {
                return Err(StreamError::FinalSize { id, final_size, offset: end });
            }
            None if fin && end < self.highest => {
                return Err(StreamError::FinalSize { id, final_size: end, offset: self.highest });
            }
            _ => {}
        }
        self.ack_pending = true;
        if self.state != RecvState::Receiving {
            // Everything up to the final size is settled; this is a retransmission whose acknowledgement was lost.
            return Ok(Credit::default());
        }
        let range = offset..end;
        let starts_at_zero =
            (offset == 0 && !range.is_empty()) || self.received.first().is_some_and(|first| first.start == 0);
        let gaps = self.received.len_after_insert(range.clone()).saturating_sub(usize::from(starts_at_zero));
        if gaps > max_gaps {
            return Err(StreamError::TooManyGaps { id, limit: max_gaps });
        }

        if self.stopped.is_none() {
            let (received, buffer, read_offset) = (&self.received, &mut self.buffer, self.read_offset);
            received.for_each_gap(range.start.max(read_offset)..range.end, |gap| {
                let from = usize::try_from(gap.start - offset).unwrap_or(usize::MAX);
                let to = usize::try_from(gap.end - offset).unwrap_or(usize::MAX);
                let pos = usize::try_from(gap.start - read_offset).unwrap_or(usize::MAX);
                buffer.write_at(pos, &data[from..to]);
            });
        }
        self.received.insert(range);
        let credit = Credit { received: self.credit_growth(end), discarded: self.discard_if_stopped() };
        self.highest = self.highest.max(end);
        if fin {
            self.final_size = Some(end);
        }
        Ok(credit)
    }

    /// After STOP_SENDING, bytes that become contiguous count as read at once. Returns how many.
    fn discard_if_stopped(&mut self) -> u64 {
        if self.stopped.is_none() {
            return 0;
        }
        let discarded = self.contiguous_end() - self.read_offset;
        self.read_offset += discarded;
        discarded
    }

    /// The peer's RESET_STREAM.
    pub fn on_reset(&mut self, id: StreamId, error_code: u64, final_size: u64) -> Result<Credit, StreamError> {
        if final_size > self.limit {
            return Err(StreamError::StreamFlowControl { id, received: final_size, limit: self.limit });
        }
        match self.final_size {
            Some(known) if known != final_size => {
                return Err(StreamError::FinalSize { id, final_size: known, offset: final_size });
            }
            None if final_size < self.highest => {
                return Err(StreamError::FinalSize { id, final_size, offset: self.highest });
            }
            _ => {}
        }
        self.ack_pending = true;
        if self.state != RecvState::Receiving {
            return Ok(Credit::default());
        }
        let credit = Credit { received: final_size - self.highest, discarded: final_size - self.read_offset };
        self.highest = final_size;
        self.final_size = Some(final_size);
        self.read_offset = final_size;
        self.buffer.clear();
        self.credit_pending = false;
        self.stop_pending = false;
        self.state =
            if self.stopped.is_some() { RecvState::ResetRead { error_code } } else { RecvState::Reset { error_code } };
        Ok(credit)
    }

    /// Whether a read would return something other than `Blocked`.
    pub fn is_readable(&self) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        match self.state {
            RecvState::Receiving => {
                self.contiguous_end() > self.read_offset || self.final_size == Some(self.read_offset)
            }
            RecvState::Reset { .. } => true,
            RecvState::Finished | RecvState::ResetRead { .. } => false,
        }
    }

    /// Whether the peer reset the stream and the application has not read that yet.
    pub fn reset_unread(&self) -> Option<u64> {
        match self.state {
            RecvState::Reset { error_code } => Some(error_code),
            _ => None,
        }
    }

    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, StreamError> {
        if self.stopped.is_some() {
            return Err(StreamError::ReadStopped(id));
        }
        match self.state {
            RecvState::Reset { error_code } | RecvState::ResetRead { error_code } => {
                self.state = RecvState::ResetRead { error_code };
                return Ok(ReadOutcome::Reset { error_code });
            }
            RecvState::Finished => return Ok(ReadOutcome::Finished),
            RecvState::Receiving => {}
        }
        let available = self.contiguous_end() - self.read_offset;
        if available > 0 {
            let n = usize::try_from(available).unwrap_or(usize::MAX).min(buf.len());
            let n = self.buffer.copy_front(&mut buf[..n]);
            self.buffer.release(n);
            self.read_offset += n as u64;
            return Ok(ReadOutcome::Data(n));
        }
        if self.final_size == Some(self.read_offset) {
            self.state = RecvState::Finished;
            // The spare segments the buffer kept for more bytes: none will come.
            self.buffer.clear();
            return Ok(ReadOutcome::Finished);
        }
        self.readable_signalled = false;
        Ok(ReadOutcome::Blocked)
    }

    /// Grants more credit once the reader consumed half a window since the last grant, so credit updates cost one
    /// frame per half window rather than one per read. Returns whether a MAX_STREAM_DATA is now due.
    ///
    /// With `tuning` (a read), the window grows as Chromium's and quiche's flow control does: grants less than two
    /// round trips apart mean the reader keeps up and the window, not the network, holds the sender back (a window
    /// spans at most two round trips of the sender's rate), so it doubles, up to `max_window`.
    pub fn grant_credit(&mut self, max_offset: u64, tuning: Option<WindowTuning>) -> bool {
        if self.final_size.is_some() || self.state != RecvState::Receiving {
            return false;
        }
        let new_limit = self.read_offset.saturating_add(self.window).min(max_offset);
        if new_limit > self.limit && new_limit - self.limit >= self.window / 2 {
            if let Some(tuning) = tuning {
                let soon =
                    self.last_grant.is_some_and(|last| tuning.now.saturating_since(last) < 2 * tuning.round_trip);
                if soon && self.window < tuning.max_window {
                    self.window = self.window.saturating_mul(2).min(tuning.max_window);
                }
                self.last_grant = Some(tuning.now);
            }
            self.limit = self.read_offset.saturating_add(self.window).min(max_offset);
            self.credit_pending = true;
        }
        self.credit_pending
    }

    /// Whether more credit could still matter to the peer.
    pub fn wants_credit(&self) -> bool {
        self.final_size.is_none() && self.state == RecvState::Receiving
    }

    /// The application's STOP_SENDING: drop buffered bytes and discard the rest as it arrives. Returns the bytes
    /// discarded now and whether a STOP_SENDING frame is due (not when the stream is already over).
    pub fn stop(&mut self, error_code: u64) -> (u64, bool) {
        if let RecvState::Reset { error_code } = self.state {
            self.state = RecvState::ResetRead { error_code };
        }
        if self.state != RecvState::Receiving || self.stopped.is_some() {
            return (0, false);
        }
        self.stopped = Some(error_code);
        self.buffer.clear();
        let discarded = self.discard_if_stopped();
        // Everything already arrived: there is nothing to ask the peer to stop.
        self.stop_pending = self.final_size != Some(self.read_offset);
        (discarded, self.stop_pending)
    }

    /// The STOP_SENDING frame to (re)send: its error code.
    pub fn pending_stop(&self) -> Option<u64> {
        self.stopped.filter(|_| self.stop_pending)
    }

    pub fn on_stop_sent(&mut self) {
        self.stop_pending = false;
    }

    /// Whether a lost STOP_SENDING must go out again.
    pub fn on_stop_lost(&mut self) -> bool {
        self.stop_pending = self.stopped.is_some() && self.state == RecvState::Receiving && !self.is_complete();
        self.stop_pending
    }

    /// The stream's size, once the FIN or a reset told it.
    pub fn final_size(&self) -> Option<u64> {
        self.final_size
    }

    /// Every byte up to the final size arrived (or the peer reset the stream).
    pub fn is_complete(&self) -> bool {
        matches!(self.state, RecvState::Reset { .. } | RecvState::ResetRead { .. })
            || self.final_size.is_some_and(|final_size| self.contiguous_end() >= final_size)
    }

    /// Nothing more will be read: the application saw the end or the reset, or stopped reading and the peer's part
    /// is complete.
    pub fn is_done(&self) -> bool {
        match self.state {
            RecvState::Finished | RecvState::ResetRead { .. } => true,
            RecvState::Reset { .. } => false,
            RecvState::Receiving => self.stopped.is_some() && self.is_complete(),
        }
    }

    /// Bytes that arrived beyond what our last STREAM_ACK covered.
    pub fn bytes_since_ack(&self) -> u64 {
        self.highest.saturating_sub(self.highest_acknowledged)
    }

    /// Our STREAM_ACK of everything received so far was written.
    pub fn on_ack_written(&mut self) {
        self.ack_pending = false;
        self.highest_acknowledged = self.highest;
    }

    /// The ranges to acknowledge, lowest first, at most `max_ranges`. The FIN (or a reset) is acknowledged as the
    /// one offset at the final size.
    pub fn ack_ranges(&self, max_ranges: usize) -> Vec<Range<u64>> {
        let mut ranges: Vec<Range<u64>> = match self.state {
            RecvState::Reset { .. } | RecvState::ResetRead { .. } => {
                return vec![Range { start: 0, end: self.final_size.unwrap_or(self.highest) + 1 }];
            }
            _ => self.received.iter().take(max_ranges).collect(),
        };
        if let Some(final_size) = self.final_size {
            match ranges.last_mut() {
                Some(last) if last.end == final_size => last.end += 1,
                _ => {
                    if ranges.len() < max_ranges {
                        ranges.push(final_size..final_size + 1);
                    }
                }
            }
        }
        ranges
    }
}

#[cfg(test)]
// One-range lists of offsets are data here, not a mistaken `(a..b).collect()`.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::streams::id::Side;

    const ID: StreamId = StreamId::new(Side::Server, 0);

    fn read_all(r: &mut RecvStream) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 7];
        while let Ok(ReadOutcome::Data(n)) = r.read(ID, &mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[test]
    fn reassembles_out_of_order_and_duplicate_chunks() {
        let mut r = RecvStream::new(100);
        r.ingest(ID, 5, b"fghij", false, 8).unwrap();
        assert!(!r.is_readable());
        r.ingest(ID, 3, b"defg", false, 8).unwrap();
        r.ingest(ID, 0, b"abc", false, 8).unwrap();
        r.ingest(ID, 2, b"cd", true, 8).unwrap_err();
        r.ingest(ID, 8, b"ijkl", true, 8).unwrap();
        assert_eq!(read_all(&mut r), b"abcdefghijkl");
        assert_eq!(r.read(ID, &mut [0; 4]), Ok(ReadOutcome::Finished));
        assert!(r.is_done());
    }

    #[test]
    fn duplicate_bytes_keep_the_first_copy() {
        let mut r = RecvStream::new(100);
        r.ingest(ID, 0, b"abc", false, 8).unwrap();
        r.ingest(ID, 1, b"XYZd", false, 8).unwrap();
        assert_eq!(read_all(&mut r), b"abcZd");
    }

    #[test]
    fn flow_control_and_final_size_violations() {
        let mut r = RecvStream::new(10);
        assert_eq!(
            r.ingest(ID, 8, b"abc", false, 8),
            Err(StreamError::StreamFlowControl { id: ID, received: 11, limit: 10 })
        );
        r.ingest(ID, 0, b"abcdef", false, 8).unwrap();
        assert_eq!(r.ingest(ID, 0, b"ab", true, 8), Err(StreamError::FinalSize { id: ID, final_size: 2, offset: 6 }));
        r.ingest(ID, 6, b"g", true, 8).unwrap();
        assert!(matches!(r.ingest(ID, 7, b"h", false, 8), Err(StreamError::FinalSize { final_size: 7, .. })));
        assert!(matches!(r.on_reset(ID, 1, 9), Err(StreamError::FinalSize { .. })));
    }

    #[test]
    fn gap_limit_is_enforced_before_any_change() {
        let mut r = RecvStream::new(100);
        r.ingest(ID, 10, b"a", false, 2).unwrap();
        r.ingest(ID, 20, b"a", false, 2).unwrap();
        assert_eq!(r.ingest(ID, 30, b"a", false, 2), Err(StreamError::TooManyGaps { id: ID, limit: 2 }));
        r.ingest(ID, 0, b"0123456789", false, 2).unwrap();
        r.ingest(ID, 30, b"a", false, 2).unwrap();
        assert_eq!(r.ack_ranges(10), [0..11, 20..21, 30..31]);
    }

    #[test]
    fn acks_cover_the_fin_as_one_offset() {
        let mut r = RecvStream::new(100);
        r.ingest(ID, 4, b"ef", true, 8).unwrap();
        assert_eq!(r.ack_ranges(10), [4..7]);
        r.ingest(ID, 0, b"abcd", false, 8).unwrap();
        assert_eq!(r.ack_ranges(10), [0..7]);
        assert_eq!(r.ack_ranges(0), Vec::<Range<u64>>::new());
    }

    #[test]
    fn credit_is_granted_after_half_a_window_is_read() {
        let mut r = RecvStream::new(10);
        r.ingest(ID, 0, b"abcdefghij", false, 8).unwrap();
        r.read(ID, &mut [0; 4]).unwrap();
        assert!(!r.grant_credit(u64::MAX, None));
        r.read(ID, &mut [0; 1]).unwrap();
        assert!(r.grant_credit(u64::MAX, None));
        assert_eq!(r.limit(), 15);
    }

    #[test]
    fn the_window_doubles_while_grants_come_within_two_round_trips() {
        // (bytes read, when in ms, the limit granted then): a round trip is 100 ms, the window 10 at first, 40 at most.
        let steps = [
            (5, 0, 15, "the first grant has nothing to compare with"),
            (5, 300, 20, "three round trips later: the window stays"),
            (5, 350, 35, "half a round trip later: the window doubles to 20"),
            (10, 360, 65, "and again, to its most, 40"),
            (20, 370, 85, "no further"),
        ];
        let mut r = RecvStream::new(10);
        let mut offset = 0;
        for (n, millis, limit, why) in steps {
            r.ingest(ID, offset, &vec![0; n], false, 8).unwrap();
            offset += n as u64;
            r.read(ID, &mut vec![0; n]).unwrap();
            let now = Time::from_millis(millis);
            let tuning = WindowTuning { now, round_trip: Duration::from_millis(100), max_window: 40 };
            assert!(r.grant_credit(u64::MAX, Some(tuning)), "{why}");
            assert_eq!(r.limit(), limit, "{why}");
            r.credit_pending = false;
        }
    }

    #[test]
    fn reset_discards_unread_bytes_and_is_read_once() {
        let mut r = RecvStream::new(100);
        r.ingest(ID, 0, b"abcdef", false, 8).unwrap();
        r.read(ID, &mut [0; 2]).unwrap();
        assert_eq!(r.on_reset(ID, 9, 10), Ok(Credit { received: 4, discarded: 8 }));
        assert_eq!(r.reset_unread(), Some(9));
        assert!(!r.is_done());
        assert_eq!(r.read(ID, &mut [0; 2]), Ok(ReadOutcome::Reset { error_code: 9 }));
        assert!(r.is_done());
        assert_eq!(r.ack_ranges(4), [0..11]);
    }

    #[test]
    fn stop_discards_data_as_it_arrives() {
        let mut r = RecvStream::new(100);
        r.ingest(ID, 0, b"abc", false, 8).unwrap();
        assert_eq!(r.stop(4), (3, true));
        assert_eq!(r.pending_stop(), Some(4));
        assert_eq!(r.ingest(ID, 3, b"de", true, 8).map(|c| c.discarded), Ok(2));
        assert_eq!(r.read(ID, &mut [0; 2]), Err(StreamError::ReadStopped(ID)));
        assert!(r.is_done());
        assert!(!r.on_stop_lost(), "all data arrived: no need to repeat STOP_SENDING");
    }
}
