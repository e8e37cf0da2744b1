"""Network namespaces of a run: creation, removal, and `clean` of what earlier runs left behind.

Every name a run creates starts with `tlab<pid>-`, the process id of the runner. Veths live only inside these
namespaces (they are created directly in them), so deleting a namespace deletes its veths; processes started in
a namespace are killed before it is deleted.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

PREFIX_PATTERN = re.compile(r"^tlab(\d+)-")
RUN_ROOT = Path("/run/tng-lab")
KILL_GRACE_S = 2.0


class LabError(RuntimeError):
    """A step of a run failed; the message says which and why."""


def run_prefix(pid: int | None = None) -> str:
    return f"tlab{os.getpid() if pid is None else pid}-"


def sh(argv: list[str], *, timeout_s: float = 30.0) -> str:
    """Runs a setup command; raises LabError with the command and its stderr when it fails."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError as err:
        raise LabError(f"{argv[0]} not found (install it, e.g. `make deps`)") from err
    except subprocess.TimeoutExpired as err:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout_s:.0f} s") from err
    if done.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def list_namespaces() -> list[str]:
    return [line.split()[0] for line in sh(["ip", "netns", "list"]).splitlines() if line.strip()]


def namespace_pids(ns: str) -> list[int]:
    return [int(pid) for pid in sh(["ip", "netns", "pids", ns]).split()]


def kill_namespace_processes(ns: str) -> int:
    """SIGTERM to every process in `ns`, SIGKILL to those still there after a grace period; returns how many."""
    pids = namespace_pids(ns)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline and any(_exists(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    return len(pids)


def _signal(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _exists(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def delete_namespace(ns: str) -> int:
    """Kills the processes in `ns` and deletes it (and with it its veths); returns how many processes it killed."""
    killed = kill_namespace_processes(ns)
    sh(["ip", "netns", "del", ns])
    return killed


@contextmanager
def namespaces(names: list[str]) -> Iterator[list[str]]:
    """Creates the namespaces; on exit, whatever happened, deletes those that were created."""
    created: list[str] = []
    try:
        for name in names:
            sh(["ip", "netns", "add", name])
            created.append(name)
        yield created
    finally:
        failures = []
        for name in reversed(created):
            try:
                delete_namespace(name)
            except LabError as err:  # keep deleting the others; `tng-lab clean` can retry this one
                failures.append(str(err))
        if failures:
            raise LabError("; ".join(failures))


def runner_alive(pid: int) -> bool:
    """Whether `pid` is a tng-lab process still running (its namespaces are in use, not leftovers)."""
    if pid == os.getpid():
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"tng_lab" in cmdline or b"tng-lab" in cmdline


def other_runs_alive(own_prefix: str | None) -> bool:
    """Whether a tng-lab run other than `own_prefix` (None: any run) still has namespaces."""
    for ns in list_namespaces():
        match = PREFIX_PATTERN.match(ns)
        if match and not (own_prefix and ns.startswith(own_prefix)) and runner_alive(int(match[1])):
            return True
    return False


def leftover_namespaces() -> tuple[list[str], set[int]]:
    """Namespaces of runs whose runner is gone, and the pids of runners still alive."""
    leftovers, live = [], set()
    for ns in list_namespaces():
        match = PREFIX_PATTERN.match(ns)
        if not match:
            continue
        if runner_alive(int(match[1])):
            live.add(int(match[1]))
        else:
            leftovers.append(ns)
    return leftovers, live


def leftover_run_directories() -> list[Path]:
    if not RUN_ROOT.is_dir():
        return []
    leftovers = []
    for run_dir in sorted(RUN_ROOT.iterdir()):
        match = PREFIX_PATTERN.match(f"{run_dir.name}-")
        if match and not runner_alive(int(match[1])):
            leftovers.append(run_dir)
    return leftovers


@contextmanager
def run_directory(prefix: str) -> Iterator[Path]:
    """/run/tng-lab/<prefix> for control sockets; removed on exit."""
    path = RUN_ROOT / prefix.rstrip("-")
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
