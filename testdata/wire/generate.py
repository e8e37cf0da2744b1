#!/usr/bin/env python3
"""Write the tng wire-format test vectors from docs/wire-format.md.

Built with nothing but `struct`, independently of the codecs the vectors test (Rust, Scapy, P4).
Run from anywhere: `python3 testdata/wire/generate.py`; it rewrites every *.json beside it (packets) and in
frames/ (frames, which travel sealed: only the Rust codec parses them).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
FRAMES = HERE / "frames"

VERSION = 1
INITIAL, RETRY, DATA, ACK, PROBE, CLOSE, SECTION, SECTION_ACK = 1, 2, 3, 4, 5, 6, 7, 8
ECN_CAPABLE, FEEDBACK_ECHO, KEY_PHASE = 0x01, 0x02, 0x04
HEADER_LEN = 24
TAG_LEN = 16
MAX_PACKET = 1472
MIN_CLIENT_INITIAL = 1200
SECTION_VERSION = 1
SECTION_PREFIX_LEN = 19
QUEUE_NEUTRAL = 0
RATE_NEUTRAL = 0xFFFFFFFF


def header(
    packet_type: int,
    payload_len: int,
    *,
    version: int = VERSION,
    flags: int = 0,
    channel_id: int = 0,
    connection_id: int = 0x0123456789ABCDEF,
    packet_number: int = 0,
    queue_level: int = QUEUE_NEUTRAL,
    rate_hint: int = RATE_NEUTRAL,
) -> bytes:
    return struct.pack(
        ">BBBBQIHHI",
        version,
        packet_type,
        flags,
        channel_id,
        connection_id,
        packet_number,
        payload_len,
        queue_level,
        rate_hint,
    )


def header_fields(raw: bytes) -> dict:
    names = (
        "version",
        "packet_type",
        "flags",
        "channel_id",
        "connection_id",
        "packet_number",
        "payload_length",
        "queue_level",
        "rate_hint",
    )
    return dict(zip(names, struct.unpack(">BBBBQIHHI", raw[:HEADER_LEN]), strict=True))


def pattern(n: int, seed: int) -> bytes:
    """Deterministic filler that looks like ciphertext but is easy to recognise in a hex dump."""
    return bytes((seed + 31 * i) & 0xFF for i in range(n))


def sealed(packet_type: int, body: bytes, **kw) -> tuple[bytes, dict]:
    raw = header(packet_type, len(body), **kw) + body
    return raw, {**header_fields(raw), "sealed": body.hex()}


def initial(stage: int, token: bytes, noise: bytes, pad_to: int | None, **kw) -> tuple[bytes, dict]:
    body = struct.pack(">BHH", stage, len(token), len(noise)) + token + noise
    padding = 0 if pad_to is None else max(0, pad_to - HEADER_LEN - len(body))
    body += bytes(padding)
    raw = header(INITIAL, len(body), **kw) + body
    fields = {
        **header_fields(raw),
        "stage": stage,
        "token": token.hex(),
        "noise": noise.hex(),
        "padding_len": padding,
    }
    return raw, fields


def retry(token: bytes, **kw) -> tuple[bytes, dict]:
    body = struct.pack(">H", len(token)) + token
    raw = header(RETRY, len(body), **kw) + body
    return raw, {**header_fields(raw), "token": token.hex()}


def section(inner: bytes, next_hop: tuple[bytes, int] | None, *, section_version: int = SECTION_VERSION, **kw):
    """SECTION: version, next-hop port and 16-byte address (IPv4-mapped for IPv4, all zero for none), inner packet."""
    address, port = next_hop if next_hop is not None else (bytes(16), 0)
    body = struct.pack(">BH", section_version, port) + address + inner
    raw = header(SECTION, len(body), **kw) + body
    fields = {
        **header_fields(raw),
        "section_version": section_version,
        "next_hop_port": port,
        "next_hop_address": address.hex(),
        "inner": inner.hex(),
    }
    return raw, fields


def section_ack(frames: bytes, **kw) -> tuple[bytes, dict]:
    raw = header(SECTION_ACK, len(frames), **kw) + frames
    return raw, {**header_fields(raw), "frames": frames.hex()}


IPV4_MAPPED_192_0_2_7 = bytes(10) + b"\xff\xff" + bytes([192, 0, 2, 7])
IPV6_2001_DB8_1 = bytes.fromhex("20010db8000000000000000000000001")
_inner_data = header(DATA, 48, flags=ECN_CAPABLE, packet_number=12) + pattern(48, 79)
# ACK frame: largest 41, delay 25 (x 1 us), no extra range, first range 9 (32..41), ECN 0 0 0; FEEDBACK_ECHO 100 units.
_section_ack_frames = (
    bytes([0x01, 0x07, 0x29, 0x19, 0x00, 0x09, 0x00, 0x00, 0x00])
    + bytes([0x02, 0x06])
    + struct.pack(">HI", 100, 0xFFFFFFFF)
)

VALID: list[tuple[str, str, tuple[bytes, dict]]] = [
    (
        "initial-client-stage1",
        "Client's first INITIAL: Noise XX message 1 (32-byte ephemeral key), no token, padded to 1200 bytes.",
        initial(1, b"", pattern(32, 1), MIN_CLIENT_INITIAL, connection_id=0xA1A2A3A4A5A6A7A8),
    ),
    (
        "initial-client-stage1-with-token",
        "Client's INITIAL repeated after a RETRY: carries the 40-byte retry token, padded to 1200 bytes.",
        initial(1, pattern(40, 7), pattern(32, 1), MIN_CLIENT_INITIAL, connection_id=0xA1A2A3A4A5A6A7A8),
    ),
    (
        "initial-server-stage2",
        "Server's INITIAL (Noise XX message 2, 136 bytes: e, encrypted s, payload with the server-chosen "
        "connection id); not padded, header carries the client's provisional id.",
        initial(2, b"", pattern(136, 3), None, connection_id=0xA1A2A3A4A5A6A7A8),
    ),
    (
        "initial-client-stage3",
        "Client's third handshake message (encrypted static key + first frames), padded to 1200 bytes, "
        "server-chosen connection id.",
        initial(3, b"", pattern(96, 5), MIN_CLIENT_INITIAL, packet_number=1),
    ),
    (
        "initial-maximum-size",
        "Client stage-1 INITIAL padded to the 1472-byte maximum.",
        initial(1, b"", pattern(32, 9), MAX_PACKET),
    ),
    (
        "retry",
        "RETRY with a 40-byte opaque token, to the client's provisional id.",
        retry(pattern(40, 7), connection_id=0xA1A2A3A4A5A6A7A8),
    ),
    (
        "retry-empty-token",
        "RETRY with an empty token: well-formed on the wire (a client treats it as a failed retry).",
        retry(b""),
    ),
    (
        "data-minimal",
        "DATA with an empty plaintext: the sealed payload is just the 16-byte tag.",
        sealed(DATA, pattern(TAG_LEN, 11), packet_number=7),
    ),
    (
        "data-typical",
        "DATA of 1200 sealed bytes on channel 1, ECN-capable, feedback-echo present.",
        sealed(DATA, pattern(1200, 13), channel_id=1, flags=ECN_CAPABLE | FEEDBACK_ECHO, packet_number=1000),
    ),
    (
        "data-maximum-size",
        "DATA at the 1472-byte maximum packet size.",
        sealed(DATA, pattern(MAX_PACKET - HEADER_LEN, 17), packet_number=42),
    ),
    (
        "data-largest-packet-number",
        "DATA whose truncated packet number is 0xFFFFFFFF, the largest on the wire.",
        sealed(DATA, pattern(64, 19), packet_number=0xFFFFFFFF),
    ),
    (
        "data-key-phase",
        "DATA sealed with the updated key (KEY_PHASE set) on channel 255, the largest channel id.",
        sealed(DATA, pattern(48, 23), flags=KEY_PHASE, channel_id=255, packet_number=5),
    ),
    (
        "data-feedback-extreme",
        "DATA after switches wrote extreme feedback: queue_level 0xFFFE (2.097 s), rate_hint 0 (pause).",
        sealed(DATA, pattern(32, 29), queue_level=0xFFFE, rate_hint=0),
    ),
    (
        "data-feedback-typical",
        "DATA with feedback written by a switch: queue 100 units (3.2 ms), rate hint 10000 kbit/s.",
        sealed(DATA, pattern(32, 31), queue_level=100, rate_hint=10_000, flags=ECN_CAPABLE),
    ),
    (
        "data-connection-id-extremes",
        "DATA with connection id 0xFFFFFFFFFFFFFFFF (all ones) and packet number 0.",
        sealed(DATA, pattern(20, 37), connection_id=0xFFFFFFFFFFFFFFFF),
    ),
    (
        "ack",
        "ACK packet: sealed ACK + FEEDBACK_ECHO frames (opaque on the wire).",
        sealed(ACK, pattern(40, 41), flags=FEEDBACK_ECHO, packet_number=9),
    ),
    (
        "ack-minimal",
        "ACK packet with the smallest sealed payload (tag only).",
        sealed(ACK, pattern(TAG_LEN, 43), connection_id=0),
    ),
    (
        "probe",
        "PROBE carrying a sealed PATH_CHALLENGE on channel 2.",
        sealed(PROBE, pattern(TAG_LEN + 10, 47), channel_id=2, packet_number=0),
    ),
    (
        "close",
        "CLOSE carrying a sealed CLOSE frame with a reason.",
        sealed(CLOSE, pattern(TAG_LEN + 20, 53), packet_number=77),
    ),
    (
        "section-ipv4-next-hop",
        "SECTION to a relay: an end-to-end DATA packet (sealed, untouched) for the next hop 192.0.2.7:4477, "
        "section packet number 5, feedback written by a switch on the section.",
        section(
            _inner_data,
            (IPV4_MAPPED_192_0_2_7, 4477),
            flags=ECN_CAPABLE,
            packet_number=5,
            queue_level=40,
            rate_hint=20_000,
        ),
    ),
    (
        "section-ipv6-next-hop",
        "SECTION carrying a client's stage-1 INITIAL (provisional id in both headers) to [2001:db8::1]:4477.",
        section(
            initial(1, b"", pattern(32, 1), MIN_CLIENT_INITIAL, connection_id=0xA1A2A3A4A5A6A7A8)[0],
            (IPV6_2001_DB8_1, 4477),
            connection_id=0xA1A2A3A4A5A6A7A8,
        ),
    ),
    (
        "section-learned-next-hop",
        "SECTION with no next hop (all-zero address and port): the relay's learned peer, or the IP destination; "
        "the smallest inner packet, a bare flow header.",
        section(header(ACK, 0), None, packet_number=0xFFFFFFFF),
    ),
    (
        "section-maximum-size",
        "SECTION at the 1472-byte maximum: its inner packet is 1429 bytes, the most an endpoint behind a relay sends.",
        section(
            header(DATA, MAX_PACKET - 2 * HEADER_LEN - SECTION_PREFIX_LEN)
            + pattern(MAX_PACKET - 2 * HEADER_LEN - SECTION_PREFIX_LEN, 89),
            None,
        ),
    ),
    (
        "section-ack",
        "SECTION_ACK: cleartext ACK of section packets 32-41 and a FEEDBACK_ECHO with the relay's queue (100 units).",
        section_ack(_section_ack_frames, flags=FEEDBACK_ECHO, packet_number=3),
    ),
]


def corrupt(base: bytes, offset: int, value: bytes) -> bytes:
    return base[:offset] + value + base[offset + len(value) :]


_data = header(DATA, 32, packet_number=3) + pattern(32, 59)
_retry = retry(pattern(8, 61))[0]

INVALID: list[tuple[str, str, bytes, str]] = [
    ("malformed-empty", "Zero-byte datagram.", b"", "truncated_header"),
    ("malformed-truncated-header", "Only 23 of the 24 header bytes.", _data[:23], "truncated_header"),
    ("malformed-bad-version", "Version 2.", corrupt(_data, 0, b"\x02"), "bad_version"),
    ("malformed-version-zero", "Version 0.", corrupt(_data, 0, b"\x00"), "bad_version"),
    (
        "malformed-section-short",
        "SECTION whose 42-byte payload cannot hold the 19-byte prefix and a 24-byte inner flow header.",
        section(header(ACK, 0)[:23], None)[0],
        "bad_section",
    ),
    (
        "malformed-section-version",
        "SECTION of section version 2.",
        section(header(ACK, 0), None, section_version=2)[0],
        "bad_section",
    ),
    ("malformed-section-ack-empty", "SECTION_ACK with no frames.", section_ack(b"")[0], "bad_section"),
    ("malformed-unknown-type", "Packet type 0x09.", corrupt(_data, 1, b"\x09"), "unknown_type"),
    ("malformed-type-zero", "Packet type 0x00.", corrupt(_data, 1, b"\x00"), "unknown_type"),
    ("malformed-reserved-flags", "Reserved flag bit 7 set.", corrupt(_data, 2, b"\x80"), "reserved_flags"),
    (
        "malformed-length-too-long",
        "payload_length says 33, 32 bytes follow.",
        corrupt(_data, 16, struct.pack(">H", 33)),
        "length_mismatch",
    ),
    (
        "malformed-length-too-short",
        "payload_length says 31, 32 bytes follow (trailing byte).",
        corrupt(_data, 16, struct.pack(">H", 31)),
        "length_mismatch",
    ),
    (
        "malformed-too-large",
        "1473-byte DATA, one over the maximum.",
        header(DATA, MAX_PACKET + 1 - HEADER_LEN) + pattern(MAX_PACKET + 1 - HEADER_LEN, 67),
        "too_large",
    ),
    (
        "malformed-short-sealed",
        "DATA with a 15-byte sealed payload, shorter than the AEAD tag.",
        header(DATA, 15) + pattern(15, 71),
        "short_sealed_payload",
    ),
    (
        "malformed-initial-too-small",
        "Client stage-1 INITIAL of 100 bytes (not padded to 1200).",
        initial(1, b"", pattern(32, 1), 100)[0],
        "initial_too_small",
    ),
    (
        "malformed-initial-bad-stage",
        "INITIAL with stage 4.",
        initial(4, b"", pattern(32, 1), MIN_CLIENT_INITIAL)[0],
        "bad_stage",
    ),
    (
        "malformed-initial-noise-overrun",
        "INITIAL stage 2 whose noise_length (200) runs past the 141-byte payload.",
        corrupt(initial(2, b"", pattern(136, 3), None)[0], HEADER_LEN + 3, struct.pack(">H", 200)),
        "handshake_length",
    ),
    (
        "malformed-initial-no-prefix",
        "INITIAL whose payload (3 bytes) is shorter than its 5 fixed bytes.",
        header(INITIAL, 3) + b"\x02\x00\x00",
        "handshake_length",
    ),
    (
        "malformed-retry-token-overrun",
        "RETRY whose token_length (9) exceeds the 8 token bytes present.",
        corrupt(_retry, HEADER_LEN, struct.pack(">H", 9)),
        "handshake_length",
    ),
]


def varint(value: int) -> bytes:
    """QUIC's variable-length integer, shortest encoding (RFC 9000 section 16)."""
    for size, prefix in ((1, 0x00), (2, 0x40), (4, 0x80), (8, 0xC0)):
        if value < 1 << (8 * size - 2):
            return (value | prefix << (8 * size - 8)).to_bytes(size, "big")
    raise ValueError(f"{value} exceeds 2^62 - 1")


