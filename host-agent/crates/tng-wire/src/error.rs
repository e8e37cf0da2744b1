//! Why a datagram or a frame was rejected.

use crate::limits::{HEADER_LEN, MAX_PACKET, MIN_CLIENT_INITIAL, TAG_LEN, VERSION};

/// A malformed packet (one variant per receiver rule of wire-format section 8, in that order) or frame (section 7).
///
/// [`WireError::as_str`] gives the stable snake_case name used in the test vectors and drop counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Rule 0: the datagram is longer than [`MAX_PACKET`].
    #[error("datagram of {len} bytes exceeds the {MAX_PACKET}-byte maximum")]
    TooLarge {
        /// Datagram length.
        len: usize,
    },
    /// Rule 1: the datagram cannot hold the flow header.
    #[error("datagram of {len} bytes is shorter than the {HEADER_LEN}-byte flow header")]
    TruncatedHeader {
        /// Datagram length.
        len: usize,
    },
    /// Rule 2: the version is not [`VERSION`].
    #[error("version {version} is not {VERSION}")]
    BadVersion {
        /// The version byte received.
        version: u8,
    },
    /// Rule 3: the packet type is not one of section 3.
    #[error("unknown packet type {packet_type:#04x}")]
    UnknownType {
        /// The type byte received.
        packet_type: u8,
    },
    /// Rule 4: a reserved flag bit (3-7) is set.
    #[error("reserved bits set in flags {flags:#04x}")]
    ReservedFlags {
        /// The flags byte received.
        flags: u8,
    },
    /// Rule 5: `payload_length` disagrees with the datagram length.
    #[error("payload_length {payload_length} does not match the {actual} bytes after the header")]
    LengthMismatch {
        /// The header's `payload_length`.
        payload_length: u16,
        /// Bytes actually following the header.
        actual: usize,
    },
    /// Rule 6: an INITIAL or RETRY payload whose fixed fields and declared lengths do not fit it exactly.
    #[error("handshake fields need {needed} bytes but the payload has {payload}")]
    HandshakeLength {
        /// Bytes the fixed fields plus the declared token and Noise lengths take.
        needed: usize,
        /// Payload length.
        payload: usize,
    },
    /// Rule 6: an INITIAL stage other than 1, 2 or 3.
    #[error("handshake stage {stage} is not 1, 2 or 3")]
    BadStage {
        /// The stage byte received.
        stage: u8,
    },
    /// Rule 6: a client INITIAL (stage 1 or 3) not padded to [`MIN_CLIENT_INITIAL`].
    #[error("client INITIAL of {len} bytes is under the {MIN_CLIENT_INITIAL}-byte minimum")]
    InitialTooSmall {
        /// Datagram length.
        len: usize,
    },
    /// Rule 6: a sealed payload shorter than the AEAD tag.
    #[error("sealed payload of {len} bytes is shorter than the {TAG_LEN}-byte tag")]
    ShortSealedPayload {
        /// Payload length.
        len: usize,
    },
    /// Rule 6: a SECTION payload too short for its prefix and an inner flow header, or of another section
    /// version; an empty SECTION_ACK payload.
    #[error("malformed section payload: {reason}")]
    BadSection {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A core frame type (below 0x20) this version does not define.
    #[error("unknown core frame type {frame_type:#04x}")]
    UnknownFrame {
        /// The frame type received.
        frame_type: u64,
    },
    /// A frame's type, length or value runs past the end of the plaintext.
    #[error("frame at offset {offset} runs past the end of the plaintext")]
    FrameTruncated {
        /// Offset of the frame's first byte in the plaintext.
        offset: usize,
    },
    /// A known frame whose value does not decode.
    #[error("malformed frame of type {frame_type:#04x}: {reason}")]
    MalformedFrame {
        /// The frame type.
        frame_type: u64,
        /// What is wrong with the value.
        reason: &'static str,
    },
}

impl WireError {
    /// The error's stable name: section 8's names for packets, `unknown_frame`, `frame_truncated` and
    /// `malformed_frame` for frames.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::TruncatedHeader { .. } => "truncated_header",
            Self::BadVersion { .. } => "bad_version",
            Self::UnknownType { .. } => "unknown_type",
            Self::ReservedFlags { .. } => "reserved_flags",
            Self::LengthMismatch { .. } => "length_mismatch",
            Self::HandshakeLength { .. } => "handshake_length",
            Self::BadStage { .. } => "bad_stage",
            Self::InitialTooSmall { .. } => "initial_too_small",
            Self::ShortSealedPayload { .. } => "short_sealed_payload",
            Self::BadSection { .. } => "bad_section",
            Self::UnknownFrame { .. } => "unknown_frame",
            Self::FrameTruncated { .. } => "frame_truncated",
            Self::MalformedFrame { .. } => "malformed_frame",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_problem() {
        let mismatch = WireError::LengthMismatch { payload_length: 33, actual: 32 };
        assert_eq!(mismatch.to_string(), "payload_length 33 does not match the 32 bytes after the header");
        assert_eq!(WireError::UnknownType { packet_type: 7 }.to_string(), "unknown packet type 0x07");
        assert_eq!(
            WireError::TooLarge { len: 1473 }.to_string(),
            "datagram of 1473 bytes exceeds the 1472-byte maximum"
        );
    }

    #[test]
    fn names_are_distinct() {
        let all = [
            WireError::TooLarge { len: 0 },
            WireError::TruncatedHeader { len: 0 },
            WireError::BadVersion { version: 0 },
            WireError::UnknownType { packet_type: 0 },
            WireError::ReservedFlags { flags: 0 },
            WireError::LengthMismatch { payload_length: 0, actual: 0 },
            WireError::HandshakeLength { needed: 0, payload: 0 },
            WireError::BadStage { stage: 0 },
            WireError::InitialTooSmall { len: 0 },
            WireError::ShortSealedPayload { len: 0 },
            WireError::BadSection { reason: "" },
            WireError::UnknownFrame { frame_type: 0 },
            WireError::FrameTruncated { offset: 0 },
            WireError::MalformedFrame { frame_type: 0, reason: "" },
        ];
        let mut names: Vec<_> = all.iter().map(WireError::as_str).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }
}
