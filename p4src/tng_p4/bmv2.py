"""simple_switch_grpc as a child process: the one launcher that PTF, the lab, the controller's tests and the benchmarks
use.

A switch starts with no program (`--no-p4`): a P4Runtime client pushes the pipeline. Its ports are either those of a
nanomsg socket (PTF's `nn` platform; no root needed) or network interfaces (`-i PORT@IFACE`, veths in a namespace).
Its output goes to one log, appended across restarts, so a test that kills and restarts it keeps the whole story.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

LOCALHOST = "127.0.0.1"
CPU_PORT = 255  # p4src/README.md: the CPU port of every tng pipeline
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 20
# jemalloc's settings for a preloaded allocator: a background thread returns pages unused for about a second.
JEMALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000"


class Bmv2Error(RuntimeError):
    """The switch did not start or died; the message ends with the tail of its log."""


@dataclass(frozen=True, slots=True)
class Bmv2Tls:
    """TLS on the switch's P4Runtime server: its certificate and key, and the CA its clients' certificates must be
    signed by (every client then needs one)."""

    cert: Path
    key: Path
    client_ca: Path


@dataclass(frozen=True, slots=True)
class Bmv2Config:
    """Everything that tells one switch from another: where it listens, its ports, where it runs and logs."""

    binary: Path
    log_path: Path
    grpc_port: int
    thrift_port: int
    device_id: int = 1
    cpu_port: int = CPU_PORT
    packet_socket: str | None = None  # nanomsg address whose ports PTF's nn platform drives
    interfaces: tuple[tuple[int, str], ...] = ()  # (port, interface) pairs
    netns: str | None = None  # network namespace to run in (its gRPC and Thrift ports are only reachable there)
    # SCHED_FIFO priority (chrt -f) for every thread, when the switch stands in for hardware that the host's other
    # processes must not delay (needs CAP_SYS_NICE); None: the default scheduler
    realtime_priority: int | None = None
    # glibc malloc arenas (MALLOC_ARENA_MAX) for the switch's many threads; None: glibc's default, 8 per core. Each
    # arena keeps the high-water mark of what its threads once held, so a switch that ran a while looks as if it
    # grew; a small cap bounds that and lets a long run tell a leak from an allocator's reserve.
    malloc_arenas: int | None = None
    # A malloc loaded in place of glibc's (LD_PRELOAD, a library name or path), e.g. jemalloc, which with its
    # background thread hands pages freed for a few seconds back to the system: memory the switch held for a burst
    # (packet-ins piling up while its controller reconnects) does not stay in its RSS. None: glibc's.
    allocator: str | None = None
    tls: Bmv2Tls | None = None  # None: P4Runtime in plaintext

    def __post_init__(self) -> None:
        if self.packet_socket is None and not self.interfaces:
            raise ValueError("a switch needs a packet socket (nanomsg) or interfaces for its ports")
        if self.malloc_arenas is not None and self.malloc_arenas < 1:
            raise ValueError(f"malloc_arenas must be at least 1, not {self.malloc_arenas}")
        if self.malloc_arenas is not None and self.allocator is not None:
            raise ValueError("malloc_arenas tunes glibc's malloc: give it or an allocator, not both")

    def environment(self) -> dict[str, str]:
        """The switch's environment: ours, with the malloc arena cap or the allocator when there is one."""
        env = dict(os.environ)
        if self.malloc_arenas is not None:
            env["MALLOC_ARENA_MAX"] = str(self.malloc_arenas)
        if self.allocator is not None:
            env["LD_PRELOAD"] = " ".join(filter(None, (self.allocator, env.get("LD_PRELOAD"))))
            env["MALLOC_CONF"] = JEMALLOC_CONF
        return env

    @property
    def grpc_address(self) -> str:
        return f"{LOCALHOST}:{self.grpc_port}"

    @property
    def thrift_address(self) -> str:
        return f"{LOCALHOST}:{self.thrift_port}"

    def command(self) -> list[str]:
        """The simple_switch_grpc command line (inside the namespace, when there is one)."""
        argv = ["ip", "netns", "exec", self.netns] if self.netns else []
        if self.realtime_priority is not None:
            argv += ["chrt", "--fifo", str(self.realtime_priority)]
        argv += [str(self.binary), "--device-id", str(self.device_id), "--thrift-port", str(self.thrift_port)]
        if self.packet_socket is not None:
            argv += ["--packet-in", self.packet_socket]
        for port, interface in self.interfaces:
            argv += ["-i", f"{port}@{interface}"]
        argv += ["--no-p4", "--", "--grpc-server-addr", self.grpc_address, "--cpu-port", str(self.cpu_port)]
        if self.tls is not None:
            tls = self.tls
            argv += ["--grpc-server-ssl", "--grpc-server-cert", str(tls.cert), "--grpc-server-key", str(tls.key)]
            argv += ["--grpc-server-cacert", str(tls.client_ca), "--grpc-server-with-client-auth"]
        return argv


