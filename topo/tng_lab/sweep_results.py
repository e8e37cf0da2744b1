"""A sweep's results: `sweep.json` (per point and workload: goodput, p95 delay, utilization, machine load) and the
Markdown tables of `sweep.md`, both built from the points' results.json, so they can be rebuilt from disk."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tng_lab.sweep import Point, Sweep

PROCESS_GROUPS = ("client", "server", "linkem", "bmv2", "controller")  # CPU shares, summed per group


@dataclass(frozen=True, slots=True)
class PointOutcome:
    """What running one point gave: its results.json (None when the lab failed first or nothing was left to run)."""

    point: Point
    results: dict[str, Any] | None
    error: str | None  # why the point's run failed as a whole
    seconds: float  # wall time of the point, setup and teardown included


def sweep_json(sweep: Sweep, outcomes: list[PointOutcome], run: dict[str, Any]) -> dict[str, Any]:
    """sweep.json: the sweep, `run` (duration, repetitions, seed, start), and one entry per point that ran."""
    names = list(outcomes[0].point.workloads) if outcomes else []
    return {
        "sweep": sweep.name,
        "file": str(sweep.file),
        "description": sweep.description,
        "base": str(sweep.base),
        **run,
        "axes": [{"name": a.name, "title": a.title, "values": [v.label for v in a.values]} for a in sweep.axes],
        "workloads": names,
        "points": [_point_entry(outcome) for outcome in outcomes],
    }


def _point_entry(outcome: PointOutcome) -> dict[str, Any]:
    point, results = outcome.point, outcome.results
    skipped = dict(point.skipped)
    by_name = {w["workload"]["name"]: w for w in results["workloads"]} if results else {}
    workloads = {}
    for name in point.workloads:
        if name in skipped:
            workloads[name] = {"status": "skipped", "reason": skipped[name]}
        elif name in by_name:
            workloads[name] = workload_entry(by_name[name])
        else:
            workloads[name] = {"status": "failed", "reason": outcome.error or "the point did not run"}
    failed = outcome.error is not None or any(entry["status"] == "failed" for entry in workloads.values())
    return {
        "index": point.index,
        "id": point.id,
        "label": point.label,
        "axes": dict(point.coordinates),
        "status": "failed" if failed else "ok",
        "error": outcome.error,
        "seconds": round(outcome.seconds, 1),
        "duration_s": results["duration_s"] if results else None,
        "switch": results["switch"] if results else None,
        "workloads": workloads,
    }


def workload_entry(result: dict[str, Any]) -> dict[str, Any]:
    """One workload of a point's results.json: its headline numbers (means over its good runs) and machine load."""
    summary = result["summary"]
    runs = [run for run in result["runs"] if run["error"] is None]
    errors = [run["error"] for run in result["runs"] if run["error"] is not None]
    reason = result["skipped"] or result.get("error") or (errors[0] if errors else None)
    entry: dict[str, Any] = {"status": result["status"], "reason": reason}
    if not runs:
        return entry
    entry.update(
        goodput_mbps=_mean(summary["goodput_mbps"]),
        goodput_sd_mbps=summary["goodput_mbps"]["sd"],
        delay_p95_ms=_mean(summary["delay_p95_ms"]),
        utilization=_mean(summary["utilization"]),
        ue_goodput_mbps=summary.get("ue_goodput_mbps", []),
        fairness=_mean(summary.get("fairness")),
        retransmitted_packets=summary["retransmitted_packets"],
        runs=len(runs),
        load={
            "loadavg_max": max(run["load"]["loadavg_max"] for run in runs),
            "machine_cpu_percent": round(statistics.fmean(run["load"]["machine_cpu_percent"] for run in runs), 1),
            "cpu_percent": _process_shares(runs),
        },
    )
    return entry


def _mean(stats: dict[str, float] | None) -> float | None:
    return stats["mean"] if stats else None


def _process_shares(runs: list[dict[str, Any]]) -> dict[str, float]:
    """CPU % per process group (100 = one core), the mean over runs; groups that ran no process are left out."""
    shares = {}
    for group in PROCESS_GROUPS:
        values = [
            sum(share for name, share in run["load"]["cpu_percent"].items() if name.split("-")[0] == group)
            for run in runs
            if any(name.split("-")[0] == group for name in run["load"]["cpu_percent"])
        ]
        if values:
            shares[group] = round(statistics.fmean(values), 1)
    return shares


def _cell(entry: dict[str, Any], key: str, digits: int, scale: float = 1.0) -> str:
    if entry["status"] == "skipped":
        return "skip"
    value = entry.get(key)
    if value is None:
        return "fail" if entry["status"] == "failed" else "-"
    text = f"{value * scale:.{digits}f}"
    return f"{text} (fail)" if entry["status"] == "failed" else text


def _loads(point: dict[str, Any]) -> list[dict[str, Any]]:
    return [entry["load"] for entry in point["workloads"].values() if "load" in entry]


