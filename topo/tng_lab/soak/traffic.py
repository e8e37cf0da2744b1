"""The soak's traffic, every kind at once, each on a thread of its own: `tng perf` clients in back-to-back rounds
(tng bulk, tng short flows, MPTCP, switch-steered TCP) and HTTP fetches through `tng proxy`.

A perf client lives for one round; a client whose server was killed fails its round and the next round connects
to the restarted server (that is how clients reconnect). Every round's report gives the bytes received and perf's
corrupted-bytes counter (the client checks every byte against what the server's stream must carry)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tng_lab import perf
from tng_lab.netns import LabError
from tng_lab.procs import Child, log_tail, spawn

ROUND_S = 20.0
ROUND_GRACE_S = 30.0  # a round's client may run this long past its duration (its last flow, the final report)
PAUSE_S = 1.0


@dataclass(frozen=True, slots=True)
class Round:
    """One perf client's run."""

    kind: str
    start: float  # seconds since the soak started
    end: float
    bytes_received: int
    bytes_corrupted: int
    goodput_mbps: float
    error: str | None  # why it failed (exit status, no report, stopped), None when it completed


@dataclass(frozen=True, slots=True)
class PerfKind:
    """A kind of perf traffic: its name and the `tng perf client` arguments after `--connect` (locals, mode...)."""

    name: str
    ns: str
    args: tuple[str, ...]


@dataclass(slots=True)
class PerfRounds:
    kind: PerfKind
    tng: Path
    server: str
    logs: Path
    started: float
    round_s: float = ROUND_S
    rounds: list[Round] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _child: Child | None = None

    def start(self) -> PerfRounds:
        self._thread = threading.Thread(target=self._loop, name=f"soak-{self.kind.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        child = self._child
        if child is not None:
            child.stop()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            self.rounds.append(self._round(number))
            self._stop.wait(PAUSE_S)

    def _round(self, number: int) -> Round:
        stem = self.logs / f"{self.kind.name}-{number}"
        argv = ["ip", "netns", "exec", self.kind.ns, str(self.tng), "perf", "client", "--connect", self.server]
        argv += [*self.kind.args, "--duration", f"{self.round_s:g}", "--seed", str(number), "--json"]
        start = self._now()
        child = spawn(
            f"tng perf client ({self.kind.name})", argv, stem.with_suffix(".log"), stdout=stem.with_suffix(".json")
        )
        self._child = child
        error = None
        try:
            child.popen.wait(self.round_s + ROUND_GRACE_S)
        except subprocess.TimeoutExpired:
            error = f"still running {ROUND_GRACE_S:.0f} s after its duration; stopped"
        child.stop()
        self._child = None
        end = self._now()
        if self._stop.is_set() and error is None and child.popen.returncode != 0:
            error = "stopped at the end of the soak"
        if error is None and child.popen.returncode != 0:
            error = f"exit status {child.popen.returncode}: {log_tail(child.log)}"
        try:
            report = perf.parse_report(stem.with_suffix(".json").read_text())
        except (LabError, OSError) as err:
            return Round(self.kind.name, start, end, 0, 0, 0.0, error or str(err))
        return Round(
            self.kind.name, start, end, report.bytes_received, report.bytes_corrupted, report.goodput_mbps, error
        )

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 2)


@dataclass(frozen=True, slots=True)
class Fetch:
    """One HTTP request through the proxy, as the fetcher reported it."""

    t: float  # seconds since the soak started, when the request went out
    end: float  # when the fetch ended (body read, error or timeout)
    size: int
    received: int
    ok: bool | None  # True: the complete body matched; False: a complete body that did not; None: interrupted
    error: str | None


def read_fetches(log: Path, wall_started: float) -> list[Fetch]:
    """The fetcher's JSON lines (a last line cut short by its stop is ignored)."""
    fetches = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        t, end = (round(float(data[key]) - wall_started, 2) for key in ("t", "end"))
        fetches.append(Fetch(t, end, int(data["size"]), int(data["received"]), data["ok"], data.get("error")))
    return fetches
