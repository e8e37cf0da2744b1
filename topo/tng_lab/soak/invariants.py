"""The soak's invariants, checked over what it recorded; each violation is one line of the report.

- delivery: no perf round reports a corrupted byte and no complete HTTP body differs from the one sent (SHA-256);
  traffic that stops (a failed round, an interrupted fetch) is excused only while a fault lasts and for
  RECOVERY_S after it heals;
- policies: a policy deleted from the controller leaves no entry on the switch once it reconciled (churn checks);
- resources: the RSS and open file descriptors of every process stay within 10% of their level after its warm-up;
  the RSS less what a process holds by design in a bounded store of its own (the VISIBLE helper's copies: they fill
  while a receiver is slow or gone, up to the store's size, and are freed when acknowledged or expired; BMv2's pool
  of packet header vectors, counted by a uprobe, up to what its buffers hold: packet_pool);
- processes: none exits except those a fault killed; every fault heals.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tng_lab.soak.processes import Exit
from tng_lab.soak.sampler import ProcessSample
from tng_lab.soak.traffic import Fetch, Round

RECOVERY_S = 20.0  # after a fault heals, connections re-establish and rounds that straddled it finish
GROWTH = 1.10  # RSS and fds may exceed their post-warm-up level by 10%...
# ...or by these, whichever is more: 10% of a level of 12 descriptors is one connection's socket, and the allocator
# of a small process keeps what its busiest moments took: a `tng perf` server settles 7-8 MiB above its first
# minute's RSS (12 MiB after 10 loopback runs, 19 after 50, 19.6 after 110), which a minute of warm-up does not see.
SLACK_RSS_KIB = 8192
SLACK_FDS = 4
BASELINE_WINDOW_S = 30.0  # the level is the highest sample in this window before the warm-up ends


@dataclass(frozen=True, slots=True)
class Window:
    """When a fault was in force (injection to heal), labelled."""

    label: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str  # delivery, policies, resources, processes, faults
    line: str


def _excused(start: float, end: float, windows: list[Window]) -> bool:
    return any(start <= w.end + RECOVERY_S and end >= w.start for w in windows)


def delivery(rounds: list[Round], fetches: list[Fetch], windows: list[Window]) -> list[Violation]:
    found = []
    for r in rounds:
        if r.bytes_corrupted:
            found.append(
                Violation(
                    "delivery",
                    f"{r.kind} round at {r.start:.0f}-{r.end:.0f} s: {r.bytes_corrupted} bytes corrupted (tng perf)",
                )
            )
        stopped = r.error or (r.bytes_received == 0 and "delivered nothing")
        if stopped and not _excused(r.start, r.end, windows) and r.error != "stopped at the end of the soak":
            found.append(
                Violation(
                    "delivery",
                    f"{r.kind} round at {r.start:.0f}-{r.end:.0f} s failed with no fault in force: {stopped}",
                )
            )
    for f in fetches:
        if f.ok is False:
            found.append(Violation("delivery", f"HTTP body at {f.t:.0f} s through tng proxy: {f.error}"))
        elif f.ok is None and not _excused(f.t, f.end, windows):
            found.append(
                Violation(
                    "delivery", f"HTTP fetch at {f.t:.0f} s through tng proxy failed with no fault in force: {f.error}"
                )
            )
    return found


def resources(
    samples: list[ProcessSample], warmup_s: float, ready_at: dict[int, float] | None = None
) -> list[Violation]:
    """Per process (role and pid): its warm-up starts when it was ready (`ready_at`; a restarted controller once
    the switch is in sync again), or at its first sample."""
    series: dict[tuple[str, int], list[ProcessSample]] = defaultdict(list)
    for sample in samples:
        series[(sample.role, sample.pid)].append(sample)
    found = []
    for (role, pid), points in series.items():
        warm = max(points[0].t, (ready_at or {}).get(pid, 0.0)) + warmup_s
        base = [p for p in points if warm - BASELINE_WINDOW_S <= p.t <= warm]
        if not base:
            continue
        for what, value, slack, unit in (
            ("RSS", lambda p: p.rss_kib - p.held_kib, SLACK_RSS_KIB, " KiB"),
            ("open fds", lambda p: p.fds, SLACK_FDS, ""),
        ):
            level = max(value(p) for p in base)
            limit = max(level * GROWTH, level + slack)
            worst = max((p for p in points if p.t > warm), key=value, default=None)
            if worst is not None and value(worst) > limit:
                held = f" less {worst.held_kib} KiB held in its store" if what == "RSS" and worst.held_kib else ""
                found.append(
                    Violation(
                        "resources",
                        f"{role} (pid {pid}): {what}{held} {value(worst)}{unit} at {worst.t:.0f} s, over {limit:.0f}"
                        f"{unit} (level after warm-up {level}{unit})",
                    )
                )
    return found


def processes(exits: list[Exit]) -> list[Violation]:
    return [Violation("processes", f"{e.role} (pid {e.pid}) {e.how} (noticed at {e.t:.0f} s)") for e in exits]
