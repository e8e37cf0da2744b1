//! The 24-byte cleartext flow header (wire-format section 2), which carries the in-network feedback fields.

use std::ops::BitOr;

use crate::error::WireError;
use crate::feedback::Feedback;
use crate::limits::{HEADER_LEN, MAX_PACKET, VERSION};
use crate::reader::Reader;

/// The header bytes the AEAD authenticates: everything before the rewritable feedback fields.
pub const ASSOCIATED_DATA_LEN: usize = 18;

// The feedback fields fill the header after the associated data.
const _: () = assert!(ASSOCIATED_DATA_LEN + Feedback::ENCODED_LEN == HEADER_LEN);

/// The `packet_type` byte (section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// Handshake message (Noise), with optional retry token and padding.
    Initial = 0x01,
    /// Stateless retry token from a server.
    Retry = 0x02,
    /// Sealed frames.
    Data = 0x03,
    /// Sealed ACK, FEEDBACK_ECHO and PADDING frames only; not ack-eliciting.
    Ack = 0x04,
    /// Sealed PATH_CHALLENGE / PATH_RESPONSE (+PADDING) frames.
    Probe = 0x05,
    /// A sealed CLOSE frame.
    Close = 0x06,
    /// One section of a relayed connection carrying an end-to-end packet unchanged (section 10).
    Section = 0x07,
    /// A section's cleartext acknowledgement: ACK, FEEDBACK_ECHO and PADDING frames (section 10).
    SectionAck = 0x08,
}

impl PacketType {
    /// The type for a `packet_type` byte, `None` if unknown.
    pub const fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            0x01 => Self::Initial,
            0x02 => Self::Retry,
            0x03 => Self::Data,
            0x04 => Self::Ack,
            0x05 => Self::Probe,
            0x06 => Self::Close,
            0x07 => Self::Section,
            0x08 => Self::SectionAck,
            _ => return None,
        })
    }

    /// The type's name in lower case, as qlog traces record it in `packet_type`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Retry => "retry",
            Self::Data => "data",
            Self::Ack => "ack",
            Self::Probe => "probe",
            Self::Close => "close",
            Self::Section => "section",
            Self::SectionAck => "section_ack",
        }
    }

    /// Whether the payload is AEAD-sealed frames (section 6).
    pub const fn is_sealed(self) -> bool {
        matches!(self, Self::Data | Self::Ack | Self::Probe | Self::Close)
    }
}

impl From<PacketType> for u8 {
    fn from(packet_type: PacketType) -> u8 {
        packet_type as u8
    }
}

/// The `flags` byte. Holds only the three defined bits: reserved bits cannot be represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// No flag set.
    pub const EMPTY: Self = Self(0);
    /// The sender reacts to ECN CE, so a switch may mark instead of dropping.
    pub const ECN_CAPABLE: Self = Self(0x01);
    /// The sealed payload carries a FEEDBACK_ECHO frame.
    pub const FEEDBACK_ECHO: Self = Self(0x02);
    /// Which of the two current keys sealed the payload.
    pub const KEY_PHASE: Self = Self(0x04);

    const DEFINED: u8 = 0x07;

    /// Flags from a received byte; `None` if a reserved bit is set.
    pub const fn from_bits(bits: u8) -> Option<Self> {
        if bits & !Self::DEFINED == 0 {
            Some(Self(bits))
        } else {
            None
        }
    }

    /// The byte on the wire.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags with `flag` set (`on`) or cleared.
    pub const fn with(self, flag: Self, on: bool) -> Self {
        if on {
            Self(self.0 | flag.0)
        } else {
            Self(self.0 & !flag.0)
        }
    }
}

impl BitOr for Flags {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// The flow header exactly as on the wire (what switches read and the AEAD binds), version implied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowHeader {
    /// Packet type.
    pub packet_type: PacketType,
    /// Flags.
    pub flags: Flags,
    /// Channel (local/remote address pair); packet numbers are per channel.
    pub channel_id: u8,
    /// Connection id, independent of addresses.
    pub connection_id: u64,
    /// Low 32 bits of the full packet number (see [`crate::pn`]).
    pub packet_number: u32,
    /// Bytes after the header.
    pub payload_length: u16,
    /// The in-network feedback fields, the only ones switches may rewrite.
    pub feedback: Feedback,
}

impl FlowHeader {
    /// Decodes the header of `datagram` (a whole UDP payload), applying receiver rules 0-5 in order.
    pub fn decode(datagram: &[u8]) -> Result<Self, WireError> {
        Self::split(datagram).map(|(header, _)| header)
    }

    /// [`FlowHeader::decode`], also returning the payload (exactly `payload_length` bytes).
    pub(crate) fn split(datagram: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let len = datagram.len();
        if len > MAX_PACKET {
            return Err(WireError::TooLarge { len });
        }
        // Read every field before judging any, so that a short datagram is `truncated_header` whatever it holds.
        let mut reader = Reader::new(datagram);
        let truncated = WireError::TruncatedHeader { len };
        let version = reader.u8().ok_or(truncated)?;
        let packet_type = reader.u8().ok_or(truncated)?;
        let flags = reader.u8().ok_or(truncated)?;
        let channel_id = reader.u8().ok_or(truncated)?;
        let connection_id = reader.u64().ok_or(truncated)?;
        let packet_number = reader.u32().ok_or(truncated)?;
        let payload_length = reader.u16().ok_or(truncated)?;
        let queue_level = reader.u16().ok_or(truncated)?;
        let rate_hint = reader.u32().ok_or(truncated)?;
        if version != VERSION {
            return Err(WireError::BadVersion { version });
        }
        let packet_type = PacketType::from_u8(packet_type).ok_or(WireError::UnknownType { packet_type })?;
        let flags = Flags::from_bits(flags).ok_or(WireError::ReservedFlags { flags })?;
        let actual = reader.remaining();
        if usize::from(payload_length) != actual {
            return Err(WireError::LengthMismatch { payload_length, actual });
        }
        let header = Self {
            packet_type,
            flags,
            channel_id,
            connection_id,
            packet_number,
            payload_length,
            feedback: Feedback { queue_level, rate_hint },
        };
        Ok((header, reader.rest()))
    }

