"""Kernel TCP counters around a run: the differences that matter for reordering, from nstat's JSON."""

from __future__ import annotations

import json

import pytest
from tng_lab.netns import LabError
from tng_lab.tcpstats import ReceiverStats, SenderStats, TcpStats, parse


def nstat_json(**counters: int) -> str:
    return json.dumps({"kernel": counters})


def test_receiver_counts_out_of_order_arrivals_and_dsacks() -> None:
    before = parse(nstat_json(TcpInSegs=100, TcpExtTCPOFOQueue=5, TcpExtTCPDSACKOldSent=1), "ue")
    after = parse(
        nstat_json(TcpInSegs=1100, TcpExtTCPOFOQueue=45, TcpExtTCPDSACKOldSent=3, TcpExtTCPDSACKOfoSent=2), "ue"
    )
    assert ReceiverStats.between(before, after) == ReceiverStats(
        segments_received=1000, out_of_order_queued=40, dsacks_sent=4
    )


def test_sender_sums_every_kind_of_reordering_evidence_and_undo() -> None:
    before = parse(nstat_json(TcpOutSegs=10, TcpRetransSegs=2), "server")
    after = parse(
        nstat_json(
            TcpOutSegs=2010,
            TcpRetransSegs=32,
            TcpExtTCPFastRetrans=20,
            TcpExtTCPTimeouts=1,
            TcpExtTCPDSACKRecv=12,
            TcpExtTCPSpuriousRTOs=1,
            TcpExtTCPSACKReorder=3,
            TcpExtTCPTSReorder=2,
            TcpExtTCPDSACKUndo=4,
            TcpExtTCPLossUndo=1,
        ),
        "server",
    )
    stats = SenderStats.between(before, after)
    assert (stats.segments_sent, stats.retransmitted_segments, stats.dsacks_received) == (2000, 30, 12)
    assert (stats.reordering_detected, stats.reductions_undone, stats.spurious_rtos) == (5, 5, 1)


def test_json_round_trip() -> None:
    stats = TcpStats(ReceiverStats(10, 2, 1), SenderStats(12, 3, 2, 0, 1, 0, 4, 1))
    assert TcpStats.from_json(json.loads(json.dumps(stats.to_json()))) == stats


def test_output_without_counters_is_a_lab_error_naming_the_namespace() -> None:
    with pytest.raises(LabError, match="nstat in tlab-ue printed no counters"):
        parse("not json", "tlab-ue")