DELIVERY_FORECAST = 0x12
VARINT_MAX = (1 << 62) - 1


def frame(frame_type: int, value: bytes) -> bytes:
    return varint(frame_type) + varint(len(value)) + value


def delivery_forecast(tick: int, received: int, cumulative: list[int]) -> tuple[bytes, dict]:
    value = varint(tick) + varint(received) + varint(len(cumulative)) + b"".join(map(varint, cumulative))
    fields = {"frame_type": DELIVERY_FORECAST, "tick": tick, "received": received, "cumulative": cumulative}
    return frame(DELIVERY_FORECAST, value), fields


VALID_FRAMES: list[tuple[str, str, tuple[bytes, dict]]] = [
    (
        "delivery-forecast-typical",
        "DELIVERY_FORECAST after 5 s at about 350 packets/s: 8 ticks of cautious cumulative deliveries.",
        delivery_forecast(250, 1747, [4, 9, 15, 21, 27, 33, 40, 46]),
    ),
    (
        "delivery-forecast-outage",
        "DELIVERY_FORECAST during an outage: the link is forecast to deliver nothing.",
        delivery_forecast(70_000, 1_000_000, [0] * 8),
    ),
    (
        "delivery-forecast-extremes",
        "DELIVERY_FORECAST with 8-byte varints: largest tick and count, one tick repeated at the maximum.",
        delivery_forecast(VARINT_MAX, VARINT_MAX, [0, VARINT_MAX, VARINT_MAX]),
    ),
]

