//! What an in-path switch writes into the tng flow header's feedback fields (docs/wire-format.md section 2).
//!
//! Only bytes 18..24 change: the AEAD leaves them out of the associated data, so endpoints still open the packet.

use std::time::Duration;

/// Offset of `queue_level` (u16, big-endian, units of 32 microseconds).
pub const QUEUE_LEVEL_OFFSET: usize = 18;
/// Offset of `rate_hint` (u32, big-endian, kbit/s).
pub const RATE_HINT_OFFSET: usize = 20;
/// Size of the cleartext flow header.
pub const FLOW_HEADER_LEN: usize = 24;
/// The only version a switch recognises; anything else is left untouched.
const VERSION: u8 = 1;
/// Largest encodable queue level; `0xFFFF` is reserved and read as this.
const MAX_QUEUE_LEVEL: u16 = 65534;
const QUEUE_LEVEL_UNIT_MICROS: u128 = 32;

/// A switch's own observation for one packet leaving its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchObservation {
    pub queue_delay: Duration,
    pub rate_kbps: u32,
}

/// Queue delay encoded in `queue_level` units, saturating at the largest encodable level.
pub fn queue_level_units(queue_delay: Duration) -> u16 {
    u16::try_from(queue_delay.as_micros() / QUEUE_LEVEL_UNIT_MICROS).unwrap_or(MAX_QUEUE_LEVEL).min(MAX_QUEUE_LEVEL)
}

/// Folds a switch's observation into a tng datagram: `queue_level = max(existing, own)`,
/// `rate_hint = min(existing, own)`. Datagrams too short to hold a flow header or of another version are left alone.
/// Returns whether the datagram was rewritten.
pub fn rewrite(datagram: &mut [u8], observation: SwitchObservation) -> bool {
    if datagram.len() < FLOW_HEADER_LEN || datagram[0] != VERSION {
        return false;
    }
    let level_bytes = [datagram[QUEUE_LEVEL_OFFSET], datagram[QUEUE_LEVEL_OFFSET + 1]];
    let existing_level = u16::from_be_bytes(level_bytes).min(MAX_QUEUE_LEVEL);
    let level = existing_level.max(queue_level_units(observation.queue_delay));
    datagram[QUEUE_LEVEL_OFFSET..QUEUE_LEVEL_OFFSET + 2].copy_from_slice(&level.to_be_bytes());

    let mut hint_bytes = [0u8; 4];
    hint_bytes.copy_from_slice(&datagram[RATE_HINT_OFFSET..RATE_HINT_OFFSET + 4]);
    let hint = u32::from_be_bytes(hint_bytes).min(observation.rate_kbps);
    datagram[RATE_HINT_OFFSET..RATE_HINT_OFFSET + 4].copy_from_slice(&hint.to_be_bytes());
    true
}
