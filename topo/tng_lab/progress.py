"""The progress bar on stderr: seconds of workload done out of all planned, the current workload and its rate."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from tqdm import tqdm


@dataclass(slots=True)
class Progress:
    total_s: float
    bar: tqdm = field(init=False)
    done_s: float = 0.0  # seconds credited by finished workloads
    current_s: float = 0.0  # seconds credited by the running one
    budget_s: float = 0.0  # what the running one may credit

    def __post_init__(self) -> None:
        # disable=None: no bar when stderr is not a terminal (logs, CI).
        self.bar = tqdm(total=round(self.total_s, 1), unit="s", file=sys.stderr, disable=None, dynamic_ncols=True)

    def start(self, label: str, duration_s: float) -> None:
        self.budget_s, self.current_s = duration_s, 0.0
        self.bar.set_description_str(label)

    def tick(self, elapsed_s: float, mbps: float) -> None:
        credit = min(elapsed_s, self.budget_s)
        self.bar.update(round(credit - self.current_s, 1))
        self.current_s = round(credit, 1)
        self.bar.set_postfix_str(f"{mbps:6.2f} Mbit/s", refresh=False)

    def finish(self) -> None:
        self.bar.update(round(self.budget_s - self.current_s, 1))
        self.done_s += self.budget_s
        self.current_s, self.budget_s = 0.0, 0.0

    def close(self) -> None:
        self.bar.close()
