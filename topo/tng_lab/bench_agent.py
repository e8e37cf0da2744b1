"""Benchmark the tng agent on real sockets: one connection over one and over two paths (multipath at rate), tbf-shaped
and unshaped, and the helpers the loopback benchmark (bench_loopback: tng against quinn and kernel TCP) shares.

The comparison is repeated `--runs` times, alternating its sides so that a change in the machine's load hits both
alike; the summary is the median, and every run records the 1-minute load average it started at.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tng_lab import procs

REPO = Path(__file__).resolve().parents[2]
TNG = REPO / "target" / "release" / "tng"


def cpu_seconds(pid: int) -> float:
    """CPU time of a process the benchmark measures: one that ended meanwhile makes the measurement void."""
    seconds = procs.cpu_seconds(pid)
    if seconds is None:
        raise RuntimeError(f"process {pid} ended while the benchmark measured its CPU time")
    return seconds


@contextmanager
def background(command: list[str]) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        if proc.poll() is not None:
            raise RuntimeError(f"{command[0]} exited at once: {' '.join(command)}")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def median_of(runs: list[dict], key: str) -> float | None:
    values = [run[key] for run in runs if run.get(key) is not None]
    return round(statistics.median(values), 1) if values else None


def run_json(command: list[str]) -> dict:
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextmanager
def two_paths_between_namespaces(rate: str | None) -> Iterator[tuple[str, str]]:
    """Client and server namespaces joined by two veth pairs, each direction shaped by tbf to `rate` (None: none)."""
    tag = os.getpid() % 100000
    client, server = f"tngbc{tag}", f"tngbs{tag}"
    try:
        for ns in (client, server):
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        for path in (0, 1):
            ip("link", "add", f"c{path}", "netns", client, "type", "veth", "peer", "name", f"s{path}", "netns", server)
            ip("-n", client, "addr", "add", f"10.78.{path}.1/24", "dev", f"c{path}")
            ip("-n", server, "addr", "add", f"10.78.{path}.2/24", "dev", f"s{path}")
            for ns, dev in ((client, f"c{path}"), (server, f"s{path}")):
                ip("-n", ns, "link", "set", dev, "up")
                if rate is None:
                    continue
                tbf = ["tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]
                subprocess.run(
                    ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", *tbf],
                    check=True,
                    capture_output=True,
                )
        # Traffic from the second client address leaves by the second path and is answered on it.
        ip("-n", client, "rule", "add", "from", "10.78.1.1", "table", "101")
        ip("-n", client, "route", "add", "10.78.0.2/32", "dev", "c1", "table", "101")
        for ns in (client, server):
            for key in ("all", "default", "c0", "c1", "s0", "s1"):
                subprocess.run(
                    ["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{key}.rp_filter=0"],
                    capture_output=True,
                    check=False,
                )
        yield client, server
    finally:
        for ns in (client, server):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def one_and_two_paths(seconds: float, rate: str | None, runs: int) -> dict | None:
    if os.geteuid() != 0:
        return None
    one_path, two_paths = [], []
    with two_paths_between_namespaces(rate) as (client, server):
        server_cmd = ["ip", "netns", "exec", server, str(TNG), "--log-level", "error", "perf", "server"]
        with background([*server_cmd, "--listen", "0.0.0.0:5383"]) as server_proc:
            base = ["ip", "netns", "exec", client, str(TNG), "--log-level", "error", "perf", "client"]
            base += ["--connect", "10.78.0.2:5383", "--duration", str(seconds), "--json"]

            def run(locals_: list[str]) -> dict:
                """One run and the server's CPU use meanwhile (percent of one core)."""
                load, server_cpu, started = load_average(), cpu_seconds(server_proc.pid), time.monotonic()
                report = run_json([*base, *locals_])
                server_percent = (cpu_seconds(server_proc.pid) - server_cpu) / (time.monotonic() - started) * 100
                return {
                    "load_average": load,
                    "goodput_mbps": round(report["goodput_mbps"], 1),
                    # Shaped, neither agent should be near a full core (100), or the ratio measures the CPU, not the
                    # paths; unshaped, the CPU is the limit and the ratio says what a second path costs in it.
                    "cpu_percent": {"client": round(report["cpu_percent"], 1), "server": round(server_percent, 1)},
                    "bytes_per_path": [path["bytes"] for path in report["paths"]],
                }

            for _ in range(runs):
                one_path.append(run(["--local", "10.78.0.1:0"]))
                two_paths.append(run(["--local", "10.78.0.1:0", "--local", "10.78.1.1:0"]))
    one, two = median_of(one_path, "goodput_mbps"), median_of(two_paths, "goodput_mbps")
    return {
        "rate_per_path": rate or "unshaped",
        "one_path_mbps": one,
        "two_paths_mbps": two,
        "ratio": round(two / one, 3) if one and two else None,
        "runs": {"one_path": one_path, "two_paths": two_paths},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=5, help="alternating runs per comparison; the medians count")
    parser.add_argument("--rate", default="200mbit", help="tbf rate of each shaped path")
    args = parser.parse_args()
    if not TNG.exists():
        print(f"{TNG} is missing: run 'cargo build --release -p tng-agent'", file=sys.stderr)
        return 1
    skipped = "skipped: needs root for network namespaces"
    print("bench: two tbf-shaped paths ...", file=sys.stderr, flush=True)
    shaped = one_and_two_paths(args.seconds, args.rate, args.runs)
    print("bench: two unshaped paths ...", file=sys.stderr, flush=True)
    unshaped = one_and_two_paths(args.seconds, None, args.runs)
    result = {
        "benchmark": "agent",
        "two_paths": shaped or skipped,
        "two_paths_unshaped": unshaped or skipped,
        "load_average": load_average(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
