"""One workload's run on a running lab: its server side and policy prepared, a perf client per UE started, the links
and switch sampled on the scenario's grid until every client has exited, and the measurements and the clients'
reports combined into a RunResult."""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tng_lab import controller, kernelcc, perf
from tng_lab.load import LoadMeter
from tng_lab.netns import LabError, sh
from tng_lab.perf import Fct, PerfReport
from tng_lab.plan import PERF_PORT, UePlan
from tng_lab.procs import Child, log_tail, spawn
from tng_lab.progress import Progress
from tng_lab.results import Delay, PathResult, RunResult, UeRun, jain_fairness
from tng_lab.scenario import KERNEL_TRANSPORTS, Scenario, Workload
from tng_lab.sender_window import SenderWindowSampler
from tng_lab.switch_counters import SwitchCounts
from tng_lab.tcpstats import TcpStats
from tng_lab.timeline import MTU_BYTES, Sample, capacity_and_utilization, path_result, pooled_delay

if TYPE_CHECKING:
    from tng_lab.runner import RunningLab

DRAIN_TIMEOUT_S = 5.0
# How long a client may run beyond its duration (shortflows finish their last flow, then statistics are fetched):
# the duration again, at least this.
MIN_CLIENT_GRACE_S = 10.0
UE_SEED_STRIDE = 1000  # UE k's tng perf seed: the run's seed + (k - 1) * this, so UE 1 keeps the single UE's seeds


class WorkloadError(LabError):
    """A workload cannot run on this lab (e.g. the controller refuses its policy); the lab itself is fine."""


def prepare(lab: RunningLab, workload: Workload) -> str | None:
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


def run_workload(lab: RunningLab, workload: Workload, repetition: int, progress: Progress) -> RunResult:
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
        needed = needed_packets(options.scenario, workload)
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


def needed_packets(scenario: Scenario, workload: Workload) -> float | None:
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
