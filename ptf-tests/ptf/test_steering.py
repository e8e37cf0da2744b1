"""PTF, tng: LTE/Wi-Fi steering of an LWIP next hop, one test per mode, and the per-port steered counters."""

from __future__ import annotations

from collections import Counter

from lwip_base import (
    PORT_SERVICE_TIME,
    STEER_FLOW_HASH,
    STEER_LOWEST_RTT,
    STEER_LTE_ONLY,
    STEER_QDEPL,
    STEER_QDEPL_MEASURED,
    STEER_WEIGHTED,
    STEER_WIFI_ONLY,
    STEERED,
    UE_IP,
    Link,
    LwipTest,
    binomial_interval,
)
from ptf.testutils import group

POLICY = 20
SPLIT_PACKETS = 400


class SteeringTest(LwipTest):
    """Every packet to the UE gets POLICY; tests choose its steering mode."""

    def setUp(self) -> None:
        super().setUp()
        self.classify(POLICY, dst_addr=UE_IP)

    def sendToUe(self, sport: int) -> int:
        """Send one UDP datagram to the UE; the port it left on (checked byte for byte against that link)."""
        pkt = self.udp_to_ue(sport)
        self.send(self.uplink, pkt)
        port, _ = self.receive()
        self.assertIn(port, (self.lte, self.wifi))
        return port

    def runSplitTest(self, lte_share: float) -> None:
        """SPLIT_PACKETS datagrams of one flow: the LTE count is inside the 99% binomial interval of lte_share."""
        before = self.counters(STEERED)
        ports = Counter(self.sendToUe(40000) for _ in range(SPLIT_PACKETS))
        lo, hi = binomial_interval(SPLIT_PACKETS, lte_share)
        on_lte = ports[self.lte]
        self.assertTrue(lo <= on_lte <= hi, f"{on_lte} of {SPLIT_PACKETS} on LTE, not in [{lo}, {hi}]")
        self.assertCounted(STEERED, before, {self.lte: ports[self.lte], self.wifi: ports[self.wifi]}, "steered")

    def runSinglePacketTest(self, expected_port: int, *, sport: int = 40000) -> None:
        """One datagram leaves on `expected_port`, rewritten for that link."""
        pkt = self.udp_to_ue(sport)
        self.send(self.uplink, pkt)
        self.assertReceived(self.to_ue(pkt, expected_port), expected_port)
        self.assertNothingElse()


@group("tng")
class FlowHashKeepsEachFlowOnOnePort(SteeringTest):
    """flow-hash (the default mode): 16 flows x 8 packets; each flow stays on one port, and both ports are used."""

    def runTest(self) -> None:
        ports_of_flow = {sport: {self.sendToUe(sport) for _ in range(8)} for sport in range(41000, 41016)}
        for sport, ports in ports_of_flow.items():
            self.assertEqual(len(ports), 1, f"flow {sport} used ports {ports}")
        self.assertEqual(set().union(*ports_of_flow.values()), {self.lte, self.wifi})


@group("tng")
class FlowHashIsTheDefaultAndCanBeExplicit(SteeringTest):
    """An explicit flow-hash entry steers like the default: the same flow goes to the same port."""

    def runTest(self) -> None:
        first = self.sendToUe(42000)
        self.steer(POLICY, STEER_FLOW_HASH)
        self.assertEqual({self.sendToUe(42000) for _ in range(5)}, {first})


@group("tng")
class WeightedSplitsPacketsByWeight(SteeringTest):
    """weighted 1:3: packets of one flow go to LTE with probability 1/4."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_WEIGHTED, lte_weight=1, wifi_weight=3)
        self.runSplitTest(0.25)


@group("tng")
class QdeplSplitsByDepletionRateWhenQueuesAreEmpty(SteeringTest):
    """qdepl with empty queues: lambda_LTE = mu_LTE / (mu_LTE + mu_WiFi) lambda, here 3/4 to LTE."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_QDEPL, lte_rate=3000, wifi_rate=1000)
        self.runSplitTest(0.75)


@group("tng")
class QdeplSendsWhereTheQueueDrainsFirst(SteeringTest):
    """qdepl with queues: depth / rate decides. LTE 10 packets at 100 pps (0.1 s) beats Wi-Fi 2 at 10 pps (0.2 s);
    with the rates swapped, Wi-Fi (2 at 100 pps) beats LTE (10 at 10 pps)."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_QDEPL, lte_rate=100, wifi_rate=10)
        self.steer(POLICY + 1, STEER_QDEPL, lte_rate=10, wifi_rate=100)
        self.classify(POLICY + 1, priority=20, dst_addr=UE_IP, src_port=41001)
        for sport, expected in ((40000, self.lte), (41001, self.wifi)):
            self.write_queue_depth(self.lte, 10)
            self.write_queue_depth(self.wifi, 2)
            self.runSinglePacketTest(expected, sport=sport)


@group("tng")
class QdeplMeasuredSplitsByTheRatesEgressMeasured(SteeringTest):
    """qdepl-measured with empty queues: egress measured 10 ms per packet on LTE and 2.5 ms on Wi-Fi, so LTE
    drains at 1/5 of the total rate and gets 1/5 of the packets."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_QDEPL_MEASURED)
        self.write_service_time(self.lte, 10_000)
        self.write_service_time(self.wifi, 2_500)
        self.runSplitTest(0.2)


@group("tng")
class EgressMeasuresTheServiceTimeOfABackloggedPort(SteeringTest):
    """A burst into an LTE queue drained at 100 packets/s: egress measures about 10 ms per packet."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_LTE_ONLY)
        self.set_queue_rate(self.lte, 100)
        for sport in range(44000, 44012):
            self.send(self.uplink, self.udp_to_ue(sport))
        for _ in range(12):
            self.assertEqual(self.receive()[0], self.lte)
        service_us = self.read_register(PORT_SERVICE_TIME, self.lte)
        self.assertTrue(7_000 <= service_us <= 13_000, f"measured {service_us} us per packet at 100 packets/s")


@group("tng")
class LowestRttSpillsOnlyPastItsThreshold(SteeringTest):
    """lowest-rtt-first preferring Wi-Fi with spill depth 5: Wi-Fi while its queue holds 0 or 5 packets, LTE at 6."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_LOWEST_RTT, preferred_link=Link.WIFI, spill_depth=5)
        self.runSinglePacketTest(self.wifi)
        self.write_queue_depth(self.wifi, 5)
        self.runSinglePacketTest(self.wifi)
        self.write_queue_depth(self.wifi, 6)
        self.runSinglePacketTest(self.lte)
        self.runSinglePacketTest(self.lte)  # LTE's dequeue leaves Wi-Fi's register as it was


@group("tng")
class LteOnlyAndWifiOnly(SteeringTest):
    """lte-only and wifi-only pin every packet of every flow; the steered counter counts them per port."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_LTE_ONLY)
        self.steer(POLICY + 1, STEER_WIFI_ONLY)
        before = self.counters(STEERED)
        self.assertEqual({self.sendToUe(sport) for sport in range(43000, 43010)}, {self.lte})
        self.classify(POLICY + 1, priority=20, dst_addr=UE_IP, dst_port=40000)
        self.assertEqual({self.sendToUe(sport) for sport in range(43000, 43010)}, {self.wifi})
        self.assertCounted(STEERED, before, {self.lte: 10, self.wifi: 10}, "steered")
