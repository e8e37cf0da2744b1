"""Every SAMPLE_S: RSS and open file descriptors of every registered process (with what a process reports holding
in a bounded store of its own), and the bytes both links carried downstream (the soak's goodput line), on a thread
of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tng_lab.procs import rss_kib
from tng_lab.soak.processes import Registry, open_fds

SAMPLE_S = 10.0


@dataclass(frozen=True, slots=True)
class ProcessSample:
    t: float  # seconds since the soak started
    role: str
    pid: int
    rss_kib: int
    fds: int
    # Of the RSS, what the process holds by design in a bounded store (the VISIBLE helper's copies of unacknowledged
    # segments, at most its --max-mbytes; BMv2's packet pool, packet_pool), read right after the RSS; 0 for others.
    held_kib: int = 0


@dataclass(frozen=True, slots=True)
class LinkSample:
    t: float
    down_bytes: int  # forwarded downlink bytes of all links so far (linkem's counters)


@dataclass(frozen=True, slots=True)
class Pause:
    """A stretch in which the sampler did not run for far longer than its interval: the whole soak was stopped (the
    machine's owner may SIGSTOP niced processes) or starved, so every timeout in it fired for no fault of tng."""

    start: float
    end: float


PAUSE_FACTOR = 2.5  # a gap of this many intervals between samples is a pause


@dataclass(slots=True)
class Sampler:
    registry: Registry
    link_bytes: Callable[[], int | None]  # the links' forwarded downlink bytes, None when a linkem does not answer
    # role -> the bytes its process holds in its bounded store now (None: it did not answer)
    held_bytes: dict[str, Callable[[], int | None]] = field(default_factory=dict)
    interval_s: float = SAMPLE_S
    processes: list[ProcessSample] = field(default_factory=list)
    links: list[LinkSample] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def sample(self) -> None:
        t = round(time.monotonic() - self.registry.started, 2)
        for role, pid in self.registry.roles().items():
            rss, fds = rss_kib(pid), open_fds(pid)
            held = self.held_bytes[role]() if role in self.held_bytes else None
            if rss is not None and fds is not None:
                self.processes.append(ProcessSample(t, role, pid, rss, fds, (held or 0) >> 10))
        down = self.link_bytes()
        if down is not None:
            self.links.append(LinkSample(t, down))
        self.registry.check()

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last > PAUSE_FACTOR * self.interval_s:
                origin = self.registry.started
                self.pauses.append(Pause(round(last - origin, 1), round(now - origin, 1)))
            last = now
            self.sample()
            self._stop.wait(max(0.0, now + self.interval_s - time.monotonic()))
