"""Runs a sweep: every point's generated scenario with the runner, in its own directory, one progress line per point
with an estimate of the time left; then sweep.json, the plots and sweep.md (also after a failed point, and with the
points done so far when interrupted)."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tng_lab import runner, sweep, tomlwrite
from tng_lab.netns import LabError
from tng_lab.outputs import write_run
from tng_lab.results import to_json
from tng_lab.scenario import ScenarioError
from tng_lab.sweep_plots import plot_sweep
from tng_lab.sweep_results import PointOutcome, sweep_json, sweep_markdown


@dataclass(frozen=True, slots=True)
class SweepOptions:
    sweep: sweep.Sweep
    out_dir: Path
    duration_s: float | None  # None: each point's scenario's own
    repeat: int
    seed: int | None  # None: each point's scenario's own
    binaries: runner.Binaries


@dataclass(frozen=True, slots=True)
class SweepOutputs:
    data: dict[str, Any]  # sweep.json's content
    json_file: Path
    markdown: Path
    plots: list[Path]

    def failed(self) -> bool:
        return any(point["status"] == "failed" for point in self.data["points"])


def say(text: str) -> None:
    print(f"tng-lab sweep: {text}", file=sys.stderr, flush=True)


def run(options: SweepOptions) -> SweepOutputs:
    """Checks every point's scenario, then runs the points one after the other; a point whose lab fails is recorded
    as failed and the sweep goes on. Writes the sweep's outputs whatever happens."""
    points = sweep.points(options.sweep, options.out_dir)  # a wrong point fails here, before anything runs
    if os.geteuid() != 0:
        raise LabError("tng-lab sweep needs root (it creates network namespaces)")
    options.out_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    workload_s = sum(_workload_seconds(options, point) for point in points)
    say(f"{len(points)} points into {options.out_dir}; at most {_duration(workload_s)} of workloads, plus setup")
    outcomes: list[PointOutcome] = []
    begun = time.monotonic()
    try:
        for point in points:
            outcome = _run_point(options, point)
            outcomes.append(outcome)
            say(_progress_line(outcome, len(points), time.monotonic() - begun))
    finally:
        outputs = _write(options, outcomes, started)
    return outputs


def _workload_seconds(options: SweepOptions, point: sweep.Point) -> float:
    if point.scenario is None:
        return 0.0
    duration = options.duration_s or point.scenario.duration_s
    return duration * options.repeat * len(point.scenario.workloads)


def _run_point(options: SweepOptions, point: sweep.Point) -> PointOutcome:
    """The point's scenario, written to its directory (`tng-lab run` takes it as it is) and run there."""
    started = time.monotonic()
    directory = options.out_dir / point.id
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scenario.toml").write_text(tomlwrite.dumps(point.data))
    scenario = point.scenario
    if scenario is None:
        return PointOutcome(point, None, None, time.monotonic() - started)
    run_options = runner.RunOptions(
        scenario=scenario,
        out_dir=directory,
        duration_s=options.duration_s or scenario.duration_s,
        repeat=options.repeat,
        seed=scenario.seed if options.seed is None else options.seed,
        binaries=options.binaries,
    )
    try:
        results = runner.run(run_options)
    except (LabError, ScenarioError) as err:
        return PointOutcome(point, None, str(err), time.monotonic() - started)
    write_run(results, directory)
    return PointOutcome(point, to_json(results), None, time.monotonic() - started)


def _progress_line(outcome: PointOutcome, total: int, elapsed_s: float) -> str:
    point = outcome.point
    done = point.index
    if outcome.error:
        status = f"FAILED: {outcome.error}"
    else:
        workloads = outcome.results["workloads"] if outcome.results else []
        counts = {status: 0 for status in ("ok", "skipped", "failed")}
        for workload in workloads:
            counts[workload["status"]] += 1
        counts["skipped"] += len(point.skipped)
        status = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    left = elapsed_s / done * (total - done)
    eta = f"ETA {_duration(left)}" if done < total else f"done in {_duration(elapsed_s)}"
    return f"[{done}/{total}] {point.label}: {status} ({outcome.seconds:.0f} s); {eta}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _write(options: SweepOptions, outcomes: list[PointOutcome], started: str) -> SweepOutputs:
    # duration_s and seed None: each point's scenario's own
    run = {"started": started, "duration_s": options.duration_s, "repeat": options.repeat, "seed": options.seed}
    data = sweep_json(options.sweep, outcomes, run)
    json_file = options.out_dir / "sweep.json"
    json_file.write_text(json.dumps(data, indent=2) + "\n")
    plots = plot_sweep(data, options.out_dir)
    markdown = options.out_dir / "sweep.md"
    markdown.write_text(sweep_markdown(data, plots))
    return SweepOutputs(data, json_file, markdown, plots)
