"""A replicated controller on this machine, for its tests and benchmark: an etcd cluster (one member or more, TLS
optional) as child processes on free loopback ports in a directory of its own (Debian's etcd-server; `make deps`
installs it), and controller replicas as processes, optionally writing BMv2 switches; who leads, and the time a
follower takes to take over."""

from __future__ import annotations

import shutil
import socket
import ssl
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


@dataclass(frozen=True, slots=True)
class EtcdServerTls:
    """TLS of a test etcd: its certificate and key (valid for 127.0.0.1), the CA whose client certificates it
    requires, and a client certificate and key of that CA (for its health check and for the replicas)."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path

    def store_keys(self) -> str:
        """The [store] keys of a replica that uses it."""
        return f'etcd_ca = "{self.ca}"\netcd_cert = "{self.client_cert}"\netcd_key = "{self.client_key}"\n'


@dataclass(slots=True)
class EtcdProcess:
    """An etcd cluster of `members` processes serving clients on `urls` once `start` returns (https:// with `tls`);
    each member's data and log stay in `directory`/mN."""

    directory: Path
    members: int = 1
    tls: EtcdServerTls | None = None
    urls: list[str] = field(default_factory=list, init=False)
    _processes: list[subprocess.Popen[bytes] | None] = field(default_factory=list, init=False)

    @property
    def url(self) -> str:
        """The first member's client URL."""
        return self.urls[0] if self.urls else ""

    def start(self) -> str:
        """Starts every member and returns the first one's client URL once all are healthy."""
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError(skip_reason())
        scheme = "http" if self.tls is None else "https"
        ports = [(_free_port(), _free_port()) for _ in range(self.members)]
        self.urls = [f"{scheme}://127.0.0.1:{client}" for client, _ in ports]
        peers = [f"http://127.0.0.1:{peer}" for _, peer in ports]
        cluster = ",".join(f"m{number}={peer}" for number, peer in enumerate(peers))
        self._processes = []
        for number, (url, peer) in enumerate(zip(self.urls, peers, strict=True)):
            directory = self.directory / f"m{number}"
            directory.mkdir(parents=True, exist_ok=True)
            command = [
                binary,
                f"--name=m{number}",
                f"--data-dir={directory / 'data'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={cluster}",
            ]
            if self.tls is not None:
                command += [
                    f"--cert-file={self.tls.cert}",
                    f"--key-file={self.tls.key}",
                    f"--trusted-ca-file={self.tls.ca}",
                    "--client-cert-auth",
                ]
            with (directory / "etcd.log").open("ab") as log:
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            self._processes.append(process)
        for number in range(self.members):
            self._wait_healthy(number)
        return self.url

    def _wait_healthy(self, number: int) -> None:
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        process = self._processes[number]
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and process is not None and process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.urls[number]}/health", timeout=1, context=context) as answer:
                    if b'"true"' in answer.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        tail = "\n".join((self.directory / f"m{number}" / "etcd.log").read_text(errors="replace").splitlines()[-10:])
        raise RuntimeError(f"etcd did not start on {self.urls[number]}\n{tail}")

    def kill(self, number: int) -> None:
        """kill -9 of one member."""
        process = self._processes[number]
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def stop(self) -> None:
        for process in self._processes:
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


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
    """`count` controller replicas on one etcd cluster (of `etcd_members`, with `etcd_tls`), each writing `switches`
    while it leads, started in order (the first leads); their logs and configurations in `directory`. Every replica
    is given all members' URLs, the first member first, and `more_config` (TOML tables) at the end of its file."""

    directory: Path
    count: int = 3
    switches: Sequence[Bmv2] = ()
    etcd_members: int = 1
    etcd_tls: EtcdServerTls | None = None
    more_config: str = ""
    etcd: EtcdProcess = field(init=False)
    processes: list[ControllerProcess] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.etcd = EtcdProcess(self.directory / "etcd", self.etcd_members, self.etcd_tls)

    def start(self) -> None:
        self.etcd.start()
        for number in range(self.count):
            self.start_replica(number)

    def start_replica(self, number: int, url: str | None = None) -> ControllerProcess:
        """Starts replica `number` on every etcd member, or on `url` alone (a proxy's)."""
        config = self.directory / f"r{number}.toml"
        urls = [url] if url else self.etcd.urls
        tls = "" if self.etcd_tls is None else self.etcd_tls.store_keys()
        config.write_text(fleet_config(self.switches, urls, f"r{number}", tls) + self.more_config)
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
