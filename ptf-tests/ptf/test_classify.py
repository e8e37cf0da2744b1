"""PTF, tng: flow -> policy classification (default policy, priorities, tng connection id) and new-flow digests."""

from __future__ import annotations

import ipaddress
import queue
import time

import finsy as fy
from lwip_base import (
    CONNECTION_POLICY,
    CORE_IP,
    CORE_MAC,
    DEFAULT_POLICY,
    FLOW_POLICY,
    NEW_FLOW_DIGEST,
    POLICY_PACKETS,
    SERVER_IP,
    SERVER_MAC,
    SET_POLICY,
    SWITCH_MAC,
    LwipTest,
)
from ptf.testutils import group
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from tng_p4.wire import TNG_UDP_PORT, PacketType, TngFlow, TngSealed

DIGEST_TIMEOUT_S = 2.0
DIGEST_SETTLE_S = 0.5


def datagram(sport: int, dport: int, payload: bytes = b"data") -> Packet:
    """A UDP datagram from the core to the server, as it arrives on the core port."""
    return Ether(
        bytes(
            Ether(src=CORE_MAC, dst=SWITCH_MAC)
            / IP(src=CORE_IP, dst=SERVER_IP)
            / UDP(sport=sport, dport=dport)
            / Raw(load=payload)
        )
    )


def tng_datagram(connection_id: int) -> Packet:
    flow = TngFlow(packet_type=PacketType.DATA, connection_id=connection_id) / TngSealed(sealed=bytes(16))
    return datagram(50000, TNG_UDP_PORT, bytes(flow))


class ClassifyTest(LwipTest):
    @staticmethod
    def collect(digests: queue.Queue[fy.P4DigestList], seconds: float) -> list[object]:
        """Every digest (one list may hold several) that arrives within `seconds`."""
        received: list[object] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                received.extend(digests.get(timeout=left).data)
            except queue.Empty:
                break
        return received

    def runPolicyTest(self, pkt: Packet, policy: int) -> None:
        """`pkt` is routed to the server and counted under `policy` only."""
        before = self.counters(POLICY_PACKETS)
        self.send(self.core, pkt)
        self.assertReceived(self.routed(pkt, SERVER_MAC), self.uplink)
        self.assertCounted(POLICY_PACKETS, before, {policy: 1}, f"policy {policy}")


@group("tng")
class DefaultPolicyIsTheTableDefault(ClassifyTest):
    """Unclassified traffic gets the flow_policy default action: policy 0 until the controller changes it."""

    def runTest(self) -> None:
        self.runPolicyTest(datagram(1000, 2000), DEFAULT_POLICY)
        self.set_default(FLOW_POLICY, fy.Action(SET_POLICY, policy=7), fy.Action(SET_POLICY, policy=DEFAULT_POLICY))
        self.runPolicyTest(datagram(1000, 2000), 7)


@group("tng")
class HigherPriorityClassWins(ClassifyTest):
    """Overlapping classes: 'UDP to port 5001' (priority 20) beats 'any UDP' (priority 10) for port 5001 only."""

    def runTest(self) -> None:
        self.classify(3, priority=10, protocol=17)
        self.classify(4, priority=20, protocol=17, dst_port=5001)
        self.runPolicyTest(datagram(1000, 5001), 4)
        self.runPolicyTest(datagram(1000, 5002), 3)


@group("tng")
class TngConnectionIdBeatsFiveTuple(ClassifyTest):
    """A tng packet is classified by connection id first (it survives address changes), by 5-tuple otherwise."""

    def runTest(self) -> None:
        self.classify(5, dst_port=TNG_UDP_PORT)
        self.insert(CONNECTION_POLICY, fy.Action(SET_POLICY, policy=6), connection_id=0x1122334455667788)
        self.runPolicyTest(tng_datagram(0x1122334455667788), 6)
        self.runPolicyTest(tng_datagram(0x0102030405060708), 5)


@group("tng")
class NewFlowDigestOncePerFlow(ClassifyTest):
    """Three packets of one flow and two of another: exactly one digest per flow, with its 5-tuple and policy."""

    def runTest(self) -> None:
        self.classify(9, dst_port=5009)
        self.switch.insert(fy.P4DigestEntry(NEW_FLOW_DIGEST, max_list_size=1, max_timeout_ns=1_000_000))
        digests = self.switch.receive_digests(NEW_FLOW_DIGEST)
        self.collect(digests, DIGEST_SETTLE_S)  # whatever the switch buffered before the digest was configured
        for sport, dport in [(1001, 5009)] * 3 + [(1002, 5010)] * 2:
            pkt = datagram(sport, dport)
            self.send(self.core, pkt)
            self.assertReceived(self.routed(pkt, SERVER_MAC), self.uplink)
        received = self.collect(digests, DIGEST_TIMEOUT_S)

        def expected(sport: int, dport: int, policy: int) -> dict[str, int]:
            return {
                "src_addr": int(ipaddress.IPv4Address(CORE_IP)),
                "dst_addr": int(ipaddress.IPv4Address(SERVER_IP)),
                "protocol": 17,
                "src_port": sport,
                "dst_port": dport,
                "ingress_port": self.core,
                "policy": policy,
                "connection_id": 0,
            }

        self.assertEqual(received, [expected(1001, 5009, 9), expected(1002, 5010, DEFAULT_POLICY)])
