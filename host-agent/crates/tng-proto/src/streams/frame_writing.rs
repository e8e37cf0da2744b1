//! Filling a packet with the semantic layer's frames: credit updates and control frames first, then STREAM_ACKs,
//! then stream data round robin; and the sizing rules that keep every frame within the packet.

use std::ops::Range;

use tng_wire::{varint, Frame};

use super::retransmit::{Timer, TimerKind};
use super::send::ChunkKind;
use super::{SentChunk, StreamId, Streams};
use crate::time::Time;

/// The STREAM frame types (0x03, 0x10, 0x11) take one varint byte.
const STREAM_TYPE_LEN: usize = 1;

impl Streams {
    /// Whether [`Streams::write_frames`] has something to write that should not wait: everything but STREAM_ACKs
    /// before they are due (those ride along in any packet that leaves). May be true once more after everything
    /// left is blocked by credit; the next `write_frames` call notices and clears it.
    pub fn has_pending_frames(&self, now: Time) -> bool {
        self.max_data_pending
            || self.max_streams_pending
            || self.stream_count_probe_pending
            || !self.closed_acks.is_empty()
            || !self.control_queue.is_empty()
            || !self.send_queue.is_empty()
            || self.acks_due_at.is_some_and(|due| due <= now)
    }

    /// When the queued STREAM_ACKs become due (see [`Streams::has_pending_frames`]), if any are queued.
    pub fn stream_ack_deadline(&self) -> Option<Time> {
        self.acks_due_at
    }

    /// Appends to `out` the frames that fit in `max_len` bytes: credit updates, STREAM_ACKs and other control frames
    /// first, then stream data round robin across streams. Records in `sent` what the packet carries, for
    /// [`Streams::on_chunk_lost`] and [`Streams::on_chunk_delivered_hint`]. Returns the bytes appended.
    ///
    /// A STREAM frame that fills the packet uses the compact encoding without a length, which runs to the end of
    /// the plaintext: the caller must append nothing after these frames.
    pub fn write_frames(&mut self, now: Time, max_len: usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) -> usize {
        self.clock = self.clock.max(now);
        let start = out.len();
        let mut budget = max_len;
        if self.stream_count_probe_pending {
            // The last stream we were allowed to open: the peer knows it, open or closed.
            let id = StreamId::new(self.side, self.peer_max_streams.saturating_sub(1));
            let probe = Frame::Stream { stream_id: id.as_u64(), offset: 0, fin: false, data: &[], to_end: false };
            if emit(&probe, &mut budget, out) {
                self.stream_count_probe_pending = false;
                sent.push(SentChunk::Stream { id, range: 0..0, fin: false });
            }
        }
        if self.max_data_pending && emit(&Frame::MaxData(self.max_data), &mut budget, out) {
            self.max_data_pending = false;
            sent.push(SentChunk::MaxData);
        }
        if self.max_streams_pending && emit(&Frame::MaxStreams(self.max_remote_streams), &mut budget, out) {
            self.max_streams_pending = false;
            sent.push(SentChunk::MaxStreams);
        }
        while let Some(&(id, end)) = self.closed_acks.front() {
            if !emit(
                &Frame::StreamAck { stream_id: id.as_u64(), ranges: vec![Range { start: 0, end }] },
                &mut budget,
                out,
            ) {
                break;
            }
            self.closed_acks.pop_front();
            sent.push(SentChunk::StreamAck { id });
        }
        self.write_control_frames(now, &mut budget, out, sent);
        self.write_stream_acks(&mut budget, out, sent);
        self.write_stream_frames(now, &mut budget, out, sent);
        self.wake_connection_writers();
        out.len() - start
    }

    fn write_control_frames(&mut self, now: Time, budget: &mut usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) {
        while let Some(&id) = self.control_queue.front() {
            if let Some(stream) = self.streams.get_mut(&id) {
                let stream_id = id.as_u64();
                if let Some((error_code, final_size)) = stream.send.pending_reset() {
                    if !emit(&Frame::ResetStream { stream_id, error_code, final_size }, budget, out) {
                        return;
                    }
                    stream.send.on_reset_sent();
                    sent.push(SentChunk::ResetStream { id });
                    self.timers.push_back(Timer { armed_at: now, kind: TimerKind::Reset { id } });
                }
                if let Some(error_code) = stream.recv.pending_stop() {
                    if !emit(&Frame::StopSending { stream_id, error_code }, budget, out) {
                        return;
                    }
                    stream.recv.on_stop_sent();
                    sent.push(SentChunk::StopSending { id });
                }
                if stream.recv.credit_pending {
                    if !emit(&Frame::MaxStreamData { stream_id, max: stream.recv.limit() }, budget, out) {
                        return;
                    }
                    stream.recv.credit_pending = false;
                    sent.push(SentChunk::MaxStreamData { id });
                }
                stream.in_control_queue = false;
            }
            self.control_queue.pop_front();
        }
    }

