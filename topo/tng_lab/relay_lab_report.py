"""What tng_lab.relay_lab measured, as numbers: the data sender's smoothed RTT and bytes in flight from its qlog, a
1 s timeline, per-level goodput and p95 delays, and the split flow against end-to-end CUBIC at every level (Tng's
targets)."""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy
from matplotlib.figure import Figure

from tng_lab import relay_figure
from tng_lab.linkem import Counters
from tng_lab.relay_lab_net import SAMPLE_S, QueueSample

if TYPE_CHECKING:
    from tng_lab.relay_lab import Direction, Options

MEASURE_AFTER_S = 1.0  # the first level starts after the first second (the simulator's measure_after_s)
GOODPUT_TARGET = 0.95  # Tng's: split goodput >= 0.95 x end-to-end CUBIC's ...
DELAY_TARGET = 0.2  # ... at <= 0.2 x its p95 delay
SPLIT, CUBIC, VEGAS = (scheme.label for scheme in relay_figure.SCHEMES)


@dataclass(frozen=True, slots=True)
class SenderMetrics:
    """The data sender's flow state over time, from its qlog: (Unix seconds, value) at every change."""

    srtt_ms: list[tuple[float, float]]  # the largest smoothed RTT over its channels
    # The sum of its channels' bytes in flight, end to end. Through a relay the channel's own controller does not
    # bound them: the sender's section to the relay does (tng_relay::EndpointSections, its room).
    in_flight_bytes: list[tuple[float, float]]
    # The sum of the congestion windows of its sections to relays (`tng:section_updated`): what bounds the bytes
    # in flight of a split flow's sender. Empty end to end.
    section_window_bytes: list[tuple[float, float]] = dataclasses.field(default_factory=list)


# The qlog events read, and of each the fields and the series they go to: (event, field, series).
_SENDER_FIELDS = (
    ("recovery:metrics_updated", "smoothed_rtt", "srtt"),
    ("recovery:metrics_updated", "bytes_in_flight", "in_flight"),
    ("tng:section_updated", "congestion_window", "section_window"),
)


def sender_metrics(qlog_dir: Path) -> SenderMetrics:
    """Every `recovery:metrics_updated` that set a smoothed RTT or the bytes in flight, and every
    `tng:section_updated`, over every trace in `qlog_dir` (the data sender's)."""
    events: list[tuple[float, str, str, float]] = []
    for trace in sorted(qlog_dir.glob("*.sqlog")):
        with trace.open(errors="replace") as lines:
            header = json.loads(lines.readline().lstrip("\x1e"))
            reference_ms = float(header["trace"]["common_fields"]["reference_time"])
            for line in lines:
                if "metrics_updated" not in line and "section_updated" not in line:
                    continue
                try:
                    event = json.loads(line.lstrip("\x1e"))
                except ValueError:  # the last line of a trace cut short when its server stopped
                    continue
                data = event["data"]
                # A channel's series are its own; a section's are the relay's it goes through.
                source = f"{trace.name}/{data.get('channel', data.get('remote', 0))}"
                at = (reference_ms + event["time"]) / 1000
                for name, field_name, series in _SENDER_FIELDS:
                    if event["name"] == name and data.get(field_name) is not None:
                        events.append((at, series, source, float(data[field_name])))
    held: dict[str, dict[str, float]] = {series: {} for _, _, series in _SENDER_FIELDS}
    out: dict[str, list[tuple[float, float]]] = {series: [] for series in held}
    for at, series, source, value in sorted(events):
        held[series][source] = value
        combined = max(held[series].values()) if series == "srtt" else sum(held[series].values())
        out[series].append((at, combined))
    return SenderMetrics(out["srtt"], out["in_flight"], out["section_window"])


def _held(series: list[tuple[float, float]], times: list[float], at: float) -> float | None:
    index = bisect.bisect_right(times, at) - 1
    return series[index][1] if index >= 0 else None


def _held_kb(series: list[tuple[float, float]], times: list[float], at: float) -> float | None:
    held = _held(series, times, at)
    return round(held / 1000, 1) if held is not None else None


