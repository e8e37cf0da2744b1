"""`tng-lab` (`python -m tng_lab`): run a scenario on network namespaces, sweep a scenario over axes of values, or
clean up after runs that crashed."""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import sys
from pathlib import Path
from types import FrameType

from tng_lab import capture, cleanup, netns, runner, scenario, sweep, sweep_run
from tng_lab.outputs import write_run
from tng_lab.results import summary_table, to_json

INTERRUPTED_EXIT = 130


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _snaplen(text: str) -> int:
    value = _positive_int(text)
    if not capture.MIN_SNAPLEN <= value <= capture.MAX_SNAPLEN:
        raise argparse.ArgumentTypeError(
            f"{value} is outside {capture.MIN_SNAPLEN}..{capture.MAX_SNAPLEN} bytes (tcpdump's largest snap length)"
        )
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tng-lab", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a scenario and write results.json, plots and summary.md")
    run.add_argument("scenario", type=Path, help="scenario file (TOML), e.g. topo/scenarios/lwip.toml")
    run.add_argument("--duration", type=_positive_float, help="seconds per workload (default: the scenario's)")
    run.add_argument("--repeat", type=_positive_int, default=1, help="runs of every workload (default 1)")
    run.add_argument("--seed", type=int, help="first workload seed; repetition i uses seed + i (default: scenario's)")
    run.add_argument("--out", type=Path, help="output directory (default: build/lab/<scenario>-<time>)")
    run.add_argument("--bin-dir", type=Path, help="where tng and linkem are (default: target/release)")
    run.add_argument("--json", action="store_true", help="print results.json to stdout instead of the summary table")
    run.add_argument("--workloads", type=_names, help="run only these workloads (comma-separated names)")
    run.add_argument("--pcap", action="store_true", help="capture both ends of every link into OUT/pcap/ (tcpdump)")
    run.add_argument(
        "--pcap-snaplen",
        type=_snaplen,
        default=capture.DEFAULT_SNAPLEN,
        help=f"bytes kept of each captured packet (default {capture.DEFAULT_SNAPLEN})",
    )
    run.add_argument(
        "--pcap-max-mb",
        type=_positive_int,
        default=capture.DEFAULT_MAX_MB,
        help=f"size cap of each capture file in MB; capturing stops there (default {capture.DEFAULT_MAX_MB})",
    )
    swept = commands.add_parser(
        "sweep", help="run every point of a sweep file; write each point's results, sweep.json, sweep.md and plots"
    )
    swept.add_argument("sweep", type=Path, help="sweep file (TOML), e.g. topo/sweeps/lwip.toml")
    swept.add_argument("--duration", type=_positive_float, help="seconds per workload (default: the scenario's)")
    swept.add_argument("--repeat", type=_positive_int, default=1, help="runs of every workload per point (default 1)")
    swept.add_argument("--seed", type=int, help="first workload seed of every point (default: the scenario's)")
    swept.add_argument("--out", type=Path, help="output directory (default: build/lab/<sweep>-<time>)")
    swept.add_argument("--bin-dir", type=Path, help="where tng and linkem are (default: target/release)")
    swept.add_argument(
        "--only",
        type=_axis_cut,
        action="append",
        default=[],
        metavar="AXIS=LABEL[,LABEL...]",
        help="run only these values of an axis (repeatable), e.g. --only ues=1 --only ratio=3:1,10:1",
    )
    swept.add_argument("--workloads", type=_names, help="run only these workloads (comma-separated names)")
    commands.add_parser("clean", help="remove namespaces, processes and sockets left by runs that did not finish")
    return top


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated names")
    return names


def _axis_cut(text: str) -> tuple[str, list[str]]:
    axis, _, labels = text.partition("=")
    if not axis.strip() or not labels.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not AXIS=LABEL[,LABEL...]")
    return axis.strip(), _names(labels)


def run_command(args: argparse.Namespace) -> int:
    loaded = scenario.load(args.scenario)
    if args.workloads:
        loaded = scenario.only_workloads(loaded, args.workloads)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = (args.out or runner.REPO / "build" / "lab" / f"{loaded.name}-{stamp}").resolve()
    options = runner.RunOptions(
        scenario=loaded,
        out_dir=out_dir,
        duration_s=args.duration or loaded.duration_s,
        repeat=args.repeat,
        seed=loaded.seed if args.seed is None else args.seed,
        binaries=runner.Binaries.locate(args.bin_dir),
        pcap=pcap_options(args),
    )
    results = runner.run(options)
    _, summary, plots = write_run(results, out_dir)
    if args.json:
        print(json.dumps(to_json(results), indent=2))
    else:
        print(summary_table(results))
        print(f"results: {out_dir / 'results.json'}\nsummary: {summary}")
        print("plots: " + ", ".join(str(plot) for plot in plots))
        if results.pcap_dir is not None:
            print(f"pcaps: {results.pcap_dir}")
    failed = results.failed()
    if failed:
        print(
            f"tng-lab: {len(failed)} workload(s) failed: {', '.join(w.workload.name for w in failed)}", file=sys.stderr
        )
    return 1 if failed else 0


def pcap_options(args: argparse.Namespace) -> capture.PcapOptions | None:
    """The capture bounds of `run --pcap`, or None without --pcap."""
    if not args.pcap:
        return None
    return capture.PcapOptions(snaplen=args.pcap_snaplen, max_bytes=args.pcap_max_mb * 1_000_000)


def sweep_command(args: argparse.Namespace) -> int:
    loaded = sweep.load(args.sweep)
    if args.only or args.workloads:
        loaded = sweep.restrict(loaded, dict(args.only), args.workloads)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = (args.out or runner.REPO / "build" / "lab" / f"{loaded.name}-{stamp}").resolve()
    options = sweep_run.SweepOptions(
        sweep=loaded,
        out_dir=out_dir,
        duration_s=args.duration,
        repeat=args.repeat,
        seed=args.seed,
        binaries=runner.Binaries.locate(args.bin_dir),
    )
    outputs = sweep_run.run(options)
    print(outputs.markdown.read_text())
    print(f"sweep: {outputs.json_file}\ntables: {outputs.markdown}")
    print("plots: " + ", ".join(str(plot) for plot in outputs.plots))
    if outputs.failed():
        print("tng-lab sweep: some points or workloads failed (sweep.md says which and why)", file=sys.stderr)
    return 1 if outputs.failed() else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too: a background job starts with it ignored
        signal.signal(sig, _interrupt)
    try:
        if args.command == "clean":
            print(cleanup.clean().line())
            return 0
        if args.command == "sweep":
            return sweep_command(args)
        return run_command(args)
    except scenario.ScenarioError as err:
        print(f"tng-lab: scenario error: {err}", file=sys.stderr)
        return 2
    except netns.LabError as err:
        print(f"tng-lab: error: {err} (everything this run created was removed)", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:
        why = f" by {err}" if str(err) else ""
        print(f"tng-lab: interrupted{why}; everything this run created was removed", file=sys.stderr)
        return INTERRUPTED_EXIT
