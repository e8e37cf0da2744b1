"""The BMv2 launcher against a fake simple_switch_grpc: command lines, start-up, failures, restarts, and that the
switch always stops."""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest
from tng_p4 import bmv2
from tng_p4.bmv2 import JEMALLOC_CONF, Bmv2, Bmv2Config, Bmv2Error, Bmv2Tls, nanomsg_config

# Records its command line and pid, then listens on the --grpc-server-addr port until it is killed.
FAKE_SWITCH = """#!{python}
import os, signal, socket, sys, time
args = sys.argv[1:]
print(" ".join(args), flush=True)
open(os.environ["FAKE_SWITCH_PID"], "w").write(str(os.getpid()))
open(os.environ["FAKE_SWITCH_PID"] + ".arenas", "w").write(os.environ.get("MALLOC_ARENA_MAX", "unset"))
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


def switch(binary: Path, tmp_path: Path, **options: object) -> Bmv2:
    return Bmv2(nanomsg_config(binary, tmp_path, log_path=tmp_path / "log"), **options)  # type: ignore[arg-type]


def test_switch_listens_with_the_expected_command_line_and_stops(fake_switch: Path, tmp_path: Path) -> None:
    config = nanomsg_config(fake_switch, tmp_path, device_id=3)
    with Bmv2(config):
        socket.create_connection((bmv2.LOCALHOST, config.grpc_port), timeout=1).close()
        assert config.packet_socket == f"ipc://{tmp_path / 'packets.ipc'}"
        assert (tmp_path / "bmv2.log").read_text().split() == [
            "--device-id", "3",
            "--thrift-port", str(config.thrift_port),
            "--packet-in", config.packet_socket,
            "--no-p4",
            "--",
            "--grpc-server-addr", config.grpc_address,
            "--cpu-port", str(bmv2.CPU_PORT),
        ]  # fmt: skip
        assert pid_alive(tmp_path / "pid")
    assert not pid_alive(tmp_path / "pid")


def test_a_switch_on_veths_in_a_namespace() -> None:
    config = Bmv2Config(
        binary=Path("/usr/local/bin/simple_switch_grpc"),
        log_path=Path("/tmp/bmv2.log"),
        grpc_port=9559,
        thrift_port=9090,
        interfaces=((1, "srv"), (2, "l-lte")),
        netns="lab-switch",
    )
    assert " ".join(config.command()) == (
        "ip netns exec lab-switch /usr/local/bin/simple_switch_grpc --device-id 1 --thrift-port 9090 "
        "-i 1@srv -i 2@l-lte --no-p4 -- --grpc-server-addr 127.0.0.1:9559 --cpu-port 255"
    )
    assert config.thrift_address == "127.0.0.1:9090"


def test_a_tls_switch_serves_p4runtime_with_its_certificate_and_asks_clients_for_theirs() -> None:
    config = Bmv2Config(
        binary=Path("/usr/local/bin/simple_switch_grpc"),
        log_path=Path("/tmp/bmv2.log"),
        grpc_port=9559,
        thrift_port=9090,
        packet_socket="ipc:///tmp/p.ipc",
        tls=Bmv2Tls(cert=Path("s.pem"), key=Path("s.key"), client_ca=Path("ca.pem")),
    )
    assert " ".join(config.command()).endswith(
        "-- --grpc-server-addr 127.0.0.1:9559 --cpu-port 255 --grpc-server-ssl --grpc-server-cert s.pem "
        "--grpc-server-key s.key --grpc-server-cacert ca.pem --grpc-server-with-client-auth"
    )


def test_a_real_time_switch_starts_under_chrt_inside_its_namespace() -> None:
    config = Bmv2Config(
        binary=Path("/usr/local/bin/simple_switch_grpc"),
        log_path=Path("/tmp/bmv2.log"),
        grpc_port=9559,
        thrift_port=9090,
        interfaces=((1, "srv"),),
        netns="lab-switch",
        realtime_priority=10,
    )
    assert config.command()[:8] == [
        "ip", "netns", "exec", "lab-switch", "chrt", "--fifo", "10", "/usr/local/bin/simple_switch_grpc"
    ]  # fmt: skip


def test_a_switch_needs_ports() -> None:
    with pytest.raises(ValueError, match="needs a packet socket"):
        Bmv2Config(binary=Path("x"), log_path=Path("log"), grpc_port=1, thrift_port=2)


def test_a_switch_gets_its_malloc_arena_cap_in_its_environment(fake_switch: Path, tmp_path: Path) -> None:
    uncapped = nanomsg_config(fake_switch, tmp_path)
    with Bmv2(uncapped):
        assert (tmp_path / "pid.arenas").read_text() == os.environ.get("MALLOC_ARENA_MAX", "unset")
    with Bmv2(dataclasses.replace(uncapped, malloc_arenas=2)):
        assert (tmp_path / "pid.arenas").read_text() == "2"
    with pytest.raises(ValueError, match="malloc_arenas must be at least 1, not 0"):
        dataclasses.replace(uncapped, malloc_arenas=0)


def test_a_switch_gets_its_allocator_preloaded_with_jemalloc_s_settings(tmp_path: Path) -> None:
    config = nanomsg_config(Path("simple_switch_grpc"), tmp_path)
    env = dataclasses.replace(config, allocator="libjemalloc.so.2").environment()
    assert env["LD_PRELOAD"].split()[0] == "libjemalloc.so.2"
    assert env["MALLOC_CONF"] == JEMALLOC_CONF
    assert config.environment().get("LD_PRELOAD") == os.environ.get("LD_PRELOAD")
    with pytest.raises(ValueError, match="give it or an allocator, not both"):
        dataclasses.replace(config, allocator="libjemalloc.so.2", malloc_arenas=2)


def test_switch_is_stopped_when_the_body_is_interrupted(fake_switch: Path, tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), switch(fake_switch, tmp_path):
        raise KeyboardInterrupt
    assert not pid_alive(tmp_path / "pid")


def test_a_switch_that_exits_reports_its_log(
    fake_switch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SWITCH_MODE", "fail")
    with (
        pytest.raises(Bmv2Error, match=r"exited with status 1\n(.|\n)*boom: cannot open socket"),
        switch(fake_switch, tmp_path),
    ):
        pytest.fail("the body must not run")


def test_a_switch_that_never_listens_times_out_and_is_stopped(
    fake_switch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SWITCH_MODE", "silent")
    with pytest.raises(Bmv2Error, match="did not listen"), switch(fake_switch, tmp_path, startup_timeout_s=1):
        pytest.fail("the body must not run")
    assert not pid_alive(tmp_path / "pid")


def test_a_switch_that_ignores_sigterm_is_killed(
    fake_switch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SWITCH_MODE", "stubborn")
    monkeypatch.setattr(bmv2, "STOP_TIMEOUT_S", 0.3)
    with switch(fake_switch, tmp_path):
        pass
    assert not pid_alive(tmp_path / "pid")


def test_a_killed_switch_restarts_on_the_same_ports_and_keeps_its_log(fake_switch: Path, tmp_path: Path) -> None:
    launcher = switch(fake_switch, tmp_path)
    launcher.start()
    first = int((tmp_path / "pid").read_text())
    launcher.kill()
    assert not launcher.running() and not pid_alive(tmp_path / "pid")
    launcher.start()
    try:
        assert int((tmp_path / "pid").read_text()) != first
        socket.create_connection((bmv2.LOCALHOST, launcher.config.grpc_port), timeout=1).close()
        assert launcher.log_tail().count("--grpc-server-addr") == 2  # both lives in one log
    finally:
        launcher.stop()
    assert not pid_alive(tmp_path / "pid")


def test_check_reports_a_switch_that_died(fake_switch: Path, tmp_path: Path) -> None:
    launcher = switch(fake_switch, tmp_path)
    launcher.start()
    try:
        launcher.check()
        os.kill(int((tmp_path / "pid").read_text()), 9)
        while launcher.running():
            time.sleep(0.01)
        with pytest.raises(Bmv2Error, match="exited with status -9"):
            launcher.check()
    finally:
        launcher.stop()


def test_free_tcp_ports_are_distinct_and_bindable() -> None:
    ports = bmv2.free_tcp_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket() as sock:
            sock.bind((bmv2.LOCALHOST, port))
