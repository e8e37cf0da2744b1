"""Benchmark the tng agent on real sockets: loopback goodput against kernel TCP (iperf3), and two tbf-shaped paths."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TNG = REPO / "target" / "release" / "tng"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (fields 14 and 15 of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


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


def run_json(command: list[str]) -> dict:
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def tng_loopback(seconds: float) -> dict:
    port = "5381"
    server_cmd = [str(TNG), "--log-level", "error", "perf", "server", "--listen", f"127.0.0.1:{port}"]
    with background(server_cmd) as server:
        server_cpu = cpu_seconds(server.pid)
        started = time.monotonic()
        client_cmd = [str(TNG), "--log-level", "error", "perf", "client"]
        client_cmd += ["--connect", f"127.0.0.1:{port}", "--duration", str(seconds), "--json"]
        report = run_json(client_cmd)
        wall = time.monotonic() - started
        server_percent = (cpu_seconds(server.pid) - server_cpu) / wall * 100
    cpu = report["cpu_percent"] + server_percent
    gbps = report["goodput_mbps"] / 1000
    return {
        "goodput_mbps": round(report["goodput_mbps"], 1),
        "cpu_percent_client": round(report["cpu_percent"], 1),
        "cpu_percent_server": round(server_percent, 1),
        "cpu_percent_per_gbps": round(cpu / gbps, 1) if gbps > 0 else None,
        "retransmitted_packets": report["retransmitted_packets"],
    }


def iperf3_loopback(seconds: float) -> dict | None:
    if shutil.which("iperf3") is None:
        return None
    with background(["iperf3", "-s", "-1", "-p", "5382"]):
        report = run_json(["iperf3", "-c", "127.0.0.1", "-p", "5382", "-t", str(seconds), "-J"])
    end = report["end"]
    gbps = end["sum_received"]["bits_per_second"] / 1e9
    cpu = end["cpu_utilization_percent"]["host_total"] + end["cpu_utilization_percent"]["remote_total"]
    return {
        "goodput_mbps": round(gbps * 1000, 1),
        "cpu_percent_per_gbps": round(cpu / gbps, 1) if gbps > 0 else None,
    }


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextmanager
def two_shaped_paths(rate: str) -> Iterator[tuple[str, str]]:
    """Client and server namespaces joined by two veth pairs, each direction shaped by tbf to `rate`."""
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


def shaped_paths(seconds: float, rate: str) -> dict | None:
    if os.geteuid() != 0:
        return None
    with two_shaped_paths(rate) as (client, server):
        server_cmd = ["ip", "netns", "exec", server, str(TNG), "--log-level", "error", "perf", "server"]
        with background([*server_cmd, "--listen", "0.0.0.0:5383"]) as server_proc:
            base = ["ip", "netns", "exec", client, str(TNG), "--log-level", "error", "perf", "client"]
            base += ["--connect", "10.78.0.2:5383", "--duration", str(seconds), "--json"]

            def run(locals_: list[str]) -> tuple[dict, float]:
                """One run and the server's CPU use meanwhile (percent of one core)."""
                server_cpu, started = cpu_seconds(server_proc.pid), time.monotonic()
                report = run_json([*base, *locals_])
                return report, (cpu_seconds(server_proc.pid) - server_cpu) / (time.monotonic() - started) * 100

            one, one_server_cpu = run(["--local", "10.78.0.1:0"])
            two, two_server_cpu = run(["--local", "10.78.0.1:0", "--local", "10.78.1.1:0"])
    return {
        "rate_per_path": rate,
        "one_path_mbps": round(one["goodput_mbps"], 1),
        "two_paths_mbps": round(two["goodput_mbps"], 1),
        "ratio": round(two["goodput_mbps"] / one["goodput_mbps"], 3) if one["goodput_mbps"] > 0 else None,
        # Neither agent should be near a full core (100), or the ratio measures the CPU rather than the paths.
        "cpu_percent_one_path": {"client": round(one["cpu_percent"], 1), "server": round(one_server_cpu, 1)},
        "cpu_percent_two_paths": {"client": round(two["cpu_percent"], 1), "server": round(two_server_cpu, 1)},
        "two_paths_bytes_per_path": [path["bytes"] for path in two["paths"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", default="200mbit", help="tbf rate of each shaped path")
    args = parser.parse_args()
    if not TNG.exists():
        print(f"{TNG} is missing: run 'cargo build --release -p tng-agent'", file=sys.stderr)
        return 1
    print("bench: tng loopback ...", file=sys.stderr, flush=True)
    tng = tng_loopback(args.seconds)
    print("bench: kernel TCP loopback (iperf3) ...", file=sys.stderr, flush=True)
    tcp = iperf3_loopback(args.seconds)
    print("bench: two tbf-shaped paths ...", file=sys.stderr, flush=True)
    paths = shaped_paths(args.seconds, args.rate)
    result = {
        "benchmark": "agent",
        "loopback_tng": tng,
        "loopback_kernel_tcp": tcp if tcp else "skipped: iperf3 not installed",
        "tng_to_tcp_ratio": round(tng["goodput_mbps"] / tcp["goodput_mbps"], 3) if tcp else None,
        "two_paths": paths if paths else "skipped: needs root for network namespaces",
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
