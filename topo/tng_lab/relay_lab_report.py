"""What tng_lab.relay_lab measured, as numbers: the data sender's smoothed RTT from its qlog, a 1 s timeline,
per-level goodput and p95 delays, and the split flow against end-to-end CUBIC at every level (Tng's targets)."""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

from tng_lab import relay_figure
from tng_lab.linkem import Counters
from tng_lab.relay_lab_net import SAMPLE_S, QueueSample

if TYPE_CHECKING:
    from tng_lab.relay_lab import Direction, Options

MEASURE_AFTER_S = 1.0  # the first level starts after the first second (the simulator's measure_after_s)
GOODPUT_TARGET = 0.95  # Tng's: split goodput >= 0.95 x end-to-end CUBIC's ...
DELAY_TARGET = 0.2  # ... at <= 0.2 x its p95 delay
SPLIT, CUBIC, VEGAS = (scheme.label for scheme in relay_figure.SCHEMES)


def sender_srtt(qlog_dir: Path) -> list[tuple[float, float]]:
    """(Unix seconds, smoothed RTT in ms) of every `recovery:metrics_updated` that set one, over every trace in
    `qlog_dir` (the data sender's), the largest over its channels at each moment."""
    events: list[tuple[float, str, float]] = []
    for trace in sorted(qlog_dir.glob("*.sqlog")):
        with trace.open(errors="replace") as lines:
            header = json.loads(lines.readline().lstrip("\x1e"))
            reference_ms = float(header["trace"]["common_fields"]["reference_time"])
            for line in lines:
                if "smoothed_rtt" not in line or "metrics_updated" not in line:
                    continue
                try:
                    event = json.loads(line.lstrip("\x1e"))
                except ValueError:  # the last line of a trace cut short when its server stopped
                    continue
                channel = f"{trace.name}/{event['data'].get('channel', 0)}"
                events.append(((reference_ms + event["time"]) / 1000, channel, float(event["data"]["smoothed_rtt"])))
    held: dict[str, float] = {}
    series = []
    for at, channel, srtt in sorted(events):
        held[channel] = srtt
        series.append((at, max(held.values())))
    return series


def _held(series: list[tuple[float, float]], times: list[float], at: float) -> float | None:
    index = bisect.bisect_right(times, at) - 1
    return series[index][1] if index >= 0 else None


def _p(values: Sequence[float], q: float) -> float | None:
    return round(float(numpy.percentile(values, q)), 1) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return round(float(numpy.mean(values)), 3) if values else None