    /// The 24 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut bytes = [0; HEADER_LEN];
        bytes[..ASSOCIATED_DATA_LEN].copy_from_slice(&self.associated_data());
        bytes[ASSOCIATED_DATA_LEN..].copy_from_slice(&self.feedback.encode());
        bytes
    }

    /// Header bytes 0-17, the AEAD's associated data: every field but the feedback.
    pub fn associated_data(&self) -> [u8; ASSOCIATED_DATA_LEN] {
        let mut bytes = [0; ASSOCIATED_DATA_LEN];
        bytes[0] = VERSION;
        bytes[1] = self.packet_type.into();
        bytes[2] = self.flags.bits();
        bytes[3] = self.channel_id;
        bytes[4..12].copy_from_slice(&self.connection_id.to_be_bytes());
        bytes[12..16].copy_from_slice(&self.packet_number.to_be_bytes());
        bytes[16..18].copy_from_slice(&self.payload_length.to_be_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FlowHeader {
        FlowHeader {
            packet_type: PacketType::Data,
            flags: Flags::ECN_CAPABLE | Flags::KEY_PHASE,
            channel_id: 7,
            connection_id: 0x0102_0304_0506_0708,
            packet_number: 0x0a0b_0c0d,
            payload_length: 4,
            feedback: Feedback { queue_level: 0x1112, rate_hint: 0x2122_2324 },
        }
    }

    #[test]
    fn encodes_fields_big_endian_at_their_offsets() {
        let expected = [
            0x01, 0x03, 0x05, 0x07, 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0x00, 0x04, 0x11, 0x12, 0x21, 0x22,
            0x23, 0x24,
        ];
        assert_eq!(sample().encode(), expected);
        assert_eq!(sample().associated_data(), expected[..ASSOCIATED_DATA_LEN]);
    }

    #[test]
    fn decode_reads_back_what_encode_wrote() {
        let mut datagram = sample().encode().to_vec();
        datagram.extend_from_slice(&[0; 4]);
        assert_eq!(FlowHeader::decode(&datagram), Ok(sample()));
    }

    #[test]
    fn decode_applies_rules_in_order() {
        let mut datagram = sample().encode().to_vec();
        datagram.extend_from_slice(&[0; 4]);
        // Break everything at once: version, type, flags and length. The first rule wins.
        let mut broken = datagram.clone();
        broken[0] = 9;
        broken[1] = 0;
        broken[2] = 0xff;
        broken.push(0);
        assert_eq!(FlowHeader::decode(&broken), Err(WireError::BadVersion { version: 9 }));
        broken[0] = VERSION;
        assert_eq!(FlowHeader::decode(&broken), Err(WireError::UnknownType { packet_type: 0 }));
        broken[1] = PacketType::Probe.into();
        assert_eq!(FlowHeader::decode(&broken), Err(WireError::ReservedFlags { flags: 0xff }));
        broken[2] = 0;
        assert_eq!(FlowHeader::decode(&broken), Err(WireError::LengthMismatch { payload_length: 4, actual: 5 }));
        assert_eq!(FlowHeader::decode(&datagram[..23]), Err(WireError::TruncatedHeader { len: 23 }));
        let mut oversized = datagram;
        oversized.resize(MAX_PACKET + 1, 0);
        oversized[0] = 9;
        assert_eq!(FlowHeader::decode(&oversized), Err(WireError::TooLarge { len: MAX_PACKET + 1 }));
    }

    #[test]
    fn flags_reject_reserved_bits_and_combine() {
        for bit in 3..8 {
            assert_eq!(Flags::from_bits(1 << bit), None);
        }
        let all = Flags::from_bits(0x07).expect("defined bits");
        assert!(all.contains(Flags::ECN_CAPABLE | Flags::FEEDBACK_ECHO));
        assert_eq!(all.with(Flags::FEEDBACK_ECHO, false).bits(), 0x05);
        assert_eq!(Flags::EMPTY.with(Flags::KEY_PHASE, true), Flags::KEY_PHASE);
        assert!(!Flags::ECN_CAPABLE.contains(Flags::KEY_PHASE));
    }

    #[test]
    fn packet_type_bytes_round_trip_and_others_are_unknown() {
        for byte in 0..=u8::MAX {
            match PacketType::from_u8(byte) {
                Some(packet_type) => assert_eq!(u8::from(packet_type), byte),
                None => assert!(byte == 0 || byte >= 9, "byte {byte}"),
            }
        }
        assert!(PacketType::Ack.is_sealed());
        assert!(!PacketType::Retry.is_sealed());
        assert!(!PacketType::Section.is_sealed() && !PacketType::SectionAck.is_sealed());
    }
}
