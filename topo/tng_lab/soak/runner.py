"""Runs a soak: tng-lab's lab (tng_lab.runner builds it), every kind of traffic at once, the fault schedule, the
sampler, and at the end the invariants over what was recorded."""

from __future__ import annotations

import contextlib
import datetime
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tng_lab import bmv2, controller, perf, runner, switch
from tng_lab.netns import LabError, sh
from tng_lab.plan import PERF_PORT
from tng_lab.results import LabResults
from tng_lab.scenario import Scenario
from tng_lab.soak import faults as faults_module
from tng_lab.soak.faults import Fault, NotInjected
from tng_lab.soak.invariants import Violation, Window, delivery, processes, resources
from tng_lab.soak.lab import PROXY_SERVER_PORT, SoakLab, wait_listening
from tng_lab.soak.packet_pool import CounterUnavailable, PhvCounter, SwitchPool, buffer_bound
from tng_lab.soak.policies import Churn, churn
from tng_lab.soak.processes import Exit, Registry
from tng_lab.soak.sampler import LinkSample, Pause, ProcessSample, Sampler
from tng_lab.soak.schedule import END_MARGIN_S, Planned, make_schedule
from tng_lab.soak.switch_entries import EntryReader
from tng_lab.soak.traffic import Fetch, PerfKind, PerfRounds, Round, read_fetches

HTTP_PORT = 8080  # the HTTP body server, behind it
PROXY_LISTEN = "127.0.0.1:8081"  # `tng proxy` in the UE namespace
PROXY_IDLE_TIMEOUT_S = 5  # above links-flap's longest both-down state (2 s), well within the 20 s of recovery
MPTCP_SYSCTL = Path("/proc/sys/net/mptcp/enabled")


@dataclass(frozen=True, slots=True)
class SoakOptions:
    scenario: Scenario
    out_dir: Path
    duration_s: float
    warmup_s: float
    seed: int
    interval_s: tuple[float, float]
    round_s: float
    binaries: runner.Binaries
    kinds: frozenset[str] | None = None  # the kinds of fault to schedule (faults.KINDS); None: all


@dataclass(frozen=True, slots=True)
class FaultRecord:
    label: str
    planned_s: float
    hold_s: float
    injected: bool
    start: float | None = None  # seconds since the soak started: injected...
    end: float | None = None  # ...and healed
    evidence: str = ""  # what showed it happened (or why it did not)
    healed: str = ""  # what showed it was undone
    problem: str | None = None  # the heal failed


@dataclass(slots=True)
class SoakRecord:
    """Everything a soak recorded; the report and the invariants read it."""

    options: SoakOptions
    started: str
    switch: str
    loadavg_start: float
    loadavg_end: float = 0.0
    switch_buffers_filled: str = ""  # BMv2's buffers filled once before the warm-up ends (switch_buffers): evidence
    switch_pool: str = ""  # whether BMv2's packet pool is counted and left out of its RSS (packet_pool), its bound
    elapsed_s: float = 0.0
    skipped_traffic: dict[str, str] = field(default_factory=dict)
    unavailable_faults: dict[str, str] = field(default_factory=dict)
    schedule: list[Planned] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    fetches: list[Fetch] = field(default_factory=list)
    churns: list[Churn] = field(default_factory=list)
    process_samples: list[ProcessSample] = field(default_factory=list)
    link_samples: list[LinkSample] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    ready_at: dict[int, float] = field(default_factory=dict)  # pid -> when it was ready (its warm-up starts)
    late_faults: int = 0  # scheduled faults left out because the soak fell behind its schedule
    exits: list[Exit] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    def windows(self) -> list[Window]:
        faults = [Window(f.label, f.start, f.end) for f in self.faults if f.start is not None and f.end is not None]
        return faults + [Window("the soak was paused", p.start, p.end) for p in self.pauses]

    def check(self) -> None:
        found = delivery(self.rounds, self.fetches, self.windows())
        found += [Violation("policies", f"{c.policy} at {c.t:.0f} s: {c.problem}") for c in self.churns if c.problem]
        found += resources(self.process_samples, self.options.warmup_s, self.ready_at)
        found += processes(self.exits)
        found += [
            Violation("faults", f"{f.label} at {f.start:.0f} s did not heal: {f.problem}")
            for f in self.faults
            if f.problem
        ]
        self.violations = found


