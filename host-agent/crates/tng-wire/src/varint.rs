//! QUIC variable-length integers (RFC 9000 section 16): the two high bits of the first byte give the length.

/// Largest value a varint can hold, 2^62 - 1.
pub const MAX: u64 = (1 << 62) - 1;

/// Bytes the shortest encoding of `value` takes (1, 2, 4 or 8).
pub const fn encoded_len(value: u64) -> usize {
    if value < 1 << 6 {
        1
    } else if value < 1 << 14 {
        2
    } else if value < 1 << 30 {
        4
    } else {
        8
    }
}

/// Appends the shortest encoding of `value`.
///
/// # Panics
/// If `value` exceeds [`MAX`]: no encoding exists, and writing a wrong one would corrupt the packet silently.
pub fn encode(value: u64, out: &mut Vec<u8>) {
    assert!(value <= MAX, "varint value {value} exceeds 2^62 - 1");
    // The `as` casts keep exactly the bits that `encoded_len` proved to be the only non-zero ones.
    match encoded_len(value) {
        1 => out.push(value as u8),
        2 => out.extend_from_slice(&(0x4000 | value as u16).to_be_bytes()),
        4 => out.extend_from_slice(&(0x8000_0000 | value as u32).to_be_bytes()),
        _ => out.extend_from_slice(&(0xc000_0000_0000_0000 | value).to_be_bytes()),
    }
}

/// Decodes the varint at the start of `bytes`: `(value, bytes consumed)`, or `None` if `bytes` ends inside it.
/// Non-minimal encodings are accepted, as in QUIC.
pub fn decode(bytes: &[u8]) -> Option<(u64, usize)> {
    let first = *bytes.first()?;
    let len = 1usize << (first >> 6);
    let encoded = bytes.get(..len)?;
    let value = encoded.iter().skip(1).fold(u64::from(first & 0x3f), |acc, &b| acc << 8 | u64::from(b));
    Some((value, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode(value, &mut out);
        out
    }

    #[test]
    fn rfc9000_examples_decode() {
        // RFC 9000 appendix A.1, including the non-minimal two-byte encoding of 37.
        let cases: [(&[u8], u64); 5] = [
            (&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c], 151_288_809_941_952_652),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
            (&[0x40, 0x25], 37),
        ];
        for (bytes, value) in cases {
            assert_eq!(decode(bytes), Some((value, bytes.len())), "{bytes:02x?}");
        }
    }

    #[test]
    fn each_length_boundary_uses_the_shortest_encoding_and_round_trips() {
        let cases = [(0, 1), (63, 1), (64, 2), (16_383, 2), (16_384, 4), ((1 << 30) - 1, 4), (1 << 30, 8), (MAX, 8)];
        for (value, len) in cases {
            let bytes = encoded(value);
            assert_eq!(bytes.len(), len, "value {value}");
            assert_eq!(encoded_len(value), len, "value {value}");
            assert_eq!(decode(&bytes), Some((value, len)), "value {value}");
        }
        assert_eq!(encoded(MAX), [0xff; 8]);
    }

    #[test]
    fn non_minimal_encodings_are_accepted() {
        assert_eq!(decode(&[0x40, 0x00]), Some((0, 2)));
        assert_eq!(decode(&[0x80, 0, 0, 0x01]), Some((1, 4)));
        assert_eq!(decode(&[0xc0, 0, 0, 0, 0, 0, 0x3f, 0xff]), Some((16_383, 8)));
    }

    #[test]
    fn truncated_input_is_none() {
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0x40]), None);
        assert_eq!(decode(&[0x80, 0, 0]), None);
        assert_eq!(decode(&[0xc0, 0, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn decode_ignores_bytes_after_the_varint() {
        assert_eq!(decode(&[0x25, 0xff, 0xff]), Some((37, 1)));
    }

    #[test]
    #[should_panic(expected = "exceeds 2^62 - 1")]
    fn encoding_a_value_above_max_panics() {
        encoded(MAX + 1);
    }
}
