"""PTF, tng: IPv4 forwarding (LPM next hop, MAC rewrite, TTL) and drops by reason."""

from __future__ import annotations

import finsy as fy
from lwip_base import (
    CORE_IP,
    CORE_MAC,
    DROPS,
    FORWARDED,
    PORT_TX,
    ROUTE_DROP,
    ROUTES,
    SERVER_IP,
    SERVER_MAC,
    SWITCH_MAC,
    UE_IP,
    LwipTest,
)
from ptf.testutils import group
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, Raw
from tng_controller.helper_frames import Reason, helper_frame
from tng_p4.pipeline import DropReason
from tng_p4.vectors import load_wire_vectors
from tng_p4.wire import TNG_UDP_PORT


def udp(dst: str, *, ttl: int = 64, src: str = CORE_IP, dport: int = 5678, payload: bytes = b"payload") -> Packet:
    """A UDP datagram from the core side, as it arrives on the core port."""
    return Ether(
        bytes(
            Ether(src=CORE_MAC, dst=SWITCH_MAC)
            / IP(src=src, dst=dst, ttl=ttl)
            / UDP(sport=1234, dport=dport)
            / Raw(load=payload)
        )
    )


@group("tng")
class RouteRewritesMacsAndDecrementsTtl(LwipTest):
    """A packet to the server leaves on the uplink with the switch's source MAC, the next hop's MAC, TTL - 1;
    egress counts it on that port."""

    def runTest(self) -> None:
        drops = self.counters(DROPS)
        sent = self.counters(PORT_TX)
        forwarded = self.counters(FORWARDED)
        pkt = udp(SERVER_IP)
        self.send(self.core, pkt)
        self.assertReceived(self.routed(pkt, SERVER_MAC), self.uplink)
        self.assertNothingElse()
        self.assertEqual(self.counters(DROPS), drops)
        self.assertCounted(PORT_TX, sent, {self.uplink: 1}, "egress.port_tx")
        self.assertCounted(FORWARDED, forwarded, {self.uplink: 1}, "ingress.forwarded")


@group("tng")
class LongestPrefixWins(LwipTest):
    """A /32 inside the core /24 sends its address to the uplink; the rest of the /24 still goes to the core."""

    def runTest(self) -> None:
        self.add_route(f"{CORE_IP}/32", self.uplink, SERVER_MAC)
        to_host = udp(CORE_IP, src=UE_IP)
        to_net = udp("203.0.113.8", src=UE_IP)
        self.send(self.core, to_host)
        self.assertReceived(self.routed(to_host, SERVER_MAC), self.uplink)
        self.send(self.core, to_net)
        self.assertReceived(self.routed(to_net, CORE_MAC), self.core)
        self.assertNothingElse()


@group("tng")
class TtlOneIsDroppedAsExpired(LwipTest):
    """TTL 1 would reach 0: dropped, counted under ttl_expired."""

    def runTest(self) -> None:
        self.runDropTest(udp(SERVER_IP, ttl=1), DropReason.TTL_EXPIRED)


@group("tng")
class UnroutedDestinationIsDropped(LwipTest):
    """No route matches: the default action drops, counted under no_route."""

    def runTest(self) -> None:
        self.runDropTest(udp("10.9.8.7"), DropReason.NO_ROUTE)


@group("tng")
class DropRouteIsCountedAsNoRoute(LwipTest):
    """A route whose action is drop blackholes its prefix under no_route."""

    def runTest(self) -> None:
        self.switch.insert(fy.P4TableEntry(ROUTES, match=fy.Match(dst_addr="10.0.0.0/8"), action=fy.Action(ROUTE_DROP)))
        self.runDropTest(udp("10.9.8.7"), DropReason.NO_ROUTE)


@group("tng")
class NonIpv4IsDropped(LwipTest):
    """The pipeline routes IPv4 only: an ARP request is dropped under no_route."""

    def runTest(self) -> None:
        arp = Ether(src=CORE_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=CORE_IP, pdst=SERVER_IP)
        self.runDropTest(arp, DropReason.NO_ROUTE)


@group("tng")
class Ipv4LongerThanTheFrameIsDropped(LwipTest):
    """An IPv4 total length that runs past the frame (a truncated datagram) is dropped under bad_length."""

    def runTest(self) -> None:
        pkt = udp(SERVER_IP)
        pkt[IP].len += 40
        del pkt[IP].chksum
        self.runDropTest(Ether(bytes(pkt)), DropReason.BAD_LENGTH)


@group("tng")
class TcpDataOffsetBelowFiveIsDropped(LwipTest):
    """A TCP header claiming fewer than 20 bytes is dropped under bad_length."""

    def runTest(self) -> None:
        pkt = Ether(src=CORE_MAC, dst=SWITCH_MAC) / IP(src=CORE_IP, dst=SERVER_IP) / TCP(dataofs=4) / Raw(b"x" * 8)
        self.runDropTest(Ether(bytes(pkt)), DropReason.BAD_LENGTH)


@group("tng")
class UdpLongerThanItsDatagramIsDropped(LwipTest):
    """A UDP length beyond the IPv4 payload is dropped under bad_length, never forwarded half-parsed."""

    def runTest(self) -> None:
        pkt = udp(SERVER_IP)
        pkt[UDP].len += 100
        pkt[UDP].chksum = 0
        self.runDropTest(Ether(bytes(pkt)), DropReason.BAD_LENGTH)


@group("tng")
class TruncatedTcpHeaderIsDropped(LwipTest):
    """A frame that ends inside its TCP header is dropped under packet_too_short."""

    def runTest(self) -> None:
        full = bytes(Ether(src=CORE_MAC, dst=SWITCH_MAC) / IP(src=CORE_IP, dst=SERVER_IP) / TCP())
        self.runDropTest(Ether(full[:-8]), DropReason.PACKET_TOO_SHORT)


@group("tng")
class BadIpv4ChecksumIsDropped(LwipTest):
    """A wrong IPv4 header checksum is dropped under ipv4_checksum."""

    def runTest(self) -> None:
        pkt = udp(SERVER_IP)
        pkt[IP].chksum ^= 0x5A5A
        self.runDropTest(Ether(bytes(pkt)), DropReason.IPV4_CHECKSUM)


@group("tng")
class MalformedTngIsDroppedByItsReason(LwipTest):
    """The main pipeline keeps the wire checks: a tng datagram with a bad version is dropped under bad_version."""

    def runTest(self) -> None:
        vector = next(v for v in load_wire_vectors() if v.name == "malformed-bad-version")
        self.runDropTest(udp(SERVER_IP, dport=TNG_UDP_PORT, payload=vector.raw), DropReason.BAD_VERSION)


@group("tng")
class ValidTngIsForwarded(LwipTest):
    """A valid tng datagram is routed like any other packet."""

    def runTest(self) -> None:
        vector = next(v for v in load_wire_vectors() if v.name == "data-minimal")
        pkt = udp(SERVER_IP, dport=TNG_UDP_PORT, payload=vector.raw)
        self.send(self.core, pkt)
        self.assertReceived(self.routed(pkt, SERVER_MAC), self.uplink)
        self.assertNothingElse()


@group("tng")
class HelperFrameFromAnotherPortIsCountedAsHelperFrame(LwipTest):
    """A frame in the helper's encapsulation that did not come from the helper is neither routed nor silently
    eaten: it is dropped under helper_frame."""

    def runTest(self) -> None:
        frame = helper_frame(Reason.COPIES_HELD, bytes(udp(SERVER_IP)))
        self.runDropTest(Ether(frame), DropReason.HELPER_FRAME)
