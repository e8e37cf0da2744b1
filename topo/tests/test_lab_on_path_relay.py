"""A `tng relay --on-path` with real processes in namespaces: client - router (the relay) - server, unshaped veths.
The client sends its SECTIONs to the server's address (`--relay on-path`); the router's TPROXY rule
(tng_lab.relay_procs.divert_sections) hands them to the relay. Killed with SIGKILL mid-transfer and started again,
the relay leaves the transfer intact (fate sharing: `tng perf client` checks every byte and exits non-zero on a
wrong one), and the fresh relay carries the rest.

Needs root and the release binaries (lab_binaries).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import lab_binaries
import pytest
from tng_lab.netns import namespaces, run_prefix, sh
from tng_lab.perf import PerfServer
from tng_lab.plan import Veth, namespace_commands, veth_commands
from tng_lab.procs import spawn
from tng_lab.relay_procs import client_argv, divert_sections, start_relay, stop_relay, trace_path

bin_dir = lab_binaries.bin_dir  # the shared fixture, collected in this module too

CLIENT, ROUTER_NEAR, ROUTER_FAR, SERVER = "10.22.1.2", "10.22.1.1", "10.22.2.1", "10.22.2.2"
PORT = 5201  # the perf server's, which an on-path relay must listen on
DURATION_S, KILL_AT_S, RESTART_AT_S = 8.0, 2.5, 4.0


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[tuple[dict[str, str], ExitStack]]:
    """Namespaces client, router and server, the router forwarding between two veths; torn down afterwards."""
    prefix = f"{run_prefix()}op-"
    ns = {role: f"{prefix}{role}" for role in ("client", "router", "server")}
    with ExitStack() as stack:
        stack.enter_context(namespaces(list(ns.values())))
        commands = [command for name in ns.values() for command in namespace_commands(name)]
        veths = [
            Veth(ns["client"], "lan", "02:74:6c:22:01:02", ns["router"], "near", "02:74:6c:22:01:01"),
            Veth(ns["router"], "far", "02:74:6c:22:02:01", ns["server"], "lan", "02:74:6c:22:02:02"),
        ]
        for veth in veths:
            commands += veth_commands(veth)
        for host, address, router_if, router_address in (
            ("client", CLIENT, "near", ROUTER_NEAR),
            ("server", SERVER, "far", ROUTER_FAR),
        ):
            commands += [
                ["ip", "-n", ns[host], "addr", "add", f"{address}/24", "dev", "lan"],
                ["ip", "-n", ns["router"], "addr", "add", f"{router_address}/24", "dev", router_if],
                ["ip", "-n", ns[host], "route", "add", "default", "via", router_address],
            ]
        commands.append(["ip", "netns", "exec", ns["router"], "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        for command in commands:
            sh(command)
        yield ns, stack
    assert not [name for name in sh(["ip", "netns", "list"]).split() if name.startswith(prefix)]


@pytest.mark.needs_root
def test_an_on_path_relay_killed_mid_transfer_loses_nothing_and_its_restart_carries_the_rest(
    bin_dir: Path, tmp_path: Path, routed: tuple[dict[str, str], ExitStack]
) -> None:
    ns, stack = routed
    tng = bin_dir / "tng"
    server = PerfServer(tng, ns["server"], SERVER, PORT, tmp_path)
    stack.callback(server.stop)
    server.ensure("cubic")
    ccs = ("vegas", "cubic")
    divert_sections(ns["router"], PORT)
    first = start_relay(tng, ns["router"], ccs, 64, tmp_path, name="relay-1", on_path_port=PORT)
    stack.callback(first.stop)
    argv = client_argv(tng, ns["client"], f"{SERVER}:{PORT}", DURATION_S, ["--relay", "on-path"])
    client = spawn("tng perf client", argv, tmp_path / "client.log", stdout=tmp_path / "client.out")
    stack.callback(client.stop)
    t0 = time.monotonic()
    time.sleep(KILL_AT_S)
    first.popen.send_signal(signal.SIGKILL)
    first.popen.wait(5.0)
    time.sleep(RESTART_AT_S - KILL_AT_S)
    second = start_relay(tng, ns["router"], ccs, 64, tmp_path, name="relay-2", on_path_port=PORT)
    stack.callback(second.stop)
    status = client.popen.wait(DURATION_S + 30.0)
    elapsed = time.monotonic() - t0
    progress = (tmp_path / "client.log").read_text(errors="replace")
    assert status == 0, progress[-2000:]
    assert "did not match" not in progress
    lines = stop_relay(second, trace_path(tmp_path, "relay-2"))
    forwarded = lines[-1]["stats"]["forwarded"]
    assert forwarded > 1000, lines[-1]  # the fresh relay, learning the connection from the client's next SECTION
    first_trace = [line for line in trace_path(tmp_path, "relay-1").read_text().splitlines() if line.strip()]
    assert first_trace, "the first relay wrote no trace before it was killed"
    assert elapsed < DURATION_S + 30.0
