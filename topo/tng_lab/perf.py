"""`tng perf` from the runner's side: server and client command lines, what the binary supports, its JSON report."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tng_lab.netns import LabError, sh
from tng_lab.procs import Child, spawn
from tng_lab.scenario import Workload

SERVER_START_TIMEOUT_S = 10.0
_TRANSPORT_OPTION = re.compile(r"--transport <[A-Z_]+>(?P<body>.*?)(?=\n\s*-{1,2}[a-z]|\Z)", re.S)
_LISTED_VALUES = re.compile(r"\[possible values: ([^\]]+)\]")
_BULLET_VALUES = re.compile(r"^\s*- ([a-z0-9_-]+):", re.M)


@dataclass(frozen=True, slots=True)
class Fct:
    mean: float
    p50: float
    p99: float
    count: int


@dataclass(frozen=True, slots=True)
class PerfReport:
    """The fields tng-lab reads from `tng perf client --json`."""

    transport: str
    mode: str
    goodput_mbps: float
    bytes_received: int
    bytes_corrupted: int
    fct_ms: Fct
    retransmitted_packets: int
    sent_packets: int
    cpu_percent: float
    paths: list[dict[str, Any]]
    # When the workload started (Unix seconds) and the interval goodput_mbps counts over.
    started_unix_s: float
    duration_s: float
    fct_samples_ms: list[float] = field(default_factory=list)
    # Seconds from the workload's start until its streams closed and the server's counters came back.
    run_s: float | None = None
    # Time the sender's bytes waited between its write and their first transmission, {"p50", "p95"} in ms (tng only).
    sender_queueing_ms: dict[str, float] | None = None


def parse_report(text: str) -> PerfReport:
    """Parses the client's JSON; raises LabError naming a missing or malformed field."""
    try:
        data = json.loads(text)
        fct = data["fct_ms"]
        return PerfReport(
            transport=str(data["transport"]),
            mode=str(data["mode"]),
            goodput_mbps=float(data["goodput_mbps"]),
            bytes_received=int(data["bytes_received"]),
            bytes_corrupted=int(data["bytes_corrupted"]),
            fct_ms=Fct(float(fct["mean"]), float(fct["p50"]), float(fct["p99"]), int(fct["count"])),
            retransmitted_packets=int(data["retransmitted_packets"]),
            sent_packets=int(data.get("sent_packets", 0)),
            cpu_percent=float(data["cpu_percent"]),
            paths=list(data["paths"]),
            started_unix_s=float(data["started_unix_s"]),
            duration_s=float(data["duration_s"]),
            fct_samples_ms=[float(v) for v in data.get("fct_samples_ms", [])],
            run_s=float(data["run_s"]) if data.get("run_s") is not None else None,
            sender_queueing_ms=(
                {key: float(value) for key, value in data["sender_queueing_ms"].items()}
                if data.get("sender_queueing_ms") is not None
                else None
            ),
        )
    except json.JSONDecodeError as err:
        raise LabError(f"tng perf client printed no JSON report ({err})") from err
    except (KeyError, TypeError, ValueError) as err:
        raise LabError(f"tng perf client report lacks or mangles field {err}") from err


def combined(reports: list[PerfReport]) -> PerfReport:
    """One report for clients that ran at once (one per UE): bytes, packets and CPU add up, every FCT sample is
    kept, and each path entry says which client (`ue`, from 1) it came from. Goodput is every client's counted bytes
    over the span from the first client's start to the last one's end: clients start a little apart (a loaded
    machine spawns them one by one), and the sum of their rates would count the time one ran alone as if all had
    shared it (four UEs once summed to 41.6 Mbit/s on links of 40). FCT mean, p50 and p99 of several clients are their
    means weighted by flow count: exact for the mean, an approximation for the percentiles (the pooled samples, when
    the clients report them, give the exact distribution). The run lasted as long as the longest client's, and its
    sender queueing is the worst client's (the highest p50 and p95)."""
    if len(reports) == 1:
        return reports[0]
    flows = sum(report.fct_ms.count for report in reports)
    start = min(report.started_unix_s for report in reports)
    end = max(report.started_unix_s + report.duration_s for report in reports)
    counted_megabits = sum(report.goodput_mbps * report.duration_s for report in reports)

    def weighted(value: Callable[[Fct], float]) -> float:
        return sum(value(r.fct_ms) * r.fct_ms.count for r in reports) / flows if flows else 0.0

    return PerfReport(
        transport=reports[0].transport,
        mode=reports[0].mode,
        goodput_mbps=counted_megabits / (end - start),
        bytes_received=sum(report.bytes_received for report in reports),
        bytes_corrupted=sum(report.bytes_corrupted for report in reports),
        fct_ms=Fct(weighted(lambda f: f.mean), weighted(lambda f: f.p50), weighted(lambda f: f.p99), flows),
        retransmitted_packets=sum(report.retransmitted_packets for report in reports),
        sent_packets=sum(report.sent_packets for report in reports),
        cpu_percent=sum(report.cpu_percent for report in reports),
        paths=[{**path, "ue": ue} for ue, report in enumerate(reports, start=1) for path in report.paths],
        started_unix_s=start,
        duration_s=end - start,
        fct_samples_ms=[sample for report in reports for sample in report.fct_samples_ms],
        run_s=max((r.run_s for r in reports if r.run_s is not None), default=None),
        sender_queueing_ms=_worst_queueing([r.sender_queueing_ms for r in reports if r.sender_queueing_ms]),
    )


