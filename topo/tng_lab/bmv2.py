"""BMv2 as the in-path switch: `simple_switch_grpc` (started by tng_p4.bmv2) in the switch namespace, owning its veths
as ports, and its egress queue depths read while a run goes on.

The tng controller pushes the pipeline over P4Runtime and programs it. The switch's gRPC and Thrift servers listen
inside the switch namespace, where the controller runs too, so their fixed ports never collide with another run's
(or another BMv2 on the machine).
"""

from __future__ import annotations

import ctypes.util
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from tng_p4.bmv2 import LOCALHOST, Bmv2Config

from tng_lab import linkem
from tng_lab.linkspec import Direction
from tng_lab.netns import LabError
from tng_lab.plan import Plan
from tng_lab.procs import CHILD_ENV, log_tail

GRPC_PORT = 9559
THRIFT_PORT = 9090
GRPC_ADDRESS = f"{LOCALHOST}:{GRPC_PORT}"
THRIFT_ADDRESS = f"{LOCALHOST}:{THRIFT_PORT}"
DEVICE_ID = 1
PACKET_BITS = 1500 * 8  # BMv2's queue rates are packets/s; the controller converts capacities with 1500-byte packets
QUEUE_REGISTER = "port_queue_depth"  # packets left in a port's egress queue at its last dequeue (p4src/README.md)
ANSWER_TIMEOUT_S = 2.0
MALLOC_ARENAS = 2  # glibc's malloc, where jemalloc is not installed: bounds what it keeps back (docs/soak.md)
_REGISTER_VALUE = re.compile(rf"{QUEUE_REGISTER}\[(?P<port>\d+)\]\s*=\s*(?P<value>\d+)")


# A link BMv2 shapes also passes linkem, which adds its delay. At the same rate as BMv2, linkem could never drain a
# burst BMv2 releases after a late wake-up: those packets would stand in linkem's queue, out of steering's sight, for
# the rest of the run (measured: +4 ms median, +10 ms p95 on Wi-Fi). 3% faster drains such a burst within ~0.1 s.
LINKEM_HEADROOM = 1.03


def linkem_direction(down: Direction) -> Direction:
    """linkem's share of a downlink that BMv2 shapes at `down.rate_bps`: the same, at LINKEM_HEADROOM times the rate."""
    if down.rate_bps is None:
        return down
    return replace(down, rate_bps=down.rate_bps * LINKEM_HEADROOM)


def queue_rate_pps(rate_bps: float) -> int:
    """The egress queue rate the controller gives a port of capacity `rate_bps` (tng_controller.queue_rates)."""
    return max(1, round(rate_bps / PACKET_BITS))


def config(binary: Path, plan: Plan, log: Path) -> Bmv2Config:
    """simple_switch_grpc on the switch namespace's interfaces, program pushed later by the controller; with jemalloc
    as its malloc where it is installed (make deps installs libjemalloc2), which returns what a burst made the switch
    hold instead of keeping it in its RSS (docs/soak.md, "Results")."""
    allocator = ctypes.util.find_library("jemalloc")
    return Bmv2Config(
        binary=binary,
        log_path=log,
        grpc_port=GRPC_PORT,
        thrift_port=THRIFT_PORT,
        device_id=DEVICE_ID,
        interfaces=tuple(plan.switch_ports()),
        netns=plan.switch_ns,
        realtime_priority=int(linkem.REALTIME_PRIORITY),
        malloc_arenas=None if allocator else MALLOC_ARENAS,
        allocator=allocator,
    )


class QueueDepths:
    """Reads BMv2's egress queue depths while a run goes on, through one simple_switch_CLI kept open in the switch
    namespace (its Thrift server is only reachable there; one CLI per sample would cost a core)."""

    def __init__(self, plan: Plan, log: Path) -> None:
        cli = shutil.which("simple_switch_CLI")
        if cli is None:
            raise LabError("simple_switch_CLI not found on PATH (BMv2's Thrift client)")
        argv = ["ip", "netns", "exec", plan.switch_ns, sys.executable, cli, "--thrift-port", str(THRIFT_PORT)]
        self._log = log
        self._errors = log.open("wb")
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            start_new_session=True,
            env=CHILD_ENV,
            text=True,
        )
        self._answers: queue.Queue[tuple[int, int]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            match = _REGISTER_VALUE.search(line)
            if match:
                self._answers.put((int(match["port"]), int(match["value"])))

    def read(self, ports: list[int]) -> dict[int, int]:
        """Packets queued per egress port; raises LabError when the CLI does not answer."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.write("".join(f"register_read {QUEUE_REGISTER} {port}\n" for port in ports))
            self._process.stdin.flush()
        except OSError as err:
            raise LabError(f"simple_switch_CLI (queue depths) is gone: {err}; {log_tail(self._log)}") from err
        depths = {}
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while len(depths) < len(ports):
            try:
                port, value = self._answers.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                raise LabError(f"simple_switch_CLI did not report {QUEUE_REGISTER}: {log_tail(self._log)}") from None
            depths[port] = value
        return depths

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(ANSWER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._errors.close()
