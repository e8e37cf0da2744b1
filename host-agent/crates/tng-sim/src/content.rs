//! Application payload: every byte is a function of (stream, offset), so the receiver checks content, not only
//! counts, and a misplaced, duplicated or corrupted byte is caught.
//!
//! Bytes come in 8-byte words, each a strong hash (splitmix64's finalizer) of the stream and the word's index:
//! neighbouring bytes differ, and so do bytes shifted by any distance, while generating and checking cost one
//! hash per 8 bytes.

const WORD: u64 = 8;

fn word(stream: u64, index: u64) -> [u8; 8] {
    let mut x = index ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)).to_le_bytes()
}

/// The byte at `offset` of the stream numbered `stream`.
pub fn byte_at(stream: u64, offset: u64) -> u8 {
    word(stream, offset / WORD)[(offset % WORD) as usize]
}

/// Calls `visit(expected_bytes, position_in_buffer)` for each piece of the stream's bytes in [offset, offset + len).
fn for_each_piece(stream: u64, offset: u64, len: usize, mut visit: impl FnMut(&[u8], usize)) {
    let mut position = 0usize;
    while position < len {
        let at = offset + position as u64;
        let within = (at % WORD) as usize;
        let take = (WORD as usize - within).min(len - position);
        visit(&word(stream, at / WORD)[within..within + take], position);
        position += take;
    }
}

/// Fills `buffer` with the stream's bytes starting at `offset`.
pub fn fill(stream: u64, offset: u64, buffer: &mut [u8]) {
    for_each_piece(stream, offset, buffer.len(), |expected, position| {
        buffer[position..position + expected.len()].copy_from_slice(expected);
    });
}

/// Number of bytes in `data` (read at `offset` of `stream`) that differ from what was sent.
pub fn count_corrupted(stream: u64, offset: u64, data: &[u8]) -> u64 {
    let mut corrupted = 0u64;
    for_each_piece(stream, offset, data.len(), |expected, position| {
        let received = &data[position..position + expected.len()];
        if received != expected {
            corrupted += received.iter().zip(expected).filter(|(a, b)| a != b).count() as u64;
        }
    });
    corrupted
}
