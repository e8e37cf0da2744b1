"""`python -m tng_lab.soak`: the fault soak (`make soak`). Exit 0 when every invariant held and every scheduled fault
was injected, 1 otherwise, 2 for a bad option or scenario, 130 when interrupted (everything is removed either way)."""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
from pathlib import Path

from tng_lab import netns, runner, scenario
from tng_lab.soak import report
from tng_lab.soak.faults import KINDS
from tng_lab.soak.runner import SoakOptions, soak
from tng_lab.soak.schedule import DEFAULT_INTERVAL_S

SCENARIO = runner.REPO / "topo" / "scenarios" / "soak.toml"
INTERRUPTED_EXIT = 130


def _interval(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    try:
        interval = (float(low), float(high))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN-MAX seconds") from None
    if not 0 < interval[0] <= interval[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 < MIN <= MAX")
    return interval


def _kinds(text: str) -> frozenset[str]:
    kinds = frozenset(kind.strip() for kind in text.split(",") if kind.strip())
    if not kinds:
        raise argparse.ArgumentTypeError("name at least one kind of fault")
    if unknown := sorted(kinds - set(KINDS)):
        raise argparse.ArgumentTypeError(f"no such fault: {', '.join(unknown)} (known: {', '.join(KINDS)})")
    return kinds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tng_lab.soak", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60.0, help="how long the soak runs (default 60)")
    p.add_argument("--seed", type=int, default=1, help="seed of the fault schedule and the traffic (default 1)")
    p.add_argument(
        "--warmup",
        type=float,
        default=60.0,
        help="seconds before the first fault; RSS and fds levels are taken at its end (default 60)",
    )
    p.add_argument(
        "--fault-interval",
        type=_interval,
        default=DEFAULT_INTERVAL_S,
        metavar="MIN-MAX",
        help="seconds between faults (default 30-120)",
    )
    p.add_argument(
        "--faults",
        type=_kinds,
        metavar="KIND,...",
        help="schedule only these kinds of fault (default: every kind the lab can run; docs/soak.md lists them)",
    )
    p.add_argument("--round", type=float, default=20.0, help="seconds of one perf client round (default 20)")
    p.add_argument(
        "--scenario", type=Path, default=SCENARIO, help="links and switch (default topo/scenarios/soak.toml)"
    )
    p.add_argument("--out", type=Path, help="results directory (default build/soak/<timestamp>)")
    p.add_argument("--bin-dir", type=Path, help="where tng and linkem are (default target/release)")
    return p


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = (args.out or runner.REPO / "build" / "soak" / stamp).resolve()
    try:
        options = SoakOptions(
            scenario=scenario.load(args.scenario),
            out_dir=out_dir,
            duration_s=args.minutes * 60.0,
            warmup_s=args.warmup,
            seed=args.seed,
            interval_s=args.fault_interval,
            round_s=args.round,
            binaries=runner.Binaries.locate(args.bin_dir),
            kinds=args.faults,
        )
        record = soak(options)
    except scenario.ScenarioError as err:
        print(f"tng-soak: scenario error: {err}", file=sys.stderr)
        return 2
    except netns.LabError as err:
        print(f"tng-soak: error: {err} (everything this soak created was removed)", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:
        print(f"tng-soak: interrupted by {err}; everything this soak created was removed", file=sys.stderr)
        return INTERRUPTED_EXIT
    report_file, plot_file = report.write(record, out_dir)
    print("\n".join(report.lines(record)))
    print(f"report: {report_file}\ntimeline: {plot_file}")
    not_injected = [f for f in record.faults if not f.injected]
    return 1 if record.violations or not_injected else 0
