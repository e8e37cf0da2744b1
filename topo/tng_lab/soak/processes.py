"""The long-lived processes of a soak, by role: which pid plays each role now, which ones a fault killed on purpose,
and the ones that exited on their own (a violated invariant)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Exit:
    role: str
    pid: int
    t: float  # seconds since the soak started
    how: str  # why it is gone, as far as the soak can tell


@dataclass(slots=True)
class Registry:
    """Role -> pid. A fault announces a kill (`killing`) before it sends the signal and registers the successor when
    it has started it; a pid that disappears unannounced is an unexpected exit."""

    started: float
    _pids: dict[str, int] = field(default_factory=dict)
    _killed: set[int] = field(default_factory=set)
    exits: list[Exit] = field(default_factory=list)  # unexpected ones
    ready_at: dict[int, float] = field(default_factory=dict)  # pid -> seconds since the start when it was ready
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, role: str, pid: int) -> None:
        with self._lock:
            self._pids[role] = pid
            self.ready_at[pid] = round(time.monotonic() - self.started, 1)

    def mark_ready(self, role: str) -> None:
        """`role`'s process is ready only now (a restarted switch or controller once they are in sync): its
        warm-up, after which its resources are compared with their level, starts here."""
        with self._lock:
            self.ready_at[self._pids[role]] = round(time.monotonic() - self.started, 1)

    def pid(self, role: str) -> int:
        with self._lock:
            return self._pids[role]

    def roles(self) -> dict[str, int]:
        with self._lock:
            return dict(self._pids)

    def killing(self, role: str) -> int:
        """The pid of `role`, marked as killed on purpose."""
        with self._lock:
            pid = self._pids[role]
            self._killed.add(pid)
            return pid

    def check(self) -> list[Exit]:
        """Roles whose process is gone without a fault killing it; each is reported once (and dropped)."""
        found = []
        with self._lock:
            for role, pid in list(self._pids.items()):
                if pid in self._killed or alive(pid):
                    continue
                found.append(Exit(role, pid, round(time.monotonic() - self.started, 1), "exited without being killed"))
                del self._pids[role]
            self.exits += found
        return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def open_fds(pid: int) -> int | None:
    try:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return None
