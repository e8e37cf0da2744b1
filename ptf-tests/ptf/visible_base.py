"""PTF, tng, tier 2: VISIBLE's test vocabulary (a steered downlink TCP flow, its ACKs, the retransmission helper).

Downlink data from the server leaves on the LTE port (lte-only steering keeps the test deterministic); the UE's ACKs
arrive on the LTE port. The retransmission helper is the real helper core (tng_controller.retransmit_helper) fed
with what the switch clones to the helper port or the CPU port; its confirmations of the copies it holds go back to
the switch on the helper port.
"""

from __future__ import annotations

import ipaddress
import zlib

from lwip_base import (
    SERVER_IP,
    SERVER_PORT,
    STEER_LTE_ONLY,
    UE_IP,
    UE_PORT,
    VISIBLE_DECISIONS,
    LwipTest,
    l4_checksum_valid,
)
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from tng_controller.helper_frames import HELPER_ETHERTYPE, Flow, Reason, helper_frame
from tng_controller.retransmit_helper import RetransmitHelper
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


class BoostTest(VisibleTest):
    """Boosting on (queues up to 10 packets count as spare); holding (no slack) and retransmission off; the hold
    budget long enough that no dup-ACK of a test counts as a stalled sender's."""

    def setUp(self) -> None:
        super().setUp()
        self.visible(POLICY, boost_max_depth=10, boost_max=100, hold_budget_us=10_000_000)


class RetransmitTest(VisibleTest):
    """Retransmission on (one request per burst); boosting and holding off."""

    def setUp(self) -> None:
        super().setUp()
        self.visible(POLICY, retransmit_max=1)
