"""Runs a scenario: builds the topology, starts linkem and the perf server, runs every workload, tears down.

Everything the run creates is registered on one exit stack as soon as it exists, so a failed step, a crashed
process or a Ctrl-C (SIGINT, SIGTERM, SIGHUP) unwinds it all: clients, server and linkem processes are stopped by
process group, namespaces (and with them every veth) are deleted, the socket directory is removed. Signals are
ignored while that happens, so a second Ctrl-C cannot cut the teardown short.
"""

from __future__ import annotations

import datetime
import math
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
from tng_lab.load import LoadMeter
from tng_lab.netns import LabError, namespaces, run_directory, run_prefix, sh
from tng_lab.perf import Fct, PerfReport
from tng_lab.plan import PERF_PORT, Plan, UePlan, make_plan
from tng_lab.procs import Child, log_tail, running, spawn
from tng_lab.progress import Progress
from tng_lab.results import Delay, LabResults, PathResult, RunResult, UeRun, WorkloadResult, jain_fairness
from tng_lab.scenario import KERNEL_TRANSPORTS, Scenario, ScenarioError, Workload
from tng_lab.sender_window import SenderWindowSampler
from tng_lab.switch_counters import SwitchCounts
from tng_lab.tcpstats import ReceiverStats, SenderStats, TcpStats
from tng_lab.timeline import MTU_BYTES, Sample, capacity_and_utilization, path_result, pooled_delay

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("ip", "ethtool", "chrt", "ss", "sysctl")
SHIELDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DRAIN_TIMEOUT_S = 5.0
# How long a client may run beyond its duration (shortflows finish their last flow, then statistics are fetched):
# the duration again, at least this.
MIN_CLIENT_GRACE_S = 10.0
LINKEM_EXIT_GRACE_S = 1.0
UE_SEED_STRIDE = 1000  # UE k's tng perf seed: the run's seed + (k - 1) * this, so UE 1 keeps the single UE's seeds

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


class WorkloadError(LabError):
    """A workload cannot run on this lab (e.g. the controller refuses its policy); the lab itself is fine."""


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
                    result.cc = _prepare(lab, workload)
                except WorkloadError as err:
                    result.error = str(err)
                    notice(f"workload {workload.name} failed: {err}")
                    continue
                label = f"{workload.name} ({repetition + 1}/{options.repeat})"
                progress.start(label, options.duration_s)
                result.runs.append(_run_workload(lab, workload, repetition, progress))
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


def _trace_file(options: RunOptions, link: str, direction: str, spec: Direction) -> Path | None:
    if spec.trace_model is None:
        return spec.trace_file
    destination = options.out_dir / "traces" / spec.trace_model.file_name(link, direction)
    return linkem.generate_trace(options.binaries.linkem, spec.trace_model, destination)


def _service(direction: Direction, trace_file: Path | None) -> Service:
    trace = TraceSchedule(tuple(linkem.read_trace(trace_file))) if trace_file else None
    return Service(direction.delay_s * 1e3, direction.rate_bps, trace)


def _prepare(lab: RunningLab, workload: Workload) -> str | None:
    """The server, MPTCP endpoints, the congestion control; returns the one the data sender uses."""
    plan = lab.plan
    if workload.transport == "tng":
        lab.server.ensure(workload.cc)
    else:
        lab.server.current()  # kernel sockets do not depend on the server's tng congestion control
    for command in plan.mptcp_endpoints(workload.paths if workload.transport == "mptcp" else ()):
        sh(command)
    if workload.steering is not None:
        assert lab.controller is not None  # preflight skips steered workloads without BMv2
        policy = plan.run_dir / f"policy-{workload.name}.toml"
        policy.write_text(controller.policy_toml(lab.options.scenario, plan, workload))
        shutil.copyfile(policy, lab.logs / policy.name)
        try:
            lab.controller.set_policy(policy)
        except LabError as err:  # the other workloads can still run
            said = str(err).partition("): ")[2] or str(err)  # tngctl's answer, without the command line (run-specific)
            raise WorkloadError(f"the controller refused its steering policy: {said}") from err
    if workload.transport not in KERNEL_TRANSPORTS:
        return workload.cc or "agent default"
    for command in plan.ue_tcp_sack(workload.sack):  # every kernel workload sets it: no leak into the next one
        sh(command)
    cc = workload.cc or lab.default_cc
    kernelcc.set_default(plan.server_ns, cc)  # the server sends the data with its namespace's default
    return f"{workload.alcc} (alcc) over {cc}" if workload.alcc else cc


