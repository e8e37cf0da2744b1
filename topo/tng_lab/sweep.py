"""Sweep files: a base scenario, axes of values, and the points they span, each a generated scenario.

A point takes one value of every axis (the Cartesian product, the first axis varying slowest). Every value is a set
of scenario keys to change, by path: `links.lte.down.rate` (an array of tables is entered by an entry's `name`,
or by its index), `ues`, `duration_s`, ... An axis either names one `key` and lists plain `values`, or lists
values as tables `{ label = "3:1", set = { "links.wifi.down.rate" = "30mbit", ... } }`. Nothing here knows what a
key means: the generated scenario is checked by the scenario parser, and its errors name the point.

A workload whose steering mode this lab does not know (a mode the controller is still to get) is left out of the
point's scenario and reported skipped with the reason, not as an error.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tng_lab import scenario
from tng_lab.scenario import STEERING_MODES, Scenario, ScenarioError, _Table, read_toml

SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,31}$")  # a point's scenario is `<name>-<index>`
AXIS_NAME = re.compile(r"^[a-z][a-z0-9_]{0,19}$")
UNSAFE_IN_FILE_NAMES = re.compile(r"[^A-Za-z0-9_.+-]+")


@dataclass(frozen=True, slots=True)
class AxisValue:
    label: str
    settings: tuple[tuple[str, Any], ...]  # (scenario key path, value)


@dataclass(frozen=True, slots=True)
class Axis:
    name: str
    title: str  # for tables and plots
    values: tuple[AxisValue, ...]


@dataclass(frozen=True, slots=True)
class Sweep:
    file: Path
    name: str
    description: str
    base: Path  # the base scenario file
    axes: tuple[Axis, ...]
    workloads: tuple[dict[str, Any], ...] | None  # replaces the base's workloads when given

    def size(self) -> int:
        size = 1
        for axis in self.axes:
            size *= len(axis.values)
        return size


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration of a sweep: its axis values, the generated scenario data and the scenario to run."""

    index: int  # from 1
    coordinates: tuple[tuple[str, str], ...]  # (axis name, value label), in axis order
    data: dict[str, Any]  # the generated scenario, as TOML data
    scenario: Scenario | None  # None when no workload is left to run
    skipped: tuple[tuple[str, str], ...]  # (workload name, reason) of workloads left out of `scenario`
    workloads: tuple[str, ...]  # every workload's name, in order, skipped or not

    @property
    def id(self) -> str:
        return point_id(self.index, self.coordinates)

    @property
    def label(self) -> str:
        return point_label(self.coordinates)


def point_id(index: int, coordinates: tuple[tuple[str, str], ...]) -> str:
    """A directory name: the index and the axis values."""
    parts = [f"{axis}-{UNSAFE_IN_FILE_NAMES.sub('-', label).strip('-')}" for axis, label in coordinates]
    return f"{index:03d}_" + "_".join(parts)


