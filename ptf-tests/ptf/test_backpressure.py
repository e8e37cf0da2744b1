"""PTF, tng: queue-sharing backpressure at dequeue (tng feedback fields, ECN CE) on a rate-limited egress queue."""

from __future__ import annotations

from lwip_base import (
    CORE_IP,
    CORE_MAC,
    ECN_MARKED,
    FEEDBACK_WRITTEN,
    SERVER_IP,
    SERVER_MAC,
    SWITCH_MAC,
    LwipTest,
)
from ptf.testutils import group
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from tng_p4.wire import QUEUE_LEVEL_MAX, QUEUE_NEUTRAL, RATE_NEUTRAL, TNG_UDP_PORT, TngFlow, TngSealed, set_feedback

POLICY = 30
FEEDBACK_MIN_US = 5_000
ECN_MARK_US = 30_000
CAPACITY_KBPS = 10_000
QUEUE_RATE_PPS = 100  # 10 ms per packet
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3
LEVEL_UNIT_US = 32


def tng_datagram(number: int, ecn: int, *, queue_level: int = QUEUE_NEUTRAL, rate_hint: int = RATE_NEUTRAL) -> Packet:
    """A tng DATA packet from the server to the core, as it arrives on the uplink."""
    return Ether(
        bytes(
            Ether(src=SERVER_MAC, dst=SWITCH_MAC)
            / IP(src=SERVER_IP, dst=CORE_IP, tos=ecn)
            / UDP(sport=50000, dport=TNG_UDP_PORT)
            / TngFlow(connection_id=0xABCD, packet_number=number, queue_level=queue_level, rate_hint=rate_hint)
            / TngSealed(sealed=bytes(range(32)))
        )
    )


def feedback(pkt: Packet) -> tuple[int, int]:
    """(queue_level, rate_hint) of a tng packet."""
    return pkt[TngFlow].queue_level, pkt[TngFlow].rate_hint


class BackpressureTest(LwipTest):
    """tng to the core gets POLICY, with feedback above FEEDBACK_MIN_US and ECN marks above ECN_MARK_US."""

    def setUp(self) -> None:
        super().setUp()
        self.classify(POLICY, dst_addr=CORE_IP)
        self.backpressure(POLICY, feedback_min_us=FEEDBACK_MIN_US, ecn_mark_us=ECN_MARK_US)
        self.capacity(self.core, CAPACITY_KBPS)

    def runBurstTest(self, sent: list[Packet]) -> list[Packet]:
        """Send `sent` at once into the core port's queue drained at QUEUE_RATE_PPS; check every packet that comes
        out: the switch changed nothing but feedback, ECN and checksums (which verify), feedback appears only above
        FEEDBACK_MIN_US, CE only on ECT packets above ECN_MARK_US; the counters agree. The received packets."""
        self.set_queue_rate(self.core, QUEUE_RATE_PPS)
        feedback_before = self.counters(FEEDBACK_WRITTEN)
        marked_before = self.counters(ECN_MARKED)
        for pkt in sent:
            self.send(self.uplink, pkt)
        received = [self.assertBackpressure(pkt, self.receive()) for pkt in sent]
        self.assertNothingElse()
        written = sum(1 for pkt, got in zip(sent, received, strict=True) if feedback(pkt) != feedback(got))
        marked = sum(1 for got in received if got[IP].tos & 3 == CE)
        self.assertCounted(FEEDBACK_WRITTEN, feedback_before, {self.core: written}, "feedback_written")
        self.assertCounted(ECN_MARKED, marked_before, {self.core: marked}, "ecn_marked")
        return received

    def assertBackpressure(self, sent: Packet, received: tuple[int, Packet]) -> Packet:
        port, got = received
        self.assertEqual(port, self.core)
        flow = got[TngFlow]
        expected = set_feedback(self.routed(sent, CORE_MAC), flow.queue_level, flow.rate_hint)
        expected[IP].tos = got[IP].tos
        del expected[IP].chksum
        if expected[UDP].chksum == 0:
            self.assertEqual(got[UDP].chksum, 0, "a zero UDP checksum stays zero")
        self.assertEqual(bytes(got), bytes(Ether(bytes(expected))), "only feedback, ECN and checksums change")
        level = flow.queue_level
        if feedback(got) != feedback(sent):
            self.assertEqual(flow.rate_hint, min(sent[TngFlow].rate_hint, CAPACITY_KBPS))
            self.assertGreaterEqual((level + 1) * LEVEL_UNIT_US, FEEDBACK_MIN_US, "feedback below the threshold")
        ect = sent[IP].tos & 3 in (ECT0, ECT1)
        if got[IP].tos & 3 == CE:
            self.assertTrue(ect, "CE on a packet that is not ECN-capable")
            self.assertGreaterEqual((level + 1) * LEVEL_UNIT_US, ECN_MARK_US, "CE below the threshold")
        else:
            self.assertFalse(ect and level * LEVEL_UNIT_US > ECN_MARK_US, "no CE above the threshold")
            self.assertEqual(got[IP].tos & 3, sent[IP].tos & 3)
        return got


@group("tng")
class FeedbackAndEcnOnlyAboveThresholds(BackpressureTest):
    """16 packets into a 100 pps queue wait 0 to 150 ms: the first leave untouched, later ones carry the queue
    delay and the port capacity, and the ECN-capable ones past 30 ms are CE; Not-ECT is never marked, and a
    zero UDP checksum stays zero."""

    def runTest(self) -> None:
        sent = [tng_datagram(n, (ECT0, ECT1, NOT_ECT)[n % 3]) for n in range(16)]
        sent[7][UDP].chksum = 0
        sent[7] = Ether(bytes(sent[7]))
        received = self.runBurstTest(sent)
        neutral = [got[TngFlow].rate_hint == RATE_NEUTRAL for got in received]
        self.assertTrue(neutral[0], "the first packet did not wait")
        self.assertFalse(neutral[-1], "the last packet waited about 150 ms")
        self.assertEqual(received[-1][TngFlow].rate_hint, CAPACITY_KBPS)
        self.assertEqual(received[-3][IP].tos & 3, CE)


@group("tng")
class FeedbackKeepsThePathMaximumAndMinimum(BackpressureTest):
    """Feedback from earlier switches survives: a larger queue_level and a smaller rate_hint stay, and the
    reserved queue_level 0xffff is written back as 65534."""

    def runTest(self) -> None:
        sent = [tng_datagram(n, NOT_ECT, queue_level=60_000, rate_hint=5_000) for n in range(8)]
        sent += [tng_datagram(n, NOT_ECT, queue_level=0xFFFF) for n in range(8, 16)]
        received = self.runBurstTest(sent)
        for got in received[:8]:
            self.assertEqual(feedback(got), (60_000, 5_000))
        self.assertEqual(feedback(received[-1]), (QUEUE_LEVEL_MAX, CAPACITY_KBPS))


@group("tng")
class NoQueueLeavesFeedbackNeutral(BackpressureTest):
    """Without a queue nothing is written or marked: tng packets leave exactly as routed."""

    def runTest(self) -> None:
        feedback_before = self.counters(FEEDBACK_WRITTEN)
        marked_before = self.counters(ECN_MARKED)
        for n in range(5):
            pkt = tng_datagram(n, ECT0)
            self.send(self.uplink, pkt)
            self.assertReceived(self.routed(pkt, CORE_MAC), self.core)
        self.assertNothingElse()
        self.assertEqual(self.counters(FEEDBACK_WRITTEN), feedback_before)
        self.assertEqual(self.counters(ECN_MARKED), marked_before)
