//! Datagrams waiting to leave, grouped by destination so that each send carries as many as GSO allows.
//!
//! The endpoint interleaves its destinations datagram by datagram: a connection over two paths alternates them, a
//! server answers many peers in turn. Batching only runs of one destination sent those one datagram per system
//! call: over two unshaped paths a connection moved a third of what it moved over one.

use std::mem;
use std::net::SocketAddr;

use tng_proto::{EcnCodepoint, Transmit};

/// Most bytes one GSO send may carry: a UDP payload is at most 65,507 bytes over IPv4 (65,527 over IPv6).
const MAX_GSO_BYTES: usize = 65_507;
/// Batches kept open at once; a datagram to yet another destination has the oldest sent first.
const MAX_OPEN: usize = 16;

/// Where a batch goes: datagrams share a GSO send only when all of this is equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Destination {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub ecn: Option<EcnCodepoint>,
}

/// Datagrams to one destination, back to back in `bytes`, each `segment` bytes long except perhaps the last.
#[derive(Debug)]
pub(super) struct Batch {
    pub to: Destination,
    pub segment: usize,
    segments: usize,
    /// Whether another datagram may join: only the last of a GSO send may be shorter than its segment size.
    open: bool,
    pub bytes: Vec<u8>,
}

impl Batch {
    /// Whether a datagram of `size` bytes may join, the batch then holding `bytes_after` bytes.
    fn takes(&self, size: usize, max_segments: usize, bytes_after: usize) -> bool {
        self.open && self.segments < max_segments && size <= self.segment && bytes_after <= MAX_GSO_BYTES
    }

    fn joined(&mut self, size: usize) {
        self.segments += 1;
        self.open = size == self.segment;
    }
}

/// The open batches of one flush. The endpoint writes each datagram at the end of [`SendBatches::landing`]: the
/// buffer of the batch the previous datagram joined, or a scratch buffer after a datagram that started a batch.
/// [`SendBatches::file`] moves it to its own batch when it landed elsewhere, so a single destination has one datagram
/// per batch copied and many destinations have none.
#[derive(Debug, Default)]
pub(super) struct SendBatches {
    /// Open batches, oldest first.
    batches: Vec<Batch>,
    /// Where the next datagram is written: an index into `batches`, or `scratch` when None.
    landing: Option<usize>,
    /// Empty between datagrams.
    scratch: Vec<u8>,
    /// Emptied buffers of batches already sent, for the next ones.
    spare: Vec<Vec<u8>>,
}

impl SendBatches {
    /// The buffer the endpoint appends the next datagram to.
    pub fn landing(&mut self) -> &mut Vec<u8> {
        match self.landing {
            Some(index) => &mut self.batches[index].bytes,
            None => &mut self.scratch,
        }
    }

    /// Forgets the datagram of `size` bytes just written to the landing buffer (one that cannot be sent).
    pub fn discard_last(&mut self, size: usize) {
        let buffer = self.landing();
        buffer.truncate(buffer.len() - size);
    }

    /// Files the datagram of `transmit`, just written at the end of the landing buffer, under its destination.
    /// Returns a batch to send now: the destination's own when it can take no more, or the oldest when too many
    /// are open. `max_segments` is what the sending socket's GSO allows (1 without it).
    pub fn file(&mut self, transmit: &Transmit, max_segments: usize) -> Option<Batch> {
        let to = Destination { local: transmit.local, remote: transmit.remote, ecn: transmit.ecn };
        let size = transmit.size;
        if let Some(index) = self.landing {
            let batch = &mut self.batches[index];
            // The datagram is in `bytes` already.
            if batch.to == to && batch.takes(size, max_segments, batch.bytes.len()) {
                batch.joined(size);
                return None;
            }
        }
        let own = self.batches.iter().position(|batch| batch.to == to);
        if let Some(index) = own.filter(|&index| Some(index) != self.landing) {
            let batch = &self.batches[index];
            if batch.takes(size, max_segments, batch.bytes.len() + size) {
                self.move_landed(size, index);
                self.batches[index].joined(size);
                self.landing = Some(index);
                return None;
            }
        }
        // The datagram starts a batch: its destination's, which can take no more, or the oldest leaves first.
        let bytes = self.take_landed(size);
        let leaving = match own {
            Some(index) => Some(index),
            None => (self.batches.len() == MAX_OPEN).then_some(0),
        };
        let ready = leaving.map(|index| self.batches.remove(index));
        self.batches.push(Batch { to, segment: size, segments: 1, open: true, bytes });
        // The next datagram lands apart: when it goes elsewhere too (a server answering many peers), it starts its
        // batch without a copy; when it goes here, it is the only one of the batch copied.
        self.landing = None;
        ready
    }

    /// The oldest open batch, taken out to be sent: what is left at the end of a flush.
    pub fn pop_oldest(&mut self) -> Option<Batch> {
        if self.batches.is_empty() {
            return None;
        }
        self.landing = None;
        Some(self.batches.remove(0))
    }

    /// Keeps a sent batch's buffer for a later one.
    pub fn recycle(&mut self, mut bytes: Vec<u8>) {
        bytes.clear();
        self.spare.push(bytes);
    }

    /// Moves the last `size` bytes of the landing buffer to the end of batch `index`'s (not the landing batch).
    fn move_landed(&mut self, size: usize, index: usize) {
        let (from, to) = match self.landing {
            None => (&mut self.scratch, &mut self.batches[index].bytes),
            Some(landing) if landing < index => {
                let (head, tail) = self.batches.split_at_mut(index);
                (&mut head[landing].bytes, &mut tail[0].bytes)
            }
            Some(landing) => {
                let (head, tail) = self.batches.split_at_mut(landing);
                (&mut tail[0].bytes, &mut head[index].bytes)
            }
        };
        let start = from.len() - size;
        to.extend_from_slice(&from[start..]);
        from.truncate(start);
    }