def notice(text: str) -> None:
    print(f"tng-soak: {text}", file=sys.stderr, flush=True)


def soak(options: SoakOptions) -> SoakRecord:
    scenario = options.scenario
    choice = switch.choose(scenario, runner.REPO)
    run_options = runner.RunOptions(scenario, options.out_dir, options.round_s, 1, options.seed, options.binaries)
    runner.preflight(run_options, choice)
    record = SoakRecord(
        options,
        datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        choice.notice,
        os.getloadavg()[0],
    )
    notice(f"in-path switch: {choice.notice}")
    logs = options.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = LabResults(
        scenario.name,
        scenario.file,
        scenario.description,
        record.started,
        options.round_s,
        1,
        options.seed,
        scenario.sample_ms,
        choice.notice,
        {},
        {},
    )
    with runner.ShieldedExitStack() as stack:
        lab = runner.start_lab(run_options, choice, stack, results, logs)
        started = time.monotonic()
        wall_started = time.time()
        soak_lab = SoakLab(lab, choice, stack, Registry(started), logs)
        fetch_log = _start_services(soak_lab, options)
        if lab.controller is not None:
            record.switch_pool = _count_switch_pool(soak_lab, scenario, stack)
            notice(f"BMv2's packet pool: {record.switch_pool}")
            record.switch_buffers_filled = soak_lab.fill_switch_buffers()
            notice(f"BMv2's buffers filled once: {record.switch_buffers_filled}")
        traffic = _start_traffic(soak_lab, options, record, started)
        held = {"helper": soak_lab.helper_held_bytes} if "helper" in soak_lab.registry.roles() else {}
        if soak_lab.switch_pool is not None:
            held["bmv2"] = soak_lab.switch_pool.held_bytes
        sampler = Sampler(soak_lab.registry, soak_lab.link_down_bytes, held).start()
        stack.callback(sampler.stop)
        try:
            _run_faults(soak_lab, options, record, started)
            _sleep_until(started + options.duration_s)
        finally:
            for rounds in traffic:
                rounds.stop()
            sampler.stop()
            record.elapsed_s = round(time.monotonic() - started, 1)
            record.rounds = sorted((r for rounds in traffic for r in rounds.rounds), key=lambda r: r.start)
            record.fetches = read_fetches(fetch_log, wall_started)
            record.process_samples = sampler.processes
            record.link_samples = sampler.links
            record.pauses = sampler.pauses
            record.exits = soak_lab.registry.exits
            record.ready_at = soak_lab.registry.ready_at
            record.loadavg_end = os.getloadavg()[0]
    record.check()
    return record


def _count_switch_pool(soak: SoakLab, scenario: Scenario, stack: contextlib.ExitStack) -> str:
    """Sets the uprobe that counts BMv2's packet header vectors (packet_pool); what the report says of it."""
    assert soak.choice.simple_switch_grpc is not None
    try:
        counter = PhvCounter.attach(soak.choice.simple_switch_grpc)
    except CounterUnavailable as err:
        return f"not counted ({err}): BMv2's whole RSS counts"
    stack.callback(counter.close)
    plan = soak.plan
    depths = [controller.link_queue_depth(scenario.link(path.name)) for path in plan.paths]
    others = 2 + (plan.helper_port is not None)  # the server's port, the CPU port, the helper's
    bound = buffer_bound(depths + [None] * others)
    soak.switch_pool = SwitchPool(counter.hits, bound)
    soak.switch_pool.new_life()
    return f"counted by a uprobe on bm::PHVFactory::create; left out of BMv2's RSS up to {bound} packets (its buffers)"


def _sleep_until(deadline: float) -> None:
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))


