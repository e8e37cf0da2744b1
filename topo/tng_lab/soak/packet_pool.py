"""How many packet header vectors BMv2 holds: a uprobe on `bm::PHVFactory::create` in simple_switch_grpc.

BMv2 never frees a PHV (bm_sim/phv_source.cpp): a packet takes one from a pool and gives it back when it leaves, and
the pool makes a new one only when it is empty. So the calls to PHVFactory::create in one switch process are the most
packets it has held at once, and with the tng pipeline each one keeps 100-130 KiB of RSS for good: the end of a
250 ms delay burst, while VISIBLE clones a train of TCP segments for the helper, left 110-340 packets more in the
switch than any warm-up did (docs/soak.md, "Invariants"). The resources rule leaves that pool out of BMv2's RSS, as it
leaves out the VISIBLE helper's copies, but only up to what BMv2's buffers can hold (`SwitchPool.bound`): a pool
larger than that would be packets that never leave, and its RSS counts again.

The uprobe goes through tracefs (mounted if it is not) at the symbol's file offset (binutils' nm and readelf), and its
hits are read from uprobe_profile. It counts every process that runs the binary: the soak must have BMv2 to itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tng_lab.netns import LabError, sh

SYMBOL = "_ZNK2bm10PHVFactory6createEv"  # bm::PHVFactory::create() const
TRACEFS = Path("/sys/kernel/tracing")
GROUP = "tng_soak"
# simple_switch's buffers (targets/simple_switch/simple_switch.cpp): the input buffer's half for received packets
# (the other half takes resubmitted and recirculated ones, which the tng pipeline never makes), the output buffer,
# and an egress queue's depth where nothing sets it.
INPUT_BUFFER = 1024
OUTPUT_BUFFER = 128
DEFAULT_QUEUE = 64
# A packet the pipeline is working on, a clone between ingress and its queue: a few per thread (1 ingress, 4 egress).
IN_FLIGHT = 16
# The fill must make at least this many PHVs for its RSS step to tell what one costs.
MIN_MEASURED = 50


class CounterUnavailable(Exception):
    """The uprobe cannot be set: the message says why (no tracefs, no symbol, not root)."""


def _run(argv: list[str]) -> str:
    try:
        return sh(argv)
    except LabError as err:
        raise CounterUnavailable(str(err)) from err


def _append(path: Path, line: str) -> None:
    """One write to a tracefs control file, which takes no seek (as Python's append mode makes)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def symbol_address(nm_output: str, symbol: str) -> int:
    """The address `nm` gives `symbol` (a defined one)."""
    for line in nm_output.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == symbol and fields[1] in "TtWw":
            return int(fields[0], 16)
    raise CounterUnavailable(f"{symbol} is not defined in the binary")


def file_offset(readelf_segments: str, address: int) -> int:
    """Where in the file the code at virtual `address` is, from `readelf -lW`'s LOAD segments."""
    for line in readelf_segments.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0] == "LOAD":
            offset, vaddr, filesz = int(fields[1], 16), int(fields[2], 16), int(fields[4], 16)
            if vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
    raise CounterUnavailable(f"no LOAD segment holds address {address:#x}")


def profile_hits(uprobe_profile: str, event: str) -> int:
    """The hits of `event` (its name without the group) in tracefs' uprobe_profile."""
    for line in uprobe_profile.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] == event:
            return int(fields[2])
    raise CounterUnavailable(f"uprobe {event} is not in uprobe_profile")


@dataclass(slots=True)
class PhvCounter:
    """The uprobe, set on `attach` and removed on `close`."""

    binary: Path
    event: str

    @classmethod
    def attach(cls, binary: Path) -> PhvCounter:
        if os.geteuid() != 0:
            raise CounterUnavailable("uprobes need root")
        if not (TRACEFS / "uprobe_events").exists():
            _run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)])
        real = binary.resolve()
        offset = file_offset(_run(["readelf", "-lW", str(real)]), symbol_address(_run(["nm", "-D", str(real)]), SYMBOL))
        event = f"phv_create_{os.getpid()}"
        try:
            _append(TRACEFS / "uprobe_events", f"p:{GROUP}/{event} {real}:{offset:#x}\n")
            (TRACEFS / "events" / GROUP / event / "enable").write_text("1\n")
        except OSError as err:
            raise CounterUnavailable(f"tracefs refused the uprobe: {err}") from err
        return cls(real, event)

    def hits(self) -> int:
        return profile_hits((TRACEFS / "uprobe_profile").read_text(), self.event)

    def close(self) -> None:
        try:
            (TRACEFS / "events" / GROUP / self.event / "enable").write_text("0\n")
            _append(TRACEFS / "uprobe_events", f"-:{GROUP}/{self.event}\n")
        except OSError:
            pass  # tracefs went away with the machine's state; nothing is left to remove


@dataclass(slots=True)
class SwitchPool:
    """The PHV pool of the BMv2 that runs now, and what each of its PHVs costs in RSS."""

    count: Callable[[], int]  # PHVFactory::create calls so far, in every BMv2 life
    bound: int  # the most packets BMv2's buffers hold at once
    _life_start: int = 0
    kib_per_phv: float | None = None  # measured at a fill; the lowest measurement (the least left out)

    def new_life(self) -> None:
        """A new BMv2 process starts with an empty pool (call before it starts)."""
        self._life_start = self.count()

    def phvs(self) -> int | None:
        """PHVs the running BMv2 has made; None when the uprobe's count cannot be read."""
        try:
            return self.count() - self._life_start
        except (CounterUnavailable, OSError):
            return None

    def measure(self, phvs_before: int, rss_before_kib: int, phvs_after: int, rss_after_kib: int) -> str:
        """What one PHV costs, from the RSS step of a fill that made `phvs_after - phvs_before` of them."""
        made = phvs_after - phvs_before
        if made < MIN_MEASURED:
            return f"{made} PHVs made, too few to measure one"
        each = (rss_after_kib - rss_before_kib) / made
        if each > 0:
            self.kib_per_phv = each if self.kib_per_phv is None else min(self.kib_per_phv, each)
        return f"{made} PHVs made ({phvs_after} held), {each:.0f} KiB each"

    def held_bytes(self) -> int | None:
        """The RSS the pool accounts for, up to `bound` PHVs; None before a fill measured one or when the uprobe's
        count cannot be read (then the whole RSS counts)."""
        phvs = self.phvs()
        if self.kib_per_phv is None or phvs is None:
            return None
        return int(min(phvs, self.bound) * self.kib_per_phv * 1024)


def buffer_bound(queue_depths: list[int | None]) -> int:
    """The most packets simple_switch holds at once with egress queues of these depths (None: BMv2's default)."""
    queues = sum(DEFAULT_QUEUE if depth is None else depth for depth in queue_depths)
    return INPUT_BUFFER + OUTPUT_BUFFER + queues + IN_FLIGHT
