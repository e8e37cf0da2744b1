//! Packet numbers (wire-format section 4): full numbers up to 2^56 - 1 per channel and direction, of which the
//! header carries the low 32 bits.

/// Largest full packet number: the AEAD nonce has 56 bits for it. A connection closes before reaching it.
pub const MAX: u64 = (1 << 56) - 1;

const WINDOW: u64 = 1 << 32;
const HALF_WINDOW: u64 = WINDOW / 2;

/// The 32 bits of `packet_number` the header carries.
pub const fn truncate(packet_number: u64) -> u32 {
    packet_number as u32
}

/// Recovers the full packet number closest to `largest + 1` whose low 32 bits are `truncated` (RFC 9000 appendix
/// A.3 with a 32-bit window), where `largest` is the largest packet number opened on the channel so far (`None`
/// before any). Exact for every packet number within 2^31 of `largest + 1`, which a sender guarantees by never
/// having more than 2^31 packets in flight.
///
/// Returns `None` when the only candidate is above [`MAX`] (possible once `largest` is `MAX`): no nonce exists for it.
pub fn expand(largest: Option<u64>, truncated: u32) -> Option<u64> {
    let expected = largest.map_or(0, |largest| largest.saturating_add(1));
    let candidate = (expected & !(WINDOW - 1)) | u64::from(truncated);
    let too_far_behind = expected.checked_sub(HALF_WINDOW).is_some_and(|floor| candidate <= floor);
    let too_far_ahead = candidate > expected.saturating_add(HALF_WINDOW);
    let expanded = match candidate.checked_add(WINDOW) {
        Some(up) if too_far_behind && up <= MAX => up,
        _ if too_far_ahead && candidate >= WINDOW => candidate - WINDOW,
        _ => candidate,
    };
    (expanded <= MAX).then_some(expanded)
}

/// The 64-bit AEAD nonce of section 6, `(channel_id << 56) | packet_number`; `None` if `packet_number` exceeds
/// [`MAX`] and would spill into the channel bits.
pub const fn nonce(channel_id: u8, packet_number: u64) -> Option<u64> {
    if packet_number > MAX {
        return None;
    }
    Some((channel_id as u64) << 56 | packet_number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_packets_expand_to_themselves() {
        assert_eq!(expand(None, 0), Some(0));
        assert_eq!(expand(None, 5), Some(5));
        assert_eq!(expand(Some(0), 1), Some(1));
    }

    #[test]
    fn crossing_a_32_bit_boundary_upwards() {
        let boundary = WINDOW;
        assert_eq!(expand(Some(boundary - 2), 0xffff_ffff), Some(boundary - 1));
        assert_eq!(expand(Some(boundary - 2), 0), Some(boundary));
        assert_eq!(expand(Some(boundary - 1), 3), Some(boundary + 3));
        assert_eq!(expand(Some(5 * boundary - 10), 20), Some(5 * boundary + 20));
    }

    #[test]
    fn reordered_packets_from_below_a_boundary() {
        let boundary = 3 * WINDOW;
        assert_eq!(expand(Some(boundary + 5), 0xffff_fff0), Some(boundary - 16));
        assert_eq!(expand(Some(boundary + 5), 2), Some(boundary + 2));
        assert_eq!(expand(Some(boundary), 0xffff_ffff), Some(boundary - 1));
    }

    #[test]
    fn half_window_edges() {
        let largest = 10 * WINDOW + 1000;
        let expected = largest + 1;
        // The window is (expected - 2^31, expected + 2^31].
        assert_eq!(expand(Some(largest), truncate(expected + HALF_WINDOW)), Some(expected + HALF_WINDOW));
        assert_eq!(
            expand(Some(largest), truncate(expected + HALF_WINDOW + 1)),
            Some(expected + HALF_WINDOW + 1 - WINDOW)
        );
        assert_eq!(expand(Some(largest), truncate(expected - HALF_WINDOW + 1)), Some(expected - HALF_WINDOW + 1));
        assert_eq!(expand(Some(largest), truncate(expected - HALF_WINDOW)), Some(expected - HALF_WINDOW + WINDOW));
    }

    #[test]
    fn the_2_pow_56_limit() {
        assert_eq!(expand(Some(MAX - 1), truncate(MAX)), Some(MAX));
        // Going up a window would pass MAX, so the old packet's number stays below.
        assert_eq!(expand(Some(MAX - 1), 0), Some(MAX + 1 - WINDOW));
        // After MAX nothing new exists: a small truncated number has no nonce, a large one is an old packet.
        assert_eq!(expand(Some(MAX), 0), None);
        assert_eq!(expand(Some(MAX), truncate(MAX)), Some(MAX));
        assert_eq!(expand(Some(u64::MAX), 0), None);
    }

    #[test]
    fn truncate_keeps_the_low_32_bits() {
        assert_eq!(truncate(0x0012_3456_789a_bcde), 0x789a_bcde);
        assert_eq!(truncate(MAX), u32::MAX);
    }

    #[test]
    fn nonce_puts_the_channel_above_the_packet_number() {
        assert_eq!(nonce(0, 0), Some(0));
        assert_eq!(nonce(1, 5), Some(0x0100_0000_0000_0005));
        assert_eq!(nonce(0xff, MAX), Some(u64::MAX));
        assert_eq!(nonce(0, MAX + 1), None);
    }

    proptest! {
        #[test]
        fn expansion_inverts_truncation_within_the_window(largest in 0..=MAX - 1, offset in -(HALF_WINDOW as i64) + 1..=HALF_WINDOW as i64) {
            let expected = largest + 1;
            let Some(packet_number) = expected.checked_add_signed(offset).filter(|&pn| pn <= MAX) else {
                return Err(TestCaseError::reject("packet number outside 0..=MAX"));
            };
            prop_assert_eq!(expand(Some(largest), truncate(packet_number)), Some(packet_number));
        }
    }
}
