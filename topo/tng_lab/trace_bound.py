"""How low can the delay go on a trace? Goodput and p95 one-way delay of a sender that knows the link one round trip
late: every delivery opportunity of the trace up to `feedback` ago, none of the ones since.

The Sprout paper compares with an omniscient sender, which knows the future of the link and so never queues; any
sender that learns of the link through acknowledgements knows it a round trip late instead. This one keeps
`target` packets queued by its own reckoning: the packets it sent, less those it knows were delivered or dropped,
less what the link drained since at its mean rate over the last `window` it knows of. Sweeping target and window
gives the goodput / delay trade such a sender has on the trace; its delay at a given goodput is what a
congestion controller fed by acknowledgements can hope for on that trace, and its p95 comes from the falls of the
rate it learns of too late, not from its queue target.

The link is a Mahimahi trace (one 1500-byte delivery opportunity per line, in milliseconds, looping) behind a
drop-tail queue of whole packets, then a fixed one-way delay; the sender always has data. Used by `bench_alcc` and
on its own:

    python -m tng_lab.trace_bound TRACE [--seconds 20] [--delay 20ms] [--queue 150kb] [--utilization-floor F]
                                       [--plot PNG]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tng_lab.delay import TraceSchedule
from tng_lab.linkem import read_trace
from tng_lab.linkspec import SpecValueError, parse_duration, parse_size

PACKET_BYTES = 1500  # a trace's delivery opportunity carries one packet of this size
TARGETS = (1, 2, 4, 8, 16, 32)  # packets the sender keeps queued by its reckoning
WINDOWS_MS = (40, 100, 200, 500)  # how far back it averages the link's rate


@dataclass(frozen=True, slots=True)
class Point:
    target_packets: int
    window_ms: int
    goodput_mbps: float  # of whole packets, as the trace's capacity counts them
    utilization: float  # goodput / capacity
    p95_delay_ms: float


def opportunities_per_ms(trace: Sequence[int], duration_ms: int) -> list[int]:
    """Delivery opportunities in each millisecond of the first `duration_ms`, the trace looping as linkem loops it."""
    if not trace or trace[-1] <= 0:
        raise ValueError("the trace has no delivery opportunity after time 0")
    schedule = TraceSchedule(tuple(trace))
    before = [schedule.count_before(ms) for ms in range(duration_ms + 1)]
    return [later - earlier for earlier, later in pairwise(before)]


def capacity_mbps(opportunities: Sequence[int]) -> float:
    return sum(opportunities) * PACKET_BYTES * 8 / (len(opportunities) / 1000) / 1e6


def run(
    opportunities: Sequence[int],
    *,
    queue_packets: int,
    one_way_ms: int,
    feedback_ms: int,
    target_packets: int | None,
    window_ms: int = 0,
) -> tuple[float, float]:
    """Goodput (Mbit/s) and p95 one-way delay (ms) of the sender above; `target_packets=None`: a sender that keeps
    the queue full (loss-based, as CUBIC's tail)."""
    duration = len(opportunities)
    known_opportunities = [0] * (duration + 1)
    for ms, count in enumerate(opportunities):
        known_opportunities[ms + 1] = known_opportunities[ms] + count
    queue: deque[int] = deque()  # send times of the queued packets
    delivered_by = [0] * (duration + 1)  # deliveries before each millisecond
    dropped_at = [0] * duration
    sent = dropped_known = 0
    delays: list[int] = []
    for now in range(duration):
        if target_packets is None:
            allowed = queue_packets - len(queue)
        else:
            known = now - feedback_ms  # the last millisecond the sender has heard of
            if known >= 0:
                dropped_known += dropped_at[known]
                start = max(0, known - window_ms + 1)
                rate = (known_opportunities[known + 1] - known_opportunities[start]) / (known - start + 1)
                outstanding = sent - delivered_by[known + 1] - dropped_known - rate * feedback_ms
            else:
                outstanding = sent  # nothing heard yet: the target's worth goes out first
            allowed = max(0, int(target_packets - outstanding))
        for _ in range(allowed):
            if len(queue) < queue_packets:
                queue.append(now)
            else:
                dropped_at[now] += 1
            sent += 1
        delivered = 0
        while delivered < opportunities[now] and queue:
            delays.append(now - queue.popleft() + one_way_ms)
            delivered += 1
        delivered_by[now + 1] = delivered_by[now] + delivered
    goodput = delivered_by[duration] * PACKET_BYTES * 8 / (duration / 1000) / 1e6
    delays.sort()
    return goodput, float(delays[int(0.95 * (len(delays) - 1))]) if delays else 0.0


def sweep(opportunities: Sequence[int], *, queue_packets: int, one_way_ms: int, feedback_ms: int) -> list[Point]:
    capacity = capacity_mbps(opportunities)
    points = []
    for window in WINDOWS_MS:
        for target in TARGETS:
            goodput, p95 = run(
                opportunities,
                queue_packets=queue_packets,
                one_way_ms=one_way_ms,
                feedback_ms=feedback_ms,
                target_packets=target,
                window_ms=window,
            )
            points.append(Point(target, window, round(goodput, 3), round(goodput / capacity, 4), p95))
    return points


def frontier(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both goodput and delay, by rising goodput."""
    best: list[Point] = []
    for point in sorted(points, key=lambda p: (p.p95_delay_ms, -p.goodput_mbps)):
        if not best or point.goodput_mbps > best[-1].goodput_mbps:
            best.append(point)
    return best


def lowest_delay_at(points: Sequence[Point], utilization_floor: float) -> Point | None:
    """The point of least p95 delay among those that use at least `utilization_floor` of the link."""
    enough = [p for p in points if p.utilization >= utilization_floor]
    return min(enough, key=lambda p: (p.p95_delay_ms, -p.goodput_mbps)) if enough else None


def bound(
    trace: Path, *, seconds: float, one_way_s: float, queue_bytes: int, utilization_floor: float | None = None
) -> dict[str, Any]:
    """The trace's capacity, a full-queue sender's goodput and p95, the lagged sender's sweep and frontier, and
    (with a floor) its lowest p95 using at least that share of the link."""
    duration_ms = round(seconds * 1000)
    opportunities = opportunities_per_ms(read_trace(trace), duration_ms)
    one_way_ms = round(one_way_s * 1000)
    link = {"queue_packets": max(1, queue_bytes // PACKET_BYTES), "one_way_ms": one_way_ms}
    feedback_ms = 2 * one_way_ms
    full_goodput, full_p95 = run(opportunities, **link, feedback_ms=feedback_ms, target_packets=None)
    points = sweep(opportunities, **link, feedback_ms=feedback_ms)
    result: dict[str, Any] = {
        "trace": str(trace),
        "seconds": seconds,
        **link,
        "feedback_ms": feedback_ms,
        "capacity_mbps": round(capacity_mbps(opportunities), 3),
        "full_queue": {"goodput_mbps": round(full_goodput, 3), "p95_delay_ms": full_p95},
        "frontier": [asdict(p) for p in frontier(points)],
        "points": [asdict(p) for p in points],
    }
    if utilization_floor is not None:
        best = lowest_delay_at(points, utilization_floor)
        result["utilization_floor"] = utilization_floor
        result["lowest_p95_at_floor"] = asdict(best) if best else None
    return result


def plot(found: dict[str, Any], path: Path, measured: dict[str, tuple[float, float]] | None = None) -> Path:
    """Pantheon's view of the trace: share of the link used against p95 delay (reversed, so better is up and
    right), the lagged sender's frontier as a line, the full-queue sender, and each `measured` workload's
    (utilization, p95) as a labelled point."""
    figure = Figure(figsize=(7.5, 4.8), layout="constrained")
    axes = figure.subplots()
    best = found["frontier"]
    axes.plot(
        [p["p95_delay_ms"] for p in best],
        [p["utilization"] for p in best],
        "k-o",
        markersize=3,
        label=f"a sender {found['feedback_ms']} ms behind the link (its best trade)",
    )
    full = found["full_queue"]
    axes.plot(
        [full["p95_delay_ms"]], [full["goodput_mbps"] / found["capacity_mbps"]], "ks", label="a sender keeping it full"
    )
    for name, (utilization, p95) in sorted((measured or {}).items()):
        axes.plot([p95], [utilization], "o", label=name)
    axes.invert_xaxis()
    axes.set_xlabel("p95 one-way delay (ms)")
    axes.set_ylabel("share of the link's capacity")
    axes.set_title(f"{Path(str(found['trace'])).name}: {found['capacity_mbps']:.2f} Mbit/s over {found['seconds']:g} s")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="lower left")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.trace_bound", description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a Mahimahi trace file (linkem gen-trace writes one)")
    parser.add_argument("--seconds", type=float, default=20.0, help="from the trace's start (default 20)")
    parser.add_argument("--delay", default="20ms", help="one-way delay beside the queue (default 20ms)")
    parser.add_argument("--queue", default="150kb", help="drop-tail queue, as linkem's queue= (default 150kb)")
    parser.add_argument(
        "--utilization-floor", type=float, help="report the lowest p95 using at least this share of the link (0-1)"
    )
    parser.add_argument("--plot", type=Path, help="also draw the trade in this PNG")
    args = parser.parse_args(argv)
    try:
        one_way_s = parse_duration(args.delay)
        queue_bytes = parse_size(args.queue, PACKET_BYTES)
        result = bound(
            args.trace,
            seconds=args.seconds,
            one_way_s=one_way_s,
            queue_bytes=queue_bytes,
            utilization_floor=args.utilization_floor,
        )
    except (OSError, ValueError, SpecValueError) as exc:
        print(f"trace_bound: {exc}", file=sys.stderr)
        return 2
    if args.plot is not None:
        plot(result, args.plot)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
