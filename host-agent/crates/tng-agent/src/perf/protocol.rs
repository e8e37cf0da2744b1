//! The perf tool's request format, shared by every transport so that tng, TCP and MPTCP run the same workload.
//!
//! A client sends a fixed-size request on a byte stream. A data request asks for `size` bytes of a pattern that
//! depends only on the offset, so the client can check every byte it receives, and may name the kernel congestion
//! control the server's socket must send with and the tng controller that must limit what the server writes to it
//! (ALCC, `tng_proto::alcc`). The server answers it with one status byte: [`DATA_FOLLOWS`] then the
//! data, or [`REFUSED`], a length-prefixed reason and the end of the stream. A stats request asks for the
//! sender-side counters the server gathered for the client's run (`token`), because retransmissions happen at the
//! sender.

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{bail, Result};
use tng_proto::alcc::{AlccStats, ALCC_KINDS};
use tng_proto::CcKind;

pub const REQUEST_LEN: usize = 40;
pub const STATS_LEN: usize = 88;
const MAGIC: &[u8; 4] = b"TNGP";
/// A bulk response: the server sends until the client closes its side.
pub const UNBOUNDED: u64 = u64::MAX;
/// Room for a kernel congestion control name: Linux's `TCP_CA_NAME_MAX` (16) including the terminating NUL.
const CC_FIELD: usize = 16;
/// Status byte: the requested data follows.
pub const DATA_FOLLOWS: u8 = 0;
/// Status byte: the server cannot serve the request; a reason (u16 length, UTF-8) follows and the stream ends.
pub const REFUSED: u8 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Send `size` bytes of the pattern with kernel congestion control `cc` (if named), writing only what ALCC
    /// controller `alcc` (if named, one of [`ALCC_KINDS`]) allows; count sender-side statistics under `token`.
    Data { size: u64, token: u64, cc: Option<String>, alcc: Option<CcKind> },
    /// Return the statistics gathered under `token`.
    Stats { token: u64 },
}

/// Writes `name` NUL-padded into a [`CC_FIELD`]-byte field.
fn encode_name(name: Option<&str>, field: &mut [u8]) -> Result<()> {
    let Some(name) = name else { return Ok(()) };
    if name.is_empty() || name.len() >= CC_FIELD || name.contains('\0') {
        bail!("congestion control name {name:?} must be 1 to {} bytes", CC_FIELD - 1);
    }
    field[..name.len()].copy_from_slice(name.as_bytes());
    Ok(())
}

fn decode_name(field: &[u8]) -> Result<Option<String>> {
    let len = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    if len == 0 {
        return Ok(None);
    }
    match std::str::from_utf8(&field[..len]) {
        Ok(name) => Ok(Some(name.to_owned())),
        Err(_) => bail!("congestion control name is not UTF-8"),
    }
}

/// The request's ALCC byte: 0 for none, else 1 + the controller's index in [`ALCC_KINDS`].
fn encode_alcc(alcc: Option<CcKind>) -> Result<u8> {
    let Some(kind) = alcc else { return Ok(0) };
    match ALCC_KINDS.iter().position(|k| *k == kind) {
        Some(index) => Ok(u8::try_from(index)? + 1),
        None => bail!("{}", tng_proto::alcc::UnsupportedAlcc(kind)),
    }
}

fn decode_alcc(code: u8) -> Result<Option<CcKind>> {
    match code {
        0 => Ok(None),
        code => match ALCC_KINDS.get(usize::from(code) - 1) {
            Some(kind) => Ok(Some(*kind)),
            None => bail!("unknown ALCC controller code {code}"),
        },
    }
}

impl Request {
    pub fn encode(&self) -> Result<[u8; REQUEST_LEN]> {
        let (kind, size, token, cc, alcc) = match self {
            Request::Data { size, token, cc, alcc } => (1u8, *size, *token, cc.as_deref(), *alcc),
            Request::Stats { token } => (2u8, 0, *token, None, None),
        };
        let mut out = [0u8; REQUEST_LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4] = kind;
        out[5] = encode_alcc(alcc)?;
        out[8..16].copy_from_slice(&size.to_be_bytes());
        out[16..24].copy_from_slice(&token.to_be_bytes());
        encode_name(cc, &mut out[24..])?;
        Ok(out)
    }

