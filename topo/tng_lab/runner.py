"""Runs a scenario: builds the topology, starts linkem and the perf server, runs every workload, tears down.

Everything the run creates is registered on one exit stack as soon as it exists, so a failed step, a crashed
process or a Ctrl-C (SIGINT, SIGTERM, SIGHUP) unwinds it all: clients, server and linkem processes are stopped by
process group, namespaces (and with them every veth) are deleted, the socket directory is removed. Signals are
ignored while that happens, so a second Ctrl-C cannot cut the teardown short.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import signal
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tng_p4.bmv2 import Bmv2, Bmv2Error

from tng_lab import bmv2, capture, controller, kernelcc, linkem, perf, switch, switch_counters, tcpstats
from tng_lab.delay import Service, TraceSchedule
from tng_lab.linkspec import Direction
from tng_lab.netns import LabError, namespaces, run_directory, run_prefix, sh
from tng_lab.plan import PERF_PORT, Plan, make_plan
from tng_lab.procs import Child, running
from tng_lab.progress import Progress
from tng_lab.results import LabResults, WorkloadResult
from tng_lab.scenario import KERNEL_TRANSPORTS, Scenario, ScenarioError, Workload
from tng_lab.switch_counters import SwitchCounts
from tng_lab.tcpstats import ReceiverStats, SenderStats, TcpStats
from tng_lab.timeline import Sample
from tng_lab.workload_run import WorkloadError, prepare, run_workload

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("ip", "ethtool", "chrt", "ss", "sysctl")
SHIELDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LINKEM_EXIT_GRACE_S = 1.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Binaries:
    tng: Path
    linkem: Path

    @classmethod
    def locate(cls, bin_dir: Path | None) -> Binaries:
        """`tng` and `linkem` in `bin_dir` (default: the workspace's target/release)."""
        where = bin_dir or REPO / "target" / "release"
        binaries = cls(where / "tng", where / "linkem")
        for binary in (binaries.tng, binaries.linkem):
            if not os.access(binary, os.X_OK):
                raise LabError(f"{binary} not found; build it: cargo build --release -p linkem -p tng-agent")
        return binaries


@dataclass(frozen=True, slots=True)
class RunOptions:
    scenario: Scenario
    out_dir: Path
    duration_s: float
    repeat: int
    seed: int
    binaries: Binaries
    pcap: capture.PcapOptions | None = None  # capture both ends of every link into out_dir/pcap/


class ShieldedExitStack(ExitStack):
    """An exit stack whose unwinding cannot be interrupted by the signals that stop a run."""

    def __exit__(self, *exc_info: object) -> bool:
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SHIELDED_SIGNALS}
        try:
            return super().__exit__(*exc_info)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@dataclass(frozen=True, slots=True)
class _Counters:
    """Counter snapshots taken before a run: (UE, server) kernel TCP counters, and the switch's."""

    tcp: tuple[tcpstats.Snapshot, tcpstats.Snapshot] | None
    switch: switch_counters.Snapshot | None


