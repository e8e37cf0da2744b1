"""Scenario files: TOML checked into dataclasses. Every error names the file, the key and the problem."""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from tng_lab.linkspec import (
    TRACE_MODELS,
    Direction,
    SpecValueError,
    TraceModel,
    check_amount,
    parse_duration,
    parse_fraction,
    parse_rate,
)

Transport = Literal["tng", "tcp", "mptcp"]
Mode = Literal["bulk", "shortflows", "rr"]
SwitchUse = Literal["auto", "bmv2", "linux"]
TRANSPORTS: tuple[Transport, ...] = ("tng", "tcp", "mptcp")
KERNEL_TRANSPORTS: tuple[Transport, ...] = ("tcp", "mptcp")
MODES: tuple[Mode, ...] = ("bulk", "shortflows", "rr")
SWITCH_USES: tuple[SwitchUse, ...] = ("auto", "bmv2", "linux")
HelperAttach = Literal["port", "cpu"]
# Where VISIBLE's retransmission helper takes the switch's copies: a process on a switch port of its own (an
# AF_PACKET socket, no gRPC per copy) or the controller's P4Runtime stream (packet-in and packet-out per copy).
HELPER_ATTACHES: tuple[HelperAttach, ...] = ("port", "cpu")
# The LWIP switch's steering modes (p4src/README.md, `ingress.steering.modes`), as the scenario names them.
VisibleUse = Literal["hold", "full"]
VISIBLE_USES: tuple[VisibleUse, ...] = ("hold", "full")
STEERING_MODES = (
    "flow-hash",
    "weighted",
    "qdepl",
    "qdepl-dataplane",
    "lowest-rtt",
    "earliest-arrival",
    "lte-only",
    "wifi-only",
)
LINK_NAME = re.compile(r"^[a-z][a-z0-9]{0,9}$")  # becomes part of interface names (15 bytes at most)
WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}$")  # becomes part of file names
CC_NAME = re.compile(r"^[a-z0-9_]{1,16}$")
# The tng controllers `tng perf --alcc` runs over kernel TCP (docs/congestion-control.md, ALCC); sprout also needs
# the perf client's forecasts, which it sends during a bulk download only.
ALCC_CONTROLLERS = ("copa", "verus", "sprout")
# The further `linkem gen-trace` flags each trace model takes.
TRACE_OPTIONS = {
    "sprout": ("sigma", "mean_reversion", "outages_per_minute", "outage_mean_seconds"),
    "steps": ("period_seconds", "spread"),
}
DIRECTION_KEYS = ("rate", "trace", "delay", "jitter", "reorder", "loss", "ge", "queue", "ecn")
MAX_LINKS = 8
MAX_UES = 8

T = TypeVar("T")


class ScenarioError(ValueError):
    """A scenario file that cannot be run: `FILE: KEY: PROBLEM`."""

    def __init__(self, file: Path, key: str | None, problem: str) -> None:
        self.file, self.key, self.problem = file, key, problem
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")


@dataclass(frozen=True, slots=True)
class Link:
    """An emulated link between the in-path switch and the UE; `down` runs switch -> UE, `up` UE -> switch."""

    name: str
    down: Direction
    up: Direction


@dataclass(frozen=True, slots=True)
class Workload:
    """One `tng perf client` run; `paths` names the links it may use (the first carries MPTCP's initial subflow)."""

    name: str
    transport: Transport
    mode: Mode
    paths: tuple[str, ...]
    cc: str | None = None
    parallel: int | None = None
    flow_size: int | None = None
    response_size: int | None = None
    steering: str | None = None  # set: one kernel TCP connection to the UE's LWIP address, steered by the switch
    # VISIBLE on the steered connection's ACKs: "hold" holds reordering dup-ACKs only (no copies, no helper work),
    # "full" also boosts and retransmits locally through the retransmission helper; None: off.
    visible: VisibleUse | None = None
    sack: bool = True  # the UE offers SACK (net.ipv4.tcp_sack) on this workload's kernel TCP connections
    # ALCC: this tng controller limits what the server writes to its kernel TCP socket (cc still runs underneath)
    alcc: str | None = None


