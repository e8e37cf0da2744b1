"""Kernel congestion control for the perf server's namespace.

`tng perf server` sends the data and applies the congestion control a client names with `--cc` to that socket itself
(setsockopt TCP_CONGESTION); as root it has CAP_NET_ADMIN and may pick any available controller. A socket without a
requested controller sends with its namespace's default, and a namespace other than the initial one may only default to
a congestion control listed in the host-wide `net.ipv4.tcp_allowed_congestion_control` (otherwise the kernel answers
EPERM). So a run that sets namespace defaults adds the ones its kernel workloads name to that list. The first run that
changes the list keeps the original in RUN_ROOT; the last run to end (or `tng-lab clean` after runs were killed) puts
it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tng_lab.netns import RUN_ROOT, other_runs_alive, sh

ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
ORIGINAL = RUN_ROOT / "tcp_allowed_congestion_control.orig"
DEFAULT_SYSCTL = "net.ipv4.tcp_congestion_control"


def available() -> list[str]:
    return AVAILABLE.read_text().split()


@contextmanager
def allowed(names: set[str], prefix: str) -> Iterator[list[str]]:
    """Makes `names` allowed host-wide while the run `prefix` goes on; yields the ones it had to add."""
    current = ALLOWED.read_text().split()
    added = sorted(name for name in names if name not in current)
    if added:
        if not ORIGINAL.is_file():
            ORIGINAL.parent.mkdir(parents=True, exist_ok=True)
            ORIGINAL.write_text(" ".join(current))
        ALLOWED.write_text(" ".join(current + added))
    try:
        yield added
    finally:
        restore(prefix)


def restore(own_prefix: str | None) -> list[str]:
    """Puts back the list as it was before tng-lab changed it, unless a run other than `own_prefix` still goes on;
    returns the names it took out."""
    if not ORIGINAL.is_file() or other_runs_alive(own_prefix):
        return []
    original = ORIGINAL.read_text().split()
    removed = [name for name in ALLOWED.read_text().split() if name not in original]
    ALLOWED.write_text(" ".join(original))
    ORIGINAL.unlink()
    return removed


def set_default(ns: str, name: str) -> None:
    sh(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{DEFAULT_SYSCTL}={name}"])


def get_default(ns: str) -> str:
    return sh(["ip", "netns", "exec", ns, "sysctl", "-n", DEFAULT_SYSCTL]).strip()
