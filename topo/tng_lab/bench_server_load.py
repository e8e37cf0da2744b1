"""Benchmark a tng server under many connections (issue 13): `tng perf server` on loopback, and `tng perf client
--mode connections` opening `--connections` connections (default 10^4) from one endpoint, then, for `--duration`
seconds once all are established, a request for 1000 bytes on every connection every second.

The server's RSS (VmRSS) and CPU time are sampled every second. The JSON holds the client's connections report
(handshakes, requests, losses), the server's peak and final RSS and its CPU use, the request rate reached against the
one asked for, and the verdicts of the targets: the server's RSS at most 1 GiB, and no connection lost (every
handshake succeeded and every connection answered to the end). Server and load generator share this machine's
cores, so the 1-minute load average at the start and at the end is stated.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from tng_lab.bench_agent import TNG, background, cpu_seconds, load_average
from tng_lab.procs import rss_kib

PORT = 5394
# Connections the server accepts beyond the benchmark's own: the client's statistics connection, and some slack.
MAX_CONNECTIONS_MARGIN = 64
GIB = 1024**3
MIB = 1024**2
# How long the client may run beyond its establishing and measured phases before the benchmark gives up on it.
CLIENT_GRACE_S = 300.0


@dataclass(frozen=True)
class ServerSample:
    """The server process at one moment: seconds since the start, resident bytes, CPU seconds used."""

    at_s: float
    rss_bytes: int
    cpu_s: float


def sample(pid: int, started: float) -> ServerSample:
    rss = rss_kib(pid)
    if rss is None:
        raise RuntimeError(f"the server (pid {pid}) is gone")
    return ServerSample(time.monotonic() - started, rss * 1024, cpu_seconds(pid))


def summarize(report: dict[str, Any], samples: list[ServerSample], load: dict[str, float]) -> dict[str, Any]:
    """The benchmark's JSON from the client's perf report and the server's samples."""
    connections = report["connections"]
    duration_s = report["duration_s"]
    asked_per_s = connections["established"] / connections["interval_s"]
    requests_per_s = connections["requests"] / duration_s if duration_s > 0 else 0.0
    peak = max(s.rss_bytes for s in samples)
    span = samples[-1].at_s - samples[0].at_s
    server_cpu = (samples[-1].cpu_s - samples[0].cpu_s) / span * 100 if span > 0 else None
    return {
        "benchmark": "server_load",
        "connections": connections,
        "handshakes_per_s": round(connections["handshakes_per_s"], 1),
        "requests_per_s": round(requests_per_s, 1),
        "requests_asked_per_s": round(asked_per_s, 1),
        "request_rate_reached": round(requests_per_s / asked_per_s, 3) if asked_per_s > 0 else None,
        "bytes_received": report["bytes_received"],
        "bytes_corrupted": report["bytes_corrupted"],
        "client_cpu_percent": round(report["cpu_percent"], 1),
        "server": {
            "rss_peak_mib": round(peak / MIB, 1),
            "rss_end_mib": round(samples[-1].rss_bytes / MIB, 1),
            "cpu_percent": round(server_cpu, 1) if server_cpu is not None else None,
            "samples": len(samples),
        },
        "targets": {
            "rss_at_most_1_gib": peak <= GIB,
            "no_connection_lost": connections["lost"] == 0 and connections["established"] == connections["requested"],
        },
        "load_average": load,
    }


def run(connections: int, duration_s: float, interval_s: float, response_bytes: int, port: int) -> dict[str, Any]:
    """Starts the server, runs the load generator to its end while sampling the server, and summarizes."""
    address = f"127.0.0.1:{port}"
    server_cmd = [str(TNG), "--log-level", "error", "perf", "server", "--listen", address]
    server_cmd += ["--max-connections", str(connections + MAX_CONNECTIONS_MARGIN)]
    client_cmd = [str(TNG), "--log-level", "error", "perf", "client", "--connect", address, "--json"]
    client_cmd += ["--mode", "connections", "--connections", str(connections), "--interval", f"{interval_s:g}"]
    client_cmd += ["--duration", f"{duration_s:g}", "--response-size", str(response_bytes)]
    load_start = load_average()
    with background(server_cmd) as server, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        samples = [sample(server.pid, started)]
        client = subprocess.Popen(client_cmd, stdout=out, stderr=err)
        give_up = started + duration_s + CLIENT_GRACE_S
        while client.poll() is None:
            if time.monotonic() > give_up:
                client.kill()
                client.wait()
                raise RuntimeError(f"the load generator did not finish within {duration_s + CLIENT_GRACE_S:g} s")
            time.sleep(1.0)
            samples.append(sample(server.pid, started))
            if len(samples) % 10 == 0:
                latest = samples[-1]
                print(
                    f"bench: {latest.at_s:.0f} s, server RSS {latest.rss_bytes / MIB:.0f} MiB",
                    file=sys.stderr,
                    flush=True,
                )
        if client.returncode != 0:
            err.seek(0)
            last = err.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"{' '.join(client_cmd)} failed: {last}")
        out.seek(0)
        report = json.loads(out.read())
    return summarize(report, samples, {"start": load_start, "end": load_average()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of requests once all are established")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between one connection's requests")
    parser.add_argument("--response-size", type=int, default=1000, help="bytes per response")
    parser.add_argument("--port", type=int, default=PORT)
    args = parser.parse_args()
    if not TNG.exists():
        print(f"{TNG} is missing: run 'cargo build --release -p tng-agent'", file=sys.stderr)
        return 1
    print(
        f"bench: {args.connections} connections to a tng perf server on loopback, {args.duration:g} s ...",
        file=sys.stderr,
        flush=True,
    )
    result = run(args.connections, args.duration, args.interval, args.response_size, args.port)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
