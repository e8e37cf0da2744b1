"""The link prober's frames: an ICMP echo request as a whole Ethernet frame (a packet-out sent straight out of a port
skips the pipeline's routing and source MAC), and the identifier and sequence number of an echo reply."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from ipaddress import IPv4Address

ETHERTYPE_IPV4 = 0x0800
ICMP = 1
ECHO_REQUEST = 8
ECHO_REPLY = 0
TTL = 64
PAYLOAD = b"tng link probe\x00\x00"
_ETHERNET = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_ICMP_ECHO = struct.Struct("!BBHHH")
_MORE_FRAGMENTS_OR_OFFSET = 0x3FFF


@dataclass(frozen=True, slots=True)
class EchoReply:
    source: IPv4Address
    destination: IPv4Address
    identifier: int
    sequence: int


def internet_checksum(data: bytes) -> int:
    """RFC 1071: the ones' complement of the ones' complement sum of 16-bit words."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(word for (word,) in struct.iter_unpack("!H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(
    dst_mac: int, src_mac: int, source: IPv4Address, destination: IPv4Address, identifier: int, sequence: int
) -> bytes:
    """An Ethernet frame holding an ICMP echo request from `source` to `destination`."""
    icmp = _ICMP_ECHO.pack(ECHO_REQUEST, 0, 0, identifier, sequence) + PAYLOAD
    icmp = icmp[:2] + struct.pack("!H", internet_checksum(icmp)) + icmp[4:]
    total_length = _IPV4.size + len(icmp)
    header = _IPV4.pack(0x45, 0, total_length, sequence, 0, TTL, ICMP, 0, source.packed, destination.packed)
    header = header[:10] + struct.pack("!H", internet_checksum(header)) + header[12:]
    ethernet = _ETHERNET.pack(dst_mac.to_bytes(6, "big"), src_mac.to_bytes(6, "big"), ETHERTYPE_IPV4)
    return ethernet + header + icmp


def parse_echo_reply(frame: bytes) -> EchoReply | None:
    """The echo reply in an Ethernet frame, or None for anything else (other protocols, fragments, bad checksums)."""
    if len(frame) < _ETHERNET.size + _IPV4.size + _ICMP_ECHO.size:
        return None
    _, _, ethertype = _ETHERNET.unpack_from(frame)
    if ethertype != ETHERTYPE_IPV4:
        return None
    version_ihl, _, total_length, _, fragment, _, protocol, _, source, destination = _IPV4.unpack_from(
        frame, _ETHERNET.size
    )
    header_bytes = (version_ihl & 0x0F) * 4
    if version_ihl >> 4 != 4 or header_bytes < _IPV4.size or protocol != ICMP or fragment & _MORE_FRAGMENTS_OR_OFFSET:
        return None
    icmp = frame[_ETHERNET.size + header_bytes : _ETHERNET.size + total_length]
    if len(icmp) < _ICMP_ECHO.size or internet_checksum(icmp) != 0:
        return None
    kind, code, _, identifier, sequence = _ICMP_ECHO.unpack_from(icmp)
    if (kind, code) != (ECHO_REPLY, 0):
        return None
    return EchoReply(IPv4Address(source), IPv4Address(destination), identifier, sequence)
