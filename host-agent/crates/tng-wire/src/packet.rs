//! Whole packets (wire-format sections 3, 5 and 8): header fields plus a payload shaped by the packet type, and
//! the one change a switch makes to a packet in flight, [`rewrite_feedback`].

use crate::error::WireError;
use crate::feedback::Feedback;
use crate::header::{Flags, FlowHeader, PacketType, ASSOCIATED_DATA_LEN};
use crate::limits::{HEADER_LEN, MAX_PACKET, MIN_CLIENT_INITIAL, TAG_LEN};
use crate::reader::Reader;
use crate::section::{parse_section_ack, Section};

/// `stage`, `token_length`, `noise_length`.
const HANDSHAKE_PREFIX_LEN: usize = 5;
/// `token_length`.
const RETRY_PREFIX_LEN: usize = 2;

/// Source of INITIAL padding: the largest padding any valid INITIAL can need.
static ZEROS: [u8; MIN_CLIENT_INITIAL - HEADER_LEN - HANDSHAKE_PREFIX_LEN] =
    [0; MIN_CLIENT_INITIAL - HEADER_LEN - HANDSHAKE_PREFIX_LEN];

/// Which Noise XX message an INITIAL carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Stage {
    /// Message 1, client to server (`-> e`); padded.
    ClientHello = 1,
    /// Message 2, server to client (`<- e, ee, s, es`); not padded.
    ServerHello = 2,
    /// Message 3, client to server (`-> s, se`), may carry the client's first frames; padded.
    ClientFinish = 3,
}

impl Stage {
    /// The stage for a `stage` byte, `None` if not 1-3.
    pub const fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => Self::ClientHello,
            2 => Self::ServerHello,
            3 => Self::ClientFinish,
            _ => return None,
        })
    }

    /// Whether the client sends this stage, which must then fill at least [`MIN_CLIENT_INITIAL`] bytes.
    pub const fn is_client(self) -> bool {
        matches!(self, Self::ClientHello | Self::ClientFinish)
    }
}

impl From<Stage> for u8 {
    fn from(stage: Stage) -> u8 {
        stage as u8
    }
}

/// An INITIAL payload: a Noise handshake message with its cleartext framing (section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handshake<'a> {
    /// Which handshake message this is.
    pub stage: Stage,
    /// Retry token (empty without one; always empty in stages 2 and 3).
    pub token: &'a [u8],
    /// The Noise message.
    pub noise: &'a [u8],
    /// Bytes after the Noise message. Senders send zeros; receivers keep whatever arrived so the packet re-encodes
    /// byte-exactly (the padding is authenticated by nothing and means nothing).
    pub padding: &'a [u8],
}

impl<'a> Handshake<'a> {
    /// A handshake payload as a sender builds it: client stages padded with zeros so that the datagram is exactly
    /// [`MIN_CLIENT_INITIAL`] bytes (or unpadded if already longer), the server stage unpadded.
    pub fn new(stage: Stage, token: &'a [u8], noise: &'a [u8]) -> Self {
        let unpadded = HEADER_LEN + HANDSHAKE_PREFIX_LEN + token.len() + noise.len();
        let padding_len = if stage.is_client() { MIN_CLIENT_INITIAL.saturating_sub(unpadded) } else { 0 };
        // `padding_len` is at most MIN_CLIENT_INITIAL - HEADER_LEN - HANDSHAKE_PREFIX_LEN, the length of ZEROS.
        Self { stage, token, noise, padding: &ZEROS[..padding_len] }
    }

    /// Number of padding bytes.
    pub fn padding_len(&self) -> usize {
        self.padding.len()
    }

    fn encoded_len(&self) -> usize {
        HANDSHAKE_PREFIX_LEN + self.token.len() + self.noise.len() + self.padding.len()
    }