@dataclass(frozen=True, slots=True)
class SwitchSpec:
    """The in-path switch: which one to use, and which two links the LWIP route steers over."""

    use: SwitchUse = "auto"  # auto: BMv2 when the toolchain and the compiled pipeline are there
    lte: str | None = None
    wifi: str | None = None
    helper: HelperAttach = "port"  # how a workload with visible = "full" gets the retransmission helper

    @property
    def lwip(self) -> bool:
        return self.lte is not None


@dataclass(frozen=True, slots=True)
class Scenario:
    file: Path
    name: str
    description: str
    duration_s: float
    seed: int
    sample_ms: int
    links: tuple[Link, ...]
    workloads: tuple[Workload, ...]
    switch: SwitchSpec = SwitchSpec()
    ues: int = 1  # UEs behind the links; each workload runs one client per UE at once

    def link(self, name: str) -> Link:
        return next(link for link in self.links if link.name == name)


def only_workloads(loaded: Scenario, names: Sequence[str]) -> Scenario:
    """`loaded` with only the workloads named, in the scenario's order; raises ScenarioError naming an unknown one."""
    known = [workload.name for workload in loaded.workloads]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ScenarioError(
            loaded.file, "workloads", f"no workload named {', '.join(map(repr, unknown))} ({', '.join(known)})"
        )
    return dataclasses.replace(loaded, workloads=tuple(w for w in loaded.workloads if w.name in names))


_MISSING: Any = object()


