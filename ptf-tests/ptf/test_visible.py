"""PTF, tng: VISIBLE on the uplink ACKs of a steered downlink TCP flow (holding, boosting, local retransmission).

Downlink data from the server leaves on the LTE port (lte-only steering keeps the test deterministic); the UE's ACKs
arrive on the LTE port. The retransmission helper is the real helper core (tng_controller.retransmit_helper) fed
with what the switch clones to the helper port or the CPU port; its confirmations of the copies it holds go back to
the switch on the helper port.
"""

from __future__ import annotations

import ipaddress
import queue
import time
import zlib

from lwip_base import (
    CPU_PORT,
    MSS,
    SERVER_IP,
    SERVER_PORT,
    STEER_LTE_ONLY,
    UE_IP,
    UE_PORT,
    VISIBLE_DECISIONS,
    LwipTest,
    l4_checksum_valid,
)
from ptf.testutils import group
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from tng_controller.retransmit_helper import HELPER_ETHERTYPE, Flow, Reason, RetransmitHelper, helper_frame
from tng_p4.pipeline import VisibleDecision as Decision

POLICY = 40
DOWNLINK = Flow(SERVER_IP, SERVER_PORT, UE_IP, UE_PORT)
TIMESTAMPS = [("NOP", None), ("NOP", None), ("Timestamp", (1000, 2000))]
SACK = [*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (3000, 4000))]
PACKET_IN_TIMEOUT_S = 2.0
STATE_CELLS = 4096  # VISIBLE_FLOW_CELLS


def is_confirmation(frame: bytes) -> bool:
    return frame[12:14] == HELPER_ETHERTYPE.to_bytes(2, "big") and frame[14] == Reason.COPIES_HELD


def state_cell(ue_port: int) -> int:
    """The VISIBLE state cell of the connection SERVER_IP:SERVER_PORT - UE_IP:ue_port: CRC-32 of both endpoints,
    lower address first (UE_IP sorts before SERVER_IP), as the pipeline hashes them."""
    endpoints = ipaddress.IPv4Address(UE_IP).packed + ipaddress.IPv4Address(SERVER_IP).packed
    return zlib.crc32(endpoints + ue_port.to_bytes(2, "big") + SERVER_PORT.to_bytes(2, "big")) % STATE_CELLS


