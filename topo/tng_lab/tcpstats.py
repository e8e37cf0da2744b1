"""Kernel TCP counters of the UE and server namespaces around a run (nstat): how much reordering the receiver saw, and
what it cost the sender (retransmissions, DSACKs for retransmissions that were not needed, undone reductions).

Each namespace has its own SNMP counters, and during a run only that run's connections live in the two namespaces
(plus the perf tool's short control connection), so the difference of two snapshots is the workload's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from tng_lab.netns import LabError, sh

Snapshot = dict[str, int]


@dataclass(frozen=True, slots=True)
class ReceiverStats:
    """The UE's side of the downlink: out-of-order arrivals and the DSACKs they led it to send."""

    segments_received: int
    out_of_order_queued: int  # TcpExtTCPOFOQueue: segments that arrived ahead of a hole
    dsacks_sent: int  # duplicates reported back: each is a retransmission the sender did not need

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot) -> ReceiverStats:
        delta = _delta(before, after)
        return cls(
            segments_received=delta("TcpInSegs"),
            out_of_order_queued=delta("TcpExtTCPOFOQueue"),
            dsacks_sent=delta("TcpExtTCPDSACKOldSent", "TcpExtTCPDSACKOfoSent"),
        )


@dataclass(frozen=True, slots=True)
class SenderStats:
    """The server's side: what reordering and loss made it do."""

    segments_sent: int
    retransmitted_segments: int
    fast_retransmits: int
    timeouts: int
    dsacks_received: int  # TcpExtTCPDSACKRecv: retransmissions the receiver already had (spurious)
    spurious_rtos: int
    reordering_detected: int  # the sender raised its reordering degree (SACK, timestamps or Reno evidence)
    reductions_undone: int  # window reductions taken back once the "loss" proved to be reordering

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot) -> SenderStats:
        delta = _delta(before, after)
        return cls(
            segments_sent=delta("TcpOutSegs"),
            retransmitted_segments=delta("TcpRetransSegs"),
            fast_retransmits=delta("TcpExtTCPFastRetrans"),
            timeouts=delta("TcpExtTCPTimeouts"),
            dsacks_received=delta("TcpExtTCPDSACKRecv"),
            spurious_rtos=delta("TcpExtTCPSpuriousRTOs"),
            reordering_detected=delta("TcpExtTCPSACKReorder", "TcpExtTCPTSReorder", "TcpExtTCPRenoReorder"),
            reductions_undone=delta("TcpExtTCPDSACKUndo", "TcpExtTCPLossUndo", "TcpExtTCPPartialUndo"),
        )


@dataclass(frozen=True, slots=True)
class TcpStats:
    """Both ends of a kernel TCP (or MPTCP) workload's downlink."""

    receiver: ReceiverStats
    sender: SenderStats

    def to_json(self) -> dict[str, dict[str, int]]:
        return {"receiver": asdict(self.receiver), "sender": asdict(self.sender)}

    @classmethod
    def from_json(cls, data: dict[str, dict[str, int]]) -> TcpStats:
        return cls(
            ReceiverStats(**{f.name: int(data["receiver"][f.name]) for f in fields(ReceiverStats)}),
            SenderStats(**{f.name: int(data["sender"][f.name]) for f in fields(SenderStats)}),
        )


def snapshot(namespace: str) -> Snapshot:
    """The absolute kernel counters of `namespace` (nstat without touching its history file)."""
    # --ignore: absolute values, not the change since the history file; --noupdate: leave that file alone.
    output = sh(["ip", "netns", "exec", namespace, "nstat", "--ignore", "--noupdate", "--zeros", "--json"])
    return parse(output, namespace)


def parse(output: str, namespace: str) -> Snapshot:
    try:
        counters = json.loads(output)["kernel"]
        return {name: int(value) for name, value in counters.items()}
    except (ValueError, KeyError, TypeError) as err:
        raise LabError(f"nstat in {namespace} printed no counters ({err}): {output[:200]!r}") from err


def _delta(before: Snapshot, after: Snapshot) -> Callable[..., int]:
    """The increase of the named counters, summed (a counter the kernel does not have counts 0)."""

    def delta(*names: str) -> int:
        return sum(after.get(name, 0) - before.get(name, 0) for name in names)

    return delta
