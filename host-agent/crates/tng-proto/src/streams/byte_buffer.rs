//! A byte queue in fixed-size segments: append or write at a position, read slices, release from the front.
//!
//! Releasing from the front only moves a cursor and frees whole segments, so no byte is ever moved after it was
//! written (a contiguous buffer that shifted its live bytes down spent 6 % of a bulk sender's time in those shifts).
//! A slice never crosses a segment boundary: callers that want more take what [`ByteBuffer::slice`] gives and ask
//! again. Every segment but the last holds exactly [`SEGMENT`] bytes, so a position finds its segment by division.
//! An emptied buffer gives its memory back, except up to [`SPARES`] whole segments that it keeps for its next bytes:
//! a busy stream drains its buffer again and again (a receiver whose application reads all there is), and handing
//! the segments back each time made the allocator return their pages to the kernel and fault them in again (a bulk
//! receiver took 77,000 page faults a second, 7 % of its samples; with four spares about 3,000). Only segments that
//! grew to full size are kept, so a stream of small writes holds nothing once drained; [`ByteBuffer::clear`] frees
//! them all, which the streams call when their half ends. A stream left open and idle after a bulk transfer keeps
//! its spares (up to 256 KiB per direction) until it ends.

use std::collections::VecDeque;

/// Bytes per segment: one 64 KiB application write fills one.
pub(super) const SEGMENT: usize = 64 * 1024;
/// Released whole segments a buffer keeps for reuse (two were too few for a bulk receiver: its faults came back).
const SPARES: usize = 4;

#[derive(Debug, Default)]
pub(super) struct ByteBuffer {
    segments: VecDeque<Vec<u8>>,
    /// The first segment's first `head` bytes are released.
    head: usize,
    /// Released whole segments (empty, [`SEGMENT`] of capacity), for the next ones needed.
    spares: Vec<Vec<u8>>,
}

impl ByteBuffer {
    /// Bytes held, released ones included.
    fn stored(&self) -> usize {
        self.segments.back().map_or(0, |last| (self.segments.len() - 1) * SEGMENT + last.len())
    }

    /// Live bytes.
    pub fn len(&self) -> usize {
        self.stored() - self.head
    }

    pub fn push(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let last = self.last_with_room(data.len());
            let take = data.len().min(SEGMENT - last.len());
            last.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
    }

    /// Writes `data` at live position `pos`, zero-filling any hole between the current end and `pos`.
    pub fn write_at(&mut self, pos: usize, mut data: &[u8]) {
        let mut at = self.head + pos;
        let end = at + data.len();
        while self.stored() < end {
            let missing = end - self.stored();
            let last = self.last_with_room(missing);
            let grow = missing.min(SEGMENT - last.len());
            last.resize(last.len() + grow, 0);
        }
        while !data.is_empty() {
            let segment = &mut self.segments[at / SEGMENT];
            let offset = at % SEGMENT;
            let take = data.len().min(SEGMENT - offset);
            segment[offset..offset + take].copy_from_slice(&data[..take]);
            data = &data[take..];
            at += take;
        }
    }

    /// The last segment if it has room, else a new one, with capacity for `more` bytes or up to [`SEGMENT`]. The first
    /// segment grows like a `Vec` (doubling) but never past [`SEGMENT`], so a stream of small writes holds little.
    fn last_with_room(&mut self, more: usize) -> &mut Vec<u8> {
        match self.segments.back() {
            None => self.segments.push_back(self.spares.pop().unwrap_or_default()),
            // A buffer that filled a segment is a busy one: the next is whole from the start, not grown by copies.
            Some(last) if last.len() == SEGMENT => {
                let next = self.spares.pop().unwrap_or_else(|| Vec::with_capacity(SEGMENT));
                self.segments.push_back(next);
            }
            Some(_) => {}
        }
        let last = self.segments.back_mut().expect("just ensured");
        let needed = (last.len() + more).min(SEGMENT);
        if last.capacity() < needed {
            let capacity = needed.max(2 * last.capacity()).clamp(1024, SEGMENT);
            last.reserve_exact(capacity - last.len());
        }
        last
    }

    /// Live bytes from `start` up to `end` or the end of `start`'s segment, whichever comes first, clamped to what
    /// the buffer holds.
    pub fn slice(&self, start: usize, end: usize) -> &[u8] {
        let end = end.min(self.len());
        if start >= end {
            return &[];
        }
        let at = self.head + start;
        let segment = &self.segments[at / SEGMENT];
        let offset = at % SEGMENT;
        &segment[offset..segment.len().min(offset + (end - start))]
    }

    /// Copies live bytes from the front into `buf`, as many as both hold; returns how many.
    pub fn copy_front(&self, buf: &mut [u8]) -> usize {
        let mut copied = 0;
        while copied < buf.len() {
            let part = self.slice(copied, buf.len());
            if part.is_empty() {
                break;
            }
            buf[copied..copied + part.len()].copy_from_slice(part);
            copied += part.len();
        }
        copied
    }

