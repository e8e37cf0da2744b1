"""The soak's report: `soak.json` (options and seed, the fault log, traffic, churn checks, samples, every invariant
with its violations), `timeline.png` (faults, goodput, RSS on one time axis) and the lines printed at the end."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tng_lab.results import plain
from tng_lab.soak.runner import SoakRecord

INVARIANTS = {
    "delivery": "no byte lost, duplicated or corrupted where the transport promises delivery (perf's corrupted "
    "counter, SHA-256 of every HTTP body); traffic stops only while a fault lasts",
    "policies": "no switch entry for a deleted policy once the controller reconciled",
    "resources": "RSS (less what a process holds in its bounded store) and open fds of every process within 10% of "
    "their post-warm-up level",
    "processes": "no process exits except those a fault killed",
    "faults": "every injected fault heals",
}
DPI = 110
KIND_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]
MAX_VIOLATIONS_SHOWN = 8  # on the plot; soak.json and the printed report have every one


def traffic_summary(record: SoakRecord) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = defaultdict(lambda: {"rounds": 0, "failed": 0, "bytes": 0, "corrupted": 0})
    for r in record.rounds:
        kind = summary[r.kind]
        kind["rounds"] += 1
        kind["failed"] += r.error is not None
        kind["bytes"] += r.bytes_received
        kind["corrupted"] += r.bytes_corrupted
    fetches = record.fetches
    summary["http-proxy"] = {
        "fetches": len(fetches),
        "verified": sum(f.ok is True for f in fetches),
        "mismatched": sum(f.ok is False for f in fetches),
        "interrupted": sum(f.ok is None for f in fetches),
        "bytes_verified": sum(f.received for f in fetches if f.ok),
    }
    return dict(summary)


def to_json(record: SoakRecord) -> dict[str, Any]:
    options = record.options
    violated = {v.invariant for v in record.violations}
    return {
        "scenario": options.scenario.name,
        "started": record.started,
        "seed": options.seed,
        "duration_s": options.duration_s,
        "elapsed_s": record.elapsed_s,
        "warmup_s": options.warmup_s,
        "fault_interval_s": list(options.interval_s),
        "round_s": options.round_s,
        "switch": record.switch,
        "switch_buffers_filled": record.switch_buffers_filled,
        "switch_pool": record.switch_pool,
        "loadavg": {"start": record.loadavg_start, "end": record.loadavg_end},
        "skipped_traffic": record.skipped_traffic,
        "unavailable_faults": record.unavailable_faults,
        "faults": plain(record.faults),
        "faults_injected": sum(f.injected for f in record.faults),
        "faults_not_injected": sum(not f.injected for f in record.faults),
        "faults_left_out_late": record.late_faults,
        "traffic": traffic_summary(record),
        "invariants": {name: {"rule": rule, "held": name not in violated} for name, rule in INVARIANTS.items()},
        "violations": [f"{v.invariant}: {v.line}" for v in record.violations],
        "pauses": plain(record.pauses),
        "churn": plain(record.churns),
        "unexpected_exits": plain(record.exits),
        "rounds": plain(record.rounds),
        "fetches": plain(record.fetches),
        "process_samples": plain(record.process_samples),
        "link_samples": plain(record.link_samples),
    }


def plot(record: SoakRecord, file: Path) -> Path:
    figure = Figure(figsize=(12, 8))
    faults_ax, goodput_ax, rss_ax = figure.subplots(3, 1, sharex=True, height_ratios=[1, 2, 2])
    for number, fault in enumerate(f for f in record.faults if f.start is not None):
        color = "#d62728" if fault.injected else "#7f7f7f"
        for ax in (faults_ax, goodput_ax, rss_ax):
            ax.axvspan(fault.start, max(fault.end or fault.start, fault.start + 1), color=color, alpha=0.15, lw=0)
        faults_ax.text(fault.start, number % 4, fault.label, fontsize=7, va="bottom")
    faults_ax.set_ylim(-0.5, 4.5)
    faults_ax.set_yticks([])
    faults_ax.set_title(f"fault soak, seed {record.options.seed}: faults (red: injected, grey: not injected)")
    links = record.link_samples
    t = [(a.t + b.t) / 2 for a, b in pairwise(links)]
    mbps = [(b.down_bytes - a.down_bytes) * 8 / max(b.t - a.t, 1e-9) / 1e6 for a, b in pairwise(links)]
    goodput_ax.plot(t, mbps, color="black", label="both links, downlink (linkem)")
    by_kind: dict[str, list] = defaultdict(list)
    for r in record.rounds:
        by_kind[r.kind].append(r)
    for number, (kind, rounds) in enumerate(by_kind.items()):
        color = KIND_COLORS[number % len(KIND_COLORS)]
        goodput = [r.goodput_mbps for r in rounds]
        goodput_ax.hlines(
            goodput, [r.start for r in rounds], [r.end for r in rounds], color=color, label=f"{kind} rounds"
        )
    goodput_ax.set_ylabel("Mbit/s")
    goodput_ax.legend(fontsize=7, loc="upper right")
    series: dict[str, list] = defaultdict(list)
    for sample in record.process_samples:
        series[sample.role].append(sample)
    for role, samples in sorted(series.items()):
        rss_ax.plot([s.t for s in samples], [s.rss_kib / 1024 for s in samples], marker=".", label=role)
    rss_ax.set_yscale("log")
    rss_ax.set_ylabel("RSS MiB (log)")
    rss_ax.set_xlabel("seconds since the soak started")
    rss_ax.legend(fontsize=7, loc="upper left", ncol=3)
    shown = record.violations[:MAX_VIOLATIONS_SHOWN]
    figure.subplots_adjust(bottom=0.08 + 0.018 * len(shown))
    for number, violation in enumerate(shown):
        figure.text(
            0.01, 0.005 + 0.018 * number, f"{violation.invariant}: {violation.line}"[:200], fontsize=6, color="#d62728"
        )
    figure.savefig(file, dpi=DPI)
    return file


def lines(record: SoakRecord) -> list[str]:
    """What the soak prints at the end: faults, traffic, invariants, one line per violation."""
    out = [f"soak: {record.elapsed_s:.0f} s, seed {record.options.seed}, {record.switch}"]
    out.append(f"  load average {record.loadavg_start:.1f} at start, {record.loadavg_end:.1f} at the end")
    injected = [f for f in record.faults if f.injected]
    out.append(f"  faults: {len(injected)} injected, {len(record.faults) - len(injected)} not injected")
    for fault in record.faults:
        status = "injected" if fault.injected else "NOT injected"
        out.append(f"    {fault.start or 0:6.0f} s {fault.label}: {status}; {fault.evidence}")
    for name, reason in record.unavailable_faults.items():
        out.append(f"    never scheduled: {name}: {reason}")
    for name, summary in traffic_summary(record).items():
        out.append(f"  traffic {name}: " + ", ".join(f"{k} {v}" for k, v in summary.items()))
    for name, reason in record.skipped_traffic.items():
        out.append(f"  traffic {name}: skipped: {reason}")
    out.append(
        f"  policy churn checks: {len(record.churns)}, failed {sum(c.problem is not None for c in record.churns)}"
    )
    violated = {v.invariant for v in record.violations}
    for name in INVARIANTS:
        out.append(f"  invariant {name}: {'VIOLATED' if name in violated else 'held'}")
    out += [f"  VIOLATED {v.invariant}: {v.line}" for v in record.violations]
    return out


def write(record: SoakRecord, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "soak.json"
    report.write_text(json.dumps(to_json(record), indent=2) + "\n")
    return report, plot(record, out_dir / "timeline.png")
