"""The frames between the tng pipeline and the VISIBLE helper (p4src/v1model/visible.p4): the helper header
(Ethernet type 0x88b5, then reason and a reserved byte) before a copy of the frame the switch received, what the
helper reads of an Ethernet/IPv4/TCP segment, TCP timestamps it rewrites, and the COPIES_HELD frame it answers
with. The helper's state lives in retransmit_helper.py; PTF tests build these frames to drive the pipeline."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from enum import IntEnum

HELPER_ETHERTYPE = 0x88B5
_HELPER = struct.Struct("!6s6sHBB")  # helper Ethernet header (dst, src, type) + reason + reserved
_ETHERNET = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBB")  # ports, seq, ack, data offset, flags (the first 14 of 20 bytes)
_TCP_FULL = struct.Struct("!HHIIBBHHH")  # ... window, checksum, urgent pointer
_TCP_HEADER_BYTES = 20
_TCP_CHECKSUM_AT = 16  # offset in the TCP header
_TCP_OPTION_END = 0
_TCP_OPTION_NOP = 1
_TCP_OPTION_TIMESTAMPS = 8
_TCP_OPTION_TIMESTAMPS_LENGTH = 10
_ETHERTYPE_IPV4 = 0x0800
_PROTO_TCP = 6
_TCP_FIN = 0x01
_TCP_SYN = 0x02
_TCP_ACK = 0x10
_IPV4_DONT_FRAGMENT = 0x4000
_SEQ_MASK = 0xFFFFFFFF


class Reason(IntEnum):
    """Why the switch sent a frame to the helper (helper_t.reason)."""

    DATA_COPY = 1
    ACK_REPORT = 2
    RETRANSMIT = 3
    COPIES_HELD = 4  # from the helper to the switch: a range of which it holds every byte


def seq_before(a: int, b: int) -> bool:
    """a precedes b in 32-bit sequence space (RFC 1982)."""
    return ((a - b) & _SEQ_MASK) >= 0x80000000


def seq_distance(origin: int, seq: int) -> int:
    """Signed distance from origin to seq in 32-bit sequence space."""
    distance = (seq - origin) & _SEQ_MASK
    return distance - (1 << 32) if distance >= 0x80000000 else distance


@dataclass(frozen=True, slots=True)
class Flow:
    """One direction of a TCP connection: the data sender's address and port, then the receiver's."""

    sender: str
    sender_port: int
    receiver: str
    receiver_port: int

    def reversed(self) -> Flow:
        """The other direction: the one the receiver's ACKs travel."""
        return Flow(self.receiver, self.receiver_port, self.sender, self.sender_port)


@dataclass(frozen=True, slots=True)
class TcpSegment:
    """What the helper reads from an Ethernet/IPv4/TCP frame."""

    flow: Flow
    seq: int
    ack: int
    length: int  # sequence space used: payload bytes, +1 for SYN, +1 for FIN

    @property
    def end(self) -> int:
        return (self.seq + self.length) & _SEQ_MASK


def parse_tcp(frame: bytes) -> TcpSegment:
    """The TCP segment in an Ethernet/IPv4 frame; ValueError if the frame is anything else or truncated."""
    if len(frame) < _ETHERNET.size + _IPV4.size:
        raise ValueError("frame too short for Ethernet/IPv4")
    (_dst, _src, ether_type) = _ETHERNET.unpack_from(frame)
    if ether_type != _ETHERTYPE_IPV4:
        raise ValueError(f"ethertype {ether_type:#06x} is not IPv4")
    version_ihl, _tos, total_length, _id, _frag, _ttl, protocol, _csum, src, dst = _IPV4.unpack_from(
        frame, _ETHERNET.size
    )
    ip_header = (version_ihl & 0x0F) * 4
    if version_ihl >> 4 != 4 or protocol != _PROTO_TCP or ip_header < _IPV4.size:
        raise ValueError("not an IPv4 TCP packet")
    tcp_at = _ETHERNET.size + ip_header
    if len(frame) < tcp_at + _TCP_HEADER_BYTES or total_length < ip_header + _TCP_HEADER_BYTES:
        raise ValueError("frame too short for its TCP header")
    sport, dport, seq, ack, offset, flags = _TCP.unpack_from(frame, tcp_at)
    payload = total_length - ip_header - (offset >> 4) * 4
    if payload < 0 or len(frame) < _ETHERNET.size + total_length:
        raise ValueError("IPv4 total length disagrees with the frame")
    length = payload + (1 if flags & _TCP_SYN else 0) + (1 if flags & _TCP_FIN else 0)
    flow = Flow(socket.inet_ntoa(src), sport, socket.inet_ntoa(dst), dport)
    return TcpSegment(flow=flow, seq=seq, ack=ack, length=length)


