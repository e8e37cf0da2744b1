"""Tng's lossy-WAN figure (seed 004, Figure 10) from the simulator: cumulative bytes over time, split and end to end.

Runs a scenario file with a relay before a WAN whose random loss rate steps (`loss_steps`), for each controller
(default NewReno and Vegas, the paper's Reno-like and Vegas-like schemes) split as written and end to end
(`--without-relays`), and draws the bytes each delivered over time, with the moments the loss rate rises marked.
Writes `lossy-wan.json` (per loss rate, each run's goodput and split / end to end) and `cumulative.png`.

    python -m tng_lab.lossy_wan_figure host-agent/scenarios/relay-lossy-wan.toml --out build/sim/relay-lossy-wan
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tng_lab.relay_figure import DEFAULT_SIM, REPO, Scheme, run_scheme, save

COLORS = {"newreno": "#d62728", "vegas": "#1f77b4", "cubic": "#9467bd", "copa": "#8c564b", "bbr": "#e377c2"}


def schemes(controllers: list[str]) -> list[tuple[str, Scheme, Scheme]]:
    """Per controller: the split run (the sending end's section runs it) and the end-to-end run."""
    pairs = []
    for cc in controllers:
        color = COLORS.get(cc, "#7f7f7f")
        chosen = ("--set", f'transport.cc="{cc}"')
        split = Scheme(f"split, {cc}", color, chosen)
        pairs.append((cc, split, Scheme(f"end-to-end {cc}", color, ("--without-relays", *chosen))))
    return pairs


def cumulative_mb(report: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Times and megabytes delivered by then, from the report's timeline (goodput per interval)."""
    timeline = report["timeline"]
    times = [0.0] + [point["t_s"] for point in timeline]
    starts = times[:-1]  # each interval starts where the one before ended
    delivered = (
        point["goodput_mbps"] * (point["t_s"] - start) / 8 for point, start in zip(timeline, starts, strict=True)
    )
    return times, [0.0, *accumulate(delivered)]


def levels_table(pairs: list[tuple[str, Scheme, Scheme]], reports: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per loss level: its span and rate, each run's goodput and the split / end-to-end ratio."""
    first = reports[pairs[0][1].label]["levels"]
    rows = []
    for index, level in enumerate(first):
        row: dict[str, Any] = {
            "from_s": level["from_s"],
            "to_s": level["to_s"],
            "random_loss": level.get("random_loss"),
        }
        for cc, split, end_to_end in pairs:
            split_mbps = reports[split.label]["levels"][index]["goodput_mbps"]
            end_mbps = reports[end_to_end.label]["levels"][index]["goodput_mbps"]
            row[cc] = {
                "split_mbps": split_mbps,
                "end_to_end_mbps": end_mbps,
                "split_over_end_to_end": round(split_mbps / end_mbps, 2) if end_mbps > 0 else None,
            }
        rows.append(row)
    return rows


def plot(pairs: list[tuple[str, Scheme, Scheme]], reports: dict[str, dict[str, Any]], title: str, out: Path) -> Path:
    """cumulative.png: megabytes delivered over time, split solid and end to end dashed, loss steps marked."""
    figure = Figure(figsize=(9, 4.8))
    axes = figure.add_subplot()
    for index, (_, split, end_to_end) in enumerate(pairs):
        width = 1.5 + 1.5 * (len(pairs) - 1 - index)  # the first controllers' lines wider: overlaps stay visible
        for scheme, style in ((split, "-"), (end_to_end, "--")):
            times, megabytes = cumulative_mb(reports[scheme.label])
            axes.plot(times, megabytes, style, color=scheme.color, linewidth=width, label=scheme.label)
    top = axes.get_ylim()[1]
    for level in reports[pairs[0][1].label]["levels"]:
        loss = level.get("random_loss")
        if loss is None:
            continue
        axes.axvline(level["from_s"], color="#7f7f7f", linestyle=":", linewidth=0.8)
        axes.text(level["from_s"] + 0.3, 0.97 * top, f"{loss * 100:g} %", fontsize="x-small", va="top", color="#555555")
    axes.set_xlabel("time (s); the WAN's random loss rate from each dotted line on")
    axes.set_ylabel("delivered (MB)")
    return save(figure, axes, title, out / "cumulative.png", legend_at="center right")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.lossy_wan_figure", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path, help="a tng-sim scenario file with a relay and loss_steps")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default build/sim/<scenario>)")
    parser.add_argument("--sim", type=Path, default=DEFAULT_SIM, help="the tng-sim binary (default: release build)")
    parser.add_argument("--controllers", default="newreno,vegas", help="comma-separated (default newreno,vegas)")
    parser.add_argument("--interval-ms", type=int, default=500, help="timeline interval (default 500 ms)")
    args = parser.parse_args(argv)
    if not args.sim.is_file():
        print(f"lossy_wan_figure: {args.sim} not found (cargo build --release -p tng-sim)", file=sys.stderr)
        return 2
    pairs = schemes([cc.strip() for cc in args.controllers.split(",") if cc.strip()])
    out_dir = args.out or REPO / "build" / "sim" / args.scenario.stem
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = {}
    for _, split, end_to_end in pairs:
        for scheme in (split, end_to_end):
            print(f"lossy_wan_figure: {scheme.label} ...", file=sys.stderr)
            try:
                reports[scheme.label] = run_scheme(args.sim, args.scenario, scheme, args.interval_ms, [])
            except RuntimeError as error:
                print(f"lossy_wan_figure: {error}", file=sys.stderr)
                return 1
    if not reports[pairs[0][1].label].get("levels"):
        print(f"lossy_wan_figure: {args.scenario} has no loss_steps (no levels in its report)", file=sys.stderr)
        return 1
    summary = {"scenario": str(args.scenario), "levels": levels_table(pairs, reports), "reports": reports}
    (out_dir / "lossy-wan.json").write_text(json.dumps(summary, indent=1) + "\n")
    written = plot(pairs, reports, args.scenario.stem, out_dir)
    for path in (out_dir / "lossy-wan.json", written):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
