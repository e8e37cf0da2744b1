"""The Scapy tng layer beyond the vectors: building, UDP binding, rule order, switch feedback."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from tng_p4.wire import (
    MAX_PACKET,
    TNG_UDP_PORT,
    PacketType,
    TngFlow,
    TngInitial,
    TngRetry,
    TngSealed,
    WireError,
    set_feedback,
    validate,
)

TAG = bytes(range(16))


def datagram(**header: int) -> bytes:
    return bytes(TngFlow(**header) / TngSealed(sealed=TAG))


def test_defaults_build_a_neutral_data_header_with_computed_length() -> None:
    raw = bytes(TngFlow() / TngSealed(sealed=TAG))
    assert raw[:24] == struct.pack(">BBBBQIHHI", 1, PacketType.DATA, 0, 0, 0, 0, 16, 0, 0xFFFFFFFF)
    assert raw[24:] == TAG


def test_explicit_payload_length_is_kept() -> None:
    assert bytes(TngFlow(payload_length=99) / TngSealed(sealed=TAG))[16:18] == b"\x00\x63"


def test_handshake_lengths_are_computed() -> None:
    initial = bytes(TngFlow(packet_type=PacketType.INITIAL) / TngInitial(stage=2, token=b"", noise=b"abc"))
    assert initial[24:] == b"\x02\x00\x00\x00\x03abc"
    retry = bytes(TngFlow(packet_type=PacketType.RETRY) / TngRetry(token=b"tok"))
    assert retry[24:] == b"\x00\x03tok"


def test_flags_by_name() -> None:
    assert bytes(TngFlow(flags="ECN_CAPABLE+KEY_PHASE"))[2] == 0x05
    assert TngFlow(datagram(flags=0x02)).flags.FEEDBACK_ECHO


@pytest.mark.parametrize("packet_type", [PacketType.DATA, PacketType.ACK, PacketType.PROBE, PacketType.CLOSE])
def test_sealed_types_dissect_to_sealed_payload(packet_type: PacketType) -> None:
    assert TngFlow(datagram(packet_type=packet_type))[TngSealed].sealed == TAG


def test_unknown_type_leaves_the_payload_raw() -> None:
    pkt = TngFlow(datagram(packet_type=7))
    assert TngSealed not in pkt
    assert pkt[Raw].load == TAG


@pytest.mark.parametrize(("sport", "dport"), [(50000, TNG_UDP_PORT), (TNG_UDP_PORT, 50000)])
def test_udp_either_port_4477_dissects_as_tng(sport: int, dport: int) -> None:
    frame = Ether() / IP() / UDP(sport=sport, dport=dport) / Raw(load=datagram(channel_id=9))
    assert Ether(bytes(frame))[TngFlow].channel_id == 9


def test_other_udp_ports_are_not_tng() -> None:
    frame = Ether() / IP() / UDP(sport=50000, dport=TNG_UDP_PORT + 1) / Raw(load=datagram())
    assert TngFlow not in Ether(bytes(frame))


def test_building_over_udp_sets_the_destination_port() -> None:
    assert UDP(bytes(UDP() / TngFlow())).dport == TNG_UDP_PORT


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (bytes([2]) + datagram()[1:] + bytes(MAX_PACKET), WireError.TOO_LARGE),
        (bytes([2, 9]) + datagram()[2:], WireError.BAD_VERSION),
        (datagram(packet_type=0, flags=0x80), WireError.UNKNOWN_TYPE),
        (datagram(flags=0x08, payload_length=3), WireError.RESERVED_FLAGS),
        (datagram(packet_type=PacketType.RETRY, payload_length=3), WireError.LENGTH_MISMATCH),
    ],
    ids=[
        "size-before-version",
        "version-before-type",
        "type-before-flags",
        "flags-before-length",
        "length-before-type-rules",
    ],
)
def test_rules_apply_in_order(raw: bytes, error: WireError) -> None:
    assert validate(raw) == error


def initial(stage: int, token_length: int, noise_length: int, size: int) -> bytes:
    body = struct.pack(">BHH", stage, token_length, noise_length)
    body += bytes(size - 24 - len(body))
    return bytes(TngFlow(packet_type=PacketType.INITIAL) / Raw(load=body))


def test_lengths_that_wrap_16_bits_overrun() -> None:
    assert validate(initial(1, 0xFFFF, 0xFFFF, 1200)) == WireError.HANDSHAKE_LENGTH


def test_length_checks_come_before_stage_checks() -> None:
    assert validate(initial(9, 2000, 0, 1200)) == WireError.HANDSHAKE_LENGTH


def test_only_client_stages_must_be_padded() -> None:
    assert validate(initial(2, 0, 10, 100)) is None
    assert validate(initial(3, 0, 10, 1199)) == WireError.INITIAL_TOO_SMALL
    assert validate(initial(3, 0, 10, 1200)) is None


def test_retry_with_trailing_bytes_is_a_handshake_length_error() -> None:
    raw = bytes(TngFlow(packet_type=PacketType.RETRY) / TngRetry(token=b"ab") / Raw(load=b"x"))
    assert validate(raw) == WireError.HANDSHAKE_LENGTH


def frame(queue_level: int = 0, rate_hint: int = 0xFFFFFFFF, udp_checksum: int | None = None) -> Ether:
    pkt = (
        Ether()
        / IP()
        / UDP(sport=50000, dport=TNG_UDP_PORT, chksum=udp_checksum)
        / TngFlow(queue_level=queue_level, rate_hint=rate_hint)
        / TngSealed(sealed=TAG)
    )
    return Ether(bytes(pkt))


@pytest.mark.parametrize(
    ("before", "own", "after"),
    [
        ((0, 0xFFFFFFFF), (100, 10_000), (100, 10_000)),
        ((300, 5_000), (100, 10_000), (300, 5_000)),
        ((0xFFFF, 5_000), (10, 0), (65534, 0)),
        ((10, 5_000), (0xFFFF, 0xFFFFFFFF), (65534, 5_000)),
    ],
    ids=["neutral", "path-already-worse", "reserved-queue-level-read-as-max", "own-queue-level-clamped"],
)
def test_set_feedback_keeps_the_worst_of_path_and_switch(
    before: tuple[int, int], own: tuple[int, int], after: tuple[int, int]
) -> None:
    original = frame(*before)
    updated = set_feedback(original, *own)
    assert (updated[TngFlow].queue_level, updated[TngFlow].rate_hint) == after
    assert (original[TngFlow].queue_level, original[TngFlow].rate_hint) == before


def test_set_feedback_keeps_the_udp_checksum_valid() -> None:
    original = frame()
    sent = Ether(bytes(set_feedback(original, 100, 10_000)))
    assert sent[UDP].chksum != original[UDP].chksum
    recomputed = sent.copy()
    recomputed[UDP].chksum = None
    assert Ether(bytes(recomputed))[UDP].chksum == sent[UDP].chksum


def test_set_feedback_keeps_a_disabled_udp_checksum() -> None:
    assert Ether(bytes(set_feedback(frame(udp_checksum=0), 100, 10_000)))[UDP].chksum == 0


@pytest.mark.parametrize(("queue_level", "rate_hint"), [(-1, 0), (0x10000, 0), (0, -1), (0, 1 << 32)])
def test_set_feedback_rejects_values_that_do_not_fit(queue_level: int, rate_hint: int) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        set_feedback(frame(), queue_level, rate_hint)
