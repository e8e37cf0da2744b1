"""A one-member etcd cluster as a child process on free loopback ports in a directory of its own, for the replicated
controller's tests and benchmark (Debian's etcd-server; `make deps` installs it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

STARTUP_TIMEOUT_S = 30.0


def etcd_binary() -> str | None:
    """The etcd server on PATH (or in /usr/bin, where Debian puts it)."""
    return shutil.which("etcd") or shutil.which("etcd", path="/usr/bin")


def skip_reason() -> str | None:
    """Why the replicated controller cannot be tested here (None: it can)."""
    return None if etcd_binary() else "etcd is not installed (make deps installs Debian's etcd-server)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(slots=True)
class EtcdProcess:
    """etcd serving clients on `url` once `start` returns; its data and log stay in `directory`."""

    directory: Path
    url: str = ""
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> str:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError(skip_reason())
        client, peer = _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / "etcd.log").open("ab") as log:
            self._process = subprocess.Popen(
                [
                    binary,
                    "--name=tng",
                    f"--data-dir={self.directory / 'data'}",
                    f"--listen-client-urls={self.url}",
                    f"--advertise-client-urls={self.url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=tng={peer_url}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as answer:
                    if b'"true"' in answer.read():
                        return self.url
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        tail = "\n".join((self.directory / "etcd.log").read_text(errors="replace").splitlines()[-10:])
        raise RuntimeError(f"etcd did not start on {self.url}\n{tail}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