    /// Every queued STREAM_ACK that fits, due or not: in a packet that leaves anyway they cost no extra packet.
    fn write_stream_acks(&mut self, budget: &mut usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) {
        let max_ack_ranges = self.config.max_reassembly_gaps.saturating_add(2);
        while let Some(&id) = self.ack_queue.front() {
            if let Some(stream) = self.streams.get_mut(&id) {
                if stream.recv.ack_pending {
                    let stream_id = id.as_u64();
                    let mut ranges = stream.recv.ack_ranges(max_ack_ranges);
                    if !ranges.is_empty() {
                        truncate_ack_to_fit(stream_id, &mut ranges, *budget);
                        if ranges.is_empty() || !emit(&Frame::StreamAck { stream_id, ranges }, budget, out) {
                            return;
                        }
                        sent.push(SentChunk::StreamAck { id });
                    }
                    stream.recv.on_ack_written();
                }
                stream.in_ack_queue = false;
            }
            self.ack_queue.pop_front();
        }
        self.acks_due_at = None;
    }

    fn write_stream_frames(&mut self, now: Time, budget: &mut usize, out: &mut Vec<u8>, sent: &mut Vec<SentChunk>) {
        while let Some(id) = self.send_queue.pop_front() {
            let credit = self.peer_max_data.saturating_sub(self.data_sent);
            let Some(stream) = self.streams.get_mut(&id) else { continue };
            stream.in_send_queue = false;
            let Some(next) = stream.send.next_chunk(credit) else {
                self.note_blocked(id, now);
                continue;
            };
            let capacity = stream_frame_capacity(*budget, id, next.offset).filter(|&n| n > 0 || !next.carries_data);
            let Some(chunk) = capacity.and_then(|n| stream.send.take_chunk(n as u64, credit)) else {
                // Not even a minimal frame fits: the stream keeps its turn for the next packet.
                stream.in_send_queue = true;
                self.send_queue.push_front(id);
                return;
            };
            if chunk.kind == ChunkKind::New {
                self.unsent -= chunk.range.end - chunk.range.start;
            }
            let mut frame = Frame::Stream {
                stream_id: id.as_u64(),
                offset: chunk.range.start,
                fin: chunk.fin,
                data: stream.send.chunk_data(&chunk.range),
                to_end: false,
            };
            // The frame with a length is kept whenever it fits, so that more frames may follow; otherwise the
            // chunk fills the packet and goes in the compact form, the last frame.
            let fills_packet = frame.encoded_len() > *budget;
            if let Frame::Stream { to_end, .. } = &mut frame {
                *to_end = fills_packet;
            }
            if !emit(&frame, budget, out) {
                // `stream_frame_capacity` sized the frame to fit, so this is unreachable; stay consistent anyway.
                stream.send.on_lost(chunk.range, chunk.fin);
                stream.in_send_queue = true;
                self.send_queue.push_front(id);
                return;
            }
            let len = chunk.range.end - chunk.range.start;
            match chunk.kind {
                ChunkKind::New => {
                    self.data_sent += len;
                    let queueing = &mut self.queueing;
                    stream.send.on_first_sent(&chunk.range, now, |delay, bytes| queueing.record(delay, bytes));
                }
                ChunkKind::Retransmission => self.stats.bytes_retransmitted += len,
                ChunkKind::Probe => {}
            }
            if chunk.kind != ChunkKind::Probe {
                let kind = TimerKind::Data { id, range: chunk.range.clone(), fin: chunk.fin };
                self.timers.push_back(Timer { armed_at: now, kind });
            }
            sent.push(SentChunk::Stream { id, range: chunk.range, fin: chunk.fin });
            if fills_packet {
                // Nothing may follow a compact frame.
                *budget = 0;
            }
            let credit = self.peer_max_data.saturating_sub(self.data_sent);
            if stream.send.next_chunk(credit).is_some() {
                stream.in_send_queue = true;
                self.send_queue.push_back(id);
            } else {
                self.note_blocked(id, now);
            }
            if chunk.kind == ChunkKind::New {
                self.wake_stream_writer(id);
            }
        }
    }
}

/// Encodes `frame` if it fits in `budget`.
fn emit(frame: &Frame<'_>, budget: &mut usize, out: &mut Vec<u8>) -> bool {
    let len = frame.encoded_len();
    if len > *budget {
        return false;
    }
    frame.encode(out);
    *budget -= len;
    true
}

/// Most data bytes a STREAM frame for `id` at `offset` can carry within `budget`, or `None` if not even an empty one
/// fits: the compact frame `type | id | offset | data` that runs to the end of the packet.
pub(super) fn stream_frame_capacity(budget: usize, id: StreamId, offset: u64) -> Option<usize> {
    budget.checked_sub(STREAM_TYPE_LEN + varint::encoded_len(id.as_u64()) + varint::encoded_len(offset))
}

/// Keeps the lowest ranges of a STREAM_ACK that fit in `budget` (all, if they fit): the lowest matter most, since
/// they release the head of the peer's buffer. Leaves `ranges` empty if not even one fits.
pub(super) fn truncate_ack_to_fit(stream_id: u64, ranges: &mut Vec<Range<u64>>, budget: usize) {
    let id_len = varint::encoded_len(stream_id);
    let mut ranges_len = 0;
    let mut fitting = 0;
    for (i, range) in ranges.iter().enumerate() {
        ranges_len += varint::encoded_len(range.start) + varint::encoded_len(range.end);
        let value_len = id_len + varint::encoded_len(i as u64 + 1) + ranges_len;
        if 1 + varint::encoded_len(value_len as u64) + value_len > budget {
            break;
        }
        fitting = i + 1;
    }
    ranges.truncate(fitting);
}