@dataclass(slots=True)
class _Table:
    """A TOML table being read: takes typed keys and finally rejects the keys nobody asked for."""

    file: Path
    path: str
    data: dict[str, Any]
    seen: set[str] = field(default_factory=set)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, problem: str) -> ScenarioError:
        return ScenarioError(self.file, self.key(name), problem)

    def take(self, name: str, kind: type[T], default: T = _MISSING) -> T:
        self.seen.add(name)
        if name not in self.data:
            if default is _MISSING:
                raise self.error(name, "missing (required)")
            return default
        value = self.data[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(name, f"expected {_type_name(kind)}, got {_type_name(type(value))} {value!r}")
        return cast(T, value)

    def positive(self, name: str, kind: type[T], default: T = _MISSING) -> T:
        value = self.take(name, kind, default)
        if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise self.error(name, f"must be a positive number, got {value!r}")
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: str = _MISSING) -> str:
        value = self.take(name, str, default)
        if value not in choices:
            raise self.error(name, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def sub(self, name: str) -> _Table:
        return _Table(self.file, self.key(name), self.take(name, dict))

    def tables(self, name: str) -> list[_Table]:
        items = self.take(name, list)
        if not items:
            raise self.error(name, "needs at least one entry")
        tables = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise ScenarioError(self.file, f"{self.key(name)}[{index}]", "expected a table ([[...]] entry)")
            tables.append(_Table(self.file, f"{self.key(name)}[{index}]", item))
        return tables

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            allowed = ", ".join(sorted(self.seen))
            raise self.error(unknown[0], f"unknown key (this table takes: {allowed})")


def _type_name(kind: type) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table"}
    return names.get(kind, "an array" if kind is list else kind.__name__)


def read_toml(file: Path) -> dict[str, Any]:
    """The tables of a TOML file of the lab (scenario or sweep); raises ScenarioError when it cannot be read."""
    try:
        return tomllib.loads(file.read_text())
    except OSError as err:
        raise ScenarioError(file, None, f"cannot read: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(file, None, f"invalid TOML: {err}") from err


def load(file: Path) -> Scenario:
    """Reads and checks a scenario file; raises ScenarioError naming the file, the key and the problem."""
    return parse(read_toml(file), file)


def parse(data: dict[str, Any], file: Path) -> Scenario:
    root = _Table(file, "", data)
    name = root.take("name", str)
    if not WORKLOAD_NAME.match(name):
        raise root.error("name", f"{name!r} must be letters, digits, '_', '.', '+' or '-' (at most 40)")
    description = root.take("description", str, "")
    duration_s = root.positive("duration_s", float, 10.0)
    seed = root.take("seed", int, 1)
    sample_ms = root.positive("sample_ms", int, 200)
    ues = root.take("ues", int, 1)
    if not 1 <= ues <= MAX_UES:
        raise root.error("ues", f"must be 1 to {MAX_UES} (UEs sharing the links, one client each), got {ues}")
    links = tuple(_link(table, file.parent) for table in root.tables("links"))
    if len(links) > MAX_LINKS:
        raise root.error("links", f"at most {MAX_LINKS} links, got {len(links)}")
    _unique(root, "links", [link.name for link in links])
    switch = _switch(root.sub("switch"), links) if "switch" in data else SwitchSpec()
    root.seen.add("switch")
    workloads = tuple(_workload(table, {link.name for link in links}, switch) for table in root.tables("workloads"))
    _unique(root, "workloads", [workload.name for workload in workloads])
    root.finish()
    return Scenario(file, name, description, duration_s, seed, sample_ms, links, workloads, switch, ues)


def _switch(table: _Table, links: tuple[Link, ...]) -> SwitchSpec:
    use = cast(SwitchUse, table.choice("use", SWITCH_USES, "auto"))
    helper = cast(HelperAttach, table.choice("helper", HELPER_ATTACHES, "port"))
    names = [link.name for link in links]
    lwip: dict[str, str | None] = {}
    for role in ("lte", "wifi"):
        lwip[role] = table.take(role, str, None)
        if lwip[role] is not None and lwip[role] not in names:
            raise table.error(role, f"no link named {lwip[role]!r} ({', '.join(names)})")
    if (lwip["lte"] is None) != (lwip["wifi"] is None):
        raise table.error("lte" if lwip["lte"] is None else "wifi", "the LWIP route needs both an lte and a wifi link")
    if lwip["lte"] is not None and lwip["lte"] == lwip["wifi"]:
        raise table.error("wifi", f"is the same link as lte ({lwip['lte']!r})")
    rates = {link.name: link.down.rate_bps for link in links}
    for role in ("lte", "wifi"):
        name = lwip[role]
        if name is not None and rates[name] is None:
            raise table.error(role, f"link {name!r} needs a constant down rate (the switch queue is shaped to it)")
    table.finish()
    return SwitchSpec(use, lwip["lte"], lwip["wifi"], helper)


def _unique(table: _Table, key: str, names: list[str]) -> None:
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ScenarioError(table.file, f"{table.key(key)}[{index}].name", f"{name!r} is used twice")


def _link(table: _Table, base: Path) -> Link:
    name = table.take("name", str)
    if not LINK_NAME.match(name):
        raise table.error("name", f"{name!r} must be a lowercase letter then up to 9 lowercase letters or digits")
    down = _direction(table.sub("down"), base)
    up = _direction(table.sub("up"), base) if "up" in table.data else Direction()
    table.seen.add("up")
    table.finish()
    return Link(name, down, up)


def _checked(table: _Table, name: str, check: Callable[[str], T]) -> T:
    text = table.take(name, str)
    try:
        return check(text)
    except SpecValueError as err:
        raise table.error(name, str(err)) from err


def _direction(table: _Table, base: Path) -> Direction:
    rate = _checked(table, "rate", parse_rate) if "rate" in table.data else None
    trace_file, trace_model = None, None
    if "trace" in table.data:
        if rate is not None:
            raise table.error("trace", "conflicts with rate (a direction has either a rate or a trace)")
        if isinstance(table.data["trace"], dict):
            trace_model = _trace_model(table.sub("trace"))
        else:
            trace_file = (base / table.take("trace", str)).resolve()
            if not trace_file.is_file():
                raise table.error("trace", f"no trace file at {trace_file}")
    delay = _checked(table, "delay", parse_duration) if "delay" in table.data else 0.0
    extra: list[tuple[str, str]] = []
    for key, check in (("jitter", parse_duration), ("loss", parse_fraction), ("queue", check_amount)):
        if key in table.data:
            _checked(table, key, check)
            extra.append((key, table.data[key]))
    if "reorder" in table.data:
        extra.append(("reorder", "1" if table.take("reorder", bool) else "0"))
    if "ecn" in table.data:
        ecn = table.take("ecn", str)
        if ecn != "off":
            _checked(table, "ecn", check_amount)
        extra.append(("ecn", ecn))
    if "ge" in table.data:
        if "loss" in table.data:
            raise table.error("ge", "conflicts with loss (a direction has one loss model)")
        extra.append(("ge", _gilbert_elliott(table)))
    table.seen.update(DIRECTION_KEYS)
    table.finish()
    return Direction(rate, trace_file, trace_model, delay, tuple(extra))


def _gilbert_elliott(table: _Table) -> str:
    values = table.take("ge", list)
    if len(values) != 4 or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise table.error("ge", "expected four probabilities [p, r, loss_good, loss_bad]")
    if not all(0.0 <= v <= 1.0 for v in values):
        raise table.error("ge", f"probabilities must be within [0, 1], got {values}")
    return ",".join(f"{float(v):g}" for v in values)


def _trace_model(table: _Table) -> TraceModel:
    model = table.choice("model", TRACE_MODELS)
    mean_mbps = table.positive("mean_mbps", float)
    seconds = table.positive("seconds", int, 60)
    seed = table.take("seed", int, 1)
    options = tuple((name, table.positive(name, float)) for name in TRACE_OPTIONS[model] if name in table.data)
    table.seen.update(TRACE_OPTIONS[model])
    for name in table.data:
        other = next((m for m, names in TRACE_OPTIONS.items() if name in names and m != model), None)
        if other is not None:
            raise table.error(name, f"is an option of the {other} model, not of {model}")
    table.finish()
    return TraceModel(model, mean_mbps, seconds, seed, options)


def _workload(table: _Table, links: set[str], switch: SwitchSpec) -> Workload:
    name = table.take("name", str)
    if not WORKLOAD_NAME.match(name):
        raise table.error("name", f"{name!r} must be letters, digits, '_', '.', '+' or '-' (at most 40)")
    transport = cast(Transport, table.choice("transport", TRANSPORTS))
    mode = cast(Mode, table.choice("mode", MODES, "bulk"))
    steering = table.choice("steering", STEERING_MODES) if "steering" in table.data else None
    table.seen.add("steering")
    visible = cast(VisibleUse, table.choice("visible", VISIBLE_USES)) if "visible" in table.data else None
    table.seen.add("visible")
    if visible and steering is None:
        raise table.error("visible", "needs steering (VISIBLE works on the ACKs of a switch-steered connection)")
    if steering is not None:
        if transport != "tcp":
            problem = f"steers one kernel TCP connection: needs transport = 'tcp', not {transport!r}"
            raise table.error("steering", problem)
        if not switch.lwip:
            raise table.error("steering", "needs an LWIP switch: set [switch] lte and wifi to two links")
        if "paths" in table.data:
            raise table.error("paths", "conflicts with steering (the switch picks the link of every packet)")
    paths = (switch.lte, switch.wifi) if steering is not None else table.take("paths", list)
    if not paths:
        raise table.error("paths", "needs at least one link name")
    for index, path in enumerate(paths):
        if path not in links:
            known = ", ".join(sorted(links))
            raise ScenarioError(table.file, f"{table.key('paths')}[{index}]", f"no link named {path!r} ({known})")
    if len(set(paths)) != len(paths):
        raise table.error("paths", f"names a link twice: {paths}")
    cc = table.take("cc", str, None)
    if cc is not None and not CC_NAME.match(cc):
        raise table.error("cc", f"{cc!r} is not a congestion-control name")
    parallel = table.positive("parallel", int, None)
    flow_size = table.positive("flow_size", int, None)
    response_size = table.positive("response_size", int, None)
    if mode != "shortflows" and (parallel is not None or flow_size is not None):
        raise table.error("parallel" if parallel is not None else "flow_size", "only applies to mode shortflows")
    if mode != "rr" and response_size is not None:
        raise table.error("response_size", "only applies to mode rr")
    sack = table.take("sack", bool, True)
    if not sack and transport not in KERNEL_TRANSPORTS:
        raise table.error("sack", f"only applies to kernel TCP (transport tcp or mptcp), not {transport!r}")
    alcc = table.choice("alcc", ALCC_CONTROLLERS) if "alcc" in table.data else None
    table.seen.add("alcc")
    if alcc is not None and transport != "tcp":
        raise table.error("alcc", f"limits a kernel TCP sender: needs transport = 'tcp', not {transport!r}")
    if alcc == "sprout" and mode != "bulk":
        raise table.error(
            "alcc", f"sprout runs on the client's forecasts during a bulk download: needs mode = 'bulk', not {mode!r}"
        )
    table.finish()
    return Workload(
        name, transport, mode, tuple(paths), cc, parallel, flow_size, response_size, steering, visible, sack, alcc
    )