INVALID_FRAMES: list[tuple[str, str, bytes, str]] = [
    (
        "delivery-forecast-no-tick",
        "DELIVERY_FORECAST whose tick count is zero.",
        frame(DELIVERY_FORECAST, varint(1) + varint(0) + varint(0)),
        "malformed_frame",
    ),
    (
        "delivery-forecast-decreasing",
        "DELIVERY_FORECAST whose cumulative deliveries fall from 5 to 4.",
        frame(DELIVERY_FORECAST, varint(1) + varint(0) + varint(2) + varint(5) + varint(4)),
        "malformed_frame",
    ),
    (
        "delivery-forecast-short-count",
        "DELIVERY_FORECAST announcing 3 ticks and carrying 2.",
        frame(DELIVERY_FORECAST, varint(1) + varint(0) + varint(3) + varint(5) + varint(6)),
        "malformed_frame",
    ),
    (
        "delivery-forecast-left-over",
        "DELIVERY_FORECAST with a byte after its last tick.",
        frame(DELIVERY_FORECAST, varint(1) + varint(0) + varint(1) + varint(5) + b"\x00"),
        "malformed_frame",
    ),
    (
        "delivery-forecast-truncated",
        "DELIVERY_FORECAST whose length runs 2 bytes past the plaintext.",
        varint(DELIVERY_FORECAST) + varint(6) + varint(1) + varint(0) + varint(1) + varint(5),
        "frame_truncated",
    ),
    ("frame-unknown-core-type", "Core frame type 0x13, not defined.", frame(0x13, b""), "unknown_frame"),
]


