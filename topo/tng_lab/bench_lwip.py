"""Benchmark in-network aggregation: lwip.toml on BMv2, every switch-steered workload against its peers of the same
run (MPTCP over both links, TCP on each link alone). The run's results.json, summary.md and plots are written as
`tng-lab run` writes them, so one run gives both the ratios and the tables behind them.

For each steered workload (a steering mode, with or without VISIBLE) it reports goodput / MPTCP's, goodput /
(TCP over LTE + TCP over Wi-Fi) and p95 delay / MPTCP's, from the means over `--repeat` runs, with the load the
machine was under. Without BMv2 it says why and reports nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tng_lab import runner, scenario, switch
from tng_lab.outputs import write_run
from tng_lab.results import LabResults, WorkloadResult

SCENARIO = runner.REPO / "topo" / "scenarios" / "lwip.toml"
PEERS = {"mptcp": "mptcp", "lte": "tcp-lte", "wifi": "tcp-wifi"}


def ratios(results: LabResults) -> dict[str, Any]:
    """Per steered workload, its goodput and p95 delay relative to the peers' of the same run."""
    by_name = {w.workload.name: w for w in results.workloads}
    missing = [name for name in PEERS.values() if by_name.get(name) is None or by_name[name].status() != "ok"]
    if missing:
        return {"error": f"peer workloads did not run: {', '.join(missing)}"}
    mptcp = _means(by_name[PEERS["mptcp"]])
    single = _means(by_name[PEERS["lte"]])["goodput"] + _means(by_name[PEERS["wifi"]])["goodput"]
    report = {}
    for result in results.workloads:
        if result.workload.steering is None:
            continue
        if result.status() != "ok":
            report[result.workload.name] = {"status": result.status()}
            continue
        means = _means(result)
        report[result.workload.name] = {
            "steering": result.workload.steering,
            "visible": result.workload.visible or "off",
            "goodput_mbps": means["goodput"],
            "p95_delay_ms": means["p95"],
            "goodput_over_mptcp": round(means["goodput"] / mptcp["goodput"], 3),
            "goodput_over_single_links": round(means["goodput"] / single, 3),
            "p95_delay_over_mptcp": round(means["p95"] / mptcp["p95"], 3) if means["p95"] and mptcp["p95"] else None,
        }
    return {
        "peers": {"mptcp_goodput_mbps": mptcp["goodput"], "mptcp_p95_ms": mptcp["p95"], "single_links_mbps": single},
        "steered": report,
    }


def run_written(loaded: scenario.Scenario, out: Path, duration_s: float, repeat: int) -> tuple[LabResults, Path, Path]:
    """Runs every workload of `loaded` as `tng-lab run` does and writes its results.json, summary.md and plots into
    `out`; returns the results and the paths of results.json and summary.md."""
    options = runner.RunOptions(
        scenario=loaded,
        out_dir=out.resolve(),
        duration_s=duration_s,
        repeat=repeat,
        seed=loaded.seed,
        binaries=runner.Binaries.locate(None),
    )
    results = runner.run(options)
    results_file, summary, _ = write_run(results, options.out_dir)
    return results, results_file, summary


def _means(result: WorkloadResult) -> dict[str, float]:
    summary = result.summary()
    p95 = summary["delay_p95_ms"]
    return {"goodput": summary["goodput_mbps"]["mean"], "p95": p95["mean"] if p95 else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.bench_lwip", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per workload (default 10)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every workload (default 1)")
    parser.add_argument("--out", type=Path, default=runner.REPO / "build" / "bench" / "lwip-lab")
    args = parser.parse_args(argv)
    loaded = scenario.load(SCENARIO)
    choice = switch.choose(loaded, runner.REPO)
    if not choice.bmv2:
        print(json.dumps({"benchmark": "lwip", "skipped": choice.notice}))
        print(f"lwip bench skipped: {choice.notice}", file=sys.stderr)
        return 0
    load_before = os.getloadavg()
    results, results_file, summary = run_written(loaded, args.out, args.duration, args.repeat)
    report = {
        "benchmark": "lwip",
        "scenario": str(SCENARIO.relative_to(runner.REPO)),
        "switch": results.switch,
        "duration_s": args.duration,
        "repeat": args.repeat,
        **ratios(results),
        "results": str(results_file),
        "summary": str(summary),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
