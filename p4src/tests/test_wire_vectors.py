"""Every shared wire vector against the Scapy layer: dissect, rebuild byte-exact, validate."""

from __future__ import annotations

import ipaddress

import pytest
from scapy.packet import Packet
from tng_p4.vectors import HEADER_FIELDS, Vector, load_wire_vectors
from tng_p4.wire import (
    SEALED_TYPES,
    PacketType,
    TngFlow,
    TngInitial,
    TngRetry,
    TngSealed,
    TngSection,
    TngSectionAck,
    validate,
)

VECTORS = load_wire_vectors()
VALID = [vector for vector in VECTORS if vector.valid]
MALFORMED = [vector for vector in VECTORS if not vector.valid]


def rebuild(vector: Vector) -> Packet:
    """The vector's packet built from its fields alone (payload_length included, as given)."""
    header = TngFlow(**vector.header)
    payload = vector.payload
    if header.packet_type == PacketType.INITIAL:
        return header / TngInitial(
            stage=payload["stage"],
            token=payload["token"],
            noise=payload["noise"],
            padding=bytes(payload["padding_len"]),
        )
    if header.packet_type == PacketType.RETRY:
        return header / TngRetry(token=payload["token"])
    if header.packet_type == PacketType.SECTION:
        section = TngSection(
            section_version=payload["section_version"],
            next_hop_port=payload["next_hop_port"],
            next_hop_address=str(ipaddress.IPv6Address(payload["next_hop_address"])),
        )
        return header / section / TngFlow(payload["inner"])
    if header.packet_type == PacketType.SECTION_ACK:
        return header / TngSectionAck(frames=payload["frames"])
    assert header.packet_type in SEALED_TYPES
    return header / TngSealed(sealed=payload["sealed"])


def dissected_payload(pkt: TngFlow) -> dict[str, int | bytes]:
    # A SECTION's inner packet dissects as a TngFlow of its own, so the outer layer is looked at first.
    if TngSection in pkt:
        section = pkt[TngSection]
        return {
            "section_version": section.section_version,
            "next_hop_port": section.next_hop_port,
            "next_hop_address": ipaddress.IPv6Address(section.next_hop_address).packed,
            "inner": bytes(section.payload),
        }
    if TngSectionAck in pkt:
        return {"frames": pkt[TngSectionAck].frames}
    if TngInitial in pkt:
        initial = pkt[TngInitial]
        return {
            "stage": initial.stage,
            "token": initial.token,
            "noise": initial.noise,
            "padding_len": len(initial.padding),
        }
    if TngRetry in pkt:
        return {"token": pkt[TngRetry].token}
    return {"sealed": pkt[TngSealed].sealed}


@pytest.mark.parametrize("vector", VALID, ids=[vector.name for vector in VALID])
def test_valid_vector(vector: Vector) -> None:
    pkt = TngFlow(vector.raw)
    assert {name: int(pkt.getfieldval(name)) for name in HEADER_FIELDS} == vector.header
    assert dissected_payload(pkt) == vector.payload
    if TngInitial in pkt and TngSection not in pkt:
        assert pkt[TngInitial].padding == bytes(len(pkt[TngInitial].padding))
    assert bytes(rebuild(vector)) == vector.raw
    assert validate(vector.raw) is None


@pytest.mark.parametrize("vector", MALFORMED, ids=[vector.name for vector in MALFORMED])
def test_malformed_vector(vector: Vector) -> None:
    assert validate(vector.raw) == vector.error


def test_the_vector_set_is_complete() -> None:
    assert len(VECTORS) >= 20
    assert len(MALFORMED) >= 6
    assert len({vector.name for vector in VECTORS}) == len(VECTORS)
