"""Benchmark the cellular controllers per trace: each controller's goodput and p95 delay against kernel BBR's of the
same run, natively in tng and over kernel TCP (ALCC), with issue 15's targets checked.

Runs `alcc.toml` (a Sprout-model trace) and `alcc-steps.toml` (a level redrawn every 5 s), and with `--trace FILE`
also alcc.toml's link replaying that Mahimahi trace file (e.g. Sprout's Verizon-LTE-short.down from
ravinet/mahimahi). Each run's results.json, summary.md and plots are written as `tng-lab run` writes them. Per
trace it also says how low the delay of a sender that knows the link one round trip late goes at the goodput the
target asks for (`trace_bound`): whether the delay target is within reach of a controller fed by acknowledgements.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from tng_lab import runner, scenario, trace_bound
from tng_lab.bench_lwip import run_written
from tng_lab.linkspec import parse_size
from tng_lab.results import LabResults, WorkloadResult

SCENARIOS = runner.REPO / "topo" / "scenarios"
TRACES = (SCENARIOS / "alcc.toml", SCENARIOS / "alcc-steps.toml")
BBR = "tcp-bbr"
# Issue 15's targets: one delay-based controller at >= 0.9 x BBR's goodput and <= 0.3 x its p95; none under 0.75 x
# BBR's goodput; ALCC within 10 % of the same controller in tng, on goodput and on p95.
BEST_GOODPUT, BEST_DELAY, FLOOR, ALCC_BAND = 0.9, 0.3, 0.75, 0.1


def ratios(results: LabResults) -> dict[str, Any]:
    """Per workload, its means and their ratios to BBR's; then the targets' verdicts."""
    by_name = {w.workload.name: w for w in results.workloads}
    bbr = by_name.get(BBR)
    if bbr is None or bbr.status() != "ok":
        return {"error": f"the peer workload {BBR} did not run"}
    reference = _means(bbr)
    workloads: dict[str, Any] = {}
    for result in results.workloads:
        if result.status() != "ok":
            workloads[result.workload.name] = {"status": result.status()}
            continue
        means = _means(result)
        workloads[result.workload.name] = {
            "transport": result.workload.transport,
            "cc": result.workload.cc,
            "alcc": result.workload.alcc,
            "goodput_mbps": means["goodput"],
            "p95_delay_ms": means["p95"],
            "goodput_over_bbr": round(means["goodput"] / reference["goodput"], 3),
            "p95_delay_over_bbr": round(means["p95"] / reference["p95"], 3) if reference["p95"] else None,
        }
    return {
        "bbr": {"goodput_mbps": reference["goodput"], "p95_delay_ms": reference["p95"]},
        "workloads": workloads,
        "targets": targets(workloads),
    }


def targets(workloads: dict[str, Any]) -> dict[str, Any]:
    """Issue 15's targets on one trace, from `ratios`' workloads."""
    delay_based = {
        name: w for name, w in workloads.items() if "goodput_over_bbr" in w and (w["alcc"] or w["transport"] == "tng")
    }
    best = [
        name
        for name, w in delay_based.items()
        if w["goodput_over_bbr"] >= BEST_GOODPUT and (w["p95_delay_over_bbr"] or 1.0) <= BEST_DELAY
    ]
    under_floor = [name for name, w in delay_based.items() if w["goodput_over_bbr"] < FLOOR]
    alcc_vs_native = {}
    for name, w in delay_based.items():
        native = workloads.get(f"tng-{w['alcc']}") if w["alcc"] else None
        if native is None or "goodput_mbps" not in native:
            continue
        goodput = w["goodput_mbps"] / native["goodput_mbps"] - 1
        delay = w["p95_delay_ms"] / native["p95_delay_ms"] - 1 if native["p95_delay_ms"] else None
        within = abs(goodput) <= ALCC_BAND and delay is not None and abs(delay) <= ALCC_BAND
        alcc_vs_native[name] = {"goodput_change": round(goodput, 3), "p95_change": _round(delay), "within": within}
    return {
        "best_delay_based": {"met_by": best, "met": bool(best)},
        "none_under_floor": {"under": under_floor, "met": not under_floor},
        "alcc_within_ten_percent": alcc_vs_native,
    }


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def _means(result: WorkloadResult) -> dict[str, float]:
    summary = result.summary()
    p95 = summary["delay_p95_ms"]
    return {"goodput": summary["goodput_mbps"]["mean"], "p95": p95["mean"] if p95 else 0.0}


def with_trace_file(loaded: scenario.Scenario, trace: Path) -> scenario.Scenario:
    """`loaded` with its first link's downlink replaying `trace` (a Mahimahi file) instead of its own trace."""
    link = loaded.links[0]
    down = dataclasses.replace(link.down, trace_file=trace.resolve(), trace_model=None, rate_bps=None)
    links = (dataclasses.replace(link, down=down), *loaded.links[1:])
    return dataclasses.replace(loaded, name=f"{loaded.name}-{trace.stem}", links=links)


