"""PTF, tng: LTE/Wi-Fi steering of an LWIP next hop, one test per mode, and the per-port steered counters."""

from __future__ import annotations

import time
from collections import Counter

from lwip_base import (
    PORT_SERVICE_TIME,
    STEER_EARLIEST_ARRIVAL,
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
from ptf import testutils
from ptf.testutils import group
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

POLICY = 20
SPLIT_PACKETS = 400
# The paced stream of the in-order tests: LTE drains 50 packets/s and is 60 ms "further away" (the delay term of
# link_state: BMv2 cannot delay), Wi-Fi drains 100 packets/s; the stream (140 packets/s) needs both, with a margin
# over Wi-Fi's rate that a busy machine's late wake-ups do not eat (at 175 over 150, one CI run sent too slowly for
# Wi-Fi's queue to build). Slow enough that scheduling noise stays well below a packet time.
STREAM_PACKETS = 240
STREAM_PPS = 140
LTE_PPS, WIFI_PPS = 50, 100
LTE_DELAY_US = 60_000
# Arrivals closer than this are not told apart: PTF stamps packets when its thread reads them off the socket.
ORDER_TOLERANCE_S = 0.003
RECEIVE_DRAIN_S = 3.0


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
        """SPLIT_PACKETS datagrams of one flow: the LTE count is inside the 99.99% binomial interval of lte_share
        (a right split fails one run in 10,000; at 400 packets the interval is still within 0.09 of the share)."""
        before = self.counters(STEERED)
        ports = Counter(self.sendToUe(40000) for _ in range(SPLIT_PACKETS))
        lo, hi = binomial_interval(SPLIT_PACKETS, lte_share, confidence=0.9999)
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


@group("tng")
class EarliestArrivalSendsWhereThePacketArrivesFirst(SteeringTest):
    """earliest-arrival with LTE 20 ms further away, 1.2 ms per packet on LTE and 0.4 ms on Wi-Fi, both ports idle
    for longer than a packet time (so each prediction is (queue + 1) x packet time + delay): Wi-Fi while
    (queue + 1) x 0.4 ms <= 21.2 ms (52 packets queued, a tie, still Wi-Fi), LTE from 53 packets on."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_EARLIEST_ARRIVAL)
        self.link_state(lte_delay_us=20_000, wifi_delay_us=0, lte_packet_us=1_200, wifi_packet_us=400)
        self.runSinglePacketTest(self.wifi)
        for depth, expected in ((48, self.wifi), (52, self.wifi), (53, self.lte)):
            self.write_queue_depth(self.wifi, depth)
            self.runSinglePacketTest(expected)


@group("tng")
class EarliestArrivalPrefersThePacketTimeEgressMeasured(SteeringTest):
    """Equal delays and 1 ms per packet from the controller: LTE (1 queued) beats Wi-Fi (3 queued) until egress
    measures 5 ms per packet on LTE."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_EARLIEST_ARRIVAL)
        self.link_state(lte_delay_us=0, wifi_delay_us=0, lte_packet_us=1_000, wifi_packet_us=1_000)
        for measured, expected in ((0, self.lte), (5_000, self.wifi)):
            self.write_service_time(self.lte, measured)
            self.write_queue_depth(self.lte, 1)
            self.write_queue_depth(self.wifi, 3)
            self.runSinglePacketTest(expected)


@group("tng")
class EarliestArrivalCountsPacketsSteeredSinceTheLastDequeue(SteeringTest):
    """A burst into a Wi-Fi queue that drains 2 packets/s (its depth register changes once per 500 ms): Wi-Fi takes
    packets while (waiting + 1) x 1 ms <= LTE's 6 ms, 6 or 7 of them (7 when the first left before the second
    arrived), then LTE; one or two more when a dequeue during the burst let the queue shrink or missed a packet that
    joined it while egress was busy. Without counting what was steered since the last dequeue, all 12 would go to
    Wi-Fi."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_EARLIEST_ARRIVAL)
        self.link_state(lte_delay_us=5_000, wifi_delay_us=0, lte_packet_us=1_000, wifi_packet_us=1_000)
        self.set_queue_rate(self.wifi, 2)
        for sport in range(45000, 45012):
            self.send(self.uplink, self.udp_to_ue(sport))
        ports = Counter(self.receive(timeout_s=8.0)[0] for _ in range(12))
        self.assertTrue(6 <= ports[self.wifi] <= 9, f"{ports[self.wifi]} of 12 on Wi-Fi")
        self.assertEqual(ports[self.lte], 12 - ports[self.wifi])


class PacedStreamTest(SteeringTest):
    """A paced stream over two links of different rate and delay; reports the share of packets that reach the UE
    behind a later one (RFC 4737's reordered packets, with a small tolerance). A packet reaches the UE when the link
    has carried it: BMv2 releases it from the rate-limited queue at the start of its slot, the link then takes one
    packet time to serialize it and its delay to propagate it."""

    def runStreamTest(self) -> tuple[float, Counter[int]]:
        self.set_queue_rate(self.lte, LTE_PPS)
        self.set_queue_rate(self.wifi, WIFI_PPS)
        delay_s = {self.lte: 1 / LTE_PPS + LTE_DELAY_US / 1e6, self.wifi: 1 / WIFI_PPS}
        arrivals: dict[int, float] = {}
        ports: Counter[int] = Counter()
        sent_at = -1.0
        first_sent_at = time.monotonic()
        for index in range(STREAM_PACKETS):
            # Paced from the previous send, never in a burst to catch up after a late wake-up.
            pause = sent_at + 1 / STREAM_PPS - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            sent_at = time.monotonic()
            self.send(self.uplink, self.udp_to_ue(46000 + index))
            self.collect(arrivals, ports, delay_s, timeout_s=0)
        self.sent_pps = (STREAM_PACKETS - 1) / max(sent_at - first_sent_at, 1e-9)
        while len(arrivals) < STREAM_PACKETS:
            self.collect(arrivals, ports, delay_s, timeout_s=RECEIVE_DRAIN_S)
        reordered, highest, highest_at = 0, -1, 0.0
        for index in sorted(arrivals, key=arrivals.__getitem__):
            if index > highest:
                highest, highest_at = index, arrivals[index]
            elif arrivals[index] > highest_at + ORDER_TOLERANCE_S:
                reordered += 1  # a later packet reached the UE clearly before this one
        return reordered / STREAM_PACKETS, ports

    def collect(
        self, arrivals: dict[int, float], ports: Counter[int], delay_s: dict[int, float], timeout_s: float
    ) -> None:
        """Takes every packet the switch sent so far (waits up to `timeout_s` for the first)."""
        while True:
            result = testutils.dp_poll(self, device_number=0, timeout=timeout_s)
            if not isinstance(result, self.dataplane.PollSuccess):
                if timeout_s:
                    self.fail(f"{len(arrivals)} of {STREAM_PACKETS} packets came out")
                return
            index = Ether(result.packet)[UDP].sport - 46000
            arrivals[index] = result.time + delay_s[result.port]
            ports[result.port] += 1
            timeout_s = 0


@group("tng")
class EarliestArrivalDeliversAPacedStreamInOrder(PacedStreamTest):
    """The controller's link state and the queues' build-up keep the stream in order: under 5% reordered, both
    links used. qdepl (rates only) on the same stream reorders LTE's packets behind 30 ms of Wi-Fi traffic."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_EARLIEST_ARRIVAL)
        self.link_state(
            lte_delay_us=LTE_DELAY_US, wifi_delay_us=0, lte_packet_us=10**6 // LTE_PPS, wifi_packet_us=10**6 // WIFI_PPS
        )
        share, ports = self.runStreamTest()
        used = f"links used: {dict(ports)}, stream sent at {self.sent_pps:.0f} packets/s"
        self.assertTrue(ports[self.lte] and ports[self.wifi], used)
        self.assertLess(share, 0.05, f"{share:.1%} reordered, ports {dict(ports)}")


@group("tng")
class QdeplReordersAPacedStream(PacedStreamTest):
    """The baseline of the test above: qdepl steers by depletion rate alone and reorders at least 10% of it."""

    def runTest(self) -> None:
        self.steer(POLICY, STEER_QDEPL, lte_rate=LTE_PPS, wifi_rate=WIFI_PPS)
        share, ports = self.runStreamTest()
        self.assertGreater(share, 0.10, f"{share:.1%} reordered, ports {dict(ports)}")