class VisibleTest(LwipTest):
    """TCP from the server gets POLICY: lte-only steering; each test turns VISIBLE on with its parameters."""

    def setUp(self) -> None:
        super().setUp()
        self.classify(POLICY, src_addr=SERVER_IP, protocol=6)
        self.steer(POLICY, STEER_LTE_ONLY)
        self.decisions = self.counters(VISIBLE_DECISIONS)
        self.helper = RetransmitHelper(generation=1, confirm_bytes=0)  # confirms every copy that extends its range
        self.helper_at: int | None = None  # the switch port the helper sits behind, if any
        self.retransmissions: list[bytes] = []  # what the helper re-injects for the last frame it got

    def exchange(self, port: int, pkt: Packet, *expected: tuple[int, Packet], clone_lost: bool = False) -> None:
        """Send `pkt` on `port`; exactly `expected` (port, packet) come out, in any order, byte for byte, with valid
        TCP checksums. Frames on the helper's port are handed to the helper core (unless `clone_lost`), and its
        confirmations sent back to the switch, which drops them."""
        self.send(port, pkt)
        received = sorted((self.receive() for _ in expected), key=lambda item: item[0])
        for (got_port, got), (want_port, want) in zip(received, sorted(expected, key=lambda e: e[0]), strict=True):
            self.assertEqual(got_port, want_port, f"{got!r} left on port {got_port}, expected {want_port}")
            self.assertEqual(bytes(got), bytes(want), f"got {got!r}\nexpected {want!r}")
            if got_port == self.helper_at:
                if clone_lost:
                    continue
                answers = self.helper.handle(bytes(got))
                self.retransmissions = [frame for frame in answers if not is_confirmation(frame)]
                for frame in answers:
                    if is_confirmation(frame):
                        self.send(self.helper_at, Ether(frame))
            else:
                self.assertTrue(l4_checksum_valid(got), f"bad TCP checksum: {got!r}")

    def data(self, seq: int, *, clone_lost: bool = False, options: list[object] | None = None) -> Packet:
        """A downlink segment [seq, seq + MSS): forwarded on LTE, and copied to the helper if it is on a port (the
        copy lost on its way if `clone_lost`)."""
        pkt = self.downlink(seq, options=options or [])
        copies = [(self.helper_at, helper_frame(Reason.DATA_COPY, bytes(pkt)))] if self.helper_at is not None else []
        self.exchange(self.uplink, pkt, (self.lte, self.to_ue(pkt, self.lte)), *copies, clone_lost=clone_lost)
        return pkt

    def new_ack(self, ack: int) -> None:
        """The receiver's new ACK: forwarded unchanged, and reported to the helper if it is on a port."""
        pkt = self.uplink_ack(ack)
        reports = [(self.helper_at, helper_frame(Reason.ACK_REPORT, bytes(pkt)))] if self.helper_at is not None else []
        self.exchange(self.lte, pkt, (self.uplink, self.to_server(pkt)), *reports)

    def dup_ack(
        self, ack: int, *, sent_as: int | None = None, options: list[object] | None = None, window: int = 4096
    ) -> None:
        """An ACK from the UE; the server gets it with ACK number `sent_as` (a boost) or unchanged (None)."""
        pkt = self.uplink_ack(ack, options=options or [], window=window)
        self.exchange(self.lte, pkt, (self.uplink, self.to_server(pkt, ack=sent_as)))

    def request(self, ack: int) -> list[bytes]:
        """An ACK from the UE that goes on unchanged and to the helper as a retransmission request; what the helper
        re-injects."""
        pkt = self.uplink_ack(ack)
        self.exchange(
            self.lte,
            pkt,
            (self.uplink, self.to_server(pkt)),
            (self.helper_port, helper_frame(Reason.RETRANSMIT, bytes(pkt))),
        )
        return self.retransmissions

    def held_dup_ack(self, ack: int, options: list[object] | None = None) -> None:
        self.send(self.lte, self.uplink_ack(ack, options=options or []))

    def assertDecisions(self, **expected: int) -> None:
        """ingress.visible.decisions grew by exactly `expected` (Decision names, lower case) since setUp."""
        self.assertNothingElse()
        self.assertCounted(
            VISIBLE_DECISIONS, self.decisions, {Decision[name.upper()]: n for name, n in expected.items()}, "decisions"
        )


@group("tng")
class HoldThenReleaseAtTheBudget(VisibleTest):
    """Reordering dup-ACKs are held (dropped) until the hold time reaches the budget; the next one goes on."""

    def runTest(self) -> None:
        self.visible(POLICY, hold_budget_us=300_000, hold_slack=10)
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.new_ack(2000)
        self.held_dup_ack(2000)
        self.held_dup_ack(2000)
        time.sleep(0.4)
        self.held_dup_ack(2000)  # held: 0.4 s were not yet counted when it arrived
        self.dup_ack(2000)  # the hold time is now past the 300 ms budget
        self.assertDecisions(data_tracked=3, new_ack=1, dup_ack=4, held=3, dup_ack_forwarded=1)


@group("tng")
class NewAckResetsTheBurstAndTheEwmaLearnsItsLength(VisibleTest):
    """Hold limit = EWMA of past burst lengths + slack. First burst (EWMA 0, slack 1): one dup-ACK held, three go
    on. The new ACK ends the burst (alpha shift 0: EWMA := 4); the next burst holds five, the sixth goes on."""

    def runTest(self) -> None:
        self.visible(POLICY, hold_budget_us=10_000_000, hold_slack=1, alpha_shift=0, beta_shift=8)
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.new_ack(2000)
        self.held_dup_ack(2000)
        for _ in range(3):
            self.dup_ack(2000)
        self.new_ack(3000)
        for _ in range(5):
            self.held_dup_ack(3000)
        self.dup_ack(3000)
        self.assertDecisions(data_tracked=3, new_ack=2, dup_ack=10, held=6, dup_ack_forwarded=4)


