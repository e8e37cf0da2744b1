"""running_switch() against a fake simple_switch_grpc: start-up, failures, and that the switch always stops."""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import pytest
from tng_p4 import bmv2
from tng_p4.bmv2 import Bmv2Error, running_switch

# Records its command line and pid, then listens on the --grpc-server-addr port until it is killed.
FAKE_SWITCH = """#!{python}
import os, signal, socket, sys, time
args = sys.argv[1:]
print(" ".join(args), flush=True)
open(os.environ["FAKE_SWITCH_PID"], "w").write(str(os.getpid()))
if os.environ.get("FAKE_SWITCH_MODE") == "fail":
    print("boom: cannot open socket", flush=True)
    sys.exit(1)
if os.environ.get("FAKE_SWITCH_MODE") == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("FAKE_SWITCH_MODE") != "silent":
    host, port = args[args.index("--grpc-server-addr") + 1].split(":")
    server = socket.socket()
    server.bind((host, int(port)))
    server.listen()
while True:
    time.sleep(1)
"""


@pytest.fixture
def fake_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "simple_switch_grpc"
    path.write_text(FAKE_SWITCH.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_SWITCH_PID", str(tmp_path / "pid"))
    return path


def pid_alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return False
    return True


def test_switch_listens_with_the_expected_command_line_and_stops(fake_switch: Path, tmp_path: Path) -> None:
    log = tmp_path / "switch.log"
    with running_switch(fake_switch, socket_dir=tmp_path, log_path=log, device_id=3) as switch:
        host, port = switch.grpc_address.split(":")
        socket.create_connection((host, int(port)), timeout=1).close()
        assert switch.packet_socket == f"ipc://{tmp_path / 'packets.ipc'}"
        assert log.read_text().split() == [
            "--device-id", "3",
            "--thrift-port", str(switch.thrift_port),
            "--packet-in", switch.packet_socket,
            "--no-p4",
            "--",
            "--grpc-server-addr", switch.grpc_address,
            "--cpu-port", str(bmv2.CPU_PORT),
        ]  # fmt: skip
        assert pid_alive(tmp_path / "pid")
    assert not pid_alive(tmp_path / "pid")


def test_switch_is_stopped_when_the_body_is_interrupted(fake_switch: Path, tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), running_switch(fake_switch, socket_dir=tmp_path, log_path=tmp_path / "log"):
        raise KeyboardInterrupt
    assert not pid_alive(tmp_path / "pid")


def test_a_switch_that_exits_reports_its_log(
    fake_switch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SWITCH_MODE", "fail")
    with (
        pytest.raises(Bmv2Error, match=r"exited with status 1\n(.|\n)*boom: cannot open socket"),
        running_switch(fake_switch, socket_dir=tmp_path, log_path=tmp_path / "log"),
    ):
        pytest.fail("the body must not run")


def test_a_switch_that_never_listens_times_out_and_is_stopped(
    fake_switch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SWITCH_MODE", "silent")
    with (
        pytest.raises(Bmv2Error, match="did not listen"),
        running_switch(fake_switch, socket_dir=tmp_path, log_path=tmp_path / "log", startup_timeout_s=1),
    ):
        pytest.fail("the body must not run")
    assert not pid_alive(tmp_path / "pid")


def test_a_switch_that_ignores_sigterm_is_killed(
    fake_switch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SWITCH_MODE", "stubborn")
    monkeypatch.setattr(bmv2, "STOP_TIMEOUT_S", 0.3)
    with running_switch(fake_switch, socket_dir=tmp_path, log_path=tmp_path / "log"):
        pass
    assert not pid_alive(tmp_path / "pid")


def test_free_tcp_ports_are_distinct_and_bindable() -> None:
    ports = bmv2.free_tcp_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket() as sock:
            sock.bind((bmv2.LOCALHOST, port))