    /// Releases the first `n` live bytes (or all, if fewer are live).
    pub fn release(&mut self, n: usize) {
        self.head += n.min(self.len());
        if self.head == self.stored() {
            self.head = 0;
            while let Some(segment) = self.segments.pop_front() {
                self.keep_spare(segment);
            }
            return;
        }
        while self.head >= SEGMENT {
            let segment = self.segments.pop_front().expect("a released whole segment");
            self.keep_spare(segment);
            self.head -= SEGMENT;
        }
    }

    /// Keeps a released segment as a spare if it is a whole one and there are fewer than [`SPARES`]; frees it
    /// otherwise.
    fn keep_spare(&mut self, mut segment: Vec<u8>) {
        if self.spares.len() < SPARES && segment.capacity() == SEGMENT {
            segment.clear();
            self.spares.push(segment);
        }
    }

    /// Drops every byte and all memory, the spares included.
    pub fn clear(&mut self) {
        *self = ByteBuffer::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(b: &ByteBuffer) -> Vec<u8> {
        let mut out = vec![0; b.len()];
        assert_eq!(b.copy_front(&mut out), b.len());
        out
    }

    #[test]
    fn push_slice_release_round_trip() {
        let mut b = ByteBuffer::default();
        b.push(b"hello ");
        b.push(b"world");
        assert_eq!(b.slice(0, 11), b"hello world");
        b.release(6);
        assert_eq!(b.len(), 5);
        assert_eq!(b.slice(0, 100), b"world");
        assert_eq!(b.slice(7, 3), b"");
        b.release(100);
        assert_eq!(b.len(), 0);
        assert!(b.segments.is_empty() && b.spares.is_empty(), "an emptied buffer of small writes frees its memory");
    }

    #[test]
    fn a_busy_buffer_keeps_a_few_whole_segments_until_cleared() {
        let mut b = ByteBuffer::default();
        b.push(&vec![1; (SPARES + 3) * SEGMENT]);
        b.release(2 * SEGMENT);
        let kept: Vec<_> = b.spares.iter().map(|s| s.as_ptr()).collect();
        assert_eq!(kept.len(), 2, "released whole segments are kept");
        b.release(usize::MAX);
        assert!(b.segments.is_empty());
        assert_eq!(b.spares.len(), SPARES, "no more than SPARES");
        assert!(b.spares.iter().all(|s| s.capacity() == SEGMENT && s.is_empty()));
        b.push(&[2; 10]);
        assert!(b.spares.len() == SPARES - 1, "the next bytes go to a spare");
        assert_eq!(b.slice(0, 10), [2; 10]);
        b.clear();
        assert!(b.segments.is_empty() && b.spares.is_empty(), "clear frees everything");
    }

    #[test]
    fn write_at_fills_holes_and_overwrites() {
        let mut b = ByteBuffer::default();
        b.write_at(4, b"ef");
        assert_eq!(b.slice(0, 6), b"\0\0\0\0ef");
        b.write_at(0, b"abcd");
        assert_eq!(b.slice(0, 6), b"abcdef");
        b.release(2);
        b.write_at(4, b"gh");
        assert_eq!(b.slice(0, 6), b"cdefgh");
    }

    #[test]
    fn slices_stop_at_segment_boundaries_and_copies_cross_them() {
        let data: Vec<u8> = (0..3 * SEGMENT + 100).map(|i| (i % 251) as u8).collect();
        let mut b = ByteBuffer::default();
        for piece in data.chunks(1000) {
            b.push(piece);
        }
        assert_eq!(b.len(), data.len());
        assert_eq!(b.slice(SEGMENT - 10, SEGMENT + 10), &data[SEGMENT - 10..SEGMENT]);
        assert_eq!(b.slice(SEGMENT, SEGMENT + 10), &data[SEGMENT..SEGMENT + 10]);
        assert_eq!(live(&b), data);
        b.release(SEGMENT + 5);
        assert_eq!(b.segments.len(), 3, "a wholly released segment is freed");
        assert_eq!(live(&b), &data[SEGMENT + 5..]);
        assert_eq!(b.slice(SEGMENT - 10, SEGMENT + 5), &data[2 * SEGMENT - 5..2 * SEGMENT]);
    }

    #[test]
    fn write_at_across_segments_matches_a_flat_buffer() {
        let mut b = ByteBuffer::default();
        let mut flat = Vec::new();
        let mut released = 0;
        for (i, pos) in [5 * SEGMENT / 2, 10, SEGMENT - 3, 2 * SEGMENT + 7, 0].into_iter().enumerate() {
            let data: Vec<u8> = (0..SEGMENT / 2 + i).map(|j| (i * 31 + j) as u8).collect();
            b.write_at(pos, &data);
            let at = released + pos;
            if flat.len() < at + data.len() {
                flat.resize(at + data.len(), 0);
            }
            flat[at..at + data.len()].copy_from_slice(&data);
            b.release(7);
            released += 7;
            assert_eq!(live(&b), &flat[released..]);
        }
    }

    #[test]
    fn small_writes_hold_small_segments() {
        let mut b = ByteBuffer::default();
        b.push(&[1; 100]);
        assert!(b.segments[0].capacity() <= 1024);
        b.release(100);
        assert!(b.segments.is_empty());
    }
}
