"""The processes of the relay experiments (tng_lab.relay_lab, tng_lab.lossy_wan_lab): `tng relay` with its trace,
`tng perf` clients, and what a client's output says about its transfer."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from tng_lab.load import LoadMeter
from tng_lab.netns import LabError, sh
from tng_lab.procs import Child, log_tail, spawn

RELAY_PORT = 4477
DIVERT_MARK = 0x746E  # "tn": the firewall mark, and the routing table number, of diverted SECTIONs
END_GRACE_S = 30.0  # how long a client may run beyond its duration before the run counts as failed
TRACE_INTERVAL_MS = 100
PROGRESS_LINE = re.compile(r"^\[\s*(\d+) s\]\s+([0-9.]+) Mbit/s", re.M)
SUMMARY_GOODPUT = re.compile(r"goodput ([0-9.]+) Mbit/s.*?(\d+) retransmitted packets")
CORRUPTED = re.compile(r"(\d+) received bytes did not match")


def netns_exec(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def trace_path(logs: Path, name: str) -> Path:
    return logs / f"{name}-trace.jsonl"


def divert_sections(ns: str, port: int) -> None:
    """Makes `ns`, a router, hand the tng SECTIONs and SECTION_ACKs it routes to UDP `port` to a `tng relay
    --on-path` listening on that port: an nftables TPROXY rule matching the port and the tng header's packet type
    (the second byte of the UDP payload: 0x07 SECTION, 0x08 SECTION_ACK) marks them, and a policy route delivers
    marked packets locally (the kernel's tproxy documentation). Everything else is forwarded as before. Once per
    namespace: the rule outlives relay restarts."""
    table = ["ip", "tng_relay"]
    hook = "{ type filter hook prerouting priority mangle; policy accept; }"
    match = ["udp", "dport", str(port), "@th,72,8", "{ 0x07, 0x08 }"]
    action = ["meta", "mark", "set", hex(DIVERT_MARK), "tproxy", "to", f":{port}", "accept"]
    for command in (
        netns_exec(ns, "nft", "add", "table", *table),
        netns_exec(ns, "nft", "add", "chain", *table, "prerouting", hook),
        netns_exec(ns, "nft", "add", "rule", *table, "prerouting", *match, *action),
        ["ip", "-n", ns, "rule", "add", "fwmark", hex(DIVERT_MARK), "lookup", str(DIVERT_MARK)],
        ["ip", "-n", ns, "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", str(DIVERT_MARK)],
    ):
        sh(command)


def start_relay(
    tng: Path,
    ns: str,
    ccs: tuple[str, str],
    queue_limit: int,
    logs: Path,
    *,
    next_relay: str | None = None,
    name: str = "relay",
    on_path_port: int | None = None,
) -> Child:
    """`tng relay` in `ns` with (--toward-client-cc, --toward-server-cc) = `ccs`, tracing to `trace_path(logs,
    name)`, on RELAY_PORT, or with `on_path_port` on the path (`--on-path`), on that port, the servers', to which
    `divert_sections` sends what `ns` routes. Returns once its socket is bound."""
    toward_client, toward_server = ccs
    port = RELAY_PORT if on_path_port is None else on_path_port
    argv = netns_exec(ns, str(tng), "relay", "--listen", f"0.0.0.0:{port}")
    if on_path_port is not None:
        argv.append("--on-path")
    argv += ["--toward-client-cc", toward_client, "--toward-server-cc", toward_server]
    argv += ["--queue-limit", str(queue_limit), "--log-level", "info"]
    argv += ["--trace", str(trace_path(logs, name)), "--trace-interval", str(TRACE_INTERVAL_MS)]
    if next_relay is not None:
        argv += ["--next-relay", next_relay]
    relay = spawn(f"tng relay ({name})", argv, logs / f"{name}.log")
    deadline = time.monotonic() + 10.0
    while not sh(netns_exec(ns, "ss", "-Hlun", f"sport = :{port}")).strip():
        relay.check()
        if time.monotonic() > deadline:
            raise LabError(f"tng relay ({name}) did not bind its socket within 10 s")
        time.sleep(0.05)
    return relay


def stop_relay(relay: Child, trace: Path) -> list[dict[str, Any]]:
    """SIGINT makes the relay write a last line of its trace; returns the trace's lines."""
    if relay.running():
        relay.popen.send_signal(signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            relay.popen.wait(5.0)
    relay.stop()
    try:
        lines = [json.loads(line) for line in trace.read_text().splitlines()]
    except (OSError, ValueError) as err:
        raise LabError(f"{relay.name} left no readable trace ({err}): {log_tail(relay.log)}") from err
    if not lines:
        raise LabError(f"{relay.name}'s trace is empty: {log_tail(relay.log)}")
    return lines


def client_argv(tng: Path, ns: str, server: str, duration_s: float, extra: list[str]) -> list[str]:
    argv = netns_exec(ns, str(tng), "perf", "client", "--connect", server)
    return [*argv, "--duration", f"{duration_s:g}", *extra]


def wait_exit(child: Child, deadline: float, meter: LoadMeter) -> int:
    """The child's exit status; it is stopped and the run fails when it outlives `deadline`."""
    while child.running() and time.monotonic() < deadline:
        meter.tick()
        time.sleep(0.2)
    status = child.popen.poll()
    if status is None:
        child.stop()
        raise LabError(f"{child.name} still ran {END_GRACE_S:.0f} s after its duration: {log_tail(child.log)}")
    return status


def transfer_report(status: int, progress_log: Path, summary: Path) -> dict[str, Any]:
    """The tng client's per-second goodput (its progress lines) and outcome. Without --json `tng perf client`
    prints no byte count, but it checks every byte it reads against the server's pattern and exits non-zero naming
    the count of mismatches; the bytes checked are the sum of its whole seconds of progress."""
    progress = progress_log.read_text(errors="replace")
    seconds = [(int(s), float(mbps)) for s, mbps in PROGRESS_LINE.findall(progress)]
    summary_match = SUMMARY_GOODPUT.search(summary.read_text(errors="replace"))
    corrupted = CORRUPTED.search(progress)
    return {
        "exit_status": status,
        "goodput_mbps": float(summary_match[1]) if summary_match else None,
        "retransmitted_packets": int(summary_match[2]) if summary_match else None,
        "bytes_checked": round(sum(mbps for _, mbps in seconds) * 1e6 / 8),
        "bytes_corrupted": int(corrupted[1]) if corrupted else 0,
        "verified": status == 0 and summary_match is not None and not corrupted,
        "goodput_per_second": seconds,
    }
