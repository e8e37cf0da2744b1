"""A replicated controller on this machine, for its tests and benchmark: an etcd cluster (one member or more, TLS
optional) as child processes on free loopback ports in a directory of its own (Debian's etcd-server; `make deps`
installs it), optionally with its first member in a network namespace of its own that can be cut off from the other
members, and controller replicas as processes, optionally writing BMv2 switches; who leads, and the time a follower
takes to take over."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from aetcd import rpc
from tng_p4.bmv2 import Bmv2

from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.testbed import ControllerProcess, fleet_config

STARTUP_TIMEOUT_S = 30.0
POLL_S = 0.02
IN_SYNC = "CONNECTED"
ROOT = "root"  # the user of a test etcd with authentication: etcd's superuser, so it may do everything


def etcd_binary() -> str | None:
    """The etcd server on PATH (or in /usr/bin, where Debian puts it)."""
    return shutil.which("etcd") or shutil.which("etcd", path="/usr/bin")


def skip_reason() -> str | None:
    """Why the replicated controller cannot be tested here (None: it can)."""
    return None if etcd_binary() else "etcd is not installed (make deps installs Debian's etcd-server)"


def partition_skip_reason() -> str | None:
    """Why an etcd member cannot be cut off from its peers here (None: it can)."""
    if os.geteuid() != 0:
        return "cutting an etcd member off needs root (a network namespace)"
    return None if shutil.which("ip") else "cutting an etcd member off needs iproute2's ip"


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=10)


@dataclass(slots=True)
class MemberNamespace:
    """A network namespace joined to this one by a veth pair: the member in it listens on `inside`, the others on
    `outside`. `cut` drops, inside, every packet to another member's peer port and from the member's own, so the
    member loses its peers as in a partition while its clients, on its client port, still reach it."""

    name: str
    outside: str = field(init=False)
    inside: str = field(init=False)
    _veth: str = field(init=False)

    def __post_init__(self) -> None:
        subnet = os.getpid() % 250
        self.outside, self.inside = f"10.252.{subnet}.1", f"10.252.{subnet}.2"
        self._veth = f"tev{os.getpid() % 10**7}"

    def create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self._veth, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        _ip("addr", "add", f"{self.outside}/24", "dev", self._veth)
        _ip("link", "set", self._veth, "up")
        for argv in (["addr", "add", f"{self.inside}/24", "dev", "eth0"], ["link", "set", "eth0", "up"]):
            _ip("-n", self.name, *argv)
        _ip("-n", self.name, "link", "set", "lo", "up")

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self, own_peer_port: int, peer_ports: Sequence[int]) -> None:
        rules = [["sport", str(own_peer_port)]] + [["dport", str(port)] for port in peer_ports]
        for rule in rules:
            _ip("-n", self.name, "rule", "add", "ipproto", "tcp", *rule, "blackhole")

    def delete(self) -> None:
        subprocess.run(["ip", "link", "del", self._veth], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=10)


def _free_ports(count: int) -> list[int]:
    """`count` distinct free ports: all probes are bound at once, so the kernel cannot hand one out twice (a
    cluster's members once got the same port as client and peer port, and one of them failed to bind)."""
    with ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


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
    each member's data and log stay in `directory`/mN. With `apart`, the first member runs in a network namespace of
    its own and `partition()` cuts it off from the others (the rest listen on the namespace's veth, not loopback).
    With `auth`, etcd requires user and password authentication once started: user ROOT, its password in
    `password_file`; `token_ttl_s` is how long a token lives unused (etcd's default: 300 s)."""

    directory: Path
    members: int = 1
    tls: EtcdServerTls | None = None
    apart: bool = False
    auth: bool = False
    token_ttl_s: int | None = None
    urls: list[str] = field(default_factory=list, init=False)
    _processes: list[subprocess.Popen[bytes] | None] = field(default_factory=list, init=False)
    _peer_ports: list[int] = field(default_factory=list, init=False)
    _namespace: MemberNamespace | None = field(default=None, init=False)

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
        free = _free_ports(2 * self.members)
        ports = list(zip(free[::2], free[1::2], strict=True))
        hosts = ["127.0.0.1"] * self.members
        if self.apart:
            if self.tls is not None:
                raise ValueError("a member apart listens off loopback, where the test certificates are not valid")
            self._namespace = MemberNamespace(f"tng-etcd-{os.getpid()}")
            self._namespace.create()
            hosts = [self._namespace.inside] + [self._namespace.outside] * (self.members - 1)
        self.urls = [f"{scheme}://{host}:{client}" for host, (client, _) in zip(hosts, ports, strict=True)]
        self._peer_ports = [peer for _, peer in ports]
        peers = [f"http://{host}:{peer}" for host, (_, peer) in zip(hosts, ports, strict=True)]
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
            if self.token_ttl_s is not None:
                command.append(f"--auth-token-ttl={self.token_ttl_s}")
            if self.tls is not None:
                command += [
                    f"--cert-file={self.tls.cert}",
                    f"--key-file={self.tls.key}",
                    f"--trusted-ca-file={self.tls.ca}",
                    "--client-cert-auth",
                ]
            if number == 0 and self._namespace is not None:
                command = self._namespace.command(command)
            with (directory / "etcd.log").open("ab") as log:
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            self._processes.append(process)
        for number in range(self.members):
            self._wait_healthy(number)
        if self.auth:
            self._enable_auth()
        return self.url

    @property
    def password_file(self) -> Path:
        return self.directory / "password"

    def store_keys(self) -> str:
        """The [store] keys of a replica that uses this etcd, besides its URLs."""
        keys = "" if self.tls is None else self.tls.store_keys()
        if self.auth:
            keys += f'etcd_user = "{ROOT}"\netcd_password_file = "{self.password_file}"\n'
        return keys

    def _enable_auth(self) -> None:
        """etcd's superuser with a password of its own, then authentication on (as `etcdctl auth enable` does)."""
        password = secrets.token_urlsafe(12)
        self.password_file.write_text(password + "\n")
        target = self.url.split("://", 1)[1]
        if self.tls is None:
            channel = grpc.insecure_channel(target)
        else:
            files = (self.tls.ca, self.tls.client_key, self.tls.client_cert)
            channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(*(f.read_bytes() for f in files)))
        with channel:
            auth = rpc.AuthStub(channel)
            auth.UserAdd(rpc.AuthUserAddRequest(name=ROOT, password=password), timeout=10)
            auth.RoleAdd(rpc.AuthRoleAddRequest(name=ROOT), timeout=10)
            auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user=ROOT, role=ROOT), timeout=10)
            auth.AuthEnable(rpc.AuthEnableRequest(), timeout=10)

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

    def partition(self) -> None:
        """Cuts the first member (apart) off from the others; its clients still reach it."""
        if self._namespace is None:
            raise ValueError("only a member started apart can be cut off")
        self._namespace.cut(self._peer_ports[0], self._peer_ports[1:])

    def stop(self) -> None:
        for process in self._processes:
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self._namespace is not None:
            self._namespace.delete()
            self._namespace = None


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
    """`count` controller replicas on one etcd cluster (of `etcd_members`, with `etcd_tls`, the first one
    `etcd_apart`, `etcd_auth`: see EtcdProcess), each writing `switches` while it leads, started in order (the first
    leads); their logs and configurations in `directory`. Every replica is given all members' URLs, the first member
    first, and `more_config` (TOML tables) at the end of its file."""

    directory: Path
    count: int = 3
    switches: Sequence[Bmv2] = ()
    etcd_members: int = 1
    etcd_tls: EtcdServerTls | None = None
    etcd_apart: bool = False
    etcd_auth: bool = False
    more_config: str = ""
    etcd: EtcdProcess = field(init=False)
    processes: list[ControllerProcess] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.etcd = EtcdProcess(
            self.directory / "etcd", self.etcd_members, self.etcd_tls, self.etcd_apart, self.etcd_auth
        )

    def start(self) -> None:
        self.etcd.start()
        for number in range(self.count):
            self.start_replica(number)

    def start_replica(self, number: int, url: str | None = None) -> ControllerProcess:
        """Starts replica `number` on every etcd member, or on `url` alone (a proxy's)."""
        config = self.directory / f"r{number}.toml"
        urls = [url] if url else self.etcd.urls
        config.write_text(fleet_config(self.switches, urls, f"r{number}", self.etcd.store_keys()) + self.more_config)
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