    /// Rule 6 for INITIAL, in the order of section 8: lengths, then stage, then client padding.
    fn parse(payload: &'a [u8], datagram_len: usize) -> Result<Self, WireError> {
        let mut reader = Reader::new(payload);
        let short_prefix = WireError::HandshakeLength { needed: HANDSHAKE_PREFIX_LEN, payload: payload.len() };
        let stage = reader.u8().ok_or(short_prefix)?;
        let token_len = usize::from(reader.u16().ok_or(short_prefix)?);
        let noise_len = usize::from(reader.u16().ok_or(short_prefix)?);
        let overrun =
            WireError::HandshakeLength { needed: HANDSHAKE_PREFIX_LEN + token_len + noise_len, payload: payload.len() };
        let token = reader.bytes(token_len).ok_or(overrun)?;
        let noise = reader.bytes(noise_len).ok_or(overrun)?;
        let stage = Stage::from_u8(stage).ok_or(WireError::BadStage { stage })?;
        if stage.is_client() && datagram_len < MIN_CLIENT_INITIAL {
            return Err(WireError::InitialTooSmall { len: datagram_len });
        }
        Ok(Self { stage, token, noise, padding: reader.rest() })
    }
}

/// A packet's payload, by packet type. Sealed payloads are the AEAD ciphertext including its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload<'a> {
    /// `INITIAL`: a handshake message.
    Initial(Handshake<'a>),
    /// `RETRY`: the server's opaque token.
    Retry {
        /// The token.
        token: &'a [u8],
    },
    /// `DATA`: sealed frames.
    Data(&'a [u8]),
    /// `ACK`: sealed ACK, FEEDBACK_ECHO and PADDING frames.
    Ack(&'a [u8]),
    /// `PROBE`: sealed PATH_CHALLENGE / PATH_RESPONSE (+PADDING) frames.
    Probe(&'a [u8]),
    /// `CLOSE`: a sealed CLOSE frame.
    Close(&'a [u8]),
    /// `SECTION`: one end-to-end packet carried over a relay's section.
    Section(Section<'a>),
    /// `SECTION_ACK`: cleartext ACK, FEEDBACK_ECHO and PADDING frames acknowledging SECTION packets.
    SectionAck(&'a [u8]),
}

impl<'a> Payload<'a> {
    /// The packet type this payload travels as.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Self::Initial(_) => PacketType::Initial,
            Self::Retry { .. } => PacketType::Retry,
            Self::Data(_) => PacketType::Data,
            Self::Ack(_) => PacketType::Ack,
            Self::Probe(_) => PacketType::Probe,
            Self::Close(_) => PacketType::Close,
            Self::Section(_) => PacketType::Section,
            Self::SectionAck(_) => PacketType::SectionAck,
        }
    }

    /// The ciphertext of a sealed payload, `None` for INITIAL and RETRY.
    pub fn sealed(&self) -> Option<&'a [u8]> {
        match *self {
            Self::Data(sealed) | Self::Ack(sealed) | Self::Probe(sealed) | Self::Close(sealed) => Some(sealed),
            Self::Initial(_) | Self::Retry { .. } | Self::Section(_) | Self::SectionAck(_) => None,
        }
    }

    /// Bytes the payload takes on the wire (`payload_length`).
    pub fn encoded_len(&self) -> usize {
        match self {
            Self::Initial(handshake) => handshake.encoded_len(),
            Self::Retry { token } => RETRY_PREFIX_LEN + token.len(),
            Self::Data(sealed) | Self::Ack(sealed) | Self::Probe(sealed) | Self::Close(sealed) => sealed.len(),
            Self::Section(section) => section.encoded_len(),
            Self::SectionAck(frames) => frames.len(),
        }
    }

    /// Rule 6 for every type.
    fn parse(packet_type: PacketType, payload: &'a [u8], datagram_len: usize) -> Result<Self, WireError> {
        let sealed = |payload: &'a [u8]| {
            if payload.len() < TAG_LEN {
                Err(WireError::ShortSealedPayload { len: payload.len() })
            } else {
                Ok(payload)
            }
        };
        Ok(match packet_type {
            PacketType::Initial => Self::Initial(Handshake::parse(payload, datagram_len)?),
            PacketType::Retry => Self::Retry { token: parse_retry(payload)? },
            PacketType::Data => Self::Data(sealed(payload)?),
            PacketType::Ack => Self::Ack(sealed(payload)?),
            PacketType::Probe => Self::Probe(sealed(payload)?),
            PacketType::Close => Self::Close(sealed(payload)?),
            PacketType::Section => Self::Section(Section::parse(payload)?),
            PacketType::SectionAck => Self::SectionAck(parse_section_ack(payload)?),
        })
    }
}

fn parse_retry(payload: &[u8]) -> Result<&[u8], WireError> {
    let mut reader = Reader::new(payload);
    let token_len =
        reader.u16().ok_or(WireError::HandshakeLength { needed: RETRY_PREFIX_LEN, payload: payload.len() })?;
    let token = reader.rest();
    if token.len() == usize::from(token_len) {
        Ok(token)
    } else {
        Err(WireError::HandshakeLength { needed: RETRY_PREFIX_LEN + usize::from(token_len), payload: payload.len() })
    }
}

/// A tng packet (one UDP payload). The packet type and `payload_length` follow from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Packet<'a> {
    /// Flags.
    pub flags: Flags,
    /// Channel the packet travels on.
    pub channel_id: u8,
    /// Connection id.
    pub connection_id: u64,
    /// Low 32 bits of the packet number.
    pub packet_number: u32,
    /// In-network feedback as received (or [`Feedback::NEUTRAL`] when sending).
    pub feedback: Feedback,
    /// Type-specific payload.
    pub payload: Payload<'a>,
}

impl<'a> Packet<'a> {
    /// Parses a datagram, applying the receiver rules of section 8 in order; borrows the payload from it.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, WireError> {
        let (header, payload) = FlowHeader::split(datagram)?;
        Ok(Self {
            flags: header.flags,
            channel_id: header.channel_id,
            connection_id: header.connection_id,
            packet_number: header.packet_number,
            feedback: header.feedback,
            payload: Payload::parse(header.packet_type, payload, datagram.len())?,
        })
    }

    /// The flow header this packet is sent with (its [`FlowHeader::associated_data`] is what the AEAD binds).
    /// `payload_length` saturates for a payload too large to encode.
    pub fn header(&self) -> FlowHeader {
        FlowHeader {
            packet_type: self.payload.packet_type(),
            flags: self.flags,
            channel_id: self.channel_id,
            connection_id: self.connection_id,
            packet_number: self.packet_number,
            payload_length: u16::try_from(self.payload.encoded_len()).unwrap_or(u16::MAX),
            feedback: self.feedback,
        }
    }

    /// Datagram length.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.payload.encoded_len()
    }

    /// Appends the datagram to `out`, or returns the error a receiver would reject it with (`too_large`,
    /// `initial_too_small` or `short_sealed_payload`) and appends nothing. `Packet::parse` of the bytes written
    /// returns this packet.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        self.check()?;
        out.reserve(self.encoded_len());
        out.extend_from_slice(&self.header().encode());
        // `check` bounded the datagram to MAX_PACKET bytes, so every length below fits its u16 field.
        match self.payload {
            Payload::Initial(handshake) => {
                out.push(handshake.stage.into());
                out.extend_from_slice(&(handshake.token.len() as u16).to_be_bytes());
                out.extend_from_slice(&(handshake.noise.len() as u16).to_be_bytes());
                out.extend_from_slice(handshake.token);
                out.extend_from_slice(handshake.noise);
                out.extend_from_slice(handshake.padding);
            }
            Payload::Retry { token } => {
                out.extend_from_slice(&(token.len() as u16).to_be_bytes());
                out.extend_from_slice(token);
            }
            Payload::Data(sealed) | Payload::Ack(sealed) | Payload::Probe(sealed) | Payload::Close(sealed) => {
                out.extend_from_slice(sealed);
            }
            Payload::Section(section) => section.encode(out),
            Payload::SectionAck(frames) => out.extend_from_slice(frames),
        }
        Ok(())
    }

    /// The receiver rules a packet built from valid parts can still break: its sizes.
    fn check(&self) -> Result<(), WireError> {
        let len = self.encoded_len();
        if len > MAX_PACKET {
            return Err(WireError::TooLarge { len });
        }
        match self.payload {
            Payload::Initial(handshake) if handshake.stage.is_client() && len < MIN_CLIENT_INITIAL => {
                Err(WireError::InitialTooSmall { len })
            }
            Payload::Section(section) if section.inner.len() < HEADER_LEN => {
                Err(WireError::BadSection { reason: "shorter than its prefix and an inner flow header" })
            }
            Payload::SectionAck([]) => Err(WireError::BadSection { reason: "empty SECTION_ACK" }),
            _ => match self.payload.sealed() {
                Some(sealed) if sealed.len() < TAG_LEN => Err(WireError::ShortSealedPayload { len: sealed.len() }),
                _ => Ok(()),
            },
        }
    }
}

