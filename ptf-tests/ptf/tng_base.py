"""tng vocabulary for PTF tests: tng datagrams in Ethernet/IPv4/UDP, port forwarding, wire-check scenarios."""

from __future__ import annotations

import time

import finsy as fy
import ptf.testutils as testutils
from base_test import P4RuntimeTest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from tng_p4 import pipeline
from tng_p4.p4rt import CounterValue
from tng_p4.vectors import Vector
from tng_p4.wire import TNG_UDP_PORT

# Documentation addresses (RFC 5737, RFC 7042): these packets never leave the nanomsg socket.
CLIENT_MAC, SERVER_MAC = "00:00:5e:00:53:01", "00:00:5e:00:53:02"
CLIENT_IP, SERVER_IP = "192.0.2.1", "198.51.100.1"
CLIENT_PORT = 50000
COUNTER_TIMEOUT_S = 2.0


def udp_packet(payload: bytes, *, sport: int = CLIENT_PORT, dport: int = TNG_UDP_PORT) -> Packet:
    """`payload` as the UDP payload of an Ethernet/IPv4 frame from the client to the server."""
    return (
        Ether(src=CLIENT_MAC, dst=SERVER_MAC)
        / IP(src=CLIENT_IP, dst=SERVER_IP)
        / UDP(sport=sport, dport=dport)
        / Raw(load=payload)
    )


class TngWireTest(P4RuntimeTest):
    """Scenarios for the tng_wire pipeline: forward ingress port swports[0] to swports[1], send, check counters."""

    def setUp(self) -> None:
        super().setUp()
        self.in_port, self.out_port = self.swports()[:2]

    def forward(self, in_port: int, out_port: int) -> None:
        self.switch.insert(
            fy.P4TableEntry(
                pipeline.PORT_FORWARD,
                match=fy.Match(**{pipeline.PORT_FORWARD_KEY: in_port}),
                action=fy.Action(pipeline.FORWARD, **{pipeline.FORWARD_PORT: out_port}),
            )
        )

    def wait_for_count(self, name: str, index: int, packets: int) -> dict[int, CounterValue]:
        """Poll the counter until cell `index` reaches `packets` (BMv2 counts asynchronously to our reads)."""
        deadline = time.monotonic() + COUNTER_TIMEOUT_S
        cells = self.counters(name)
        while cells[index].packets < packets and time.monotonic() < deadline:
            time.sleep(0.05)
            cells = self.counters(name)
        return cells

    def runForwardTest(self, pkt: Packet, *, packet_type: int | None, forward: bool = True) -> None:
        """`pkt` passes the wire check: no drop is counted; it leaves out_port unchanged if `forward`.

        packet_type: the tng type the switch must count it under, or None for traffic that is not tng.
        """
        if forward:
            self.forward(self.in_port, self.out_port)
        drops_before = self.counters(pipeline.WIRE_DROPS)
        packets_before = self.counters(pipeline.WIRE_PACKETS)
        testutils.send_packet(self, self.in_port, pkt)
        if forward:
            testutils.verify_packet(self, pkt, self.out_port)
        if packet_type is None:
            packets_after = self.counters(pipeline.WIRE_PACKETS)
        else:
            expected = packets_before[packet_type].packets + 1
            packets_after = self.wait_for_count(pipeline.WIRE_PACKETS, packet_type, expected)
            packets_before[packet_type] = CounterValue(expected, packets_before[packet_type].bytes + len(pkt))
        testutils.verify_no_other_packets(self)
        self.assertEqual(packets_after, packets_before, "tng_wire_packets")
        self.assertEqual(self.counters(pipeline.WIRE_DROPS), drops_before, "tng_wire_drops")

    def runDropTest(self, pkt: Packet, reason: pipeline.DropReason) -> None:
        """`pkt` fails the wire check: dropped although forwarding is set up, counted under `reason` only."""
        self.forward(self.in_port, self.out_port)
        drops_before = self.counters(pipeline.WIRE_DROPS)
        packets_before = self.counters(pipeline.WIRE_PACKETS)
        testutils.send_packet(self, self.in_port, pkt)
        expected = drops_before[reason].packets + 1
        drops_after = self.wait_for_count(pipeline.WIRE_DROPS, reason, expected)
        testutils.verify_no_other_packets(self)
        drops_before[reason] = CounterValue(expected, drops_before[reason].bytes + len(pkt))
        self.assertEqual(drops_after, drops_before, f"tng_wire_drops after a {reason.name} drop")
        self.assertEqual(self.counters(pipeline.WIRE_PACKETS), packets_before, "tng_wire_packets")

    def runVectorTest(self, vector: Vector, *, sport: int = CLIENT_PORT, dport: int = TNG_UDP_PORT) -> None:
        """A wire vector in a UDP datagram: forwarded unchanged if valid, else dropped under its error."""
        pkt = udp_packet(vector.raw, sport=sport, dport=dport)
        if vector.valid:
            self.runForwardTest(pkt, packet_type=vector.header["packet_type"])
        else:
            assert vector.error is not None
            self.runDropTest(pkt, pipeline.drop_reason(vector.error))