def _drain(lab: RunningLab) -> None:
    """Waits until every queue (linkem's, BMv2's) and delay line is empty, so a workload does not start behind the
    last one."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        sample = lab.sample(grid_ms=0)
        busy = [c for pair in sample.links.values() for c in (pair.down, pair.up)]
        linkem_empty = all(c.queue_packets == 0 and c.delay_line_packets == 0 for c in busy)
        if linkem_empty and not any(sample.switch_queues.values()):
            return
        time.sleep(0.05)


def _client_argv(lab: RunningLab, workload: Workload, ue: UePlan, seed: int) -> list[str]:
    """UE `ue`'s perf client: bound to its LWIP address when steered, else to its address of every path."""
    plan = lab.plan
    if workload.steering is not None:
        assert ue.lwip_address is not None
        locals_ = [ue.lwip_address]  # one address behind both links: the switch picks the link of every packet
    else:
        locals_ = [ue.source(name).address for name in workload.paths]
    server = f"{plan.server_address}:{PERF_PORT}"
    options = lab.options
    return perf.client_command(options.binaries.tng, ue.namespace, workload, server, locals_, options.duration_s, seed)


def _run_workload(lab: RunningLab, workload: Workload, repetition: int, progress: Progress) -> RunResult:
    """Runs one client per UE at the same time and measures the links and the load meanwhile."""
    options, plan = lab.options, lab.plan
    seed = options.seed + repetition
    link_seed = options.scenario.seed + repetition  # every workload of a repetition meets the same losses
    _drain(lab)
    origin = lab.reset_links(link_seed)  # every workload meets every trace from its time 0
    stem = f"{workload.name}-r{repetition}"
    several = len(plan.ues) > 1
    clients: list[_Client] = []
    pids = {f"linkem-{name}": child.pid for name, child in lab.linkems.items()}
    pids["server"] = lab.server.current().pid
    pids.update(lab.switch_pids)
    meter = LoadMeter(pids)
    counters = lab.snapshot_counters(workload)
    samples = [lab.sample(grid_ms=0)]
    window = None
    if workload.transport in KERNEL_TRANSPORTS:
        interval_s = options.scenario.sample_ms / 1e3
        needed = _needed_packets(options.scenario, workload)
        window = SenderWindowSampler(plan.server_ns, PERF_PORT, origin, interval_s, needed).start()
    try:
        for ue in plan.ues:
            ue_seed = seed + (ue.number - 1) * UE_SEED_STRIDE
            file_stem = f"{stem}-ue{ue.number}" if several else stem
            name = f"tng perf client ({workload.name}{f', UE {ue.number}' if several else ''})"
            report = lab.logs / f"{file_stem}.json"
            argv = _client_argv(lab, workload, ue, ue_seed)
            child = spawn(name, argv, lab.logs / f"{file_stem}.log", stdout=report)
            clients.append(_Client(ue.number if several else None, ue_seed, child, report))
        error = _follow(lab, clients, samples, meter, progress, workload, origin)
    finally:
        for client in clients:
            client.child.stop()
        sender_window = window.stop() if window else None
    tcp, switch_counts = lab.counted_since(counters, workload)
    duration_ms = options.duration_s * 1e3
    paths = {
        name: path_result(
            samples, name, lab.services[name], lab.trace_origins[name], duration_ms, lab.switch_pps.get(name)
        )
        for name in lab.services
    }
    delay = pooled_delay([paths[name] for name in workload.paths])
    capacity, utilization = capacity_and_utilization([paths[name] for name in workload.paths])
    measured = _Measured(samples, paths, delay, capacity, utilization, tcp, switch_counts)
    reports: list[PerfReport] = []
    for client in clients:
        try:
            reports.append(perf.parse_report(client.report.read_text()))
        except LabError as err:
            return _failed_run(repetition, seed, link_seed, measured, meter, error or client.say(str(err)))
    report = perf.combined(reports)
    if error is None and report.bytes_corrupted:
        error = f"{report.bytes_corrupted} bytes arrived corrupted"
    ues = tuple(
        UeRun(ue, client.seed, one.goodput_mbps, one.bytes_received, one.retransmitted_packets)
        for ue, (client, one) in enumerate(zip(clients, reports, strict=True), start=1)
    )
    return RunResult(
        repetition=repetition,
        seed=seed,
        link_seed=link_seed,
        duration_s=round(samples[-1].t - samples[0].t, 3),
        goodput_mbps=report.goodput_mbps,
        capacity_mbps=capacity,
        utilization=utilization,
        bytes_received=report.bytes_received,
        bytes_corrupted=report.bytes_corrupted,
        retransmitted_packets=report.retransmitted_packets,
        sent_packets=report.sent_packets,
        delay_ms=delay,
        fct_ms=report.fct_ms,
        fct_samples_ms=report.fct_samples_ms,
        paths=paths,
        perf_paths=report.paths,
        load=meter.finish({"client": report.cpu_percent}),
        tcp=tcp,
        switch=switch_counts,
        error=error,
        ues=ues,
        fairness=jain_fairness([ue.goodput_mbps for ue in ues]),
        run_s=report.run_s,
        sender_queueing_ms=report.sender_queueing_ms,
        sender_window=sender_window,
    )