def _point_load(point: dict[str, Any], with_bmv2: bool) -> list[str]:
    """The point's load average (highest), machine CPU % and BMv2 CPU % (means over its measured workloads)."""
    loads = _loads(point)
    if not loads:
        return ["-"] * (3 if with_bmv2 else 2)
    cells = [
        f"{max(load['loadavg_max'] for load in loads):.1f}",
        f"{statistics.fmean(load['machine_cpu_percent'] for load in loads):.0f}",
    ]
    if with_bmv2:
        bmv2 = [load["cpu_percent"]["bmv2"] for load in loads if "bmv2" in load["cpu_percent"]]
        cells.append(f"{statistics.fmean(bmv2):.0f}" if bmv2 else "-")
    return cells


def table(data: dict[str, Any], cell: Callable[[dict[str, Any]], str], *, with_load: bool) -> str:
    """One row per point: its axis values, one cell per workload, and (`with_load`) the machine's load (BMv2's
    share when a point ran BMv2)."""
    axes = [axis["title"] for axis in data["axes"]]
    names = data["workloads"]
    with_bmv2 = any("bmv2" in load["cpu_percent"] for point in data["points"] for load in _loads(point))
    load = ["load avg", "machine CPU %", *(["BMv2 CPU %"] if with_bmv2 else [])] if with_load else []
    header = "| " + " | ".join([*axes, *names, *load]) + " |"
    rows = [header, "|" + "---|" * (len(axes) + len(names) + len(load))]
    for point in data["points"]:
        cells = [point["axes"][axis["name"]] for axis in data["axes"]]
        cells += [cell(point["workloads"][name]) for name in names]
        if with_load:
            cells += _point_load(point, with_bmv2)
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def not_run(data: dict[str, Any]) -> list[str]:
    """One line per workload and reason it was skipped or failed, with the points it happened at."""
    seen: dict[tuple[str, str, str], list[int]] = {}
    for point in data["points"]:
        for name, entry in point["workloads"].items():
            if entry["status"] in ("skipped", "failed"):
                seen.setdefault((name, entry["status"], entry.get("reason") or "?"), []).append(point["index"])
    total = len(data["points"])
    lines = []
    for (name, status, reason), indices in seen.items():
        where = f"at every point ({total})" if len(indices) == total else f"at point(s) {_ranges(indices)}"
        lines.append(f"- `{name}` {status} {where}: {reason}")
    return lines


def _ranges(indices: list[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5'."""
    spans: list[list[int]] = []
    for index in indices:
        if spans and index == spans[-1][1] + 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def per_workload(data: dict[str, Any]) -> str:
    """How long each workload ran: the sweep's --duration, else what the points' scenarios say."""
    if data["duration_s"] is not None:
        return f"{data['duration_s']:g} s"
    durations = sorted({point["duration_s"] for point in data["points"] if point["duration_s"] is not None})
    return " or ".join(f"{duration:g} s" for duration in durations) or "the scenarios' duration"


def sweep_markdown(data: dict[str, Any], plots: list[Path]) -> str:
    lines = [
        f"# {data['sweep']}",
        "",
        data["description"].strip(),
        "",
        f"- sweep file `{data['file']}`, base scenario `{data['base']}`; started {data['started']}",
        f"- {len(data['points'])} point(s), {per_workload(data)} per workload, {data['repeat']} repetition(s)",
    ]
    switches = sorted({point["switch"] for point in data["points"] if point["switch"]})
    lines += [f"- in-path switch: {switch}" for switch in switches]
    for axis in data["axes"]:
        lines.append(f"- {axis['title']} (`{axis['name']}`): {', '.join(axis['values'])}")
    failed = [point for point in data["points"] if point["error"]]
    lines += [f"- point {point['index']} ({point['label']}) failed: {point['error']}" for point in failed]
    lines += [
        "",
        "Goodput (Mbit/s, all UEs together; mean over repetitions). Load: the highest 1-minute load average and "
        "the busy share of all cores during the point's workloads (with BMv2 also its CPU share, 100 = one core).",
        "",
        table(data, lambda entry: _cell(entry, "goodput_mbps", 2), with_load=True),
        "95th-percentile one-way downlink delay per packet (ms):",
        "",
        table(data, lambda entry: _cell(entry, "delay_p95_ms", 1), with_load=False),
        "Utilization of the workload's links (% of their capacity):",
        "",
        table(data, lambda entry: _cell(entry, "utilization", 1, scale=100.0), with_load=False),
    ]
    several = any(
        len(entry.get("ue_goodput_mbps", [])) > 1 for p in data["points"] for entry in p["workloads"].values()
    )
    if several:
        lines += [
            "Jain's fairness index over the UEs' goodputs (1 = equal shares):",
            "",
            table(data, lambda entry: _cell(entry, "fairness", 3), with_load=False),
        ]
    reasons = not_run(data)
    if reasons:
        lines += ["Not run (`skip`, `fail` in the tables):", "", *reasons, ""]
    if plots:
        lines += ["Plots: " + ", ".join(f"[{plot.name}]({plot.name})" for plot in plots), ""]
    return "\n".join(lines)