def _p(values: Sequence[float], q: float) -> float | None:
    return round(float(numpy.percentile(values, q)), 1) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return round(float(numpy.mean(values)), 3) if values else None


def scheme_report(
    options: Options,
    direction: Direction,
    t0_unix: float,
    transfer: dict[str, Any],
    sender: SenderMetrics,
    samples: list[QueueSample],
    cross: list[dict[str, Any]],
) -> dict[str, Any]:
    """The scheme's timeline (1 s: goodput in that second, the sender's SRTT and bytes in flight at its end, the DSL's
    mean queue delay in its sending direction) and its levels (the run split at every cross-flow start: mean goodput
    over the whole seconds inside, p95 of the SRTT and mean bytes in flight on a 100 ms grid, p95 of the DSL queue
    delay sampled every 100 ms)."""
    links = options.links
    down = direction.dsl_sending == "ab"
    dsl_bps = (links.dsl_down_mbit if down else links.dsl_up_mbit) * 1e6

    def sending(counters: Any) -> Counters:
        return counters.down if down else counters.up

    queue = [(s.t_unix - t0_unix, sending(s.dsl).queue_bytes * 8 / dsl_bps * 1000) for s in samples]
    srtt, in_flight, window = sender.srtt_ms, sender.in_flight_bytes, sender.section_window_bytes
    srtt_times, in_flight_times = [at for at, _ in srtt], [at for at, _ in in_flight]
    window_times = [at for at, _ in window]

    def in_flight_kb(at: float) -> float | None:
        return _held_kb(in_flight, in_flight_times, at)

    def section_window_kb(at: float) -> float | None:
        return _held_kb(window, window_times, at)

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
                "sender_in_flight_kb": in_flight_kb(t0_unix + k),
                "sender_section_window_kb": section_window_kb(t0_unix + k),
                "dsl_queue_ms": _mean(in_second),
            }
        )
    grid = [i * SAMPLE_S for i in range(round(options.total_s / SAMPLE_S) + 1)]
    grid_srtt = [(t, _held(srtt, srtt_times, t0_unix + t)) for t in grid]
    grid_in_flight = [(t, in_flight_kb(t0_unix + t)) for t in grid]
    levels = []
    for flows in range(options.max_cross + 1):
        start, end = flows * options.level_s, (flows + 1) * options.level_s
        start = max(start, MEASURE_AFTER_S)
        rates = [goodput[k] for k in goodput if start <= k - 1 and k <= end]
        rtts = [ms for t, ms in grid_srtt if start <= t < end and ms is not None]
        flights = [kb for t, kb in grid_in_flight if start <= t < end and kb is not None]
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
                "sender_in_flight_mean_kb": _mean(flights),
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
        "in_flight_samples": len(in_flight),
        "section_window_samples": len(window),
    }


def ratio(top: float | None, bottom: float | None) -> float | None:
    return round(top / bottom, 3) if top is not None and bottom else None


def verdicts(goodput: float | None, delay: float | None) -> dict[str, bool]:
    """Tng's targets for the split flow's ratios to end-to-end CUBIC: goodput and p95 delay."""
    return {
        "goodput_at_least_0_95": goodput is not None and goodput >= GOODPUT_TARGET,
        "p95_delay_at_most_0_2": delay is not None and delay <= DELAY_TARGET,
    }