@dataclass(slots=True)
class RunningLab:
    """What the workloads (and the soak) need from the running topology."""

    options: RunOptions
    plan: Plan
    services: dict[str, Service]
    linkems: dict[str, Child]  # link name -> its linkem
    trace_origins: dict[str, float]  # link name -> time.monotonic() of its trace's time 0 (its last reset)
    server: perf.PerfServer
    logs: Path
    default_cc: str  # the kernel's default congestion control, for kernel workloads that name none
    controller: controller.Controller | None  # with BMv2: programs the switch, sets the steered workloads' policies
    queue_depths: bmv2.QueueDepths | None  # with BMv2: its egress queues, part of every packet's delay
    switch_pps: dict[str, int]  # link name -> BMv2 egress queue rate toward it (links it shapes)
    switch_p4info: Path | None  # with BMv2: its pipeline's P4Info, to read its counters
    switch_pids: dict[str, int]  # with BMv2: its process and the controller's, for their CPU shares

    def snapshot_counters(self, workload: Workload) -> _Counters:
        """The kernel TCP counters of both ends (kernel transports; the UEs' added up) and the switch's (BMv2)."""
        tcp = None
        if workload.transport in KERNEL_TRANSPORTS:
            ues = [tcpstats.snapshot(ns) for ns in self.plan.ue_namespaces()]
            tcp = (_added(ues), tcpstats.snapshot(self.plan.server_ns))
        switch = None
        if self.switch_p4info is not None:
            address, device = bmv2.GRPC_ADDRESS, bmv2.DEVICE_ID
            switch = switch_counters.snapshot_in(self.plan.switch_ns, address, self.switch_p4info, device)
        return _Counters(tcp, switch)

    def counted_since(self, before: _Counters, workload: Workload) -> tuple[TcpStats | None, SwitchCounts | None]:
        """What the run did to the counters `before` was taken of."""
        after = self.snapshot_counters(workload)
        tcp = None
        if before.tcp is not None and after.tcp is not None:
            tcp = TcpStats(
                ReceiverStats.between(before.tcp[0], after.tcp[0]), SenderStats.between(before.tcp[1], after.tcp[1])
            )
        switch = None
        if before.switch is not None and after.switch is not None:
            ports = {name: self.plan.port_of(name) for name in workload.paths}
            switch = SwitchCounts.between(before.switch, after.switch, ports)
        return tcp, switch

    def sample(self, grid_ms: int) -> Sample:
        """Every link's counters and switch queue now, for the grid instant `grid_ms` of the run."""
        now = time.monotonic()
        links = {path.name: self._ask(path.name, linkem.counters, path.control) for path in self.plan.paths}
        if self.queue_depths is None:
            return Sample(now, grid_ms, links)
        ports = {self.plan.port_of(name): name for name in self.switch_pps}
        depths = self.queue_depths.read(list(ports))
        return Sample(now, grid_ms, links, {name: depths[port] for port, name in ports.items()})

    def reset_links(self, seed: int) -> float:
        """Starts every link over (trace at its time 0, loss and jitter from `seed`); returns the first reset's
        instant, the run's time 0 (the links are reset one after the other, well within a millisecond each)."""
        for path in self.plan.paths:
            self.trace_origins[path.name] = self._ask(path.name, linkem.reset, path.control, seed)
        return min(self.trace_origins.values())

    def _ask(self, link: str, question: Callable[..., T], *args: object) -> T:
        """`question(*args)` on the control socket of `link`'s linkem; a linkem that does not answer fails the lab."""
        try:
            return question(*args)
        except OSError as err:
            # A dying linkem closes its socket before it can be reaped: give it a moment to say why it died.
            self.linkems[link].check(grace_s=LINKEM_EXIT_GRACE_S)
            raise LabError(f"linkem ({link}) does not answer on its control socket: {err}") from err

    def check_alive(self) -> None:
        for child in self.linkems.values():
            child.check()
        if self.server.child is not None:
            self.server.child.check()


def _added(snapshots: list[tcpstats.Snapshot]) -> tcpstats.Snapshot:
    """Counters of several namespaces as one: each counter summed."""
    total: tcpstats.Snapshot = {}
    for snapshot in snapshots:
        for name, value in snapshot.items():
            total[name] = total.get(name, 0) + value
    return total


def notice(text: str) -> None:
    """One line for the person running the lab, on stderr (stdout may carry the JSON results)."""
    print(f"tng-lab: {text}", file=sys.stderr, flush=True)


def preflight(options: RunOptions, choice: switch.SwitchChoice) -> dict[str, str]:
    """Checks what a run needs before creating anything; returns the workloads to skip with the reason."""
    if os.geteuid() != 0:
        raise LabError("tng-lab run needs root (it creates network namespaces)")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise LabError(f"missing tools: {', '.join(missing)} (install them with `make deps`)")
    if options.pcap and shutil.which("tcpdump") is None:
        raise LabError("--pcap needs tcpdump (install it with `make deps`)")
    available = kernelcc.available()
    scenario = options.scenario
    for index, workload in enumerate(scenario.workloads):
        if workload.transport in KERNEL_TRANSPORTS and workload.cc and workload.cc not in available:
            problem = f"kernel congestion control {workload.cc!r} is not available (this kernel has {available})"
            raise ScenarioError(scenario.file, f"workloads[{index}].cc", problem)
    supported = perf.supported_transports(options.binaries.tng)
    offers = ", ".join(sorted(supported))
    skipped = {}
    for workload in scenario.workloads:
        if workload.transport not in supported:
            skipped[workload.name] = f"this tng binary has no --transport {workload.transport} (it offers {offers})"
        elif workload.steering and not choice.bmv2:
            skipped[workload.name] = "switch-steered TCP needs BMv2 as the switch (this run uses Linux forwarding)"
    return skipped