/// Does in place what a switch does at dequeue: checks that `datagram` is a well-formed tng packet (every receiver
/// rule), then writes `max(queue_level, own)` and `min(rate_hint, own)` into its header. Returns the feedback now
/// in the header. Leaves `datagram` untouched on error; the AEAD does not cover these bytes, so the packet still opens.
pub fn rewrite_feedback(datagram: &mut [u8], own: Feedback) -> Result<Feedback, WireError> {
    let merged = Packet::parse(datagram)?.feedback.merge(own);
    let len = datagram.len();
    let field = datagram.get_mut(ASSOCIATED_DATA_LEN..HEADER_LEN).ok_or(WireError::TruncatedHeader { len })?;
    field.copy_from_slice(&merged.encode());
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(payload: Payload<'_>) -> Packet<'_> {
        Packet {
            flags: Flags::EMPTY,
            channel_id: 3,
            connection_id: 0xfeed_f00d,
            packet_number: 17,
            feedback: Feedback::NEUTRAL,
            payload,
        }
    }

    fn encoded(packet: &Packet<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        packet.encode(&mut out).expect("valid packet");
        out
    }

    /// A raw INITIAL datagram whose fixed fields can lie about the lengths.
    fn raw_initial(stage: u8, token_len: u16, noise_len: u16, body: &[u8], total: usize) -> Vec<u8> {
        let header = FlowHeader {
            packet_type: PacketType::Initial,
            flags: Flags::EMPTY,
            channel_id: 0,
            connection_id: 1,
            packet_number: 0,
            payload_length: (total - HEADER_LEN) as u16,
            feedback: Feedback::NEUTRAL,
        };
        let mut datagram = header.encode().to_vec();
        datagram.push(stage);
        datagram.extend_from_slice(&token_len.to_be_bytes());
        datagram.extend_from_slice(&noise_len.to_be_bytes());
        datagram.extend_from_slice(body);
        datagram.resize(total, 0);
        datagram
    }

    #[test]
    fn client_handshakes_are_padded_to_the_minimum_and_server_ones_are_not() {
        let noise = [7; 32];
        for stage in [Stage::ClientHello, Stage::ClientFinish] {
            let initial = packet(Payload::Initial(Handshake::new(stage, b"tok", &noise)));
            assert_eq!(initial.encoded_len(), MIN_CLIENT_INITIAL);
            let bytes = encoded(&initial);
            assert_eq!(bytes.len(), MIN_CLIENT_INITIAL);
            assert_eq!(Packet::parse(&bytes), Ok(initial));
        }
        let server = packet(Payload::Initial(Handshake::new(Stage::ServerHello, b"", &noise)));
        assert_eq!(encoded(&server).len(), HEADER_LEN + HANDSHAKE_PREFIX_LEN + noise.len());
        let long_noise = [1; 1300];
        let long = Handshake::new(Stage::ClientFinish, b"", &long_noise);
        assert_eq!(long.padding_len(), 0);
    }

    #[test]
    fn client_initial_size_boundary() {
        let at_minimum = raw_initial(1, 0, 32, &[9; 32], MIN_CLIENT_INITIAL);
        assert!(Packet::parse(&at_minimum).is_ok());
        let under = raw_initial(1, 0, 32, &[9; 32], MIN_CLIENT_INITIAL - 1);
        assert_eq!(Packet::parse(&under), Err(WireError::InitialTooSmall { len: MIN_CLIENT_INITIAL - 1 }));
        let server = raw_initial(2, 0, 0, &[], HEADER_LEN + HANDSHAKE_PREFIX_LEN);
        assert!(Packet::parse(&server).is_ok());
    }

    #[test]
    fn initial_rule_order_is_lengths_then_stage_then_size() {
        // Short, bad stage and overrunning all at once: the length problem is reported.
        let everything_wrong = raw_initial(9, 0, 500, &[], 100);
        assert_eq!(Packet::parse(&everything_wrong), Err(WireError::HandshakeLength { needed: 505, payload: 76 }));
        let bad_stage_and_short = raw_initial(0, 0, 10, &[0; 10], 100);
        assert_eq!(Packet::parse(&bad_stage_and_short), Err(WireError::BadStage { stage: 0 }));
        let token_overrun = raw_initial(1, 2000, 0, &[], MIN_CLIENT_INITIAL);
        assert_eq!(
            Packet::parse(&token_overrun),
            Err(WireError::HandshakeLength { needed: 2005, payload: MIN_CLIENT_INITIAL - HEADER_LEN })
        );
        let mut prefix_only = raw_initial(2, 0, 0, &[], HEADER_LEN + HANDSHAKE_PREFIX_LEN);
        prefix_only.truncate(HEADER_LEN + 4);
        prefix_only[17] = 4;
        assert_eq!(Packet::parse(&prefix_only), Err(WireError::HandshakeLength { needed: 5, payload: 4 }));
    }

    #[test]
    fn non_zero_padding_is_kept_and_re_encoded() {
        let mut datagram = raw_initial(1, 0, 4, &[1, 2, 3, 4], MIN_CLIENT_INITIAL);
        datagram[MIN_CLIENT_INITIAL - 1] = 0xee;
        let parsed = Packet::parse(&datagram).expect("valid INITIAL");
        let Payload::Initial(handshake) = parsed.payload else { panic!("not an INITIAL: {parsed:?}") };
        assert_eq!(handshake.noise, [1, 2, 3, 4]);
        assert_eq!(handshake.padding_len(), MIN_CLIENT_INITIAL - HEADER_LEN - HANDSHAKE_PREFIX_LEN - 4);
        assert_eq!(handshake.padding.last(), Some(&0xee));
        assert_eq!(encoded(&parsed), datagram);
    }

    #[test]
    fn retry_payload_must_be_exactly_the_token() {
        let retry = packet(Payload::Retry { token: b"opaque" });
        let bytes = encoded(&retry);
        assert_eq!(bytes[HEADER_LEN..], [0, 6, b'o', b'p', b'a', b'q', b'u', b'e']);
        assert_eq!(Packet::parse(&bytes), Ok(retry));
        let mut trailing = bytes.clone();
        trailing.push(0);
        trailing[17] += 1;
        assert_eq!(Packet::parse(&trailing), Err(WireError::HandshakeLength { needed: 8, payload: 9 }));
        let mut one_byte = bytes[..HEADER_LEN + 1].to_vec();
        one_byte[16..18].copy_from_slice(&1u16.to_be_bytes());
        assert_eq!(Packet::parse(&one_byte), Err(WireError::HandshakeLength { needed: 2, payload: 1 }));
    }

    #[test]
    fn sealed_payload_boundary_is_the_tag() {
        let tag = [0x5a; TAG_LEN];
        for make in [Payload::Data, Payload::Ack, Payload::Probe, Payload::Close] {
            let sealed = packet(make(&tag));
            let bytes = encoded(&sealed);
            assert_eq!(Packet::parse(&bytes), Ok(sealed));
            assert_eq!(sealed.payload.sealed(), Some(&tag[..]));
            let short = packet(make(&tag[1..]));
            assert_eq!(short.encode(&mut Vec::new()), Err(WireError::ShortSealedPayload { len: TAG_LEN - 1 }));
        }
    }

    #[test]
    fn section_carries_the_inner_packet_byte_for_byte_and_section_acks_their_frames() {
        let inner = data_packet(Feedback { queue_level: 9, rate_hint: 1_000 });
        let next_hop = "198.51.100.4:4477".parse().expect("address");
        let section = packet(Payload::Section(Section::new(Some(next_hop), &inner)));
        let bytes = encoded(&section);
        assert_eq!(bytes.len(), HEADER_LEN + crate::limits::SECTION_PREFIX_LEN + inner.len());
        let parsed = Packet::parse(&bytes).expect("valid SECTION");
        assert_eq!(parsed, section);
        let Payload::Section(carried) = parsed.payload else { panic!("not a SECTION: {parsed:?}") };
        assert_eq!(carried.inner, inner);
        assert_eq!(carried.next_hop(), Some(next_hop));
        let ack = packet(Payload::SectionAck(&[0x0d]));
        assert_eq!(Packet::parse(&encoded(&ack)), Ok(ack));
        let short = packet(Payload::Section(Section::new(None, &inner[..HEADER_LEN - 1])));
        assert_eq!(short.encode(&mut Vec::new()).map_err(|e| e.as_str()), Err("bad_section"));
        let empty = packet(Payload::SectionAck(&[]));
        assert_eq!(empty.encode(&mut Vec::new()).map_err(|e| e.as_str()), Err("bad_section"));
    }

    #[test]
    fn encode_refuses_what_a_receiver_would_drop_and_writes_nothing() {
        let big = [0; MAX_PACKET];
        let mut out = vec![0xab];
        let too_large = packet(Payload::Data(&big[HEADER_LEN - 1..]));
        assert_eq!(too_large.encode(&mut out), Err(WireError::TooLarge { len: MAX_PACKET + 1 }));
        let unpadded = Handshake { stage: Stage::ClientHello, token: b"", noise: &big[..32], padding: b"" };
        assert_eq!(
            packet(Payload::Initial(unpadded)).encode(&mut out),
            Err(WireError::InitialTooSmall { len: HEADER_LEN + HANDSHAKE_PREFIX_LEN + 32 })
        );
        assert_eq!(out, [0xab]);
        let largest = packet(Payload::Data(&big[HEADER_LEN..]));
        largest.encode(&mut out).expect("exactly MAX_PACKET bytes");
        assert_eq!(out.len(), 1 + MAX_PACKET);
    }

    #[test]
    fn header_reflects_the_payload() {
        let sealed = [0; 40];
        let ack = packet(Payload::Ack(&sealed));
        let header = ack.header();
        assert_eq!(header.packet_type, PacketType::Ack);
        assert_eq!(header.payload_length, 40);
        assert_eq!(&encoded(&ack)[..HEADER_LEN], &header.encode());
    }

    fn data_packet(feedback: Feedback) -> Vec<u8> {
        let sealed = [0xaa; TAG_LEN];
        encoded(&Packet { feedback, ..packet(Payload::Data(&sealed)) })
    }

    #[test]
    fn switch_keeps_the_larger_queue_and_the_smaller_rate() {
        let mut datagram = data_packet(Feedback { queue_level: 100, rate_hint: 10_000 });
        let own = Feedback { queue_level: 50, rate_hint: 20_000 };
        assert_eq!(rewrite_feedback(&mut datagram, own), Ok(Feedback { queue_level: 100, rate_hint: 10_000 }));
        let own = Feedback { queue_level: 300, rate_hint: 5_000 };
        assert_eq!(rewrite_feedback(&mut datagram, own), Ok(Feedback { queue_level: 300, rate_hint: 5_000 }));
        assert_eq!(&datagram[18..24], &[0x01, 0x2c, 0x00, 0x00, 0x13, 0x88]);
        assert_eq!(Packet::parse(&datagram).map(|p| p.feedback), Ok(Feedback { queue_level: 300, rate_hint: 5_000 }));
    }

    #[test]
    fn rewrite_changes_only_the_feedback_bytes() {
        let original = data_packet(Feedback::NEUTRAL);
        let mut datagram = original.clone();
        rewrite_feedback(&mut datagram, Feedback { queue_level: 7, rate_hint: 0 }).expect("well-formed packet");
        assert_eq!(datagram[..ASSOCIATED_DATA_LEN], original[..ASSOCIATED_DATA_LEN]);
        assert_eq!(datagram[HEADER_LEN..], original[HEADER_LEN..]);
        assert_ne!(datagram[ASSOCIATED_DATA_LEN..HEADER_LEN], original[ASSOCIATED_DATA_LEN..HEADER_LEN]);
    }

    #[test]
    fn rewrite_with_neutral_or_reserved_values() {
        let observed = Feedback { queue_level: 1234, rate_hint: 0 };
        let mut datagram = data_packet(observed);
        assert_eq!(rewrite_feedback(&mut datagram, Feedback::NEUTRAL), Ok(observed));
        let reserved = Feedback { queue_level: 0xFFFF, rate_hint: u32::MAX };
        let mut datagram = data_packet(Feedback::NEUTRAL);
        assert_eq!(rewrite_feedback(&mut datagram, reserved).map(|f| f.queue_level), Ok(Feedback::QUEUE_LEVEL_MAX));
    }

    #[test]
    fn rewrite_leaves_malformed_packets_untouched() {
        let mut datagram = data_packet(Feedback::NEUTRAL);
        datagram[0] = 2;
        let before = datagram.clone();
        let own = Feedback { queue_level: 9, rate_hint: 9 };
        assert_eq!(rewrite_feedback(&mut datagram, own), Err(WireError::BadVersion { version: 2 }));
        assert_eq!(datagram, before);
        let mut short = vec![1, 3, 0];
        assert_eq!(rewrite_feedback(&mut short, own), Err(WireError::TruncatedHeader { len: 3 }));
    }
}
