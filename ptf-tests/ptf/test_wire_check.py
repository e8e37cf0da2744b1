"""PTF, tng_wire: what the wire check looks at besides the vectors: ports, non-tng traffic, frames, checksums."""

from __future__ import annotations

from ptf.testutils import group
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from tng_base import CLIENT_IP, CLIENT_MAC, CLIENT_PORT, SERVER_IP, SERVER_MAC, TngWireTest, udp_packet
from tng_p4 import pipeline
from tng_p4.vectors import Vector, load_wire_vectors
from tng_p4.wire import TNG_UDP_PORT

OTHER_UDP_PORT = TNG_UDP_PORT + 1


def vector(name: str) -> Vector:
    return next(v for v in load_wire_vectors() if v.name == name)


@group("tng_wire")
class ValidTngFromPort4477(TngWireTest):
    """tng is recognised on the UDP source port too (a server's reply): a valid datagram is forwarded."""

    def runTest(self) -> None:
        self.runVectorTest(vector("data-minimal"), sport=TNG_UDP_PORT, dport=CLIENT_PORT)


@group("tng_wire")
class MalformedTngFromPort4477(TngWireTest):
    """A malformed datagram from source port 4477 is dropped like one to port 4477."""

    def runTest(self) -> None:
        self.runVectorTest(vector("malformed-bad-version"), sport=TNG_UDP_PORT, dport=CLIENT_PORT)


@group("tng_wire")
class OtherUdpPortIsNotChecked(TngWireTest):
    """Bytes that would be malformed tng pass untouched on another UDP port: recognition is by port."""

    def runTest(self) -> None:
        pkt = udp_packet(vector("malformed-bad-version").raw, dport=OTHER_UDP_PORT)
        self.runForwardTest(pkt, packet_type=None)


@group("tng_wire")
class TcpToPort4477IsNotChecked(TngWireTest):
    """tng is UDP only: TCP to port 4477 is forwarded and not counted as tng."""

    def runTest(self) -> None:
        pkt = (
            Ether(src=CLIENT_MAC, dst=SERVER_MAC)
            / IP(src=CLIENT_IP, dst=SERVER_IP)
            / TCP(sport=CLIENT_PORT, dport=TNG_UDP_PORT, flags="S")
        )
        self.runForwardTest(pkt, packet_type=None)


@group("tng_wire")
class NoForwardingEntryDrops(TngWireTest):
    """Without a port_forward entry the default action drops: a valid datagram is counted, not forwarded."""

    def runTest(self) -> None:
        valid = vector("data-typical")
        self.runForwardTest(udp_packet(valid.raw), packet_type=valid.header["packet_type"], forward=False)


@group("tng_wire")
class Ipv4ChecksumErrorDrops(TngWireTest):
    """A frame whose IPv4 header checksum is wrong is dropped under ipv4_checksum."""

    def runTest(self) -> None:
        pkt = udp_packet(vector("data-minimal").raw)
        pkt[IP].chksum = 0x0BAD
        self.runDropTest(pkt, pipeline.DropReason.IPV4_CHECKSUM)


@group("tng_wire")
class TruncatedFrameDrops(TngWireTest):
    """A frame that ends inside its IPv4 header is dropped under packet_too_short."""

    def runTest(self) -> None:
        pkt = Ether(src=CLIENT_MAC, dst=SERVER_MAC, type=0x0800) / Raw(load=b"\x45\x00\x00\x30")
        self.runDropTest(pkt, pipeline.DropReason.PACKET_TOO_SHORT)