def main() -> None:
    for old in [*HERE.glob("*.json"), *FRAMES.glob("*.json")]:
        old.unlink()
    FRAMES.mkdir(exist_ok=True)
    for name, description, (raw, fields) in VALID:
        assert len(raw) <= MAX_PACKET, name
        write(
            name,
            {
                "name": name,
                "description": description,
                "hex": raw.hex(),
                "valid": True,
                "fields": fields,
                "error": None,
            },
        )
    for name, description, raw, error in INVALID:
        write(
            name,
            {"name": name, "description": description, "hex": raw.hex(), "valid": False, "fields": {}, "error": error},
        )
    for name, description, (raw, fields) in VALID_FRAMES:
        vector = {"name": name, "description": description, "hex": raw.hex(), "valid": True, "fields": fields}
        write(name, {**vector, "error": None}, FRAMES)
    for name, description, raw, error in INVALID_FRAMES:
        vector = {"name": name, "description": description, "hex": raw.hex(), "valid": False, "fields": {}}
        write(name, {**vector, "error": error}, FRAMES)
    print(f"wrote {len(VALID)} valid and {len(INVALID)} malformed vectors to {HERE}")
    print(f"wrote {len(VALID_FRAMES)} valid and {len(INVALID_FRAMES)} malformed frame vectors to {FRAMES}")


def write(name: str, vector: dict, directory: Path = HERE) -> None:
    (directory / f"{name}.json").write_text(json.dumps(vector, indent=2) + "\n")


if __name__ == "__main__":
    main()