def _start_services(soak: SoakLab, options: SoakOptions) -> Path:
    """Registers the lab's processes, starts the proxy's server side and the proxy; returns the fetcher's log."""
    lab, plan, registry = soak.lab, soak.plan, soak.registry
    for name, child in lab.linkems.items():
        registry.register(f"linkem-{name}", child.pid)
    registry.register("perf-server", lab.server.ensure(None).pid)
    if lab.controller is not None:
        registry.register("controller", lab.controller.child.pid)
        registry.register("bmv2", lab.switch_pids["bmv2"])
        if "helper" in lab.switch_pids:
            registry.register("helper", lab.switch_pids["helper"])
    tng = str(options.binaries.tng)
    key = plan.run_dir / "soak-server.key"
    sh([tng, "keygen", "--out", str(key)])
    server = plan.server_address
    python = [sys.executable, "-m", "tng_lab.soak.http_bodies"]
    soak.start_process(
        "http-server", ["ip", "netns", "exec", plan.server_ns, *python, "serve", "--listen", f"{server}:{HTTP_PORT}"]
    )
    wait_listening(plan.server_ns, "t", HTTP_PORT, "the HTTP body server")
    serve = [tng, "serve", "--listen", f"{server}:{PROXY_SERVER_PORT}", "--identity", str(key)]
    serve += ["--allow-proxy", f"{server}:{HTTP_PORT}", "--control", str(plan.run_dir / "tng-serve.sock")]
    soak.start_process("tng-serve", ["ip", "netns", "exec", plan.server_ns, *serve])
    wait_listening(plan.server_ns, "u", PROXY_SERVER_PORT, "tng serve")
    ue = plan.ues[0]
    proxy = [tng, "proxy", "--listen", PROXY_LISTEN, "--via", f"{server}:{PROXY_SERVER_PORT}"]
    # kill-tng-serve restarts the server, which then no longer knows the proxy's connection: the proxy notices when
    # the connection times out, and connects again for the next fetch.
    proxy += ["--to", f"{server}:{HTTP_PORT}", "--idle-timeout", str(PROXY_IDLE_TIMEOUT_S)]
    for path in plan.paths:
        proxy += ["--local", f"{ue.source(path.name).address}:0"]
    soak.start_process("tng-proxy", ["ip", "netns", "exec", ue.namespace, *proxy])
    wait_listening(ue.namespace, "t", int(PROXY_LISTEN.rpartition(":")[2]), "tng proxy")
    fetcher = soak.start_process(
        "http-fetcher",
        ["ip", "netns", "exec", ue.namespace, *python, "fetch", "--connect", PROXY_LISTEN, "--seed", str(options.seed)],
    )
    return fetcher.log


def _start_traffic(soak: SoakLab, options: SoakOptions, record: SoakRecord, started: float) -> list[PerfRounds]:
    plan = soak.plan
    ue = plan.ues[0]
    locals_ = [arg for path in plan.paths for arg in ("--local", f"{ue.source(path.name).address}:0")]
    kinds = [
        PerfKind("tng-bulk", ue.namespace, (*locals_, "--mode", "bulk", "--transport", "tng")),
        PerfKind(
            "tng-short",
            ue.namespace,
            (*locals_, "--mode", "shortflows", "--parallel", "4", "--flow-size", "50000", "--transport", "tng"),
        ),
    ]
    supported = perf.supported_transports(options.binaries.tng)
    if "mptcp" not in supported or not MPTCP_SYSCTL.exists():
        record.skipped_traffic["mptcp"] = "this kernel or tng binary has no MPTCP"
    else:
        for command in plan.mptcp_endpoints(tuple(path.name for path in plan.paths)):
            sh(command)
        kinds.append(PerfKind("mptcp", ue.namespace, (*locals_[:2], "--mode", "bulk", "--transport", "mptcp")))
    steered = next((w for w in options.scenario.workloads if w.steering is not None), None)
    if soak.lab.controller is None or steered is None or ue.lwip_address is None:
        record.skipped_traffic["steered-tcp"] = (
            "switch-steered TCP needs BMv2 as the switch (this run uses Linux forwarding)"
        )
    else:
        policy = plan.run_dir / "policy-steered.toml"
        policy.write_text(controller.policy_toml(options.scenario, plan, steered))
        soak.tngctl("policy", "set", str(policy))
        kinds.append(
            PerfKind(
                "steered-tcp", ue.namespace, ("--local", f"{ue.lwip_address}:0", "--mode", "bulk", "--transport", "tcp")
            )
        )
    for name, reason in record.skipped_traffic.items():
        notice(f"no {name} traffic: {reason}")
    server = f"{plan.server_address}:{PERF_PORT}"
    logs = soak.logs / "rounds"
    logs.mkdir(exist_ok=True)
    return [PerfRounds(kind, options.binaries.tng, server, logs, started, options.round_s).start() for kind in kinds]


