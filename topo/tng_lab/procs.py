"""Child processes of a run (linkem, the perf server and clients): own process groups, logs, CPU time, stop."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tng_lab.netns import LabError

STOP_TIMEOUT_S = 3.0
CHILD_ENV = {**os.environ, "NO_COLOR": "1"}  # plain logs: no terminal colours from the agents' tracing
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Child:
    """A process started in its own session, so a Ctrl-C reaches only the runner, which stops it."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def check(self, grace_s: float = 0.0) -> None:
        """Raises LabError when the process has exited (or exits within `grace_s`), quoting the end of its log."""
        try:
            status = self.popen.wait(grace_s) if grace_s else self.popen.poll()
        except subprocess.TimeoutExpired:
            return
        if status is not None:
            raise LabError(f"{self.name} exited with status {status}: {log_tail(self.log)}")

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after STOP_TIMEOUT_S."""
        if self.popen.poll() is None:
            _killpg(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _killpg(self.pid, signal.SIGKILL)
                self.popen.wait()
        else:
            _killpg(self.pid, signal.SIGKILL)  # anything it forked and left behind in its group


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def spawn(name: str, argv: list[str], log: Path, stdout: Path | None = None) -> Child:
    """Starts `argv` with stderr (and stdout unless `stdout` is given) going to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as err, stdout.open("wb") if stdout else err as out:
        try:
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, env=CHILD_ENV
            )
        except OSError as error:
            raise LabError(f"cannot start {name} ({argv[0]}): {error.strerror}") from error
    return Child(name, popen, log)


@contextmanager
def running(name: str, argv: list[str], log: Path) -> Iterator[Child]:
    """A child that is stopped when the block exits, however it exits."""
    child = spawn(name, argv, log)
    try:
        yield child
    finally:
        child.stop()


def log_tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) if text else "(empty log)"


def rss_kib(pid: int) -> int | None:
    """Resident set size of `pid` in KiB (VmRSS of /proc/PID/status), or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of `pid` so far, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