@group("tng")
class HoldOnlyCopiesNothingAndHoldsSackDupAcks(VisibleTest):
    """A policy that neither boosts nor retransmits only holds: with the helper up, no segment is cloned to it and
    no ACK reported, and dup-ACKs carrying SACK blocks (Linux's default) are held like any other."""

    def runTest(self) -> None:
        self.helper_up(1, self.helper_port)
        self.visible(POLICY, hold_budget_us=10_000_000, hold_slack=3)
        for seq in (1000, 2000, 3000):
            self.data(seq)  # nothing on the helper port (helper_at unset: a copy would be an unexpected frame)
        self.new_ack(2000)
        for _ in range(3):
            self.send(self.lte, self.uplink_ack(2000, options=SACK))
        self.dup_ack(2000, options=SACK)  # the fourth exceeds EWMA 0 + slack 3 and goes on
        self.assertDecisions(data_tracked=3, new_ack=1, dup_ack=4, held=3, dup_ack_forwarded=1)


class BoostTest(VisibleTest):
    """Boosting on (queues up to 10 packets count as spare); holding (no slack) and retransmission off; the hold
    budget long enough that no dup-ACK of a test counts as a stalled sender's."""

    def setUp(self) -> None:
        super().setUp()
        self.visible(POLICY, boost_max_depth=10, boost_max=100, hold_budget_us=10_000_000)


@group("tng")
class BoostNeverExceedsTheForwardedBytes(BoostTest):
    """Each dup-ACK raises the ACK by MSS x dup count, capped at the highest byte forwarded downlink: 3000, then
    4000 (not 5000); one more forwarded segment lets the next reach 5000. The helper confirms its copies at the
    receiver's first ACK (it repeats what the switch ignored before) and at every copy."""

    def runTest(self) -> None:
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.new_ack(2000)
        self.dup_ack(2000, sent_as=3000)
        self.dup_ack(2000, sent_as=4000)
        self.data(4000)
        self.dup_ack(2000, sent_as=5000)
        self.assertTrue(self.helper.covered(DOWNLINK, 2000, 5000), "boosted bytes without a copy at the helper")
        self.assertDecisions(
            data_tracked=4, data_copied=4, new_ack=1, ack_reported=1, copies_confirmed=2, dup_ack=3, boosted=3
        )


@group("tng")
class BoostStopsAtACopyTheHelperNeverGot(BoostTest):
    """The clone of [2000, 3000) is lost between switch and helper: the helper confirms only up to 2000, so the
    receiver's dup-ACKs at 2000 go on unchanged (a boost would acknowledge bytes nobody can resend). The sender's
    retransmission of 2000 reaches the helper, which then confirms up to 5000, and the next dup-ACK is boosted."""

    def runTest(self) -> None:
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        self.data(1000)
        self.data(2000, clone_lost=True)
        for seq in (3000, 4000):
            self.data(seq)
        self.new_ack(2000)
        self.dup_ack(2000)
        self.dup_ack(2000)
        self.assertEqual(self.helper.held(DOWNLINK), (1000, 2000))
        self.data(2000)
        self.dup_ack(2000, sent_as=5000)
        self.assertTrue(self.helper.covered(DOWNLINK, 2000, 5000), "boosted bytes without a copy at the helper")
        self.assertDecisions(
            data_tracked=5,
            data_copied=5,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=2,
            dup_ack=3,
            boosted=1,
            dup_ack_forwarded=2,
        )


@group("tng")
class BoostedBytesStayCoveredUntilTheReceiverAcks(BoostTest):
    """The helper frees copies only on the receiver's own ACKs: after a boost to 5000, the receiver's ACK 3000
    frees [1000, 3000) and keeps [3000, 5000), which the switch acknowledged on the receiver's behalf."""

    def runTest(self) -> None:
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        for seq in (1000, 2000, 3000, 4000):
            self.data(seq)
        self.new_ack(2000)
        self.dup_ack(2000, sent_as=3000)
        self.dup_ack(2000, sent_as=5000)
        self.request(3000)  # the receiver's ACK 3000, short of the boost: a request for the owed bytes
        self.assertTrue(self.helper.covered(DOWNLINK, 3000, 5000))
        self.assertIsNone(self.helper.copy_at(DOWNLINK, 2500))
        self.new_ack(5000)
        self.assertEqual(self.helper.health().stored_segments, 0)
        self.assertDecisions(
            data_tracked=4,
            data_copied=4,
            new_ack=3,
            ack_reported=2,
            copies_confirmed=1,
            dup_ack=2,
            boosted=2,
            retransmit_requested=1,
        )