    /// The last `size` bytes of the landing buffer, taken out of it into a buffer of their own.
    fn take_landed(&mut self, size: usize) -> Vec<u8> {
        let Some(index) = self.landing else {
            // The scratch buffer holds this datagram alone: hand it over whole.
            let spare = self.spare.pop().unwrap_or_default();
            return mem::replace(&mut self.scratch, spare);
        };
        let buffer = &mut self.batches[index].bytes;
        let start = buffer.len() - size;
        let mut datagram = self.spare.pop().unwrap_or_default();
        datagram.extend_from_slice(&buffer[start..]);
        buffer.truncate(start);
        datagram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "10.0.0.1:1000";
    const B: &str = "10.0.1.1:1000";
    const SERVER: &str = "10.0.0.2:2000";

    /// Writes a datagram of `size` bytes of `fill` from `local` as the endpoint would, and files it.
    fn send(batches: &mut SendBatches, local: &str, size: usize, fill: u8, max_segments: usize) -> Option<Batch> {
        batches.landing().extend(std::iter::repeat_n(fill, size));
        let transmit = Transmit { local: local.parse().unwrap(), remote: SERVER.parse().unwrap(), ecn: None, size };
        batches.file(&transmit, max_segments)
    }

    fn all(batches: &mut SendBatches) -> Vec<Batch> {
        std::iter::from_fn(|| batches.pop_oldest()).collect()
    }

    #[test]
    fn datagrams_alternating_between_two_paths_leave_in_one_batch_per_path() {
        let mut batches = SendBatches::default();
        for round in 0..10u8 {
            assert!(send(&mut batches, A, 1200, round, 64).is_none());
            assert!(send(&mut batches, B, 1200, 100 + round, 64).is_none());
        }
        let sent = all(&mut batches);
        assert_eq!(sent.len(), 2);
        for (batch, (local, first_fill)) in sent.iter().zip([(A, 0u8), (B, 100)]) {
            assert_eq!(batch.to.local, local.parse().unwrap());
            assert_eq!(batch.segment, 1200);
            // Each datagram whole and in the order it was written.
            let fills: Vec<u8> = batch.bytes.chunks(1200).map(|d| d[0]).collect();
            assert_eq!(fills, (first_fill..first_fill + 10).collect::<Vec<_>>());
            assert!(batch.bytes.chunks(1200).all(|d| d.iter().all(|&b| b == d[0])));
        }
    }

    #[test]
    fn a_shorter_datagram_ends_its_batch_and_the_next_one_starts_another() {
        let mut batches = SendBatches::default();
        assert!(send(&mut batches, A, 1200, 1, 64).is_none());
        assert!(send(&mut batches, A, 700, 2, 64).is_none());
        let ready = send(&mut batches, A, 1200, 3, 64).expect("the ended batch is sent first");
        assert_eq!((ready.segment, ready.bytes.len()), (1200, 1900));
        let rest = all(&mut batches);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].bytes, vec![3; 1200]);
    }

    #[test]
    fn a_batch_holds_no_more_segments_than_the_socket_allows_and_every_datagram_leaves_once_in_order() {
        let mut batches = SendBatches::default();
        let mut sent = Vec::new();
        for fill in 0..7 {
            sent.extend(send(&mut batches, A, 1000, fill, 3));
            sent.extend(send(&mut batches, B, 1000, 100 + fill, 3));
        }
        sent.extend(all(&mut batches));
        assert!(sent.iter().all(|batch| batch.bytes.len() <= 3 * 1000));
        for (local, first_fill) in [(A, 0u8), (B, 100)] {
            let fills: Vec<u8> = sent
                .iter()
                .filter(|batch| batch.to.local == local.parse().unwrap())
                .flat_map(|batch| batch.bytes.chunks(1000).map(|d| d[0]))
                .collect();
            assert_eq!(fills, (first_fill..first_fill + 7).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_batch_never_exceeds_the_largest_udp_payload() {
        let mut batches = SendBatches::default();
        let sent: Vec<Batch> = (0..60).filter_map(|_| send(&mut batches, A, 1472, 0, 64)).collect();
        assert!(!sent.is_empty());
        assert!(sent.iter().all(|batch| batch.bytes.len() <= MAX_GSO_BYTES));
    }

    #[test]
    fn too_many_destinations_send_the_oldest_batch_first() {
        let mut batches = SendBatches::default();
        for port in 0..MAX_OPEN {
            assert!(send(&mut batches, &format!("10.0.0.1:{}", 3000 + port), 100, 0, 64).is_none());
        }
        let ready = send(&mut batches, "10.0.0.1:9999", 100, 0, 64).expect("one batch too many");
        assert_eq!(ready.to.local, "10.0.0.1:3000".parse().unwrap());
        assert_eq!(all(&mut batches).len(), MAX_OPEN);
    }

    #[test]
    fn a_discarded_datagram_leaves_nothing_behind() {
        let mut batches = SendBatches::default();
        assert!(send(&mut batches, A, 1200, 1, 64).is_none());
        batches.landing().extend([9; 500]);
        batches.discard_last(500);
        assert!(send(&mut batches, A, 1200, 2, 64).is_none());
        let sent = all(&mut batches);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].bytes.len(), 2400);
        assert!(!sent[0].bytes.contains(&9));
    }
}
