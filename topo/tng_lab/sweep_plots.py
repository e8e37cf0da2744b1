"""The sweep's two plots, from sweep.json: goodput and p95 delay against the configuration, one series per workload.

The configurations are the points in sweep order along the x axis, labelled with their axis values (one line per
axis). A series' line joins the points where only the last axis changes, and breaks where another axis does, so
each line segment shows how a workload responds to the last axis (e.g. more UEs) at one setting of the others.
Series are shifted a little sideways from each other so that equal values stay visible.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tng_lab.sweep_results import per_workload

COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#000000",
    "#aec7e8",
]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h", "p"]
DPI = 110
DODGE_SPAN = 0.5  # of the distance between two configurations, shared by all series


def plot_sweep(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """goodput.png and delay_p95.png; nothing when no workload of any point was measured."""
    measured = any("goodput_mbps" in entry for point in data["points"] for entry in point["workloads"].values())
    if not measured:
        return []
    goodput_label = "goodput (Mbit/s, all UEs)"
    return [
        _against_configuration(data, "goodput_mbps", goodput_label, "goodput", out_dir / "goodput.png"),
        _against_configuration(
            data,
            "delay_p95_ms",
            "p95 one-way downlink delay (ms)",
            "p95 delay",
            out_dir / "delay_p95.png",
        ),
    ]


def _segments(data: dict[str, Any]) -> list[list[int]]:
    """Runs of consecutive point positions that differ only in the last axis."""
    segments: list[list[int]] = []
    previous = None
    leading = [axis["name"] for axis in data["axes"][:-1]]
    for position, point in enumerate(data["points"]):
        key = tuple(point["axes"][name] for name in leading)
        if key != previous:
            segments.append([])
            previous = key
        segments[-1].append(position)
    return segments


def _against_configuration(data: dict[str, Any], key: str, ylabel: str, title: str, path: Path) -> Path:
    points = data["points"]
    names = data["workloads"]
    figure = Figure(figsize=(max(7.0, 0.45 * len(points) + 4.5), 5.2), layout="constrained")
    ax = figure.subplots()
    segments = _segments(data)
    series = {name: [point["workloads"][name].get(key) for point in points] for name in names}
    measured = [name for name in names if any(value is not None for value in series[name])]
    step = DODGE_SPAN / max(len(measured), 1)
    for rank, name in enumerate(measured):
        index = names.index(name)  # colours and markers follow the workload, whichever others were measured
        color, marker = COLORS[index % len(COLORS)], MARKERS[index % len(MARKERS)]
        shift = (rank - (len(measured) - 1) / 2) * step
        for number, segment in enumerate(segments):
            xs = [position + shift for position in segment]
            ys = [math.nan if series[name][p] is None else series[name][p] for p in segment]
            label = name if number == 0 else None
            ax.plot(xs, ys, color=color, marker=marker, markersize=5, linewidth=1.2, label=label)
    for boundary in (segment[0] - 0.5 for segment in segments[1:]):
        ax.axvline(boundary, color="gray", linewidth=0.6, alpha=0.5)
    ax.set_xticks(
        range(len(points)), ["\n".join(p["axes"][a["name"]] for a in data["axes"]) for p in points], fontsize=7
    )
    ax.set_xlim(-0.6, len(points) - 0.4)
    ax.set_xlabel("configuration: " + " / ".join(axis["title"] for axis in data["axes"]) + " (top to bottom)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, axis="y")
    if measured:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), title="workload", title_fontsize=8)
    ax.set_title(f"{data['sweep']}: {title} ({per_workload(data)} per workload)")
    figure.savefig(path, dpi=DPI)
    return path