@group("tng")
class NoBoostWithoutTheHelper(BoostTest):
    """With the helper down nobody could retransmit what a boost acknowledges: dup-ACKs go on unchanged."""

    def runTest(self) -> None:
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.new_ack(2000)
        self.dup_ack(2000)
        self.dup_ack(2000)
        self.assertDecisions(data_tracked=3, new_ack=1, dup_ack=2, dup_ack_forwarded=2)


@group("tng")
class NoBoostWithoutSpareQueues(BoostTest):
    """Boosting needs both links' queues at most boost_max_depth: Wi-Fi at 11 packets stops it, at 10 it boosts."""

    def runTest(self) -> None:
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.new_ack(2000)
        self.write_queue_depth(self.wifi, 11)
        self.dup_ack(2000)
        self.write_queue_depth(self.wifi, 10)
        self.dup_ack(2000, sent_as=4000)  # second dup-ACK of the burst: 2000 + 2 x MSS
        self.assertDecisions(
            data_tracked=3,
            data_copied=3,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=2,
            boosted=1,
            dup_ack_forwarded=1,
        )


class SackBoostTest(VisibleTest):
    """Boosting on with a segment size of two MSS, so that the first dup-ACK of a burst would raise the ACK from 2000
    to 4000 (segments up to 5000 forwarded and copied); the dup-ACK carries `blocks` after NOP, NOP, timestamps, as
    Linux sends them. No block may end up below the boosted ACK (RFC 2883 would read it as a D-SACK): the boost
    stops at the lowest left edge (`boosted_to`, None: not boosted), and the blocks go on untouched, TCP checksum
    valid."""

    def check_boost(self, blocks: tuple[tuple[int, int], ...], boosted_to: int | None) -> None:
        self.visible(POLICY, boost_max_depth=10, boost_max=100, hold_budget_us=10_000_000, segment_size=2 * MSS)
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        for seq in (1000, 2000, 3000, 4000):
            self.data(seq)
        self.new_ack(2000)
        options = [*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", tuple(e for b in blocks for e in b))]
        self.dup_ack(2000, sent_as=boosted_to, options=options)
        boosted = int(boosted_to is not None)
        self.assertDecisions(
            data_tracked=4,
            data_copied=4,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=1,
            boosted=boosted,
            dup_ack_forwarded=1 - boosted,
        )


@group("tng")
class ASackDupAckIsBoostedUpToItsBlock(SackBoostTest):
    def runTest(self) -> None:
        self.check_boost(((3000, 4000),), boosted_to=3000)


@group("tng")
class ASackDupAckIsBoostedUpToTheLowestOfTwoBlocks(SackBoostTest):
    def runTest(self) -> None:
        self.check_boost(((4200, 5000), (3500, 4000)), boosted_to=3500)


@group("tng")
class ASackDupAckIsBoostedUpToTheLowestOfThreeBlocks(SackBoostTest):
    def runTest(self) -> None:
        self.check_boost(((4800, 5000), (4400, 4600), (3200, 4000)), boosted_to=3200)


@group("tng")
class ASackBlockAboveTheBoostDoesNotLowerIt(SackBoostTest):
    def runTest(self) -> None:
        self.check_boost(((4500, 5000),), boosted_to=4000)


@group("tng")
class ADSackDupAckIsNotBoosted(SackBoostTest):
    """A block below the ACK (a D-SACK, RFC 2883) leaves no room to boost."""

    def runTest(self) -> None:
        self.check_boost(((1000, 2000),), boosted_to=None)


@group("tng")
class SackWithoutTimestampsIsNotBoosted(BoostTest):
    """Options the parser does not read in full (SACK without timestamps: NOP, NOP, SACK) are never boosted; with
    timestamps only, the dup-ACK is (its TCP checksum, over the options too, stays valid)."""

    def runTest(self) -> None:
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.new_ack(2000)
        self.dup_ack(2000, options=[("NOP", None), ("NOP", None), ("SAck", (3000, 4000))])
        self.dup_ack(2000, sent_as=4000, options=TIMESTAMPS)
        self.assertDecisions(
            data_tracked=3,
            data_copied=3,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=2,
            boosted=1,
            dup_ack_forwarded=1,
        )


class RetransmitTest(VisibleTest):
    """Retransmission on (one request per burst); boosting and holding off."""

    def setUp(self) -> None:
        super().setUp()
        self.visible(POLICY, retransmit_max=1)


@group("tng")
class RetransmitThroughTheHelperPort(RetransmitTest):
    """A dup-ACK past the hold budget goes on and is cloned to the helper, whose copy of the missing segment,
    sent back on the helper port, is routed to the UE (and not copied again); the next dup-ACK only goes on."""

    def runTest(self) -> None:
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        segments = {seq: self.data(seq) for seq in (1000, 2000, 3000)}
        self.new_ack(2000)
        request = self.uplink_ack(2000)
        self.exchange(
            self.lte,
            request,
            (self.uplink, self.to_server(request)),
            (self.helper_port, helper_frame(Reason.RETRANSMIT, bytes(request))),
        )
        self.assertEqual(self.retransmissions, [bytes(segments[2000])])
        copy = Ether(self.retransmissions[0])
        self.exchange(self.helper_port, copy, (self.lte, self.to_ue(segments[2000], self.lte)))
        self.dup_ack(2000)
        self.assertDecisions(
            data_tracked=3,
            data_copied=3,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=2,
            retransmit_requested=1,
            dup_ack_forwarded=1,
        )


@group("tng")
class OwedBytesAreRequestedUntilTheReceiverHasThem(VisibleTest):
    """After a boost to 3000 the sender considers [2000, 3000) delivered and will never resend it: with no
    retransmission budget at all (retransmit_max 0) every dup-ACK at 2000 still asks the helper for it (again after
    each hold budget, here 0: a re-injected copy can be lost too)."""

    def runTest(self) -> None:
        self.visible(POLICY, boost_max_depth=10, boost_max=1)
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        segments = {seq: self.data(seq) for seq in (1000, 2000, 3000)}
        self.new_ack(2000)
        self.dup_ack(2000, sent_as=3000)
        for _ in range(2):
            request = self.uplink_ack(2000)
            self.exchange(
                self.lte,
                request,
                (self.uplink, self.to_server(request)),
                (self.helper_port, helper_frame(Reason.RETRANSMIT, bytes(request))),
            )
            self.assertEqual(self.retransmissions, [bytes(segments[2000])])
        self.exchange(
            self.helper_port, Ether(self.retransmissions[0]), (self.lte, self.to_ue(segments[2000], self.lte))
        )
        self.new_ack(3000)
        self.assertDecisions(
            data_tracked=3,
            data_copied=3,
            new_ack=2,
            ack_reported=2,
            copies_confirmed=1,
            dup_ack=3,
            boosted=1,
            retransmit_requested=2,
        )


@group("tng")
class NoBoostWhileAnEarlierBurstsBytesAreOwed(VisibleTest):
    """A burst boosts 2000 to 3000, then 5000 (1 + 2 MSS). The receiver's ACK 3000 ends it with [3000, 5000) still
    owed and asks the helper for 3000. A boost of the next burst's first dup-ACK to 6000 would owe the sender 3 MSS
    on top of the first burst's, and the sender's window, which starts at the boosted ACK, would reach that far past
    the receiver's: it goes on unchanged."""

    def runTest(self) -> None:
        self.visible(POLICY, boost_max_depth=10, boost_max=2, hold_budget_us=10_000_000)
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        segments = {seq: self.data(seq) for seq in range(1000, 7000, 1000)}
        self.new_ack(2000)
        self.dup_ack(2000, sent_as=3000)
        self.dup_ack(2000, sent_as=5000)
        self.assertEqual(self.request(3000), [bytes(segments[3000])])
        self.dup_ack(3000)
        self.assertDecisions(
            data_tracked=6,
            data_copied=6,
            new_ack=2,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=3,
            boosted=2,
            retransmit_requested=1,
            dup_ack_forwarded=1,
        )


@group("tng")
class ADupAckAHoldBudgetAfterTheLastBoostAsksForTheOwedHole(VisibleTest):
    """After a boost to 3000, the next dup-ACK at 2000 comes 0.3 s later, past the 0.2 s hold budget: a sender that
    sends only at its retransmission timeouts. Another boost (to 5000) would hide the owed hole at 2000 for one more
    timeout; the dup-ACK asks the helper for it instead."""

    def runTest(self) -> None:
        self.visible(POLICY, boost_max_depth=10, boost_max=4, hold_budget_us=200_000)
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        segments = {seq: self.data(seq) for seq in range(1000, 6000, 1000)}
        self.new_ack(2000)
        self.dup_ack(2000, sent_as=3000)
        time.sleep(0.3)
        self.assertEqual(self.request(2000), [bytes(segments[2000])])
        self.assertDecisions(
            data_tracked=5,
            data_copied=5,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=2,
            boosted=1,
            retransmit_requested=1,
        )


@group("tng")
class OwedBytesAreRequestedBeforeHolding(VisibleTest):
    """After a boost to 3000 the receiver's next dup-ACK at 2000 is not held, though the hold budget would allow it:
    the sender ignores it anyway, its next one may come only after a retransmission timeout, and only the helper
    can deliver the owed [2000, 3000)."""

    def runTest(self) -> None:
        self.visible(POLICY, boost_max_depth=10, boost_max=1, hold_budget_us=10_000_000, hold_slack=10)
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        segments = {seq: self.data(seq) for seq in (1000, 2000, 3000)}
        self.new_ack(2000)
        self.dup_ack(2000, sent_as=3000)
        self.assertEqual(self.request(2000), [bytes(segments[2000])])
        self.assertDecisions(
            data_tracked=3,
            data_copied=3,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=2,
            boosted=1,
            retransmit_requested=1,
        )


@group("tng")
class EveryNewAckShortOfTheBoostRequestsTheNextOwedBytes(VisibleTest):
    """After boosts to 5000, the receiver's ACKs 3000 and 4000 (say, re-injected copies filled its holes) still leave
    bytes owed: each goes on unchanged and asks the helper for its ACK number at once, however soon after the last
    request. A sender whose window is full of bytes past the owed ones sends nothing, and so draws no dup-ACK, until
    its retransmission timeout."""

    def runTest(self) -> None:
        self.visible(POLICY, boost_max_depth=10, boost_max=2, hold_budget_us=10_000_000)
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        segments = {seq: self.data(seq) for seq in (1000, 2000, 3000, 4000)}
        self.new_ack(2000)
        self.dup_ack(2000, sent_as=3000)
        self.dup_ack(2000, sent_as=5000)
        self.assertEqual(self.request(3000), [bytes(segments[3000])])
        self.assertEqual(self.request(4000), [bytes(segments[4000])])
        self.new_ack(5000)  # nothing owed any more: a report
        self.assertDecisions(
            data_tracked=4,
            data_copied=4,
            new_ack=4,
            ack_reported=2,
            copies_confirmed=1,
            dup_ack=2,
            boosted=2,
            retransmit_requested=2,
        )


@group("tng")
class ARetransmittedCopyPassesTheReceiversPawsCheck(RetransmitTest):
    """The receiver took a newer segment in order than the copy it lacks (a sender retransmission, say): its ACKs
    echo TSval 500, and RFC 7323's PAWS check drops any segment with an older TSval, the copy's original 100 too. The
    helper re-injects the copy with TSval 500 (and a valid TCP checksum), which the receiver takes."""

    def runTest(self) -> None:
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        sent_at = [("NOP", None), ("NOP", None), ("Timestamp", (100, 7))]
        for seq in (1000, 2000, 3000):
            self.data(seq, options=sent_at)
        self.new_ack(2000)
        request = self.uplink_ack(2000, options=[("NOP", None), ("NOP", None), ("Timestamp", (9, 500))])
        self.exchange(
            self.lte,
            request,
            (self.uplink, self.to_server(request)),
            (self.helper_port, helper_frame(Reason.RETRANSMIT, bytes(request))),
        )
        copy = self.downlink(2000, options=[("NOP", None), ("NOP", None), ("Timestamp", (500, 7))])
        self.assertEqual(len(self.retransmissions), 1)
        self.exchange(self.helper_port, Ether(self.retransmissions[0]), (self.lte, self.to_ue(copy, self.lte)))
        self.assertDecisions(
            data_tracked=3,
            data_copied=3,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=1,
            retransmit_requested=1,
        )


@group("tng")
class RetransmitThroughTheCpuPort(RetransmitTest):
    """The same loop over P4Runtime: copies and the request arrive as packet-ins, the helper's copy goes back as a
    packet-out to the CPU port and is routed to the UE."""

    def runTest(self) -> None:
        self.helper_up(1, CPU_PORT)
        packet_ins = self.switch.receive_packets()
        segments = {seq: self.data(seq) for seq in (1000, 2000, 3000)}
        self.new_ack(2000)
        self.dup_ack(2000)
        retransmissions = []
        for port, kind in (
            [(self.uplink, Reason.DATA_COPY)] * 3 + [(self.lte, Reason.ACK_REPORT)] + [(self.lte, Reason.RETRANSMIT)]
        ):
            try:
                packet_in = packet_ins.get(timeout=PACKET_IN_TIMEOUT_S)
            except queue.Empty:
                self.fail(f"no packet-in for the {kind.name} from port {port}")
            self.assertEqual(packet_in.metadata, {"ingress_port": port, "_pad": 0})
            self.assertEqual(packet_in.payload[14], kind)
            retransmissions = self.helper.handle(packet_in.payload)
        self.assertEqual(retransmissions, [bytes(segments[2000])])
        self.switch.packet_out(retransmissions[0], egress_port=CPU_PORT, _pad=0)
        self.assertReceived(self.to_ue(segments[2000], self.lte), self.lte)
        self.assertDecisions(
            data_tracked=3, data_copied=3, new_ack=1, ack_reported=1, dup_ack=1, retransmit_requested=1
        )


@group("tng")
class DupAckDetectionFollowsRfc5681(RetransmitTest):
    """Only pure dup-ACKs count: a changed window, a payload or a FIN make an ACK with the same number no dup-ACK,
    and an ACK number at the highest forwarded byte (nothing outstanding) neither; all go on unchanged."""

    def runTest(self) -> None:
        for seq in (1000, 2000):
            self.data(seq)
        self.new_ack(2000)
        self.dup_ack(2000, window=8192)  # a window update, not a dup-ACK
        self.dup_ack(2000, window=8192)  # a dup-ACK at the new window
        for ack in (self.uplink_ack(2000, window=8192, payload=b"uplink data"), self.uplink_ack(2000, flags="FA")):
            self.exchange(self.lte, ack, (self.uplink, self.to_server(ack)))
        self.new_ack(3000)
        self.dup_ack(3000)  # nothing outstanding beyond 3000: not a dup-ACK
        self.assertDecisions(data_tracked=2, new_ack=2, dup_ack=1, dup_ack_forwarded=1)


class SackHidingTest(VisibleTest):
    """Holding with SACK (hold only, budget `budget_us`): segments up to 6000 forwarded, the receiver's ACK at 2000."""

    def start(self, budget_us: int) -> None:
        self.visible(POLICY, hold_budget_us=budget_us, hold_slack=10)
        for seq in range(1000, 6000, 1000):
            self.data(seq)
        self.new_ack(2000)

    def new_ack_without_blocks(self, ack: int, blocks: tuple[int, ...]) -> None:
        """A new ACK reporting `blocks` goes on with its SACK option (kind, length, blocks) turned into NOPs: the
        same length, a valid TCP checksum."""
        sack = [("NOP", None), ("NOP", None), ("SAck", blocks)]
        pkt = self.uplink_ack(ack, options=[*TIMESTAMPS, *sack])
        nops = [("NOP", None)] * (4 + 4 * len(blocks))
        want = self.to_server(self.uplink_ack(ack, options=[*TIMESTAMPS, *nops]))
        self.exchange(self.lte, pkt, (self.uplink, want))


@group("tng")
class ANewAckWithinTheHoldBudgetGoesOnWithoutItsSackBlocks(SackHidingTest):
    """The hole at 2000 fills while the hole at 3000 is still open (both segments in flight on the slower link): the
    receiver's new ACK at 3000 reports [4000, 6000) and would tell the sender of the reordering the held dup-ACKs
    hid. It goes on as a plain cumulative ACK; the next burst is held too, and a new ACK without holes is untouched."""

    def runTest(self) -> None:
        self.start(budget_us=10_000_000)
        self.held_dup_ack(2000, options=SACK)
        self.new_ack_without_blocks(3000, (4000, 5000, 5000, 6000))
        self.held_dup_ack(3000, options=[*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (4000, 6000))])
        self.new_ack(6000)
        self.assertDecisions(data_tracked=5, new_ack=3, dup_ack=2, held=2, sack_hidden=1)


