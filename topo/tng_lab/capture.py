"""Packet captures of every lab link (`tng-lab run --pcap`): tcpdump at both ends of each emulated link.

A link's switch end is its interface in the switch namespace, its UE end the interface at the far end (the UE, or
the gateway with several UEs); linkem sits between them, so the two files of a link differ by exactly what the
emulation did (loss, delay, reordering). Each file is bounded twice: tcpdump keeps `snaplen` bytes of every packet
and stops after as many packets as fit `max_bytes`, so the start of the run (handshakes) is always kept. Decode tng
in them with tools/wireshark/tng.lua (docs/observability.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tng_lab.netns import LabError
from tng_lab.plan import Plan
from tng_lab.procs import Child

PCAP_DIR = "pcap"
DEFAULT_SNAPLEN = 256  # Ethernet + IP + UDP + the tng header and INITIAL framing, or TCP headers with options
DEFAULT_MAX_MB = 100
PCAP_FILE_HEADER = 24
PCAP_RECORD_HEADER = 16
MIN_SNAPLEN = 64  # below this even the headers up to the tng flow header are cut
MAX_SNAPLEN = 262144  # tcpdump's limit
READY_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class PcapOptions:
    snaplen: int = DEFAULT_SNAPLEN
    max_bytes: int = DEFAULT_MAX_MB * 1_000_000

    def __post_init__(self) -> None:
        if not MIN_SNAPLEN <= self.snaplen <= MAX_SNAPLEN:
            raise ValueError(f"pcap snap length {self.snaplen} is outside {MIN_SNAPLEN}..{MAX_SNAPLEN} bytes")
        if self.packet_limit() < 1:
            raise ValueError(f"pcap size cap {self.max_bytes} bytes holds no packet of {self.snaplen} bytes")

    def packet_limit(self) -> int:
        """Packets that fit the size cap however large each is: tcpdump's -c."""
        return (self.max_bytes - PCAP_FILE_HEADER) // (PCAP_RECORD_HEADER + self.snaplen)


@dataclass(frozen=True, slots=True)
class CapturePoint:
    """One end of one link: where tcpdump runs and the file it writes."""

    link: str
    end: str  # "switch" or "ue"
    namespace: str
    interface: str

    def file(self, out_dir: Path) -> Path:
        return out_dir / PCAP_DIR / f"{self.link}-{self.end}.pcap"


def capture_points(plan: Plan) -> list[CapturePoint]:
    """Both ends of every link, in the plan's link order."""
    points = []
    for path in plan.paths:
        points.append(CapturePoint(path.name, "switch", plan.switch_ns, path.switch_if))
        points.append(CapturePoint(path.name, "ue", plan.ue_ns, path.ue_if))
    return points


def tcpdump_command(point: CapturePoint, out_dir: Path, options: PcapOptions) -> list[str]:
    """tcpdump on `point`. It stays root (Debian's drops to a user that cannot write the run directory) and runs in
    immediate mode: otherwise packets wait in the kernel's ring for up to a second and those of the run's last second
    are lost when the run stops it."""
    return [
        *("ip", "netns", "exec", point.namespace, "tcpdump", "--immediate-mode", "-U", "-Z", "root"),
        *("-i", point.interface, "-s", str(options.snaplen), "-c", str(options.packet_limit())),
        *("-w", str(point.file(out_dir))),
    ]


def wait_listening(child: Child, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Waits for tcpdump's "listening on" line, so the capture misses nothing the run sends afterwards."""
    deadline = time.monotonic() + timeout_s
    while True:
        child.check()
        if "listening on" in child.log.read_text(errors="replace"):
            return
        if time.monotonic() > deadline:
            raise LabError(f"{child.name} did not start capturing within {timeout_s:g} s")
        time.sleep(0.05)