def lagged_sender(loaded: scenario.Scenario, run_dir: Path, results: LabResults, seconds: float) -> dict[str, Any]:
    """The lowest p95 delay a sender one round trip behind the link reaches on this run's trace while using at least
    BEST_GOODPUT of the share of the link BBR used, and that p95 over BBR's."""
    link = loaded.links[0]
    down = link.down
    trace = runner.trace_path(run_dir.resolve(), link.name, "down", down)
    bbr = next((w for w in results.workloads if w.workload.name == BBR and w.status() == "ok"), None)
    if trace is None or bbr is None:
        return {"skipped": "no trace on the link, or no BBR run"}
    summary = bbr.summary()
    floor = BEST_GOODPUT * summary["utilization"]["mean"]
    found = trace_bound.bound(
        trace,
        seconds=seconds,
        one_way_s=down.delay_s,
        queue_bytes=parse_size(dict(down.extra).get("queue", "1000pkt"), trace_bound.PACKET_BYTES),
        utilization_floor=floor,
    )
    summaries = {w.workload.name: w.summary() for w in results.workloads if w.status() == "ok"}
    measured = {
        name: (s["utilization"]["mean"], s["delay_p95_ms"]["mean"])
        for name, s in summaries.items()
        if s["utilization"] and s["delay_p95_ms"]
    }
    figure = trace_bound.plot(found, run_dir / "lagged-sender.png", measured)
    best = found["lowest_p95_at_floor"]
    p95 = best["p95_delay_ms"] if isinstance(best, dict) else None
    bbr_p95 = summary["delay_p95_ms"]["mean"] if summary["delay_p95_ms"] else None
    over_bbr = round(p95 / bbr_p95, 3) if p95 is not None and bbr_p95 else None
    return {
        "utilization_floor": round(floor, 4),
        "lowest_p95_delay_ms": p95,
        "p95_delay_over_bbr": over_bbr,
        "delay_target_within_reach": over_bbr is not None and over_bbr <= BEST_DELAY,
        "frontier": found["frontier"],
        "plot": str(figure),
    }


def run_trace(loaded: scenario.Scenario, args: argparse.Namespace) -> dict[str, Any]:
    print(f"bench_alcc: {loaded.name} ...", file=sys.stderr)
    load_before = os.getloadavg()
    run_dir = args.out / loaded.name
    results, results_file, _ = run_written(loaded, run_dir, args.duration, args.repeat)
    return {
        "trace": loaded.links[0].down.describe(),
        "switch": results.switch,
        **ratios(results),
        "lagged_sender": lagged_sender(loaded, run_dir, results, args.duration),
        "results": str(results_file),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.bench_alcc", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per workload (default 20)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every workload (default 1)")
    parser.add_argument("--trace", type=Path, action="append", default=[], help="a Mahimahi trace file (repeatable)")
    parser.add_argument("--out", type=Path, default=runner.REPO / "build" / "bench" / "alcc-lab")
    args = parser.parse_args(argv)
    missing = [str(trace) for trace in args.trace if not trace.is_file()]
    if missing:
        print(f"bench_alcc: no such trace file: {', '.join(missing)}", file=sys.stderr)
        return 2
    scenarios = [scenario.load(path) for path in TRACES]
    scenarios += [with_trace_file(scenarios[0], trace) for trace in args.trace]
    report = {
        "benchmark": "alcc",
        "duration_s": args.duration,
        "repeat": args.repeat,
        "traces": {loaded.name: run_trace(loaded, args) for loaded in scenarios},
        "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
