"""Benchmark one connection on loopback: tng, quinn and kernel TCP (iperf3), interleaved, encryption on.

Each round runs the three stacks one after another, so a change in the machine's load hits all alike; the summary is
the median over the rounds. In every stack the server sends and the client receives, on one connection and one
stream. CPU time is read from /proc/PID/stat (utime + stime) of both processes, and reported as percent of one core
per Gbit/s of goodput. The quinn peer is `quinn-bulk` (crate tng-bench-quinn), built from crates.io's quinn with
rustls and a self-signed certificate.

Also counts instructions per delivered packet of the tng core on a fixed transfer under callgrind (the
`codec_bench --bytes` example: two endpoints in memory, on virtual time), a figure a noisy machine does not move.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tng_lab.bench_agent import TNG, background, cpu_seconds, load_average

REPO = Path(__file__).resolve().parents[2]
QUINN = REPO / "target" / "release" / "quinn-bulk"
CODEC_BENCH = REPO / "target" / "release" / "examples" / "codec_bench"
PORTS = {"tng": 5391, "quinn": 5392, "tcp": 5393}


def finished_client(command: list[str]) -> tuple[str, float, float]:
    """Runs a client to its end; its stdout, wall seconds and CPU seconds (read before the process is reaped)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        wall = time.monotonic() - started
        cpu = cpu_seconds(proc.pid)
        if proc.wait() != 0:
            errors.seek(0)
            last = errors.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"{' '.join(command)} failed: {last}")
    return out, wall, cpu


def run_stack(server_cmd: list[str], client_cmd: list[str], goodput_of) -> dict:
    """One transfer; goodput (from the client's own report) and the CPU use of sender (server) and receiver."""
    load = load_average()
    with background(server_cmd) as server:
        server_before = cpu_seconds(server.pid)
        out, wall, client_cpu = finished_client(client_cmd)
        server_cpu = cpu_seconds(server.pid) - server_before
    goodput = goodput_of(json.loads(out))
    sender, receiver = server_cpu / wall * 100, client_cpu / wall * 100
    gbps = goodput / 1000
    return {
        "load_average": load,
        "goodput_mbps": round(goodput, 1),
        "cpu_percent_sender": round(sender, 1),
        "cpu_percent_receiver": round(receiver, 1),
        "cpu_percent_per_gbps": round((sender + receiver) / gbps, 1) if gbps > 0 else None,
    }


def tng_round(seconds: float, tng: Path = TNG) -> dict:
    port = PORTS["tng"]
    server = [str(tng), "--log-level", "error", "perf", "server", "--listen", f"127.0.0.1:{port}"]
    client = [str(tng), "--log-level", "error", "perf", "client", "--connect", f"127.0.0.1:{port}"]
    client += ["--mode", "bulk", "--duration", str(seconds), "--json"]
    return run_stack(server, client, lambda report: report["goodput_mbps"])


def quinn_round(seconds: float) -> dict:
    port = PORTS["quinn"]
    server = [str(QUINN), "server", "--listen", f"127.0.0.1:{port}"]
    client = [str(QUINN), "client", "--connect", f"127.0.0.1:{port}", "--duration", str(seconds)]
    return run_stack(server, client, lambda report: report["goodput_mbps"])


def tcp_round(seconds: float) -> dict:
    port = PORTS["tcp"]
    # -R: the server sends, as in the other two.
    client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-R", "-J"]
    return run_stack(
        ["iperf3", "-s", "-p", str(port)],
        client,
        lambda report: report["end"]["sum_received"]["bits_per_second"] / 1e6,
    )