    pub fn decode(raw: &[u8; REQUEST_LEN]) -> Result<Request> {
        if &raw[..4] != MAGIC {
            bail!("not a tng perf request (bad magic {:02x?})", &raw[..4]);
        }
        let size = u64::from_be_bytes(raw[8..16].try_into()?);
        let token = u64::from_be_bytes(raw[16..24].try_into()?);
        match raw[4] {
            1 => Ok(Request::Data { size, token, cc: decode_name(&raw[24..])?, alcc: decode_alcc(raw[5])? }),
            2 => Ok(Request::Stats { token }),
            other => bail!("unknown tng perf request kind {other}"),
        }
    }
}

/// Sender-side counters of one run, as the server saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    pub retransmitted_packets: u64,
    pub sent_packets: u64,
    /// The congestion control the server's sending socket (or tng channel) used, read back from it.
    pub cc: Option<String>,
    /// Median and 95th percentile of the time the server's bytes waited between its write and their first
    /// transmission (tng only: a kernel socket does not tell).
    pub queueing: Option<Queueing>,
    /// What the ALCC controller saw, if one limited the sender.
    pub alcc: Option<AlccStats>,
}

/// Sender-side queueing delay percentiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queueing {
    pub p50: Duration,
    pub p95: Duration,
}

/// Encodes "no queueing delay known" in the microsecond fields.
const UNKNOWN: u64 = u64::MAX;

impl SenderStats {
    pub fn encode(&self) -> [u8; STATS_LEN] {
        let mut out = [0u8; STATS_LEN];
        out[..8].copy_from_slice(&self.retransmitted_packets.to_be_bytes());
        out[8..16].copy_from_slice(&self.sent_packets.to_be_bytes());
        // A name that does not fit is left out rather than sent truncated.
        if encode_name(self.cc.as_deref(), &mut out[16..32]).is_err() {
            out[16..32].fill(0);
        }
        let micros = |delay: Duration| u64::try_from(delay.as_micros()).unwrap_or(UNKNOWN - 1);
        let (p50, p95) = self.queueing.map_or((UNKNOWN, UNKNOWN), |q| (micros(q.p50), micros(q.p95)));
        out[32..40].copy_from_slice(&p50.to_be_bytes());
        out[40..48].copy_from_slice(&p95.to_be_bytes());
        // Zero samples: no ALCC controller ran.
        let alcc = self.alcc.unwrap_or_default();
        out[48..56].copy_from_slice(&alcc.samples.to_be_bytes());
        out[56..64].copy_from_slice(&alcc.peak_window.to_be_bytes());
        out[64..72].copy_from_slice(&alcc.peak_kernel_bytes.to_be_bytes());
        out[72..80].copy_from_slice(&alcc.forecasts.to_be_bytes());
        out[80..88].copy_from_slice(&alcc.round_trips.to_be_bytes());
        out
    }

    pub fn decode(raw: &[u8; STATS_LEN]) -> SenderStats {
        let word = |i: usize| u64::from_be_bytes(raw[i..i + 8].try_into().unwrap_or_default());
        let queueing = (word(32) != UNKNOWN && word(40) != UNKNOWN)
            .then(|| Queueing { p50: Duration::from_micros(word(32)), p95: Duration::from_micros(word(40)) });
        SenderStats {
            retransmitted_packets: word(0),
            sent_packets: word(8),
            cc: decode_name(&raw[16..32]).ok().flatten(),
            queueing,
            alcc: (word(48) > 0).then(|| AlccStats {
                samples: word(48),
                peak_window: word(56),
                peak_kernel_bytes: word(64),
                forecasts: word(72),
                round_trips: word(80),
            }),
        }
    }
}

/// The byte at `offset` of every response.
pub fn pattern_byte(offset: u64) -> u8 {
    // Multiplying by an odd constant makes consecutive bytes differ and a shifted copy detectable.
    (offset.wrapping_mul(0x9E37_79B9) >> 7) as u8
}

/// The pattern repeats every `PERIOD` bytes: a byte is bits 7-14 of `offset * constant`, which depend only on the
/// low 15 bits of `offset`. Filling and checking copy and compare against a table instead of computing every byte,
/// which would otherwise cost the perf tool a sizeable share of the CPU it measures.
const PERIOD: usize = 1 << 15;

/// Two periods of the pattern, so that any window of up to one period is one slice.
static PATTERN: LazyLock<Vec<u8>> = LazyLock::new(|| (0..2 * PERIOD as u64).map(pattern_byte).collect());