def _worst_queueing(reports: list[dict[str, float]]) -> dict[str, float] | None:
    if not reports:
        return None
    return {key: max(report[key] for report in reports) for key in reports[0]}


def supported_transports(binary: Path) -> set[str]:
    """The --transport values this `tng` binary accepts, read from its help."""
    match = _TRANSPORT_OPTION.search(sh([str(binary), "perf", "client", "--help"]))
    if not match:
        raise LabError(f"{binary} perf client --help does not describe --transport")
    listed = _LISTED_VALUES.search(match["body"])
    if listed:
        return {value.strip() for value in listed[1].split(",")}
    return set(_BULLET_VALUES.findall(match["body"]))


def server_command(binary: Path, ns: str, address: str, port: int, cc: str | None) -> list[str]:
    argv = ["ip", "netns", "exec", ns, str(binary), "perf", "server", "--listen", f"{address}:{port}"]
    return [*argv, "--cc", cc] if cc else argv


@dataclass(slots=True)
class PerfServer:
    """The perf server in the server namespace. Its --cc sets the congestion control of its tng channels, and the
    server sends the data, so it is restarted whenever a tng workload asks for another one."""

    binary: Path
    ns: str
    address: str
    port: int
    logs: Path
    child: Child | None = None
    cc: str | None = None
    starts: int = 0
    extra_args: tuple[str, ...] = ()  # more `tng perf server` flags (e.g. --qlog DIR)

    def ensure(self, cc: str | None) -> Child:
        """The running server with tng congestion control `cc` (None: the agent's default)."""
        if self.child is not None and self.cc == cc:
            return self.child
        self.stop()
        self.starts += 1
        log = self.logs / f"server-{self.starts}-{cc or 'default'}.log"
        argv = [*server_command(self.binary, self.ns, self.address, self.port, cc), *self.extra_args]
        self.child = spawn("tng perf server", argv, log)
        self.cc = cc
        self._wait_listening(self.child)
        return self.child

    def current(self) -> Child:
        """The running server, whichever congestion control it has (started with the default if none runs)."""
        return self.ensure(self.cc)

    def _wait_listening(self, child: Child) -> None:
        """Waits for the TCP listener; the agent binds its UDP socket before it (see `tng perf server`)."""
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        probe = ["ip", "netns", "exec", self.ns, "ss", "-Hltn", f"sport = :{self.port}"]
        while not sh(probe).strip():
            child.check()
            if time.monotonic() > deadline:
                raise LabError(f"tng perf server did not listen within {SERVER_START_TIMEOUT_S:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None


def client_command(
    binary: Path,
    ns: str,
    workload: Workload,
    server: str,
    local_addresses: list[str],
    duration_s: float,
    seed: int,
) -> list[str]:
    """The client run for `workload`: one --local per path (MPTCP: only the initial subflow's)."""
    locals_ = local_addresses[:1] if workload.transport == "mptcp" else local_addresses
    argv = ["ip", "netns", "exec", ns, str(binary), "perf", "client", "--connect", server]
    for address in locals_:
        argv += ["--local", f"{address}:0"]
    argv += ["--mode", workload.mode, "--duration", f"{duration_s:g}", "--transport", workload.transport]
    if workload.cc:
        argv += ["--cc", workload.cc]
    if workload.alcc:
        argv += ["--alcc", workload.alcc]
    for flag, value in (
        ("--parallel", workload.parallel),
        ("--flow-size", workload.flow_size),
        ("--response-size", workload.response_size),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return [*argv, "--seed", str(seed), "--json"]
