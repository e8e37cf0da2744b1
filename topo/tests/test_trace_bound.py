"""The sender one round trip behind the link (`trace_bound`): on a constant link it keeps its queue target and
fills the link; a full-queue sender waits the whole queue; a fall of the rate it learns of late is what its p95
delay pays, more the later it learns; drops it hears of do not stall it."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from tng_lab import trace_bound
from tng_lab.trace_bound import Point, frontier, lowest_delay_at, opportunities_per_ms, run

LINK = {"queue_packets": 50, "one_way_ms": 20}


def test_a_trace_loops_as_linkem_replays_it() -> None:
    # Loop k holds k x period (the last timestamp) + each timestamp, as tng_lab.delay.TraceSchedule counts them.
    assert opportunities_per_ms([1, 1, 3], 8) == [0, 2, 0, 1, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="no delivery opportunity"):
        opportunities_per_ms([], 10)


def test_on_a_constant_link_it_keeps_its_target_and_fills_the_link() -> None:
    constant = [1] * 5000  # 12 Mbit/s of 1500-byte packets
    goodput, p95 = run(constant, **LINK, feedback_ms=40, target_packets=1, window_ms=40)
    assert goodput == pytest.approx(12.0, rel=0.01)
    assert p95 <= 21.0  # the one-way delay and at most a packet's wait
    goodput, p95 = run(constant, **LINK, feedback_ms=40, target_packets=None)
    assert goodput == pytest.approx(12.0, rel=0.01)
    assert p95 == pytest.approx(20 + 50, abs=1)  # a full queue of 50 packets at one a millisecond


def test_a_fall_of_the_rate_costs_more_delay_the_later_the_sender_learns_of_it() -> None:
    falling = ([4] * 500 + [1] * 500) * 10  # 48 Mbit/s for 0.5 s, then 12 Mbit/s, and again
    p95s = [run(falling, **LINK, feedback_ms=fb, target_packets=2, window_ms=20)[1] for fb in (0, 40, 120)]
    assert p95s[0] < p95s[1] < p95s[2], p95s
    assert p95s[0] <= 22.0  # knowing the link at once, it has nothing to wait for


def test_drops_it_hears_of_do_not_stall_it() -> None:
    """A target above the queue overflows it all the time; a sender that took dropped packets for queued ones would
    reckon its queue ever longer and stop sending."""
    goodput, _ = run([1] * 5000, queue_packets=2, one_way_ms=20, feedback_ms=40, target_packets=8, window_ms=40)
    assert goodput > 0.75 * 12.0


def test_the_frontier_keeps_only_undominated_points_and_the_floor_is_respected() -> None:
    points = [
        Point(1, 40, 6.0, 0.60, 30.0),
        Point(2, 40, 7.0, 0.70, 35.0),
        Point(4, 40, 6.5, 0.65, 40.0),  # slower and later than the one before
        Point(8, 40, 9.0, 0.90, 60.0),
    ]
    assert [p.target_packets for p in frontier(points)] == [1, 2, 8]
    assert lowest_delay_at(points, 0.68) == points[1]
    assert lowest_delay_at(points, 0.95) is None


def test_the_command_reports_the_trace_and_refuses_a_bad_queue(tmp_path: Path) -> None:
    trace = tmp_path / "constant.trace"
    trace.write_text("".join(f"{ms}\n" for ms in range(1, 1001)))
    png = tmp_path / "trade.png"
    out = io.StringIO()
    with redirect_stdout(out):
        assert trace_bound.main([str(trace), "--seconds", "2", "--utilization-floor", "0.9", "--plot", str(png)]) == 0
    report = json.loads(out.getvalue())
    assert report["capacity_mbps"] == pytest.approx(12.0, rel=0.01)
    assert (report["queue_packets"], report["one_way_ms"], report["feedback_ms"]) == (100, 20, 40)
    assert report["lowest_p95_at_floor"]["p95_delay_ms"] <= 21.0
    assert report["frontier"]
    assert png.read_bytes().startswith(b"\x89PNG")
    errors = io.StringIO()
    with redirect_stderr(errors):
        assert trace_bound.main([str(trace), "--queue", "150"]) == 2
    assert "needs a size unit" in errors.getvalue()