def run(options: RunOptions) -> LabResults:
    """Runs every workload `repeat` times on one topology; raises LabError when the lab itself fails."""
    scenario = options.scenario
    choice = switch.choose(scenario, REPO)
    skipped = preflight(options, choice)
    results = LabResults(
        scenario=scenario.name,
        scenario_file=scenario.file,
        description=scenario.description,
        started=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        duration_s=options.duration_s,
        repeat=options.repeat,
        seed=options.seed,
        sample_ms=scenario.sample_ms,
        switch=choice.notice,
        links={},
        host={"cores": os.cpu_count(), "kernel": platform.release(), "loadavg_at_start": os.getloadavg()[0]},
        ues=scenario.ues,
        pcap_dir=options.out_dir / capture.PCAP_DIR if options.pcap else None,
    )
    notice(f"in-path switch: {results.switch}")
    for name, reason in skipped.items():
        notice(f"skipping workload {name}: {reason}")
    by_name = {w.name: WorkloadResult(w, w.cc, skipped=skipped.get(w.name)) for w in scenario.workloads}
    results.workloads = list(by_name.values())
    runnable = [w for w in scenario.workloads if w.name not in skipped]
    logs = options.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with ShieldedExitStack() as stack:
        lab = start_lab(options, choice, stack, results, logs)
        progress = Progress(len(runnable) * options.repeat * options.duration_s)
        stack.callback(progress.close)
        for repetition in range(options.repeat):
            for workload in runnable:
                result = by_name[workload.name]
                if result.error is not None:
                    continue  # it could not be set up in an earlier repetition
                try:
                    result.cc = prepare(lab, workload)
                except WorkloadError as err:
                    result.error = str(err)
                    notice(f"workload {workload.name} failed: {err}")
                    continue
                label = f"{workload.name} ({repetition + 1}/{options.repeat})"
                progress.start(label, options.duration_s)
                result.runs.append(run_workload(lab, workload, repetition, progress))
                progress.finish()
                if workload.steering is not None and lab.controller is not None:
                    lab.controller.remove_policy(controller.STEERED_POLICY)  # the next workload starts unsteered
    return results


def start_lab(
    options: RunOptions, choice: switch.SwitchChoice, stack: ExitStack, results: LabResults, logs: Path
) -> RunningLab:
    """Namespaces, links, switch and servers of `options.scenario`, torn down by `stack`; records the links in
    `results`."""
    scenario = options.scenario
    prefix = run_prefix()
    run_dir = stack.enter_context(run_directory(prefix))
    kernel_ccs = {w.cc for w in scenario.workloads if w.transport in KERNEL_TRANSPORTS and w.cc}
    for name in stack.enter_context(kernelcc.allowed(kernel_ccs, prefix)):
        notice(f"added {name} to net.ipv4.tcp_allowed_congestion_control for this run")
    plan = make_plan(scenario, prefix, run_dir, bmv2=choice.bmv2)
    specs: dict[str, tuple[str, str]] = {}
    services: dict[str, Service] = {}
    for link in scenario.links:
        down_trace = _trace_file(options, link.name, "down", link.down)
        up_trace = _trace_file(options, link.name, "up", link.up)
        linkem_down = bmv2.linkem_direction(link.down) if choice.bmv2 else link.down
        specs[link.name] = (linkem_down.spec(down_trace), link.up.spec(up_trace))
        services[link.name] = _service(link.down, down_trace)
        results.links[link.name] = {
            "down": link.down.describe(),
            "up": link.up.describe(),
            "down_spec": specs[link.name][0],
            "up_spec": specs[link.name][1],
        }
    stack.enter_context(namespaces(plan.namespaces()))
    for command in plan.commands():
        sh(command)
    if options.pcap:
        _start_captures(options.pcap, plan, options.out_dir, stack, logs)
    lab_controller, queue_depths, switch_pps, switch_pids = None, None, {}, {}
    if choice.bmv2:
        lab_controller, switch_pids = _start_bmv2(scenario, choice, plan, stack, logs)
        queue_depths = bmv2.QueueDepths(plan, logs / "queue-depths.log")
        stack.callback(queue_depths.close)
        switch_pps = {
            link.name: bmv2.queue_rate_pps(link.down.rate_bps) for link in scenario.links if link.down.rate_bps
        }
    linkems, started = {}, {}
    for path in plan.paths:
        down, up = specs[path.name]
        argv = linkem.command(options.binaries.linkem, path.namespace, down, up, path.control, scenario.seed)
        child = stack.enter_context(running(f"linkem ({path.name})", argv, logs / f"linkem-{path.name}.log"))
        try:
            started[path.name] = linkem.wait_ready(child, path.control)
            linkems[path.name] = child
        except LabError as err:
            index = next(i for i, link in enumerate(scenario.links) if link.name == path.name)
            problem = str(err).replace("--ab:", "down:").replace("--ba:", "up:")  # linkem's ab is our downlink
            raise ScenarioError(scenario.file, f"links[{index}]", problem) from err
    server = perf.PerfServer(options.binaries.tng, plan.server_ns, plan.server_address, PERF_PORT, logs)
    stack.callback(server.stop)
    default_cc = kernelcc.get_default(plan.server_ns)
    p4info = choice.p4info if choice.bmv2 else None
    return RunningLab(
        options,
        plan,
        services,
        linkems,
        started,
        server,
        logs,
        default_cc,
        lab_controller,
        queue_depths,
        switch_pps,
        p4info,
        switch_pids,
    )