def _timestamps_at(frame: bytes) -> int | None:
    """Offset in an Ethernet/IPv4/TCP frame (as parse_tcp accepts it) of its TCP timestamps option's TSval, if any."""
    tcp_at = _ETHERNET.size + (frame[_ETHERNET.size] & 0x0F) * 4
    at, end = tcp_at + _TCP_HEADER_BYTES, tcp_at + (frame[tcp_at + 12] >> 4) * 4
    while at < end and frame[at] != _TCP_OPTION_END:
        if frame[at] == _TCP_OPTION_NOP:
            at += 1
            continue
        if at + 1 >= end or frame[at + 1] < 2:
            return None  # malformed options: no timestamps to trust
        if frame[at] == _TCP_OPTION_TIMESTAMPS and frame[at + 1] == _TCP_OPTION_TIMESTAMPS_LENGTH:
            return at + 2 if at + _TCP_OPTION_TIMESTAMPS_LENGTH <= end else None
        at += frame[at + 1]
    return None


def timestamp_echo(frame: bytes) -> int | None:
    """The TSecr of the TCP segment in `frame`, if it carries timestamps."""
    at = _timestamps_at(frame)
    return None if at is None else int.from_bytes(frame[at + 4 : at + 8], "big")


def with_timestamp_at_least(frame: bytes, tsval: int) -> bytes:
    """`frame` (an Ethernet/IPv4/TCP segment) with its TSval raised to `tsval` if older, TCP checksum recomputed;
    unchanged if it carries no timestamps."""
    at = _timestamps_at(frame)
    if at is None or not seq_before(int.from_bytes(frame[at : at + 4], "big"), tsval):
        return frame
    ip_at = _ETHERNET.size
    tcp_at = ip_at + (frame[ip_at] & 0x0F) * 4
    tcp_end = ip_at + int.from_bytes(frame[ip_at + 2 : ip_at + 4], "big")
    segment = bytearray(frame[tcp_at:tcp_end])
    segment[at - tcp_at : at - tcp_at + 4] = tsval.to_bytes(4, "big")
    segment[_TCP_CHECKSUM_AT : _TCP_CHECKSUM_AT + 2] = bytes(2)
    pseudo_header = frame[ip_at + 12 : ip_at + 20] + bytes([0, _PROTO_TCP]) + len(segment).to_bytes(2, "big")
    segment[_TCP_CHECKSUM_AT : _TCP_CHECKSUM_AT + 2] = _internet_checksum(pseudo_header + segment).to_bytes(2, "big")
    return frame[:tcp_at] + bytes(segment) + frame[tcp_end:]


def parse_helper_frame(frame: bytes) -> tuple[Reason, bytes]:
    """Split a frame from the switch into its reason and the frame the switch received; ValueError if malformed."""
    if len(frame) < _HELPER.size:
        raise ValueError("frame too short for the helper header")
    _dst, _src, ether_type, reason, _reserved = _HELPER.unpack_from(frame)
    if ether_type != HELPER_ETHERTYPE:
        raise ValueError(f"ethertype {ether_type:#06x} is not the helper's ({HELPER_ETHERTYPE:#06x})")
    try:
        return Reason(reason), frame[_HELPER.size :]
    except ValueError:
        raise ValueError(f"unknown helper reason {reason}") from None


def helper_frame(reason: Reason, inner: bytes) -> bytes:
    """The frame the switch sends the helper for `inner` (what the pipeline's egress builds)."""
    return _HELPER.pack(bytes(6), bytes(6), HELPER_ETHERTYPE, reason, 0) + inner


def _internet_checksum(data: bytes) -> int:
    """RFC 1071: the ones' complement of the ones' complement sum of `data`'s 16-bit words (odd length: zero-padded)."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def copies_held_frame(flow: Flow, start: int, end: int) -> bytes:
    """The frame telling the switch that the helper holds every byte of `flow` in [start, end): the flow's addresses
    and ports, sequence number `start`, ACK number `end`. The switch drops it, so it carries no TCP checksum."""
    addresses = socket.inet_aton(flow.sender) + socket.inet_aton(flow.receiver)
    header = _IPV4.pack(0x45, 0, _IPV4.size + _TCP_HEADER_BYTES, 0, _IPV4_DONT_FRAGMENT, 64, _PROTO_TCP, 0, b"", b"")
    header = header[:12] + addresses
    ipv4 = header[:10] + _internet_checksum(header).to_bytes(2, "big") + header[12:]
    tcp = _TCP_FULL.pack(flow.sender_port, flow.receiver_port, start, end, 5 << 4, _TCP_ACK, 0, 0, 0)
    return helper_frame(Reason.COPIES_HELD, _ETHERNET.pack(bytes(6), bytes(6), _ETHERTYPE_IPV4) + ipv4 + tcp)
