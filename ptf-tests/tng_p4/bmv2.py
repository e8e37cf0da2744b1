"""Run simple_switch_grpc as a child process without root: nanomsg packet I/O, free gRPC and Thrift ports."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

LOCALHOST = "127.0.0.1"
CPU_PORT = 255
STOP_TIMEOUT_S = 5.0


class Bmv2Error(RuntimeError):
    """The switch did not start; the message ends with the tail of its log."""


@dataclass(frozen=True, slots=True)
class Bmv2Switch:
    """How to reach a running switch."""

    grpc_address: str
    thrift_port: int
    packet_socket: str  # nanomsg address for PTF's nn platform
    device_id: int
    cpu_port: int
    log_path: Path


def free_tcp_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on the loopback that nobody listens on right now."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOCALHOST, 0))
        return [sock.getsockname()[1] for sock in sockets]


def switch_command(binary: Path, switch: Bmv2Switch) -> list[str]:
    """The simple_switch_grpc command line: no P4 program yet (P4Runtime pushes it), packets over nanomsg."""
    return [
        str(binary),
        "--device-id",
        str(switch.device_id),
        "--thrift-port",
        str(switch.thrift_port),
        "--packet-in",
        switch.packet_socket,
        "--no-p4",
        "--",
        "--grpc-server-addr",
        switch.grpc_address,
        "--cpu-port",
        str(switch.cpu_port),
    ]


@contextmanager
def running_switch(
    binary: Path, *, socket_dir: Path, log_path: Path, device_id: int = 1, startup_timeout_s: float = 30.0
) -> Iterator[Bmv2Switch]:
    """Start a switch with its nanomsg socket in `socket_dir`; it is stopped on exit, whatever happens."""
    grpc_port, thrift_port = free_tcp_ports(2)
    switch = Bmv2Switch(
        grpc_address=f"{LOCALHOST}:{grpc_port}",
        thrift_port=thrift_port,
        packet_socket=f"ipc://{socket_dir / 'packets.ipc'}",
        device_id=device_id,
        cpu_port=CPU_PORT,
        log_path=log_path,
    )
    with switch.log_path.open("wb") as log:
        process = subprocess.Popen(
            switch_command(binary, switch),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, and we stop the switch ourselves
        )
    try:
        _wait_for_port(process, grpc_port, startup_timeout_s, switch.log_path)
        yield switch
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within STOP_TIMEOUT_S."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_for_port(process: subprocess.Popen[bytes], port: int, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Bmv2Error(f"simple_switch_grpc exited with status {process.returncode}\n{_tail(log_path)}")
        try:
            with socket.create_connection((LOCALHOST, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise Bmv2Error(f"simple_switch_grpc did not listen on port {port} within {timeout_s:.0f} s\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])