def compare(schemes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: split / end-to-end CUBIC in goodput and p95 delay (the sender's SRTT: the delay Tng's targets
    speak of; the DSL queue's beside it), end-to-end Vegas's goodput over CUBIC's, and the targets' verdicts."""
    rows = []
    for split, cubic, vegas in zip(*(schemes[label]["levels"] for label in (SPLIT, CUBIC, VEGAS)), strict=True):
        goodput = ratio(split["goodput_mbps"], cubic["goodput_mbps"])
        delay = ratio(split["p95_srtt_ms"], cubic["p95_srtt_ms"])
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
                "split_over_cubic_p95_dsl_queue": ratio(split["p95_dsl_queue_ms"], cubic["p95_dsl_queue_ms"]),
                "vegas_over_cubic_goodput": ratio(vegas["goodput_mbps"], cubic["goodput_mbps"]),
                "targets": verdicts(goodput, delay),
            }
        )
    return rows


# `tng perf` data always flows from its server to its client: through the relay, its `toward_client` direction.
RELAY_DATA_DIRECTION = "toward_client"


def relay_report(
    options: Options, t0_unix: float, trace: list[dict[str, Any]], scheme: dict[str, Any]
) -> dict[str, Any]:
    """What the relay's trace (`tng relay --trace`, one line per 100 ms) says of the data's direction: its counters
    at the end; every sample (queue, downstream window and in flight, counts); per second the SECTIONs received and
    forwarded and the queue-full drops; per level the queue's mean, how often it was empty, and the seconds the
    DSL section idled for want of packets (goodput under 90 % of the level's best second with the queue empty in
    most of that second: the upstream section did not deliver, not the DSL section's controller)."""
    samples = []
    for line in trace:
        directions = [connection[RELAY_DATA_DIRECTION] for connection in line["connections"]]
        if directions:  # one tng connection crosses the relay in a run; the busiest if more
            state = max(directions, key=lambda direction: direction["received"])
            samples.append({"t_s": round(line["unix_s"] - t0_unix, 3), **state})
    times = [sample["t_s"] for sample in samples]

    def at(t: float) -> dict[str, Any] | None:
        index = bisect.bisect_right(times, t) - 1
        return samples[index] if index >= 0 else None

    seconds = []
    for k in range(1, int(options.total_s) + 1):
        start, end = at(k - 1), at(k)
        inside = [sample for sample in samples if k - 1 < sample["t_s"] <= k]
        counts = {
            f"{count}_per_s": end[count] - (start[count] if start else 0) if end else None
            for count in ("received", "forwarded", "queue_full")
        }
        empty = sum(sample["queued"] == 0 for sample in inside) / len(inside) if inside else None
        seconds.append(
            {"t_s": k, **counts, "queue_empty_share": empty, "queued_mean": _mean([s["queued"] for s in inside])}
        )
    goodput = {point["t_s"]: point["goodput_mbps"] for point in scheme["timeline"]}
    levels = []
    for level in scheme["levels"]:
        start, end = level["from_s"], level["to_s"]
        inside = [sample for sample in samples if start <= sample["t_s"] < end]
        in_level = [second for second in seconds if start <= second["t_s"] - 1 and second["t_s"] <= end]
        best = max((goodput.get(second["t_s"]) or 0.0 for second in in_level), default=0.0)
        starved = [
            second["t_s"]
            for second in in_level
            if (goodput.get(second["t_s"]) or 0.0) < 0.9 * best and (second["queue_empty_share"] or 0.0) > 0.5
        ]
        levels.append(
            {
                "cross_flows": level["cross_flows"],
                "queued_mean": _mean([sample["queued"] for sample in inside]),
                "queue_empty_share": _mean([float(sample["queued"] == 0) for sample in inside]),
                "queue_full": sum(second["queue_full_per_s"] or 0 for second in in_level),
                "downstream_window_mean": _mean([sample["window"] for sample in inside]),
                "seconds_starved_upstream": starved,
            }
        )
    return {**trace[-1]["stats"], "samples": samples, "seconds": seconds, "levels": levels}


def plot_relay(name: str, split: dict[str, Any], out_dir: Path, title: str) -> Path:
    """The split run at the relay: its queue in the data's direction (every sample) over the goodput; what it
    received, forwarded and dropped per second; the data sender's bytes in flight end to end (its qlog: what its
    section to the relay lets it send) and the relay's downstream section's window (its trace); cross-flow starts
    marked."""
    relay = split["relay"]
    figure = Figure(figsize=(9, 8.6))
    queue_axes, rate_axes, window_axes = figure.subplots(3, 1, sharex=True)
    queue_axes.plot(
        [s["t_s"] for s in relay["samples"]],
        [s["queued"] for s in relay["samples"]],
        color="#2ca02c",
        linewidth=0.8,
        label="relay queue, data direction (packets, 100 ms samples)",
    )
    goodput_axes = queue_axes.twinx()
    points = [(p["t_s"], p["goodput_mbps"]) for p in split["timeline"] if p["goodput_mbps"] is not None]
    goodput_axes.plot(
        [t for t, _ in points],
        [g for _, g in points],
        color="#000000",
        linewidth=1.0,
        label="split goodput (Mbit/s, right axis)",
    )
    goodput_axes.set_ylim(bottom=0)
    queue_axes.set_ylabel("packets queued")
    goodput_axes.set_ylabel("goodput (Mbit/s)")
    per_second = relay["seconds"]
    t = [second["t_s"] for second in per_second]
    for field, color, label in (
        ("received_per_s", "#1f77b4", "SECTIONs received from upstream"),
        ("forwarded_per_s", "#2ca02c", "SECTIONs forwarded downstream"),
    ):
        rate_axes.plot(t, [second[field] for second in per_second], color=color, label=label)
    rate_axes.bar(
        t,
        [second["queue_full_per_s"] or 0 for second in per_second],
        color="#d62728",
        width=0.8,
        label="dropped: queue full",
    )
    rate_axes.set_ylabel("SECTIONs per second")
    rate_axes.legend(loc="lower right", fontsize="small")
    rate_axes.set_ylim(bottom=0)
    rate_axes.grid(alpha=0.3)
    sender = [
        (p["t_s"], p["sender_in_flight_kb"]) for p in split["timeline"] if p.get("sender_in_flight_kb") is not None
    ]
    window_axes.plot(
        [t for t, _ in sender],
        [kb for _, kb in sender],
        color="#9467bd",
        label="data sender's bytes in flight end to end (its qlog), at each second's end",
    )
    section = [
        (p["t_s"], p["sender_section_window_kb"])
        for p in split["timeline"]
        if p.get("sender_section_window_kb") is not None
    ]
    window_axes.plot(
        [t for t, _ in section],
        [kb for _, kb in section],
        color="#ff7f0e",
        label="data sender's section window toward the relay (its qlog), at each second's end",
    )
    window_axes.plot(
        [s["t_s"] for s in relay["samples"]],
        [s["window"] / 1000 for s in relay["samples"]],
        color="#2ca02c",
        linewidth=0.8,
        label="relay's downstream section's window, 100 ms samples",
    )
    window_axes.set_ylabel("kB")
    window_axes.set_ylim(bottom=0)
    for axes in (queue_axes, rate_axes, window_axes):
        for index, flow in enumerate(split["cross_traffic"]):
            axes.axvline(
                flow["start_s"], color="#7f7f7f", linestyle=":", label="a cross flow starts" if index == 0 else None
            )
    handles, labels = queue_axes.get_legend_handles_labels()
    more_handles, more_labels = goodput_axes.get_legend_handles_labels()
    queue_axes.legend(handles + more_handles, labels + more_labels, loc="upper right", fontsize="small")
    queue_axes.set_ylim(bottom=0)
    queue_axes.set_title(title)
    queue_axes.grid(alpha=0.3)
    window_axes.set_xlabel("time (s)")
    return relay_figure.save(figure, window_axes, "", out_dir / f"{name}-relay.png", legend_at="upper right")


def plot(name: str, schemes: dict[str, dict[str, Any]], out_dir: Path, title: str) -> list[Path]:
    """relay_figure's figures over time, one line per scheme, cross-flow starts marked."""
    panels = (
        (f"{name}-goodput.png", "goodput_mbps", "goodput (Mbit/s, 1 s bins)"),
        (f"{name}-delay.png", "sender_srtt_ms", "data sender's smoothed RTT (ms)"),
        (f"{name}-dsl-queue.png", "dsl_queue_ms", "DSL queue delay, sending direction (ms)"),
    )
    written = relay_figure.plot(schemes, title, out_dir, panels)
    if schemes[SPLIT].get("relay"):
        written.append(plot_relay(name, schemes[SPLIT], out_dir, f"{name}: the split flow at the relay"))
    return written