/// Calls `each(offset, expected)` for consecutive pieces of the pattern covering `len` bytes from `offset`.
fn for_each_piece(offset: u64, len: usize, mut each: impl FnMut(usize, &[u8])) {
    let mut done = 0;
    while done < len {
        let start = ((offset + done as u64) % PERIOD as u64) as usize;
        let piece = (len - done).min(PERIOD);
        each(done, &PATTERN[start..start + piece]);
        done += piece;
    }
}

/// Fills `buf` with the pattern starting at `offset`.
pub fn fill_pattern(offset: u64, buf: &mut [u8]) {
    for_each_piece(offset, buf.len(), |at, expected| buf[at..at + expected.len()].copy_from_slice(expected));
}

/// Number of bytes in `buf` (received at `offset`) that differ from the pattern.
pub fn count_corrupted(offset: u64, buf: &[u8]) -> u64 {
    let mut corrupted = 0;
    for_each_piece(offset, buf.len(), |at, expected| {
        let got = &buf[at..at + expected.len()];
        if got != expected {
            corrupted += got.iter().zip(expected).filter(|(a, b)| a != b).count() as u64;
        }
    });
    corrupted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for r in [
            Request::Data { size: 123_456_789, token: 7, cc: None, alcc: None },
            Request::Data { size: 1, token: 8, cc: Some("cubic".into()), alcc: None },
            Request::Data { size: 1, token: 9, cc: None, alcc: Some(CcKind::Copa) },
            Request::Data { size: 1, token: 9, cc: Some("bbr".into()), alcc: Some(CcKind::Verus) },
            Request::Stats { token: u64::MAX },
        ] {
            assert_eq!(Request::decode(&r.encode().unwrap()).unwrap(), r);
        }
    }

    #[test]
    fn congestion_control_names_that_the_kernel_would_truncate_are_refused() {
        let name = |cc: &str| Request::Data { size: 1, token: 1, cc: Some(cc.into()), alcc: None }.encode();
        assert!(name("fifteen-bytes-x").is_ok());
        assert!(name("sixteen-bytes-xx").unwrap_err().to_string().contains("1 to 15 bytes"));
        assert!(name("").is_err());
    }

    #[test]
    fn only_alcc_controllers_travel_in_a_request() {
        let cubic = Request::Data { size: 1, token: 1, cc: None, alcc: Some(CcKind::Cubic) }.encode();
        assert!(cubic.unwrap_err().to_string().contains("cubic cannot run over kernel TCP"));
        for kind in ALCC_KINDS {
            let raw = Request::Data { size: 1, token: 1, cc: None, alcc: Some(kind) }.encode().unwrap();
            assert_eq!(Request::decode(&raw).unwrap(), Request::Data { size: 1, token: 1, cc: None, alcc: Some(kind) });
        }
        let mut raw = Request::Data { size: 1, token: 1, cc: None, alcc: None }.encode().unwrap();
        raw[5] = 9;
        assert!(Request::decode(&raw).unwrap_err().to_string().contains("unknown ALCC controller code 9"));
    }

    #[test]
    fn bad_magic_and_kind_are_rejected_with_reason() {
        let mut raw = Request::Stats { token: 1 }.encode().unwrap();
        raw[4] = 9;
        assert!(Request::decode(&raw).unwrap_err().to_string().contains("kind 9"));
        raw[0] = b'X';
        assert!(Request::decode(&raw).unwrap_err().to_string().contains("bad magic"));
    }

    #[test]
    fn stats_round_trip() {
        let queueing = Queueing { p50: Duration::from_micros(1_500), p95: Duration::from_millis(180) };
        let alcc =
            AlccStats { samples: 5, peak_window: 64_000, peak_kernel_bytes: 60_000, forecasts: 7, round_trips: 4 };
        for (cc, queueing, alcc) in [(None, None, None), (Some("bbr".to_string()), Some(queueing), Some(alcc))] {
            let s = SenderStats { retransmitted_packets: 3, sent_packets: 99, cc, queueing, alcc };
            assert_eq!(SenderStats::decode(&s.encode()), s);
        }
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

    #[test]
    fn table_pattern_equals_the_byte_formula_across_periods() {
        let offset = 3 * PERIOD as u64 - 5;
        let mut buf = vec![0u8; 2 * PERIOD + 7];
        fill_pattern(offset, &mut buf);
        assert!(buf.iter().enumerate().all(|(i, &b)| b == pattern_byte(offset + i as u64)));
        buf[PERIOD + 1] ^= 0x80;
        assert_eq!(count_corrupted(offset, &buf), 1);
    }
}
