"""Scapy layers for the tng flow header and its payloads, and the receiver rules (docs/wire-format.md)."""

from __future__ import annotations

import struct
from enum import IntEnum, StrEnum

from scapy.fields import (
    ByteEnumField,
    ByteField,
    FieldLenField,
    FlagsField,
    IntField,
    IP6Field,
    ShortField,
    StrField,
    StrLenField,
    XLongField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_layers

TNG_UDP_PORT = 4477
VERSION = 1
HEADER_LEN = 24
TAG_LEN = 16
MAX_PACKET = 1472
MIN_CLIENT_INITIAL = 1200
INITIAL_PREFIX_LEN = 5
RETRY_PREFIX_LEN = 2
QUEUE_LEVEL_MAX = 65534  # 0xFFFF is reserved and read as this
QUEUE_NEUTRAL = 0
RATE_NEUTRAL = 0xFFFFFFFF
RESERVED_FLAGS = 0xF8
SECTION_VERSION = 1
SECTION_PREFIX_LEN = 19  # section_version, next_hop_port, next_hop_address

_HEADER = struct.Struct(">BBBBQIHHI")
_INITIAL_PREFIX = struct.Struct(">BHH")
_RETRY_PREFIX = struct.Struct(">H")
_SECTION_PREFIX = struct.Struct(">BH16s")


class PacketType(IntEnum):
    """Wire-format section 3."""

    INITIAL = 0x01
    RETRY = 0x02
    DATA = 0x03
    ACK = 0x04
    PROBE = 0x05
    CLOSE = 0x06
    SECTION = 0x07
    SECTION_ACK = 0x08


PACKET_TYPES = frozenset(PacketType)
SEALED_TYPES = frozenset({PacketType.DATA, PacketType.ACK, PacketType.PROBE, PacketType.CLOSE})
SERVER_STAGE = 2
STAGES = frozenset({1, SERVER_STAGE, 3})


class WireError(StrEnum):
    """Receiver-rule violations of wire-format section 8; the values are the vectors' `error` names."""

    TOO_LARGE = "too_large"
    TRUNCATED_HEADER = "truncated_header"
    BAD_VERSION = "bad_version"
    UNKNOWN_TYPE = "unknown_type"
    RESERVED_FLAGS = "reserved_flags"
    LENGTH_MISMATCH = "length_mismatch"
    HANDSHAKE_LENGTH = "handshake_length"
    BAD_STAGE = "bad_stage"
    INITIAL_TOO_SMALL = "initial_too_small"
    SHORT_SEALED_PAYLOAD = "short_sealed_payload"
    BAD_SECTION = "bad_section"


class TngFlow(Packet):
    """The 24-byte cleartext flow header; payload_length is computed from the payload when left as None."""

    name = "TngFlow"
    fields_desc = [
        ByteField("version", VERSION),
        ByteEnumField("packet_type", PacketType.DATA, {t.value: t.name for t in PacketType}),
        FlagsField(
            "flags",
            0,
            8,
            [
                "ECN_CAPABLE",
                "FEEDBACK_ECHO",
                "KEY_PHASE",
                "RESERVED3",
                "RESERVED4",
                "RESERVED5",
                "RESERVED6",
                "RESERVED7",
            ],
        ),
        ByteField("channel_id", 0),
        XLongField("connection_id", 0),
        IntField("packet_number", 0),
        ShortField("payload_length", None),
        ShortField("queue_level", QUEUE_NEUTRAL),
        IntField("rate_hint", RATE_NEUTRAL),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.payload_length is None:
            pkt = pkt[:16] + struct.pack(">H", len(pay)) + pkt[18:]
        return pkt + pay


class TngInitial(Packet):
    """INITIAL payload: stage, token and Noise message lengths, token, Noise message, zero padding."""

    name = "TngInitial"
    fields_desc = [
        ByteField("stage", 1),
        FieldLenField("token_length", None, length_of="token", fmt=">H"),
        FieldLenField("noise_length", None, length_of="noise", fmt=">H"),
        StrLenField("token", b"", length_from=lambda pkt: pkt.token_length),
        StrLenField("noise", b"", length_from=lambda pkt: pkt.noise_length),
        StrField("padding", b""),
    ]


class TngRetry(Packet):
    """RETRY payload: token length and the opaque token."""

    name = "TngRetry"
    fields_desc = [
        FieldLenField("token_length", None, length_of="token", fmt=">H"),
        StrLenField("token", b"", length_from=lambda pkt: pkt.token_length),
    ]


class TngSealed(Packet):
    """Payload of DATA, ACK, PROBE and CLOSE: AEAD-sealed frames, opaque on the wire."""

    name = "TngSealed"
    fields_desc = [StrField("sealed", b"")]


class TngSection(Packet):
    """SECTION payload: section version, next hop (IPv4 as ::ffff:a.b.c.d, :: and port 0 for none), then the
    end-to-end packet unchanged (dissected as a TngFlow of its own)."""

    name = "TngSection"
    fields_desc = [
        ByteField("section_version", SECTION_VERSION),
        ShortField("next_hop_port", 0),
        IP6Field("next_hop_address", "::"),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return TngFlow


class TngSectionAck(Packet):
    """SECTION_ACK payload: cleartext ACK, FEEDBACK_ECHO and PADDING frames (wire-format section 7 encodings)."""

    name = "TngSectionAck"
    fields_desc = [StrField("frames", b"")]


bind_layers(UDP, TngFlow, dport=TNG_UDP_PORT)
bind_bottom_up(UDP, TngFlow, sport=TNG_UDP_PORT)
bind_layers(TngFlow, TngInitial, packet_type=PacketType.INITIAL)
bind_layers(TngFlow, TngRetry, packet_type=PacketType.RETRY)
bind_bottom_up(TngFlow, TngSealed, packet_type=PacketType.ACK)
bind_bottom_up(TngFlow, TngSealed, packet_type=PacketType.PROBE)
bind_bottom_up(TngFlow, TngSealed, packet_type=PacketType.CLOSE)
bind_layers(TngFlow, TngSealed, packet_type=PacketType.DATA)  # TngFlow()/TngSealed() builds DATA by default
bind_layers(TngFlow, TngSection, packet_type=PacketType.SECTION)
bind_layers(TngFlow, TngSectionAck, packet_type=PacketType.SECTION_ACK)


def validate(raw: bytes) -> WireError | None:
    """Apply the receiver rules of wire-format section 8, in order, to one UDP payload; None if it is valid."""
    if len(raw) > MAX_PACKET:
        return WireError.TOO_LARGE
    if len(raw) < HEADER_LEN:
        return WireError.TRUNCATED_HEADER
    version, packet_type, flags, _channel, _connection, _number, payload_length, _queue, _rate = _HEADER.unpack_from(
        raw
    )
    if version != VERSION:
        return WireError.BAD_VERSION
    if packet_type not in PACKET_TYPES:
        return WireError.UNKNOWN_TYPE
    if flags & RESERVED_FLAGS:
        return WireError.RESERVED_FLAGS
    payload = raw[HEADER_LEN:]
    if payload_length != len(payload):
        return WireError.LENGTH_MISMATCH
    if packet_type == PacketType.INITIAL:
        return _check_initial(payload)
    if packet_type == PacketType.RETRY:
        return _check_retry(payload)
    if packet_type == PacketType.SECTION:
        return _check_section(payload)
    if packet_type == PacketType.SECTION_ACK:
        return WireError.BAD_SECTION if not payload else None
    return WireError.SHORT_SEALED_PAYLOAD if len(payload) < TAG_LEN else None


def _check_initial(payload: bytes) -> WireError | None:
    if len(payload) < INITIAL_PREFIX_LEN:
        return WireError.HANDSHAKE_LENGTH
    stage, token_length, noise_length = _INITIAL_PREFIX.unpack_from(payload)
    if INITIAL_PREFIX_LEN + token_length + noise_length > len(payload):
        return WireError.HANDSHAKE_LENGTH
    if stage not in STAGES:
        return WireError.BAD_STAGE
    if stage != SERVER_STAGE and HEADER_LEN + len(payload) < MIN_CLIENT_INITIAL:
        return WireError.INITIAL_TOO_SMALL
    return None


def _check_retry(payload: bytes) -> WireError | None:
    if len(payload) < RETRY_PREFIX_LEN:
        return WireError.HANDSHAKE_LENGTH
    (token_length,) = _RETRY_PREFIX.unpack_from(payload)
    return WireError.HANDSHAKE_LENGTH if len(payload) != RETRY_PREFIX_LEN + token_length else None


def _check_section(payload: bytes) -> WireError | None:
    if len(payload) < SECTION_PREFIX_LEN + HEADER_LEN:
        return WireError.BAD_SECTION
    (section_version, _port, _address) = _SECTION_PREFIX.unpack_from(payload)
    return WireError.BAD_SECTION if section_version != SECTION_VERSION else None


def set_feedback(pkt: Packet, queue_level: int, rate_hint: int) -> Packet:
    """A copy of `pkt` after a switch wrote its feedback into the tng header, as wire-format section 2 says.

    queue_level becomes the larger of the two (0xFFFF reads as 65534, the largest value written), rate_hint the
    smaller. Like a switch, this keeps the UDP checksum valid: it is recomputed unless the sender disabled it (0).
    """
    if not 0 <= queue_level <= 0xFFFF:
        raise ValueError(f"queue_level {queue_level} does not fit 16 bits")
    if not 0 <= rate_hint <= 0xFFFFFFFF:
        raise ValueError(f"rate_hint {rate_hint} does not fit 32 bits")
    out = pkt.copy()
    flow = out[TngFlow]
    flow.queue_level = max(min(flow.queue_level, QUEUE_LEVEL_MAX), min(queue_level, QUEUE_LEVEL_MAX))
    flow.rate_hint = min(flow.rate_hint, rate_hint)
    if UDP in out and out[UDP].chksum != 0:
        out[UDP].chksum = None
    return out