def nanomsg_config(binary: Path, directory: Path, *, log_path: Path | None = None, device_id: int = 1) -> Bmv2Config:
    """A switch on free loopback ports whose packets go over a nanomsg socket in `directory` (keep its path short:
    Unix socket paths end at 107 bytes), logging to `log_path` (default `directory`/bmv2.log)."""
    grpc_port, thrift_port = free_tcp_ports(2)
    return Bmv2Config(
        binary=binary,
        log_path=log_path or directory / "bmv2.log",
        grpc_port=grpc_port,
        thrift_port=thrift_port,
        device_id=device_id,
        packet_socket=f"ipc://{directory / 'packets.ipc'}",
    )


@dataclass(slots=True)
class Bmv2:
    """One switch process: start, wait until P4Runtime listens, check, stop or kill, restart on the same ports.

    As a context manager it starts on entry and stops on exit, whatever happens in between."""

    config: Bmv2Config
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Starts the switch in its own session (a Ctrl-C reaches only us, and we stop it) and returns once its gRPC
        port accepts connections; on failure it is stopped and Bmv2Error says why."""
        self.config.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.config.log_path.open("ab") as log:
            try:
                self._process = subprocess.Popen(
                    self.config.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=self.config.environment(),
                )
            except OSError as err:
                raise Bmv2Error(f"cannot start {self.config.binary}: {err.strerror}") from err
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def check(self) -> None:
        """Raises Bmv2Error when the switch has exited."""
        if self._process is not None and self._process.poll() is not None:
            raise Bmv2Error(f"simple_switch_grpc exited with status {self._process.returncode}\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after STOP_TIMEOUT_S."""
        if self._process is None:
            return
        if self._process.poll() is None:
            _killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self._process = None

    def kill(self) -> None:
        """SIGKILL: the switch loses its pipeline and every entry, as in a crash."""
        if self._process is not None:
            _killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
            self._process = None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.config.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Bmv2:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._grpc_listening():
            self.check()
            if time.monotonic() > deadline:
                raise Bmv2Error(
                    f"simple_switch_grpc did not listen on {self.config.grpc_address} within "
                    f"{self.startup_timeout_s:.0f} s\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def _grpc_listening(self) -> bool:
        if self.config.netns is None:
            try:
                with socket.create_connection((LOCALHOST, self.config.grpc_port), timeout=0.2):
                    return True
            except OSError:
                return False
        # The port is only reachable inside the namespace; ask its socket table.
        probe = ["ip", "netns", "exec", self.config.netns, "ss", "-Hltn", f"sport = :{self.config.grpc_port}"]
        done = subprocess.run(probe, capture_output=True, text=True, check=False)
        return bool(done.stdout.strip())


def free_tcp_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on the loopback that nobody listens on right now."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOCALHOST, 0))
        return [sock.getsockname()[1] for sock in sockets]


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, sig)