@group("tng")
class ANewAckAfterTheHoldBudgetOrWithADSackKeepsItsBlocks(SackHidingTest):
    """A burst that outlived the hold budget was a loss the sender has heard of (its last dup-ACK went on): the next
    new ACK keeps its blocks. So does one whose first block is a D-SACK (below the ACK: a spurious retransmission
    the sender may undo)."""

    def runTest(self) -> None:
        self.start(budget_us=300_000)
        self.held_dup_ack(2000, options=SACK)
        time.sleep(0.4)
        self.held_dup_ack(2000, options=SACK)  # held: 0.4 s were not yet counted when it arrived
        self.dup_ack(2000, options=SACK)  # past the budget: goes on
        late = self.uplink_ack(3000, options=[*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (4000, 5000))])
        self.exchange(self.lte, late, (self.uplink, self.to_server(late)))
        dsack = self.uplink_ack(4000, options=[*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (3000, 4000))])
        self.exchange(self.lte, dsack, (self.uplink, self.to_server(dsack)))
        self.assertDecisions(data_tracked=5, new_ack=3, dup_ack=3, held=2, dup_ack_forwarded=1)


@group("tng")
class ADSackIsNeverHeld(VisibleTest):
    """A dup-ACK reporting a duplicate (RFC 2883: first block below the ACK, or inside the second) goes on: held, the
    sender could not undo the window reduction of its spurious retransmission."""

    def runTest(self) -> None:
        self.visible(POLICY, hold_budget_us=10_000_000, hold_slack=10)
        for seq in (1000, 2000, 3000, 4000):
            self.data(seq)
        self.new_ack(2000)
        self.held_dup_ack(2000, options=SACK)
        below = [*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (1000, 2000, 3000, 4000))]
        inside = [*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (3000, 4000, 3000, 5000))]
        self.dup_ack(2000, options=below)
        self.dup_ack(2000, options=inside)
        self.held_dup_ack(2000, options=[*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (3000, 5000))])
        self.assertDecisions(data_tracked=4, new_ack=1, dup_ack=4, held=2, dup_ack_forwarded=2)