def point_label(coordinates: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{axis}={label}" for axis, label in coordinates)


def load(file: Path) -> Sweep:
    """Reads and checks a sweep file; raises ScenarioError naming the file, the key and the problem."""
    return parse(read_toml(file), file)


def parse(data: dict[str, Any], file: Path) -> Sweep:
    root = _Table(file, "", data)
    name = root.take("name", str)
    if not SWEEP_NAME.match(name):
        raise root.error("name", f"{name!r} must be letters, digits, '_', '.', '+' or '-' (at most 32)")
    description = root.take("description", str, "")
    base = (file.parent / root.take("base", str)).resolve()
    if not base.is_file():
        raise root.error("base", f"no scenario file at {base}")
    axes = tuple(_axis(table) for table in root.tables("axes"))
    _unique_axes(root, axes)
    workloads = None
    if "workloads" in data:
        workloads = tuple(table.data for table in root.tables("workloads"))  # checked with each point's scenario
    root.finish()
    return Sweep(file, name, description, base, axes, workloads)


def _axis(table: _Table) -> Axis:
    name = table.take("name", str)
    if not AXIS_NAME.match(name):
        raise table.error("name", f"{name!r} must be a lowercase letter then up to 19 lowercase letters, digits or _")
    title = table.take("title", str, name)
    key = table.take("key", str, None)
    raw = table.take("values", list)
    if not raw:
        raise table.error("values", "needs at least one value")
    values = []
    for index, value in enumerate(raw):
        where = f"values[{index}]"
        if key is not None:
            if isinstance(value, dict):
                raise table.error(where, f"is a table, but the axis sets one key ({key!r}): give plain values")
            values.append(AxisValue(_label(value), ((key, value),)))
            continue
        if not isinstance(value, dict):
            raise table.error(
                where, "expected a table { label = ..., set = { KEY = VALUE, ... } } (or give the axis a key)"
            )
        entry = _Table(table.file, table.key(where), value)
        label = entry.take("label", str)
        settings = entry.take("set", dict)
        if not settings:
            raise entry.error("set", "needs at least one key to change")
        entry.finish()
        values.append(AxisValue(label, tuple(settings.items())))
    labels = [value.label for value in values]
    for index, label in enumerate(labels):
        if label in labels[:index]:
            raise table.error(f"values[{index}]", f"label {label!r} is used twice")
    table.finish()
    return Axis(name, title, tuple(values))


def _label(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _unique_axes(root: _Table, axes: tuple[Axis, ...]) -> None:
    """Axis names are unique and no two axes change the same key (which one would win is no way to say it)."""
    owner: dict[str, str] = {}
    for index, axis in enumerate(axes):
        if axis.name in [other.name for other in axes[:index]]:
            raise root.error(f"axes[{index}].name", f"{axis.name!r} is used twice")
        for key in {key for value in axis.values for key, _ in value.settings}:
            if key in owner:
                raise root.error(f"axes[{index}]", f"changes {key!r}, which axis {owner[key]!r} changes too")
            owner[key] = axis.name


def restrict(sweep: Sweep, only: dict[str, Sequence[str]], workloads: Sequence[str] | None = None) -> Sweep:
    """A cut of `sweep`: each axis named in `only` keeps the values with the labels given (in the file's order),
    and with `workloads` only the workloads named run; raises ScenarioError naming an unknown axis, label or
    workload."""
    axes = []
    for axis in sweep.axes:
        labels = only.get(axis.name)
        if labels is None:
            axes.append(axis)
            continue
        known = [value.label for value in axis.values]
        unknown = [label for label in labels if label not in known]
        if unknown:
            problem = f"axis {axis.name!r} has no value {', '.join(map(repr, unknown))} ({', '.join(known)})"
            raise ScenarioError(sweep.file, "axes", problem)
        axes.append(dataclasses.replace(axis, values=tuple(v for v in axis.values if v.label in labels)))
    unknown_axes = sorted(set(only) - {axis.name for axis in sweep.axes})
    if unknown_axes:
        names = ", ".join(axis.name for axis in sweep.axes)
        raise ScenarioError(sweep.file, "axes", f"no axis named {', '.join(map(repr, unknown_axes))} ({names})")
    tables = sweep.workloads if sweep.workloads is not None else tuple(_base_data(sweep).get("workloads", []))
    if workloads is not None:
        known = [str(table.get("name")) for table in tables]
        unknown = [name for name in workloads if name not in known]
        if unknown:
            problem = f"no workload named {', '.join(map(repr, unknown))} ({', '.join(known)})"
            raise ScenarioError(sweep.file, "workloads", problem)
        tables = tuple(table for table in tables if table.get("name") in workloads)
    return dataclasses.replace(sweep, axes=tuple(axes), workloads=tables if workloads is not None else sweep.workloads)


def points(sweep: Sweep, out_dir: Path) -> list[Point]:
    """Every point of the sweep, its scenario checked (as the file `out_dir/<point id>/scenario.toml`): raises
    ScenarioError for the first point whose scenario is wrong."""
    base = _base_data(sweep)
    generated = []
    for index, values in enumerate(itertools.product(*(axis.values for axis in sweep.axes)), start=1):
        data = copy.deepcopy(base)
        if sweep.workloads is not None:
            data["workloads"] = copy.deepcopy(list(sweep.workloads))
        for axis, value in zip(sweep.axes, values, strict=True):
            for key, setting in value.settings:
                _set(data, key, copy.deepcopy(setting), sweep.file, f"axes {axis.name!r} value {value.label!r}")
        _absolute_traces(data, sweep.file.parent)  # traces the axes named are relative to the sweep file
        coordinates = tuple((axis.name, value.label) for axis, value in zip(sweep.axes, values, strict=True))
        generated.append(_point(sweep, index, coordinates, data, out_dir))
    return generated


def _base_data(sweep: Sweep) -> dict[str, Any]:
    data = read_toml(sweep.base)
    _absolute_traces(data, sweep.base.parent)  # the point's scenario lives elsewhere
    return data


def _point(
    sweep: Sweep, index: int, coordinates: tuple[tuple[str, str], ...], data: dict[str, Any], out_dir: Path
) -> Point:
    label = point_label(coordinates)
    data["name"] = f"{sweep.name}-{index}"
    described = f"Point {index} of sweep {sweep.name} ({label})."
    data["description"] = f"{data.get('description', '').strip()}\n\n{described}".strip()
    workloads = data.get("workloads")
    names = tuple(str(w.get("name")) for w in workloads) if isinstance(workloads, list) else ()
    skipped = []
    if isinstance(workloads, list):
        runnable = []
        for workload in workloads:
            steering = workload.get("steering") if isinstance(workload, dict) else None
            if isinstance(steering, str) and steering not in STEERING_MODES:
                known = ", ".join(STEERING_MODES)
                skipped.append(
                    (str(workload.get("name")), f"steering mode {steering!r} is not one this lab knows ({known})")
                )
            else:
                runnable.append(workload)
        data["workloads"] = runnable
    file = out_dir / point_id(index, coordinates) / "scenario.toml"
    parsed = None
    if data.get("workloads") != []:
        try:
            parsed = scenario.parse(data, file)
        except ScenarioError as err:
            problem = f"{err.key}: {err.problem}" if err.key else err.problem
            raise ScenarioError(sweep.file, f"point {index} ({label})", problem) from err
    return Point(index, coordinates, data, parsed, tuple(skipped), names)


def _set(data: dict[str, Any], path: str, value: Any, file: Path, where: str) -> None:
    """Sets the scenario key `path` (dotted; an array of tables is entered by an entry's name or index)."""
    parts = path.split(".")
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        reached = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node = _entry(node, part, reached, file, where)
        elif isinstance(node, dict):
            if part not in node:
                node[part] = {}
            node = node[part]
        else:
            raise ScenarioError(file, where, f"{path!r}: {'.'.join(parts[:depth])!r} is a value, not a table")
        if not isinstance(node, dict | list):
            raise ScenarioError(file, where, f"{path!r}: {reached!r} is a value, not a table")
    if isinstance(node, list):
        raise ScenarioError(file, where, f"{path!r}: names an entry of an array, not a key of it")
    node[parts[-1]] = value


def _entry(entries: list[Any], part: str, reached: str, file: Path, where: str) -> Any:
    if part.isdigit():
        if int(part) < len(entries):
            return entries[int(part)]
        raise ScenarioError(file, where, f"{reached!r}: no entry {part} (there are {len(entries)})")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == part:
            return entry
    names = ", ".join(str(entry.get("name")) for entry in entries if isinstance(entry, dict))
    raise ScenarioError(file, where, f"{reached!r}: no entry named {part!r} ({names})")


def _absolute_traces(data: dict[str, Any], directory: Path) -> None:
    """Trace files named relative to `directory` become absolute paths."""
    for link in data.get("links", []) if isinstance(data.get("links"), list) else []:
        for direction in ("down", "up"):
            spec = link.get(direction) if isinstance(link, dict) else None
            if isinstance(spec, dict) and isinstance(spec.get("trace"), str):
                spec["trace"] = str((directory / spec["trace"]).resolve())