def _needed_packets(scenario: Scenario, workload: Workload) -> float | None:
    """Full-size packets in flight that keep the workload's links busy at their base RTTs (None on a trace-driven
    link, whose rate varies): a connection per link needs each link's rate x RTT. One connection steered across the
    LWIP pair arrives in order only as late as the slowest link delivers, and its ACKs return over the link the UE
    answers on (Wi-Fi, topo/tng_lab/plan.py), so it needs the links' summed rate x (longest downlink delay + Wi-Fi's
    uplink delay)."""
    links = [link for link in scenario.links if link.name in workload.paths]
    if any(link.down.rate_bps is None for link in links):
        return None
    rates = [link.down.rate_bps or 0.0 for link in links]
    if workload.steering is not None and scenario.switch.wifi is not None:
        rtt = max(link.down.delay_s for link in links) + scenario.link(scenario.switch.wifi).up.delay_s
        bits = sum(rates) * rtt
    else:
        bits = sum(rate * (link.down.delay_s + link.up.delay_s) for rate, link in zip(rates, links, strict=True))
    return round(bits / (MTU_BYTES * 8), 1)


@dataclass(frozen=True, slots=True)
class _Client:
    """One UE's perf client of a run."""

    ue: int | None  # its UE's number when there are several (for messages)
    seed: int
    child: Child
    report: Path  # its stdout: the JSON report

    def say(self, problem: str) -> str:
        return problem if self.ue is None else f"UE {self.ue}: {problem}"


def _follow(
    lab: RunningLab,
    clients: list[_Client],
    samples: list[Sample],
    meter: LoadMeter,
    progress: Progress,
    workload: Workload,
    origin: float,
) -> str | None:
    """Samples on the sample_ms grid from `origin` (the run's reset) until every client has exited; returns why the
    run failed, or None."""
    interval_ms = lab.options.scenario.sample_ms
    started = samples[0].t
    grace = max(MIN_CLIENT_GRACE_S, lab.options.duration_s)
    deadline = started + lab.options.duration_s + grace
    while True:
        now = time.monotonic()
        # The next grid instant; a sampler that woke up late takes the latest one that has passed, at once.
        latest_passed_ms = math.floor((now - origin) * 1e3 / interval_ms) * interval_ms
        grid_ms = max(samples[-1].grid_ms + interval_ms, latest_passed_ms)
        pause = origin + grid_ms / 1e3 - now
        if pause > 0:
            time.sleep(pause)
        exited = not any(c.child.running() for c in clients)  # before sampling: the last sample covers it all
        samples.append(lab.sample(grid_ms))
        meter.tick()
        lab.check_alive()
        before, after = samples[-2], samples[-1]
        moved = sum(after.links[n].down.forwarded_bytes - before.links[n].down.forwarded_bytes for n in workload.paths)
        progress.tick(after.t - started, moved * 8 / max(after.t - before.t, 1e-9) / 1e6)
        if exited:
            break
        if after.t > deadline:
            late = next(c for c in clients if c.child.running())
            return late.say(f"client still running {grace:.0f} s after its duration; stopped it")
    for client in clients:
        status = client.child.popen.returncode
        if status != 0:
            return client.say(f"client exited with status {status}: {log_tail(client.child.log)}")
    return None


@dataclass(frozen=True, slots=True)
class _Measured:
    """What the lab measured of a run itself, with or without the client's report."""

    samples: list[Sample]
    paths: dict[str, PathResult]
    delay: Delay
    capacity_mbps: float | None
    utilization: float | None
    tcp: TcpStats | None
    switch: SwitchCounts | None


def _failed_run(
    repetition: int, seed: int, link_seed: int, measured: _Measured, meter: LoadMeter, error: str
) -> RunResult:
    samples = measured.samples
    return RunResult(
        repetition=repetition,
        seed=seed,
        link_seed=link_seed,
        duration_s=round(samples[-1].t - samples[0].t, 3),
        goodput_mbps=0.0,
        capacity_mbps=measured.capacity_mbps,
        utilization=measured.utilization,
        bytes_received=0,
        bytes_corrupted=0,
        retransmitted_packets=0,
        sent_packets=0,
        delay_ms=measured.delay,
        fct_ms=Fct(0.0, 0.0, 0.0, 0),
        fct_samples_ms=[],
        paths=measured.paths,
        perf_paths=[],
        load=meter.finish({}),
        tcp=measured.tcp,
        switch=measured.switch,
        error=error,
    )