def summary(runs: list[dict]) -> dict:
    def median(key: str) -> float | None:
        values = [run[key] for run in runs if run.get(key) is not None]
        return round(statistics.median(values), 1) if values else None

    return {
        "goodput_mbps": median("goodput_mbps"),
        "cpu_percent_per_gbps": median("cpu_percent_per_gbps"),
        "cpu_percent_sender": median("cpu_percent_sender"),
        "cpu_percent_receiver": median("cpu_percent_receiver"),
        "runs": runs,
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator and denominator else None


def callgrind_instructions_per_packet(transfer_bytes: int, out_dir: Path) -> dict | str:
    """Instructions the tng core spends per delivered data packet on a fixed in-memory transfer."""
    if shutil.which("valgrind") is None:
        return "skipped: valgrind is not installed"
    out_file = out_dir / "callgrind.codec_bench.out"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}"]
    command += [str(CODEC_BENCH), "--bytes", str(transfer_bytes), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"callgrind run failed: {done.stderr.strip().splitlines()[-1:]}")
    transfer = json.loads(done.stdout)
    totals = re.search(r"^(?:totals|summary):\s+(\d+)", out_file.read_text(), re.MULTILINE)
    if totals is None:
        raise RuntimeError(f"no instruction total in {out_file}")
    instructions = int(totals.group(1))
    return {
        "what": "both endpoints of codec_bench --bytes (handshake included), instructions / client data packets",
        "bytes_delivered": transfer["bytes_delivered"],
        "data_packets": transfer["data_packets"],
        "instructions": instructions,
        "instructions_per_packet": round(instructions / transfer["data_packets"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each transfer")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the medians count")
    parser.add_argument("--callgrind-bytes", type=int, default=4_000_000, help="size of the callgrind transfer")
    parser.add_argument("--out-dir", type=Path, default=REPO / "build" / "bench")
    parser.add_argument(
        "--baseline-tng",
        type=Path,
        help="another tng binary (say, before a change) to run in every round too, reported as tng_baseline",
    )
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds must be at least 1 and --seconds positive")
    for binary, build in ((TNG, "-p tng-agent"), (QUINN, "-p tng-bench-quinn"), (CODEC_BENCH, "--examples")):
        if not binary.exists():
            print(f"{binary} is missing: run 'cargo build --release {build}'", file=sys.stderr)
            return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with_tcp = shutil.which("iperf3") is not None
    if args.baseline_tng and not args.baseline_tng.exists():
        parser.error(f"--baseline-tng {args.baseline_tng} does not exist")
    runs: dict[str, list[dict]] = {"tng": [], "tng_baseline": [], "quinn": [], "tcp": []}
    for index in range(args.rounds):
        print(f"bench: loopback round {index + 1}/{args.rounds}: tng, quinn, kernel TCP ...", file=sys.stderr)
        runs["tng"].append(tng_round(args.seconds))
        if args.baseline_tng:
            runs["tng_baseline"].append(tng_round(args.seconds, args.baseline_tng))
        runs["quinn"].append(quinn_round(args.seconds))
        if with_tcp:
            runs["tcp"].append(tcp_round(args.seconds))
    tng, quinn = summary(runs["tng"]), summary(runs["quinn"])
    tcp = summary(runs["tcp"]) if with_tcp else None
    print("bench: callgrind on a fixed transfer ...", file=sys.stderr)
    result = {
        "benchmark": "loopback",
        "seconds_per_transfer": args.seconds,
        "rounds": args.rounds,
        "tng": tng,
        **({"tng_baseline": summary(runs["tng_baseline"])} if args.baseline_tng else {}),
        "quinn": quinn,
        "kernel_tcp": tcp if tcp else "skipped: iperf3 is not installed",
        "tng_to_quinn": {
            "goodput": ratio(tng["goodput_mbps"], quinn["goodput_mbps"]),
            "cpu_percent_per_gbps": ratio(tng["cpu_percent_per_gbps"], quinn["cpu_percent_per_gbps"]),
        },
        "tng_to_tcp_goodput": ratio(tng["goodput_mbps"], tcp["goodput_mbps"]) if tcp else None,
        "callgrind": callgrind_instructions_per_packet(args.callgrind_bytes, args.out_dir),
        "load_average": load_average(),
        "cores": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
