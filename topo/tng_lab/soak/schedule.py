"""The fault schedule: from one seed, when each fault starts (every `interval` seconds after the warm-up, drawn
uniformly), which fault (the available ones in a shuffled cycle, so a run long enough meets every one of them) and
how long it lasts (within the fault's own range)."""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_INTERVAL_S = (30.0, 120.0)
END_MARGIN_S = 30.0  # the last fault heals this long before the end, so the recovery after it is checked too


@dataclass(frozen=True, slots=True)
class Planned:
    at_s: float  # seconds since the soak started
    fault: int  # index into the faults the schedule was made from
    hold_s: float


def make_schedule(
    holds: list[tuple[float, float]],
    seed: int,
    duration_s: float,
    warmup_s: float,
    interval_s: tuple[float, float] = DEFAULT_INTERVAL_S,
) -> list[Planned]:
    """`holds[i]` is fault i's hold range; faults are picked from all of them. Empty when `holds` is."""
    rng = random.Random(seed)
    planned: list[Planned] = []
    cycle: list[int] = []
    at = warmup_s + rng.uniform(*interval_s)
    while holds:
        if not cycle:
            cycle = list(range(len(holds)))
            rng.shuffle(cycle)
        fault = cycle[0]
        hold = round(rng.uniform(*holds[fault]), 1)
        if at + hold + END_MARGIN_S > duration_s:
            break
        cycle.pop(0)
        planned.append(Planned(round(at, 1), fault, hold))
        at += hold + rng.uniform(*interval_s)
    return planned
