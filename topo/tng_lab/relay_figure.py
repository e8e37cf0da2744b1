"""Tng's DSL figures (seed 004, Figures 5 and 6) from the simulator: goodput and delay over time per scheme.

Runs a scenario file whose paths have relays three ways on `tng-sim` (the split flow as written; end to end with
CUBIC; end to end with Vegas), each with `--timeline`, and draws goodput and the data sender's smoothed RTT
over time, one line per scheme, with the moments cross-traffic flows start marked. Writes `relay-figure.json`
(the three reports), `goodput.png` and `delay.png` into the output directory.

    python -m tng_lab.relay_figure host-agent/scenarios/relay-dsl-cross.toml --out build/sim/relay-dsl-cross
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SIM = REPO / "target" / "release" / "tng-sim"
DPI = 110


@dataclass(frozen=True)
class Scheme:
    label: str
    color: str
    extra_args: tuple[str, ...]


SCHEMES = (
    Scheme("split (relay)", "#2ca02c", ()),
    Scheme("end-to-end CUBIC", "#d62728", ("--without-relays", "--set", 'transport.cc="cubic"')),
    Scheme("end-to-end Vegas", "#1f77b4", ("--without-relays", "--set", 'transport.cc="vegas"')),
)


def run_scheme(sim: Path, scenario: Path, scheme: Scheme, interval_ms: int, extra: list[str]) -> dict[str, Any]:
    argv = [str(sim), "run", str(scenario), "--json", "--deterministic", "--timeline", str(interval_ms)]
    argv += [*scheme.extra_args, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{scheme.label}: tng-sim failed: {done.stderr.strip()}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


# The figures `plot` draws by default: (file name, timeline field, y-axis label).
PANELS = (
    ("goodput.png", "goodput_mbps", "goodput (Mbit/s)"),
    ("delay.png", "sender_srtt_ms", "data sender's smoothed RTT (ms)"),
)


def plot(
    reports: dict[str, dict[str, Any]], title: str, out_dir: Path, panels: tuple[tuple[str, str, str], ...] = PANELS
) -> list[Path]:
    """One figure per panel (goodput.png and delay.png by default): one line per scheme over time, cross-flow starts
    as dotted lines. The lab's real-process runs (tng_lab.relay_lab) draw theirs with it too."""
    starts = sorted({flow["start_s"] for report in reports.values() for flow in report.get("cross_traffic", [])})
    written = []
    for name, field, ylabel in panels:
        figure = Figure(figsize=(9, 4.2))
        axes = figure.add_subplot()
        for scheme in SCHEMES:
            timeline = reports[scheme.label]["timeline"]
            points = [(point["t_s"], point[field]) for point in timeline if point[field] is not None]
            axes.plot([t for t, _ in points], [v for _, v in points], label=scheme.label, color=scheme.color)
        for index, start in enumerate(starts):
            axes.axvline(start, color="#7f7f7f", linestyle=":", label="a cross flow starts" if index == 0 else None)
        axes.set_xlabel("time (s)")
        axes.set_ylabel(ylabel)
        written.append(save(figure, axes, title, out_dir / name, legend_at="best"))
    return written


def save(figure: Figure, axes: Any, title: str, path: Path, legend_at: str) -> Path:
    """Finishes a figure over time as every simulator figure looks (zero-based axes, grid, legend) and writes it."""
    axes.set_ylim(bottom=0)
    axes.set_xlim(left=0)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc=legend_at, fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.relay_figure", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path, help="a tng-sim scenario file whose paths have relays")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default build/sim/<scenario>)")
    parser.add_argument("--sim", type=Path, default=DEFAULT_SIM, help="the tng-sim binary (default: release build)")
    parser.add_argument("--interval-ms", type=int, default=2500, help="timeline interval (the paper's: 2500 ms)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to tng-sim --set")
    args = parser.parse_args(argv)
    if not args.sim.is_file():
        print(f"relay_figure: {args.sim} not found (cargo build --release -p tng-sim)", file=sys.stderr)
        return 2
    out_dir = args.out or REPO / "build" / "sim" / args.scenario.stem
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = [item for value in args.set for item in ("--set", value)]
    reports = {}
    for scheme in SCHEMES:
        print(f"relay_figure: {scheme.label} ...", file=sys.stderr)
        try:
            reports[scheme.label] = run_scheme(args.sim, args.scenario, scheme, args.interval_ms, extra)
        except RuntimeError as error:
            print(f"relay_figure: {error}", file=sys.stderr)
            return 1
    (out_dir / "relay-figure.json").write_text(json.dumps(reports, indent=1) + "\n")
    written = plot(reports, args.scenario.stem, out_dir)
    for path in [out_dir / "relay-figure.json", *written]:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
