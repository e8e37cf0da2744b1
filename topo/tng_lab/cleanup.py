"""`tng-lab clean`: remove what runs that did not finish left behind (namespaces, processes, sockets, sysctls)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

from tng_lab import kernelcc, netns


@dataclass(slots=True)
class CleanReport:
    namespaces: list[str] = field(default_factory=list)
    processes: int = 0
    run_dirs: int = 0
    congestion_controls: list[str] = field(default_factory=list)  # taken back out of the allowed list
    live: set[int] = field(default_factory=set)  # runners still running, left alone

    def line(self) -> str:
        parts = [
            f"removed {len(self.namespaces)} namespaces",
            f"killed {self.processes} processes",
            f"removed {self.run_dirs} run directories",
        ]
        if self.congestion_controls:
            parts.append(f"disallowed {' '.join(self.congestion_controls)} again")
        if self.live:
            parts.append(f"left the runs of live tng-lab processes alone ({', '.join(map(str, sorted(self.live)))})")
        return "clean: " + ", ".join(parts)


def clean() -> CleanReport:
    """Removes everything of tng-lab runs whose runner process is gone; runs still going are left alone."""
    report = CleanReport()
    leftovers, report.live = netns.leftover_namespaces()
    for ns in leftovers:
        report.processes += netns.delete_namespace(ns)
        report.namespaces.append(ns)
    for run_dir in netns.leftover_run_directories():
        shutil.rmtree(run_dir, ignore_errors=True)
        report.run_dirs += 1
    report.congestion_controls = kernelcc.restore(own_prefix=None)
    return report
