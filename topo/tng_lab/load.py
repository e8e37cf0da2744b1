"""Machine load during a workload: load average, busy share of all cores, CPU share of named processes."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tng_lab.procs import cpu_seconds


@dataclass(frozen=True, slots=True)
class Load:
    loadavg_start: float
    loadavg_end: float
    loadavg_max: float
    machine_cpu_percent: float  # busy share of all cores, 0-100
    cpu_percent: dict[str, float]  # per process, 100 = one core


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


@dataclass(slots=True)
class LoadMeter:
    """Started before a workload, read after it; `tick` follows the load average in between."""

    pids: dict[str, int]
    started: float = field(default_factory=time.monotonic)
    jiffies: tuple[int, int] = field(default_factory=_cpu_jiffies)
    loadavg_start: float = field(default_factory=lambda: os.getloadavg()[0])
    loadavg_max: float = 0.0
    cpu_start: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loadavg_max = self.loadavg_start
        self.cpu_start = {name: cpu_seconds(pid) or 0.0 for name, pid in self.pids.items()}

    def tick(self) -> None:
        self.loadavg_max = max(self.loadavg_max, os.getloadavg()[0])

    def finish(self, extra: dict[str, float]) -> Load:
        """The load since start; `extra` adds CPU shares measured elsewhere (the perf client's own)."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        busy, total = _cpu_jiffies()
        machine = 100.0 * (busy - self.jiffies[0]) / max(total - self.jiffies[1], 1)
        shares = {}
        for name, pid in self.pids.items():
            now = cpu_seconds(pid)
            if now is not None:
                shares[name] = round(100.0 * (now - self.cpu_start[name]) / elapsed, 1)
        self.tick()
        loadavg_end = os.getloadavg()[0]
        return Load(self.loadavg_start, loadavg_end, self.loadavg_max, round(machine, 1), {**shares, **extra})
