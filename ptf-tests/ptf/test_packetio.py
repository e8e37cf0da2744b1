"""PTF, tng: controller packet I/O over the CPU port (packet_out / packet_in headers)."""

from __future__ import annotations

import queue

import finsy as fy
from lwip_base import CORE_IP, CORE_MAC, CPU_PORT, PUNT, ROUTES, SERVER_IP, SERVER_MAC, SWITCH_MAC, LwipTest
from ptf.testutils import group
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

PACKET_IN_TIMEOUT_S = 2.0
SWITCH_IP = "198.51.100.254"


def datagram(dst: str) -> Packet:
    return Ether(
        bytes(
            Ether(src=CORE_MAC, dst=SWITCH_MAC)
            / IP(src=CORE_IP, dst=dst, ttl=9)
            / UDP(sport=7, dport=9)
            / Raw(load=b"to or from the controller")
        )
    )


@group("tng")
class PacketOutToAPortLeavesUnchanged(LwipTest):
    """A packet-out naming a port leaves on that port byte for byte: no routing, no TTL change."""

    def runTest(self) -> None:
        pkt = datagram(SERVER_IP)
        self.switch.packet_out(bytes(pkt), egress_port=self.wifi, _pad=0)
        self.assertReceived(pkt, self.wifi)
        self.assertNothingElse()


@group("tng")
class PacketOutToTheCpuPortIsRouted(LwipTest):
    """A packet-out to the CPU port itself goes through the tables like a received packet (how the helper
    re-injects copies): routed to the server with MACs rewritten and TTL - 1."""

    def runTest(self) -> None:
        pkt = datagram(SERVER_IP)
        self.switch.packet_out(bytes(pkt), egress_port=CPU_PORT, _pad=0)
        self.assertReceived(self.routed(pkt, SERVER_MAC), self.uplink)
        self.assertNothingElse()


@group("tng")
class PuntedPacketReachesTheController(LwipTest):
    """A route to the CPU: the packet arrives as a packet-in, unchanged, with the port it came in on."""

    def runTest(self) -> None:
        self.switch.insert(fy.P4TableEntry(ROUTES, match=fy.Match(dst_addr=f"{SWITCH_IP}/32"), action=fy.Action(PUNT)))
        packet_ins = self.switch.receive_packets()
        pkt = datagram(SWITCH_IP)
        self.send(self.core, pkt)
        try:
            packet_in = packet_ins.get(timeout=PACKET_IN_TIMEOUT_S)
        except queue.Empty:
            self.fail("no packet-in")
        self.assertEqual(packet_in.payload, bytes(pkt))
        self.assertEqual(packet_in.metadata, {"ingress_port": self.core, "_pad": 0})
        self.assertNothingElse()
