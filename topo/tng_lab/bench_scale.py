"""Benchmark how tng's cost grows with the number of connections: `tng-sim` runs fairness.toml with 10, 100, 1000 and
10^4 clients (each client's connection gets 2 Mbit/s of the shared bottleneck), then a 30 s run of 1000 clients for
Jain's index, and `idle_memory` measures what an idle connection holds.

Per run: simulator events per wall second (what `tng-sim` reports) and per CPU second of the process (steadier on a
shared machine), and per CPU second after warm-up (`tng-sim`'s `steady_events_per_cpu_sec`, from `measure_after_s`
on: a whole run's rate also counts its handshakes and slow starts, a larger share of a short run of many clients),
wall seconds, peak RSS, Jain's index and the 1-minute load average it started at. The target is events/s at 10^4
clients within 2x of events/s at 10.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TNG_SIM = REPO / "target" / "release" / "tng-sim"
IDLE_MEMORY = REPO / "target" / "release" / "examples" / "idle_memory"
SCENARIO = REPO / "host-agent" / "scenarios" / "fairness.toml"
RATE_PER_CLIENT_MBPS = 2
# Simulated seconds per size: the largest runs 10^4 connections' worth of events per simulated second; the smallest
# runs long enough (a few CPU seconds) that its rate is not a fraction of a second's noise.
DURATIONS_S = {10: 60.0, 100: 10.0, 1000: 10.0, 10000: 3.0}


def run_measured(command: list[str]) -> tuple[str, float, int]:
    """Runs a command to completion; returns its stdout, CPU seconds (user + system) and peak RSS in bytes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            last = err.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"{' '.join(command)} failed: {last}")
        return out.read().decode(), usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def measure_after_s(duration_s: float) -> float:
    """Where a run's measurement starts: after 2 s, by which 10^4 clients have finished their handshakes and slow
    starts, or after two thirds of a shorter run."""
    return round(min(2.0, duration_s * 2 / 3), 3)


def simulate(clients: int, duration_s: float) -> dict:
    load = round(os.getloadavg()[0], 2)
    command = [
        str(TNG_SIM),
        "run",
        str(SCENARIO),
        "--set",
        f"clients={clients}",
        "--set",
        f"bottlenecks.shared.rate_mbps={RATE_PER_CLIENT_MBPS * clients}",
        "--set",
        f"duration_s={duration_s}",
        "--set",
        f"measure_after_s={measure_after_s(duration_s)}",
        "--json",
        "--quiet",
    ]
    stdout, cpu_s, rss = run_measured(command)
    report = json.loads(stdout)
    events = report["events"]
    return {
        "clients": clients,
        "simulated_s": report["simulated_s"],
        "events": events,
        "events_per_sec": round(report["events_per_sec"]),
        "events_per_cpu_sec": round(events / cpu_s) if cpu_s > 0 else None,
        "steady_events_per_cpu_sec": round(steady) if (steady := report.get("steady_events_per_cpu_sec")) else None,
        "wall_s": round(events / report["events_per_sec"], 2),
        "cpu_s": round(cpu_s, 2),
        "rss_mb": round(rss / 1e6, 1),
        "jain_fairness": round(report["jain_fairness"], 4),
        "goodput_mbps": round(report["goodput_mbps"], 1),
        "load_1min": load,
    }


def ratio(runs: list[dict], key: str, small: int, large: int) -> float | None:
    by_clients = {run["clients"]: run for run in runs}
    if small not in by_clients or large not in by_clients or not by_clients[large][key]:
        return None
    return round(by_clients[small][key] / by_clients[large][key], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="10,100,1000,10000", help="comma-separated client counts")
    parser.add_argument("--fairness-s", type=float, default=30.0, help="duration of the 1000-client Jain run (0: skip)")
    args = parser.parse_args(argv)
    for binary in (TNG_SIM, IDLE_MEMORY):
        if not binary.exists():
            print(f"bench_scale: {binary} is missing: build it with `make bench`", file=sys.stderr)
            return 1
    sizes = [int(text) for text in args.clients.split(",") if text]
    runs = []
    for clients in sizes:
        run = simulate(clients, DURATIONS_S.get(clients, 10.0))
        print(f"bench_scale: {json.dumps(run)}", file=sys.stderr)
        runs.append(run)
    fairness = simulate(1000, args.fairness_s) if args.fairness_s > 0 else None
    idle_stdout, _, _ = run_measured([str(IDLE_MEMORY), "--connections", "1000", "--json"])
    result = {
        "benchmark": "scale",
        "scenario": "fairness.toml, 2 Mbit/s of the shared bottleneck per client",
        "runs": runs,
        "events_per_sec_ratio_10_to_10000": ratio(runs, "events_per_sec", 10, 10000),
        "events_per_cpu_sec_ratio_10_to_10000": ratio(runs, "events_per_cpu_sec", 10, 10000),
        "steady_events_per_cpu_sec_ratio_10_to_10000": ratio(runs, "steady_events_per_cpu_sec", 10, 10000),
        "fairness_1000_clients": fairness,
        "idle_connection": json.loads(idle_stdout),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