def _start_captures(pcap: capture.PcapOptions, plan: Plan, out_dir: Path, stack: ExitStack, logs: Path) -> None:
    """tcpdump at both ends of every link, each capturing before anything is sent over the links."""
    (out_dir / capture.PCAP_DIR).mkdir(parents=True, exist_ok=True)
    for point in capture.capture_points(plan):
        name = f"tcpdump ({point.link} {point.end} end)"
        argv = capture.tcpdump_command(point, out_dir, pcap)
        child = stack.enter_context(running(name, argv, logs / f"tcpdump-{point.link}-{point.end}.log"))
        capture.wait_listening(child)


def _start_bmv2(
    scenario: Scenario, choice: switch.SwitchChoice, plan: Plan, stack: ExitStack, logs: Path
) -> tuple[controller.Controller, dict[str, int]]:
    """BMv2 on the switch namespace's veths, then the controller that pushes the pipeline and programs it; returns
    the controller and the two processes' ids."""
    assert choice.simple_switch_grpc and choice.p4info and choice.bmv2_json
    try:
        switch_process = stack.enter_context(Bmv2(bmv2.config(choice.simple_switch_grpc, plan, logs / "bmv2.log")))
    except Bmv2Error as err:
        raise LabError(str(err)) from err
    config = plan.run_dir / "controller.toml"
    store = plan.run_dir / "controller.db"
    config.write_text(controller.config_toml(scenario, plan, choice.p4info, choice.bmv2_json, store))
    shutil.copyfile(config, logs / "controller.toml")  # the run directory goes away with the run
    pids = {}
    if plan.helper_port is not None:
        helper = stack.enter_context(
            running("retransmission helper", controller.helper_command(plan), logs / "helper.log")
        )
        pids["helper"] = helper.pid
    child = stack.enter_context(
        running("tng controller", controller.serve_command(plan, config), logs / "controller.log")
    )
    pids["controller"] = child.pid
    if switch_process.pid is not None:
        pids["bmv2"] = switch_process.pid
    return controller.wait_ready(child, plan), pids


def trace_path(out_dir: Path, link: str, direction: str, spec: Direction) -> Path | None:
    """The trace file a direction of `link` replays in a run written to `out_dir`: its own file, or where the run
    generates its model's."""
    if spec.trace_model is None:
        return spec.trace_file
    return out_dir / "traces" / spec.trace_model.file_name(link, direction)


def _trace_file(options: RunOptions, link: str, direction: str, spec: Direction) -> Path | None:
    path = trace_path(options.out_dir, link, direction, spec)
    if spec.trace_model is None or path is None:
        return path
    return linkem.generate_trace(options.binaries.linkem, spec.trace_model, path)


def _service(direction: Direction, trace_file: Path | None) -> Service:
    trace = TraceSchedule(tuple(linkem.read_trace(trace_file))) if trace_file else None
    return Service(direction.delay_s * 1e3, direction.rate_bps, trace)
