//! The perf tool's request format, shared by every transport so that tng, TCP and MPTCP run the same workload.
//!
//! A client sends a fixed-size request on a byte stream. A data request asks for `size` bytes of a pattern that
//! depends only on the offset, so the client can check every byte it receives. A stats request asks for the
//! sender-side counters the server gathered for the client's run (`token`), because retransmissions happen at the
//! sender.

use anyhow::{bail, Result};

pub const REQUEST_LEN: usize = 24;
pub const STATS_LEN: usize = 16;
const MAGIC: &[u8; 4] = b"TNGP";
/// A bulk response: the server sends until the client closes its side.
pub const UNBOUNDED: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Send `size` bytes of the pattern; count sender-side statistics under `token`.
    Data { size: u64, token: u64 },
    /// Return the statistics gathered under `token`.
    Stats { token: u64 },
}

impl Request {
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let (kind, size, token) = match *self {
            Request::Data { size, token } => (1u8, size, token),
            Request::Stats { token } => (2u8, 0, token),
        };
        let mut out = [0u8; REQUEST_LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4] = kind;
        out[8..16].copy_from_slice(&size.to_be_bytes());
        out[16..].copy_from_slice(&token.to_be_bytes());
        out
    }

    pub fn decode(raw: &[u8; REQUEST_LEN]) -> Result<Request> {
        if &raw[..4] != MAGIC {
            bail!("not a tng perf request (bad magic {:02x?})", &raw[..4]);
        }
        let size = u64::from_be_bytes(raw[8..16].try_into()?);
        let token = u64::from_be_bytes(raw[16..].try_into()?);
        match raw[4] {
            1 => Ok(Request::Data { size, token }),
            2 => Ok(Request::Stats { token }),
            other => bail!("unknown tng perf request kind {other}"),
        }
    }
}

/// Sender-side counters of one run, as the server saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    pub retransmitted_packets: u64,
    pub sent_packets: u64,
}

impl SenderStats {
    pub fn encode(&self) -> [u8; STATS_LEN] {
        let mut out = [0u8; STATS_LEN];
        out[..8].copy_from_slice(&self.retransmitted_packets.to_be_bytes());
        out[8..].copy_from_slice(&self.sent_packets.to_be_bytes());
        out
    }

    pub fn decode(raw: &[u8; STATS_LEN]) -> SenderStats {
        let word = |i: usize| u64::from_be_bytes(raw[i..i + 8].try_into().unwrap_or_default());
        SenderStats { retransmitted_packets: word(0), sent_packets: word(8) }
    }
}

/// The byte at `offset` of every response.
pub fn pattern_byte(offset: u64) -> u8 {
    // Multiplying by an odd constant makes consecutive bytes differ and a shifted copy detectable.
    (offset.wrapping_mul(0x9E37_79B9) >> 7) as u8
}

/// Fills `buf` with the pattern starting at `offset`.
pub fn fill_pattern(offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(offset + i as u64);
    }
}

/// Number of bytes in `buf` (received at `offset`) that differ from the pattern.
pub fn count_corrupted(offset: u64, buf: &[u8]) -> u64 {
    buf.iter().enumerate().filter(|(i, b)| **b != pattern_byte(offset + *i as u64)).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for r in [Request::Data { size: 123_456_789, token: 7 }, Request::Stats { token: u64::MAX }] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn bad_magic_and_kind_are_rejected_with_reason() {
        let mut raw = Request::Stats { token: 1 }.encode();
        raw[4] = 9;
        assert!(Request::decode(&raw).unwrap_err().to_string().contains("kind 9"));
        raw[0] = b'X';
        assert!(Request::decode(&raw).unwrap_err().to_string().contains("bad magic"));
    }

    #[test]
    fn stats_round_trip() {
        let s = SenderStats { retransmitted_packets: 3, sent_packets: 99 };
        assert_eq!(SenderStats::decode(&s.encode()), s);
    }

    #[test]
    fn pattern_detects_shifted_and_flipped_bytes() {
        let mut buf = vec![0u8; 4096];
        fill_pattern(1000, &mut buf);
        assert_eq!(count_corrupted(1000, &buf), 0);
        assert!(count_corrupted(1001, &buf) > 4000, "a one-byte shift must look corrupted");
        buf[17] ^= 0x01;
        assert_eq!(count_corrupted(1000, &buf), 1);
    }
}
