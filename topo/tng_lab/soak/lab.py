"""The running lab of a soak: tng-lab's topology, switch, controller, linkems and perf server (started by
`tng_lab.runner`, not built a second time), plus what the soak adds (a `tng serve` for the proxy, the HTTP body
server), and the restarts the kill faults need."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tng_p4.bmv2 import Bmv2, Bmv2Error

from tng_lab import bmv2, controller, linkem
from tng_lab.netns import LabError, sh
from tng_lab.plan import HELPER_HEALTH
from tng_lab.procs import Child, rss_kib, running
from tng_lab.runner import RunningLab
from tng_lab.soak import switch_buffers
from tng_lab.soak.packet_pool import SwitchPool
from tng_lab.soak.processes import Registry, alive
from tng_lab.switch import SwitchChoice

# A restarted BMv2 gets its pipeline and every entry again, and a tngctl call is a fresh Python in the switch
# namespace: seconds of CPU each, minutes on a starved machine.
RECONNECT_TIMEOUT_S = 180.0
TNGCTL_TIMEOUT_S = 180.0
GONE_TIMEOUT_S = 5.0
LISTEN_TIMEOUT_S = 15.0
PROXY_SERVER_PORT = 4433  # `tng serve` for the proxy, in the server namespace


def wait_listening(ns: str, kind: str, port: int, what: str) -> None:
    """Until a socket of `kind` (t: TCP, u: UDP) listens on `port` in namespace `ns`; LabError after a while."""
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while not sh(["ip", "netns", "exec", ns, "ss", f"-Hl{kind}n", f"sport = :{port}"]).strip():
        if time.monotonic() > deadline:
            raise LabError(f"{what} did not listen on port {port} within {LISTEN_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


@dataclass(slots=True)
class SoakLab:
    lab: RunningLab
    choice: SwitchChoice
    stack: object  # the run's ExitStack: everything (re)started is registered on it
    registry: Registry
    logs: Path
    starts: int = 0  # restarts so far, for log file names
    argv_of: dict[str, list[str]] = field(default_factory=dict)  # role -> how start_process started it
    switch_pool: SwitchPool | None = None  # BMv2's packet pool, where a uprobe counts it (packet_pool)

    @property
    def plan(self):
        return self.lab.plan

    def link_down_bytes(self) -> int | None:
        total = 0
        for path in self.plan.paths:
            try:
                total += linkem.counters(path.control).down.forwarded_bytes
            except (OSError, LabError):
                return None
        return total

    def start_process(self, role: str, argv: list[str]) -> Child:
        self.starts += 1
        child = self.stack.enter_context(running(role, argv, self.logs / f"{role}-{self.starts}.log"))
        self.registry.register(role, child.pid)
        self.argv_of[role] = argv
        return child

    def restart(self, role: str) -> int:
        """Starts `role` again as `start_process` first did; its pid."""
        return self.start_process(role, self.argv_of[role]).pid

    def kill(self, role: str) -> int:
        """SIGKILL to `role`'s process, announced to the registry; returns its pid once it is gone."""
        pid = self.registry.killing(role)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while alive(pid):
            if time.monotonic() > deadline:
                raise LabError(f"{role} (pid {pid}) still runs {GONE_TIMEOUT_S:.0f} s after SIGKILL")
            time.sleep(0.05)
        return pid

    def restart_perf_server(self) -> int:
        server = self.lab.server
        if server.child is not None:
            server.child.popen.poll()  # reap the killed one
        server.child = None
        child = server.ensure(server.cc)
        self.registry.register("perf-server", child.pid)
        return child.pid

    def restart_controller(self) -> int:
        config = self.plan.run_dir / "controller.toml"
        child = self.start_process("controller", controller.serve_command(self.plan, config))
        self.lab.controller = controller.wait_ready(child, self.plan)
        return child.pid

    def restart_helper(self) -> int:
        return self.start_process("helper", controller.helper_command(self.plan)).pid

    def wait_helper(self, down: bool, timeout_s: float = RECONNECT_TIMEOUT_S) -> str:
        """The helper state the controller shows once it is down (or up again), e.g. "up (epoch 2)"; raises
        LabError after `timeout_s`."""
        started = time.monotonic()
        while True:
            try:
                switches = json.loads(self.tngctl("--json", "switches") or "[]")
            except LabError as err:
                state = f"no answer ({err})"
            else:
                state = ", ".join(str(s.get("helper")) for s in switches) or "none"
                if state.startswith("down" if down else "up"):
                    return f"{state} after {time.monotonic() - started:.1f} s"
            if time.monotonic() - started > timeout_s:
                wanted = "down" if down else "up"
                raise LabError(f"the controller does not show the helper {wanted} {timeout_s:.0f} s later ({state})")
            time.sleep(0.5)

    def restart_bmv2(self) -> int:
        choice = self.choice
        assert choice.simple_switch_grpc is not None
        self.starts += 1
        if self.switch_pool is not None:
            self.switch_pool.new_life()
        config = bmv2.config(choice.simple_switch_grpc, self.plan, self.logs / f"bmv2-{self.starts}.log")
        try:
            switch = self.stack.enter_context(Bmv2(config))
        except Bmv2Error as err:
            raise LabError(str(err)) from err
        assert switch.pid is not None
        self.registry.register("bmv2", switch.pid)
        return switch.pid

    def fill_switch_buffers(self) -> str:
        """Fills BMv2's egress queues toward the links once (tng_lab.soak.switch_buffers); the evidence, with what one
        packet header vector costs where the pool is counted."""
        ue = self.plan.ues[0]
        destinations = [ue.source(path.name).address for path in self.plan.paths]
        pid, pool = self.registry.pid("bmv2"), self.switch_pool
        if pool is None:
            return switch_buffers.fill(self.plan.server_ns, destinations, pid)
        phvs_before, rss_before = pool.phvs(), rss_kib(pid)
        filled = switch_buffers.fill(self.plan.server_ns, destinations, pid)
        phvs_after, rss_after = pool.phvs(), rss_kib(pid)
        if None in (phvs_before, rss_before, phvs_after, rss_after):
            return filled
        return f"{filled}; {pool.measure(phvs_before, rss_before, phvs_after, rss_after)}"

    def helper_held_bytes(self) -> int | None:
        """The bytes of copies the VISIBLE helper holds now, from its health report (None: no answer)."""
        host, _, port = HELPER_HEALTH.rpartition(":")
        probe = f"exec 3<>/dev/tcp/{host}/{port} && head -n 1 <&3"
        try:
            answer = sh(["ip", "netns", "exec", self.plan.switch_ns, "timeout", "1", "bash", "-c", probe], timeout_s=5)
            return int(json.loads(answer)["stored_bytes"])
        except (LabError, ValueError, KeyError, TypeError):
            return None

    def tngctl(self, *args: str) -> str:
        """`tngctl` against the controller of now, in the switch namespace."""
        assert self.lab.controller is not None
        argv = ["ip", "netns", "exec", self.plan.switch_ns, sys.executable, "-m", "tng_controller.tngctl"]
        return sh([*argv, "--server", self.lab.controller.api, *args], timeout_s=TNGCTL_TIMEOUT_S)

    def switch_state(self) -> str:
        try:
            switches = json.loads(self.tngctl("--json", "switches") or "[]")
        except LabError as err:
            return f"no answer ({err})"
        return ", ".join(str(s.get("state")) for s in switches) or "none"

    def wait_connected(self, timeout_s: float = RECONNECT_TIMEOUT_S) -> float:
        """Seconds until the controller shows the switch CONNECTED again; raises LabError after `timeout_s`."""
        started = time.monotonic()
        while (state := self.switch_state()) != "CONNECTED":
            if time.monotonic() - started > timeout_s:
                raise LabError(f"the switch is not CONNECTED {timeout_s:.0f} s later (state: {state})")
            time.sleep(2.0)
        return round(time.monotonic() - started, 1)

    def p4runtime_reachable(self) -> bool:
        """Whether a new TCP connection to BMv2's P4Runtime port opens within a second, from the switch namespace."""
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{bmv2.GRPC_PORT}"
        try:
            sh(["ip", "netns", "exec", self.plan.switch_ns, "timeout", "1", "bash", "-c", probe], timeout_s=5)
        except LabError:
            return False
        return True
