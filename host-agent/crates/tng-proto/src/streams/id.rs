//! Stream identifiers: who opened a stream is encoded in its id, so either side opens streams without a round trip
//! and without colliding with the other.

use std::fmt;

/// Which end of a connection we are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    Client,
    Server,
}

impl Side {
    pub fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// A bidirectional stream id, as QUIC's: client-opened streams are even, server-opened ones odd; the rest of the id
/// counts the streams that side opened (`index`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(u64);

impl StreamId {
    /// The `index`-th stream opened by `initiator`. Stream counts are varints (below 2^62), so every index that can
    /// occur fits.
    pub const fn new(initiator: Side, index: u64) -> StreamId {
        let low_bit = match initiator {
            Side::Client => 0,
            Side::Server => 1,
        };
        StreamId(index.saturating_mul(2) | low_bit)
    }

    pub const fn initiator(self) -> Side {
        if self.0 & 1 == 0 {
            Side::Client
        } else {
            Side::Server
        }
    }

    /// How many streams the initiator opened before this one.
    pub const fn index(self) -> u64 {
        self.0 >> 1
    }

    pub const fn as_u64(self) -> u64 {
        self.0
    }
}

impl From<u64> for StreamId {
    fn from(raw: u64) -> StreamId {
        StreamId(raw)
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parity_encodes_the_initiator() {
        let c = StreamId::new(Side::Client, 3);
        let s = StreamId::new(Side::Server, 3);
        assert_eq!((c.as_u64(), s.as_u64()), (6, 7));
        assert_eq!((c.initiator(), s.initiator()), (Side::Client, Side::Server));
        assert_eq!((c.index(), s.index()), (3, 3));
        assert_eq!(StreamId::from(9).initiator(), Side::Server);
        assert_eq!(Side::Client.peer(), Side::Server);
    }
}
