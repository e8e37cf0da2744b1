"""linkem from the runner's side: its command line, its control socket, and synthetic traces."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, fields
from pathlib import Path

from tng_lab.linkspec import TraceModel
from tng_lab.netns import LabError, sh
from tng_lab.procs import Child

START_TIMEOUT_S = 10.0
REALTIME_PRIORITY = "10"  # `chrt -f 10`: docs/linkem.md, "Timing on a busy machine"


@dataclass(frozen=True, slots=True)
class Counters:
    """One direction's counters (docs/linkem.md, "Counters"); bytes are IP bytes."""

    packets_in: int
    bytes_in: int
    forwarded_packets: int
    forwarded_bytes: int
    dropped_queue: int
    dropped_loss: int
    dropped_send: int
    dropped_oversize: int
    dropped_kernel: int
    ecn_marked: int
    checksum_completed: int
    queue_packets: int
    queue_bytes: int
    delay_line_packets: int

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Counters:
        return cls(**{f.name: int(data[f.name]) for f in fields(cls)})

    @property
    def dropped_other(self) -> int:
        return self.dropped_send + self.dropped_oversize + self.dropped_kernel


@dataclass(frozen=True, slots=True)
class LinkCounters:
    down: Counters  # linkem's ab: switch -> UE
    up: Counters  # linkem's ba: UE -> switch


def request(control: Path, command: dict[str, str | int], timeout_s: float = 2.0) -> dict:
    """One JSON-line request on the control socket; raises OSError when linkem does not answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(str(control))
        sock.sendall(json.dumps(command).encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("linkem closed the control connection")
            answer += chunk
    reply = json.loads(answer)
    if not reply.get("ok"):
        raise LabError(f"linkem refused {command}: {reply.get('error')}")
    return reply


def counters(control: Path) -> LinkCounters:
    reply = request(control, {"cmd": "counters"})
    return LinkCounters(Counters.from_json(reply["ab"]), Counters.from_json(reply["ba"]))


def reset(control: Path, seed: int) -> float:
    """Starts both directions of the link over: a trace at its time 0, loss and jitter from `seed` (docs/linkem.md,
    "Control protocol"). Returns that instant on time.monotonic()'s clock (both are CLOCK_MONOTONIC)."""
    reply = request(control, {"cmd": "reset", "seed": seed})
    return int(reply["monotonic_ns"]) / 1e9


def command(binary: Path, ns: str, down: str, up: str, control: Path, seed: int) -> list[str]:
    """linkem bridging `sw` (switch side) and `ue` in the link namespace, as a real-time process."""
    realtime = ["ip", "netns", "exec", ns, "chrt", "-f", REALTIME_PRIORITY, str(binary)]
    return [
        *realtime,
        "--a",
        "sw",
        "--b",
        "ue",
        "--ab",
        down,
        "--ba",
        up,
        "--control",
        str(control),
        "--seed",
        str(seed),
    ]


def wait_ready(child: Child, control: Path) -> float:
    """Waits until the control socket answers (both interfaces are open by then); returns time.monotonic() then."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        child.check()
        try:
            request(control, {"cmd": "get"})
            return time.monotonic()
        except OSError:
            if time.monotonic() > deadline:
                raise LabError(f"{child.name} did not open its control socket within {START_TIMEOUT_S:.0f} s") from None
            time.sleep(0.02)


def generate_trace(binary: Path, model: TraceModel, destination: Path) -> Path:
    """Writes `linkem gen-trace` output for `model` to `destination`."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(sh([str(binary), "gen-trace", *model.argv()]))
    return destination


def read_trace(path: Path) -> list[int]:
    """Delivery opportunities (milliseconds) of a Mahimahi trace."""
    return [int(line) for line in path.read_text().split() if line.strip()]
