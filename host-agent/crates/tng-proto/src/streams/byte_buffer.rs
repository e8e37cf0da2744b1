//! A contiguous byte queue: append or write at a position, read slices, release from the front.
//!
//! Contiguous so that a STREAM frame can borrow its data straight from the buffer. Releasing from the front only moves
//! a cursor; the bytes are shifted down once the released part is at least as large as the live part, which keeps the
//! cost amortised O(1) per byte. An emptied buffer gives its memory back, so an idle stream holds no allocation.

#[derive(Debug, Default)]
pub(super) struct ByteBuffer {
    bytes: Vec<u8>,
    /// `bytes[..head]` are released and wait for the next compaction.
    head: usize,
}

impl ByteBuffer {
    /// Live bytes.
    pub fn len(&self) -> usize {
        self.bytes.len() - self.head
    }

    pub fn push(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
    }

    /// Writes `data` at live position `pos`, zero-filling any hole between the current end and `pos`.
    pub fn write_at(&mut self, pos: usize, data: &[u8]) {
        let start = self.head + pos;
        let end = start + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[start..end].copy_from_slice(data);
    }

    /// Live bytes `start..end`, clamped to what the buffer holds.
    pub fn slice(&self, start: usize, end: usize) -> &[u8] {
        let live = &self.bytes[self.head..];
        let end = end.min(live.len());
        &live[start.min(end)..end]
    }

    /// Releases the first `n` live bytes (or all, if fewer are live).
    pub fn release(&mut self, n: usize) {
        self.head += n.min(self.len());
        if self.head == self.bytes.len() {
            *self = ByteBuffer::default();
        } else if self.head >= self.len() {
            self.bytes.drain(..self.head);
            self.head = 0;
        }
    }

    /// Drops every byte and the allocation.
    pub fn clear(&mut self) {
        *self = ByteBuffer::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(b.bytes.capacity(), 0, "an emptied buffer frees its memory");
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
    fn compaction_keeps_live_bytes() {
        let mut b = ByteBuffer::default();
        for i in 0..100u8 {
            b.push(&[i]);
            if i % 2 == 1 {
                b.release(1);
            }
        }
        assert_eq!(b.len(), 50);
        assert_eq!(b.slice(0, 1), [50]);
        assert!(b.head <= b.len());
    }
}
