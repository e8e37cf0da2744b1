"""PTF, tng: VISIBLE with Linux's defaults on the ACKs (timestamps, SACK blocks, D-SACK): what holding, boosting and
the new ACKs in between do with SACK blocks (docs/visible.md, "SACK and timestamps")."""

from __future__ import annotations

import time

from lwip_base import MSS
from ptf.testutils import group
from visible_base import (
    POLICY,
    SACK,
    TIMESTAMPS,
    BoostTest,
    VisibleTest,
)


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
