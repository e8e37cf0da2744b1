"""A replicated controller on this machine, for its tests and benchmark: a one-member etcd cluster as a child process
on free loopback ports in a directory of its own (Debian's etcd-server; `make deps` installs it), and controller
replicas as processes, optionally writing BMv2 switches; who leads, and the time a follower takes to take over."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from tng_p4.bmv2 import Bmv2

from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.testbed import ControllerProcess, fleet_config

STARTUP_TIMEOUT_S = 30.0
POLL_S = 0.02
IN_SYNC = "CONNECTED"


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


def _leads_in_sync(address: str) -> bool:
    """Whether the replica at `address` leads with every switch in sync (followers report theirs STANDBY; without
    switches, its leader gauge says); raises grpc.RpcError."""
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        switches = stub.ListSwitches(pb.ListSwitchesRequest(), timeout=2).switches
        if switches:
            return all(s.state == IN_SYNC for s in switches)
        stats = stub.GetStats(pb.GetStatsRequest(), timeout=2)
    return any(s.name.endswith("controller_leader") and s.value == 1.0 for s in stats.controller_metrics)


@dataclass(slots=True)
class Replicas:
    """`count` controller replicas on one etcd, each writing `switches` while it leads, started in order (the first
    leads); their logs and configurations in `directory`."""

    directory: Path
    count: int = 3
    switches: Sequence[Bmv2] = ()
    etcd: EtcdProcess = field(init=False)
    processes: list[ControllerProcess] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.etcd = EtcdProcess(self.directory / "etcd")

    def start(self) -> None:
        url = self.etcd.start()
        for number in range(self.count):
            self.start_replica(number, url)

    def start_replica(self, number: int, url: str | None = None) -> ControllerProcess:
        config = self.directory / f"r{number}.toml"
        config.write_text(fleet_config(self.switches, [url or self.etcd.url], f"r{number}"))
        process = ControllerProcess(config, self.directory / f"r{number}.log")
        process.start()
        if number < len(self.processes):
            self.processes[number] = process
        else:
            self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.stop()
        self.etcd.stop()

    def addresses(self) -> list[str]:
        return [p.address for p in self.processes]

    def wait_for_leader(self, among: Sequence[int] | None = None, timeout_s: float = STARTUP_TIMEOUT_S) -> int:
        """The number of the replica that leads with every switch in sync, once one does; raises TimeoutError."""
        candidates = range(self.count) if among is None else among
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for number in candidates:
                try:
                    if _leads_in_sync(self.processes[number].address):
                        return number
                except grpc.RpcError:
                    continue
            time.sleep(POLL_S)
        raise TimeoutError(f"no replica of {list(candidates)} leads with its switches in sync after {timeout_s} s")

    def kill_leader(self, timeout_s: float = STARTUP_TIMEOUT_S) -> tuple[int, int, float]:
        """kill -9 of the leader; returns the old leader's number, the new one's and the seconds from the kill until
        the new leader holds every switch in sync (arbitration won, tables reconciled)."""
        old = self.wait_for_leader(timeout_s=timeout_s)
        killed = time.monotonic()
        self.processes[old].kill()
        new = self.wait_for_leader([n for n in range(self.count) if n != old], timeout_s)
        return old, new, time.monotonic() - killed