def _run_faults(soak: SoakLab, options: SoakOptions, record: SoakRecord, started: float) -> None:
    available: list[Fault] = []
    for fault in faults_module.every_fault(soak):
        reason = fault.unavailable(soak)
        if not reason and options.kinds is not None and fault.name not in options.kinds:
            reason = "not among --faults"
        if reason:
            record.unavailable_faults[fault.label] = reason
            notice(f"fault {fault.label} not scheduled: {reason}")
        else:
            available.append(fault)
    record.schedule = make_schedule(
        [f.hold_s for f in available], options.seed, options.duration_s, options.warmup_s, options.interval_s
    )
    rng = random.Random(options.seed)
    reader = None
    if soak.lab.controller is not None:
        assert soak.choice.p4info is not None
        log = soak.logs / "switch-entries.log"
        reader = EntryReader(soak.plan.switch_ns, bmv2.GRPC_ADDRESS, soak.choice.p4info, bmv2.DEVICE_ID, log)
        soak.stack.callback(reader.close)
    next_at = started + options.warmup_s
    for number, planned in enumerate(record.schedule, start=1):
        next_at = max(next_at, time.monotonic()) + planned.gap_s
        if next_at - started + planned.hold_s + END_MARGIN_S > options.duration_s:
            record.late_faults = len(record.schedule) - number + 1
            notice(f"{record.late_faults} scheduled faults left out: the soak fell behind its schedule (slow machine)")
            break
        _sleep_until(next_at)
        fault = available[planned.fault]
        record.faults.append(_one_fault(soak, fault, planned, rng, started))
        last = record.faults[-1]
        status = "injected" if last.injected else "NOT injected"
        notice(f"{last.start or 0:.0f} s: {last.label}: {status}: {last.evidence}; {last.problem or last.healed}")
        if reader is not None and fault.touches_switch and last.problem is None:
            record.churns.append(churn(soak, reader, number, round(time.monotonic() - started, 1)))
        next_at = time.monotonic()
    if reader is not None:  # one more with everything healed, so every soak on BMv2 checks reconciliation
        _sleep_until(started + options.duration_s - END_MARGIN_S)
        record.churns.append(churn(soak, reader, 0, round(time.monotonic() - started, 1)))


def _one_fault(soak: SoakLab, fault: Fault, planned: Planned, rng: random.Random, started: float) -> FaultRecord:
    def now() -> float:
        return round(time.monotonic() - started, 1)

    start = now()
    try:
        evidence = fault.inject(soak, rng, planned.hold_s)
    except LabError as err:
        if fault.undo_failed_injection:
            with contextlib.suppress(LabError):
                fault.heal(soak)
        why = str(err) if isinstance(err, NotInjected) else f"injection failed: {err}"
        return FaultRecord(fault.label, planned.at_s, planned.hold_s, False, start, now(), why)
    if not fault.inject_takes_hold:
        _sleep_until(time.monotonic() + planned.hold_s)
    try:
        healed, problem = fault.heal(soak), None
    except LabError as err:
        healed, problem = "", str(err)
    return FaultRecord(fault.label, planned.at_s, planned.hold_s, True, start, now(), evidence, healed, problem)
