"""The fault schedule: from one seed, the gap before each fault (drawn uniformly from `interval`, counted from the
end of the warm-up for the first and from the previous fault's heal for the others), which fault (the available
ones in a shuffled cycle, so a run long enough meets every one of them) and how long it lasts (within the fault's
own range). `at_s` is when each fault would start if every heal were instant; the runner counts each gap from the
real heal, so a slow restart delays the rest of the schedule instead of squeezing it."""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_INTERVAL_S = (30.0, 120.0)
END_MARGIN_S = 30.0  # the last fault heals this long before the end, so the recovery after it is checked too


@dataclass(frozen=True, slots=True)
class Planned:
    at_s: float  # seconds since the soak started, with instant heals
    fault: int  # index into the faults the schedule was made from
    hold_s: float
    gap_s: float  # from the previous fault's heal (the first: from the end of the warm-up)


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
    gap = rng.uniform(*interval_s)
    at = warmup_s + gap
    while holds:
        if not cycle:
            cycle = list(range(len(holds)))
            rng.shuffle(cycle)
        fault = cycle[0]
        hold = round(rng.uniform(*holds[fault]), 1)
        if at + hold + END_MARGIN_S > duration_s:
            break
        cycle.pop(0)
        planned.append(Planned(round(at, 1), fault, hold, round(gap, 1)))
        gap = rng.uniform(*interval_s)
        at += hold + gap
    return planned
