"""Repetitions of tng_lab.relay_lab pooled per cross-traffic level, and the figure of the split flow's ratios to
end-to-end CUBIC per level (every run's and the pooled ones, against Tng's targets).

One 30 s level of one run says little: the first cross flow's slow start lands on the core section at a different
moment each time (docs/lab.md). Pooling takes each scheme's goodput as the mean of the runs' level goodputs and its
p95 SRTT as their median, and the ratios from those, so that a run's spell of bad luck weighs as one of N.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tng_lab import relay_figure
from tng_lab.relay_lab_report import CUBIC, DELAY_TARGET, GOODPUT_TARGET, SPLIT, VEGAS, ratio, verdicts


def _pooled(values: Sequence[float | None], pool: Callable[[list[float]], float]) -> float | None:
    present = [value for value in values if value is not None]
    return round(pool(present), 3) if present else None


def pool(comparisons: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per level, from each run's `relay_lab_report.compare` rows: every scheme's mean goodput and median p95 SRTT
    over the runs, the split flow's ratios to end-to-end CUBIC from those with Tng's verdicts, and each run's own
    ratios beside them."""
    if not comparisons:
        raise ValueError("no runs to pool")
    levels = {len(rows) for rows in comparisons}
    if len(levels) != 1:
        raise ValueError(f"runs with different numbers of levels cannot be pooled: {sorted(levels)}")
    pooled = []
    for rows in zip(*comparisons, strict=True):
        goodput = {
            label: _pooled([row["goodput_mbps"][label] for row in rows], statistics.mean)
            for label in (SPLIT, CUBIC, VEGAS)
        }
        p95 = {
            label: _pooled([row["p95_srtt_ms"][label] for row in rows], statistics.median)
            for label in (SPLIT, CUBIC, VEGAS)
        }
        goodput_ratio, delay_ratio = ratio(goodput[SPLIT], goodput[CUBIC]), ratio(p95[SPLIT], p95[CUBIC])
        pooled.append(
            {
                "cross_flows": rows[0]["cross_flows"],
                "runs": len(rows),
                "goodput_mbps": goodput,
                "p95_srtt_ms": p95,
                "split_over_cubic_goodput": goodput_ratio,
                "split_over_cubic_p95_srtt": delay_ratio,
                "vegas_over_cubic_goodput": ratio(goodput[VEGAS], goodput[CUBIC]),
                "per_run": {
                    key: [row[key] for row in rows]
                    for key in (
                        "split_over_cubic_goodput",
                        "split_over_cubic_p95_srtt",
                        "split_over_cubic_p95_dsl_queue",
                        "vegas_over_cubic_goodput",
                    )
                },
                "targets": verdicts(goodput_ratio, delay_ratio),
            }
        )
    return pooled


def plot_levels(name: str, pooled: Sequence[dict[str, Any]], out_dir: Path, title: str) -> Path:
    """Two panels over the cross-traffic levels: split / end-to-end CUBIC in goodput (and Vegas / CUBIC) and in p95
    SRTT; every run's ratio as a dot, the pooled ratio as a line, Tng's target dashed."""
    colors = {scheme.label: scheme.color for scheme in relay_figure.SCHEMES}
    figure = Figure(figsize=(8, 7))
    goodput_axes, delay_axes = figure.subplots(2, 1, sharex=True)
    flows = [row["cross_flows"] for row in pooled]
    panels = (
        (goodput_axes, "split_over_cubic_goodput", SPLIT, "split / end-to-end CUBIC", GOODPUT_TARGET),
        (goodput_axes, "vegas_over_cubic_goodput", VEGAS, "end-to-end Vegas / CUBIC", None),
        (delay_axes, "split_over_cubic_p95_srtt", SPLIT, "split / end-to-end CUBIC", DELAY_TARGET),
    )
    for axes, key, label, legend, target in panels:
        dots = [(row["cross_flows"], value) for row in pooled for value in row["per_run"][key] if value is not None]
        axes.scatter([x for x, _ in dots], [y for _, y in dots], color=colors[label], alpha=0.5, s=18)
        line = [(row["cross_flows"], row[key]) for row in pooled if row[key] is not None]
        axes.plot(
            [x for x, _ in line], [y for _, y in line], color=colors[label], marker="o", label=f"{legend}, pooled"
        )
        if target is not None:
            axes.axhline(target, color="#7f7f7f", linestyle="--", label=f"Tng's target ({target:g})")
    runs = max(row["runs"] for row in pooled)
    goodput_axes.set_ylabel("goodput ratio")
    figure.suptitle(title, fontsize="medium")
    goodput_axes.set_title(f"{runs} run(s): a dot is one run's ratio, the line the pooled one", fontsize="small")
    delay_axes.set_ylabel("p95 SRTT ratio")
    delay_axes.set_xlabel("cross flows on the core")
    delay_axes.set_xticks(flows)
    for axes in (goodput_axes, delay_axes):
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    path = out_dir / f"{name}-levels.png"
    figure.savefig(path, dpi=relay_figure.DPI)
    return path
