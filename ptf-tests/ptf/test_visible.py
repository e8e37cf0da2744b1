"""PTF, tng: VISIBLE on the uplink ACKs of a steered downlink TCP flow (holding, boosting, local retransmission);
the vocabulary is in visible_base.py, Linux's SACK layouts in test_visible_sack.py."""

from __future__ import annotations

import queue
import time

from lwip_base import CPU_PORT, UE_PORT
from ptf.testutils import group
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from tng_controller.helper_frames import Reason, helper_frame
from visible_base import (
    DOWNLINK,
    PACKET_IN_TIMEOUT_S,
    POLICY,
    TIMESTAMPS,
    BoostTest,
    RetransmitTest,
    VisibleTest,
    state_cell,
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


class QueueAwareHoldTest(VisibleTest):
    """LTE's queue holds 10 packets of 30 ms each (300 ms), Wi-Fi's 4 of 10 ms: with queue_aware_hold the 200 ms
    budget grows to 500 ms and the dup-ACK allowance by the 14 queued packets."""

    def queue_up(self) -> None:
        for seq in (1000, 2000, 3000):
            self.data(seq)
        self.write_queue_depth(self.lte, 10)
        self.write_service_time(self.lte, 30_000)
        self.write_queue_depth(self.wifi, 4)
        self.write_service_time(self.wifi, 10_000)
        self.new_ack(2000)


@group("tng")
class TheHoldBudgetGrowsByTheDeeperQueue(QueueAwareHoldTest):
    """Steering that splits by rate may leave the hole behind LTE's queue: dup-ACKs are held for 200 ms + 300 ms."""

    def runTest(self) -> None:
        self.visible(POLICY, hold_budget_us=200_000, hold_slack=1, queue_aware_hold=1)
        self.queue_up()
        self.held_dup_ack(2000)
        time.sleep(0.3)
        self.held_dup_ack(2000)
        self.held_dup_ack(2000)  # 0.3 s held: past hold_budget_us, within the queue-aware budget
        time.sleep(0.3)
        self.held_dup_ack(2000)  # 0.6 s were not yet counted when it arrived
        self.dup_ack(2000)  # past 500 ms
        self.assertDecisions(data_tracked=3, new_ack=1, dup_ack=5, held=4, dup_ack_forwarded=1)


@group("tng")
class WithoutQueueAwareHoldTheBudgetIsTheConfiguredOne(QueueAwareHoldTest):
    """The same queues for a policy whose steering keeps order (queue_aware_hold 0): released after 200 ms."""

    def runTest(self) -> None:
        self.visible(POLICY, hold_budget_us=200_000, hold_slack=10)
        self.queue_up()
        self.held_dup_ack(2000)
        time.sleep(0.3)
        self.held_dup_ack(2000)
        self.dup_ack(2000)  # 0.3 s held: past the budget
        self.assertDecisions(data_tracked=3, new_ack=1, dup_ack=3, held=2, dup_ack_forwarded=1)


class QueueAwareDebtTest(VisibleTest):
    """Boosts and local retransmissions with queue_aware_hold and a 0.2 s hold budget, the helper on its port."""

    def start(self, *, boost_max: int, last_seq: int) -> dict[int, Packet]:
        """Segments from 1000 to `last_seq` forwarded and copied, the receiver's ACK at 2000."""
        self.visible(
            POLICY,
            boost_max_depth=10,
            boost_max=boost_max,
            retransmit_max=2,
            hold_budget_us=200_000,
            hold_slack=10,
            queue_aware_hold=1,
        )
        self.helper_at = self.helper_port
        self.helper_up(1, self.helper_port)
        segments = {seq: self.data(seq) for seq in range(1000, last_seq + 1, 1000)}
        self.new_ack(2000)
        return segments


@group("tng")
class WithQueueAwareHoldAnOwedHoleIsAskedForAfterItsBudget(QueueAwareDebtTest):
    """Steering that splits by rate: after a boost to 3000, the hole [2000, 3000) is most likely on its way behind a
    queue. The next dup-ACK at 2000 is held, not a request; one 0.3 s later, past the 0.2 s budget, asks the helper."""

    def runTest(self) -> None:
        segments = self.start(boost_max=1, last_seq=3000)
        self.dup_ack(2000, sent_as=3000)
        self.held_dup_ack(2000)
        time.sleep(0.3)
        self.assertEqual(self.request(2000), [bytes(segments[2000])])
        self.assertDecisions(
            data_tracked=3,
            data_copied=3,
            new_ack=1,
            ack_reported=1,
            copies_confirmed=1,
            dup_ack=3,
            boosted=1,
            held=1,
            retransmit_requested=1,
        )


@group("tng")
class WithQueueAwareHoldAnAckShortOfTheBoostRestartsTheWait(QueueAwareDebtTest):
    """After boosts to 5000, the receiver's ACK 3000 (its hole arrived late over the slower link) still leaves
    [3000, 5000) owed: it goes on with its SACK block turned into NOPs (below the sender's ACK it could only make the
    sender retransmit) and as a report, not a request; the dup-ACKs at 3000 are held for a budget from it, and the
    one after asks the helper for 3000."""

    def runTest(self) -> None:
        segments = self.start(boost_max=2, last_seq=4000)
        self.dup_ack(2000, sent_as=3000)
        self.dup_ack(2000, sent_as=5000)
        short = self.uplink_ack(3000, options=[*TIMESTAMPS, ("NOP", None), ("NOP", None), ("SAck", (4000, 5000))])
        without_blocks = self.uplink_ack(3000, options=[*TIMESTAMPS, *[("NOP", None)] * 12])
        self.exchange(
            self.lte,
            short,
            (self.uplink, self.to_server(without_blocks)),
            (self.helper_port, helper_frame(Reason.ACK_REPORT, bytes(short))),
        )
        self.held_dup_ack(3000)
        time.sleep(0.3)
        self.assertEqual(self.request(3000), [bytes(segments[3000])])
        self.assertDecisions(
            data_tracked=4,
            data_copied=4,
            new_ack=2,
            ack_reported=2,
            copies_confirmed=1,
            sack_hidden=1,
            dup_ack=4,
            boosted=2,
            held=1,
            retransmit_requested=1,
        )


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