def scheme_report(
    options: Options,
    direction: Direction,
    t0_unix: float,
    transfer: dict[str, Any],
    srtt: list[tuple[float, float]],
    samples: list[QueueSample],
    cross: list[dict[str, Any]],
) -> dict[str, Any]:
    """The scheme's timeline (1 s: goodput in that second, the sender's SRTT at its end, the DSL's mean queue delay in
    its sending direction) and its levels (the run split at every cross-flow start: mean goodput over the whole
    seconds inside, p95 of the SRTT on a 100 ms grid and of the DSL queue delay sampled every 100 ms)."""
    links = options.links
    down = direction.dsl_sending == "ab"
    dsl_bps = (links.dsl_down_mbit if down else links.dsl_up_mbit) * 1e6

    def sending(counters: Any) -> Counters:
        return counters.down if down else counters.up

    queue = [(s.t_unix - t0_unix, sending(s.dsl).queue_bytes * 8 / dsl_bps * 1000) for s in samples]
    srtt_times = [at for at, _ in srtt]
    goodput = dict(transfer.pop("goodput_per_second"))
    seconds = int(options.total_s)
    timeline = []
    for k in range(1, seconds + 1):
        in_second = [ms for t, ms in queue if k - 1 < t <= k]
        timeline.append(
            {
                "t_s": k,
                "goodput_mbps": goodput.get(k),
                "sender_srtt_ms": _held(srtt, srtt_times, t0_unix + k),
                "dsl_queue_ms": _mean(in_second),
            }
        )
    grid = [i * SAMPLE_S for i in range(round(options.total_s / SAMPLE_S) + 1)]
    grid_srtt = [(t, _held(srtt, srtt_times, t0_unix + t)) for t in grid]
    levels = []
    for flows in range(options.max_cross + 1):
        start, end = flows * options.level_s, (flows + 1) * options.level_s
        start = max(start, MEASURE_AFTER_S)
        rates = [goodput[k] for k in goodput if start <= k - 1 and k <= end]
        rtts = [ms for t, ms in grid_srtt if start <= t < end and ms is not None]
        delays = [ms for t, ms in queue if start <= t < end]
        inside = [s for s in samples if start <= s.t_unix - t0_unix < end]
        core_mbit = None
        if len(inside) > 1:
            carried = sending(inside[-1].core).forwarded_bytes - sending(inside[0].core).forwarded_bytes
            core_mbit = round(carried * 8 / 1e6 / (inside[-1].t_unix - inside[0].t_unix), 2)
        levels.append(
            {
                "cross_flows": flows,
                "from_s": start,
                "to_s": end,
                "goodput_mbps": _mean(rates),
                "p95_srtt_ms": _p(rtts, 95),
                "p50_srtt_ms": _p(rtts, 50),
                "p95_dsl_queue_ms": _p(delays, 95),
                "mean_dsl_queue_ms": _mean(delays),
                "core_mbit_sending_direction": core_mbit,
            }
        )
    last = samples[-1] if samples else None
    return {
        "direction": direction.name,
        "transfer": transfer,
        "cross_traffic": cross,
        "timeline": timeline,
        "levels": levels,
        "dsl_sending_dropped_queue": sending(last.dsl).dropped_queue if last else None,
        "core_sending_dropped_queue": sending(last.core).dropped_queue if last else None,
        "queue_samples": len(samples),
        "srtt_samples": len(srtt),
    }


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return round(top / bottom, 3) if top is not None and bottom else None


def compare(schemes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: split / end-to-end CUBIC in goodput and p95 delay (the sender's SRTT: the delay Tng's targets
    speak of; the DSL queue's beside it), end-to-end Vegas's goodput over CUBIC's, and the targets' verdicts."""
    rows = []
    for split, cubic, vegas in zip(*(schemes[label]["levels"] for label in (SPLIT, CUBIC, VEGAS)), strict=True):
        goodput = _ratio(split["goodput_mbps"], cubic["goodput_mbps"])
        delay = _ratio(split["p95_srtt_ms"], cubic["p95_srtt_ms"])
        rows.append(
            {
                "cross_flows": split["cross_flows"],
                "goodput_mbps": {
                    label: level["goodput_mbps"]
                    for label, level in zip((SPLIT, CUBIC, VEGAS), (split, cubic, vegas), strict=True)
                },
                "p95_srtt_ms": {
                    label: level["p95_srtt_ms"]
                    for label, level in zip((SPLIT, CUBIC, VEGAS), (split, cubic, vegas), strict=True)
                },
                "split_over_cubic_goodput": goodput,
                "split_over_cubic_p95_srtt": delay,
                "split_over_cubic_p95_dsl_queue": _ratio(split["p95_dsl_queue_ms"], cubic["p95_dsl_queue_ms"]),
                "vegas_over_cubic_goodput": _ratio(vegas["goodput_mbps"], cubic["goodput_mbps"]),
                "targets": {
                    "goodput_at_least_0_95": goodput is not None and goodput >= GOODPUT_TARGET,
                    "p95_delay_at_most_0_2": delay is not None and delay <= DELAY_TARGET,
                },
            }
        )
    return rows


def plot(name: str, schemes: dict[str, dict[str, Any]], out_dir: Path, title: str) -> list[Path]:
    """relay_figure's figures over time, one line per scheme, cross-flow starts marked."""
    panels = (
        (f"{name}-goodput.png", "goodput_mbps", "goodput (Mbit/s, 1 s bins)"),
        (f"{name}-delay.png", "sender_srtt_ms", "data sender's smoothed RTT (ms)"),
        (f"{name}-dsl-queue.png", "dsl_queue_ms", "DSL queue delay, sending direction (ms)"),
    )
    return relay_figure.plot(schemes, title, out_dir, panels)