@group("tng")
class ASackDupAckIsADupAckWhateverItsWindow(VisibleTest):
    """Linux grows its receive window on out-of-order data too, and a SACK sender reads the blocks whatever the
    window: an ACK with SACK blocks and a new window is a dup-ACK (held here), one without blocks is a window update."""

    def runTest(self) -> None:
        self.visible(POLICY, hold_budget_us=10_000_000, hold_slack=10)
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.new_ack(2000)
        self.send(self.lte, self.uplink_ack(2000, options=SACK, window=5000))
        self.send(self.lte, self.uplink_ack(2000, options=SACK, window=6000))
        self.dup_ack(2000, options=TIMESTAMPS, window=7000)  # a window update: goes on
        self.assertDecisions(data_tracked=3, new_ack=1, dup_ack=2, held=2)


@group("tng")
class CollidingFlowIsLeftAlone(VisibleTest):
    """A second connection whose hash picks the cell a live flow holds is forwarded untouched and counted
    untracked: its dup-ACKs are not held, and nothing of it enters the first flow's state."""

    def runTest(self) -> None:
        self.visible(POLICY, hold_budget_us=10_000_000, hold_slack=10)
        other = next(port for port in range(UE_PORT + 1, 65536) if state_cell(port) == state_cell(UE_PORT))
        for seq in (1000, 2000):
            self.data(seq)
        segment = self.downlink(5000, ue_port=other)
        self.exchange(self.uplink, segment, (self.lte, self.to_ue(segment, self.lte)))
        for _ in range(3):
            ack = self.uplink_ack(5000, ue_port=other)
            self.exchange(self.lte, ack, (self.uplink, self.to_server(ack)))
        self.new_ack(2000)
        self.held_dup_ack(2000)  # the first flow still holds its own dup-ACKs
        self.assertDecisions(data_tracked=2, untracked=4, new_ack=1, dup_ack=1, held=1)
