"""A sweep's aggregation (sweep.json, sweep.md), its plots and its loop over points, on hand-made results."""

import json
import os
from pathlib import Path

import pytest
from tng_lab import runner, sweep, sweep_run
from tng_lab.load import Load
from tng_lab.netns import LabError
from tng_lab.perf import Fct
from tng_lab.results import (
    Delay,
    LabResults,
    PathResult,
    PathSeries,
    RunResult,
    UeRun,
    WorkloadResult,
    jain_fairness,
    to_json,
)
from tng_lab.scenario import Scenario
from tng_lab.sweep_plots import plot_sweep
from tng_lab.sweep_results import PointOutcome, sweep_json, sweep_markdown, workload_entry

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

BASE = """
name = "base"
[switch]
lte = "lte"
wifi = "wifi"
[[links]]
name = "lte"
down = { rate = "10mbit", delay = "25ms" }
[[links]]
name = "wifi"
down = { rate = "30mbit", delay = "5ms" }
[[workloads]]
name = "tcp-wifi"
transport = "tcp"
paths = ["wifi"]
[[workloads]]
name = "mptcp"
transport = "mptcp"
paths = ["wifi", "lte"]
[[workloads]]
name = "steered"
transport = "tcp"
steering = "qdepl"
[[workloads]]
name = "steered-new"
transport = "tcp"
steering = "teleport"
"""

SWEEP = """
name = "s"
description = "A hand-made sweep."
base = "base.toml"
[[axes]]
name = "ratio"
title = "Wi-Fi:LTE"
values = [
  { label = "1:1", set = { "links.wifi.down.rate" = "20mbit", "links.lte.down.rate" = "20mbit" } },
  { label = "3:1", set = { "links.wifi.down.rate" = "30mbit", "links.lte.down.rate" = "10mbit" } },
]
[[axes]]
name = "ues"
title = "UEs"
key = "ues"
values = [1, 2]
"""


@pytest.fixture
def points(tmp_path: Path) -> list[sweep.Point]:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "s.toml").write_text(SWEEP)
    return sweep.points(sweep.load(tmp_path / "s.toml"), tmp_path / "out")


def made_run(ue_goodputs: list[float], delay_p95: float, error: str | None = None) -> RunResult:
    series = PathSeries([0.2], [1.0], [0.1], [10.0], [20.0], [10])
    path = PathResult(1000, 100, 1.0, 10.0, 1.0, 0, 0, 0, 0, series)
    ues = tuple(UeRun(ue, 1 + 1000 * (ue - 1), mbps, int(mbps * 1e6), 3) for ue, mbps in enumerate(ue_goodputs, 1))
    return RunResult(
        repetition=0,
        seed=1,
        link_seed=1,
        duration_s=5.0,
        goodput_mbps=sum(ue_goodputs),
        capacity_mbps=40.0,
        utilization=sum(ue_goodputs) / 40.0,
        bytes_received=sum(ue.bytes_received for ue in ues),
        bytes_corrupted=0,
        retransmitted_packets=3 * len(ues),
        sent_packets=1000,
        delay_ms=Delay(20.0, delay_p95, 25.0),
        fct_ms=Fct(0.0, 0.0, 0.0, 0),
        fct_samples_ms=[],
        paths={"lte": path, "wifi": path},
        perf_paths=[],
        load=Load(1.0, 1.5, 2.5, 60.0, {"server": 2.0, "linkem-lte": 10.0, "linkem-wifi": 20.0, "client": 4.0}),
        error=error,
        ues=ues,
        fairness=jain_fairness(ue_goodputs),
    )


def lab_results(scenario: Scenario, point: int) -> LabResults:
    """What the runner gives for `scenario` at point `point`: goodput grows with the point, mptcp fails at 4."""
    lab = LabResults(
        scenario.name, scenario.file, scenario.description, "2026-01-01T00:00:00+00:00", 5.0, 1, 1, 200,
        "Linux forwarding (test)", {"lte": {"down": "d", "up": "u"}, "wifi": {"down": "d", "up": "u"}}, {"cores": 2},
        ues=scenario.ues,
    )  # fmt: skip
    by_name = {w.name: w for w in scenario.workloads}
    shares = [10.0 + point] if scenario.ues == 1 else [6.0 + point, 4.0 + point]
    mptcp_error = "client exited with status 1: boom" if point == 4 else None
    lab.workloads = [
        WorkloadResult(by_name["tcp-wifi"], "cubic", [made_run(shares, 40.0 + point)]),
        WorkloadResult(by_name["mptcp"], "cubic", [made_run([2 * s for s in shares], 90.0, mptcp_error)]),
        WorkloadResult(by_name["steered"], "cubic", skipped="switch-steered TCP needs BMv2 as the switch"),
    ]
    return lab


def outcomes(points: list[sweep.Point]) -> list[PointOutcome]:
    made = []
    for point in points:
        if point.index == 3:
            made.append(PointOutcome(point, None, "linkem (lte) exited with status 1: gone", 3.0))
        else:
            made.append(PointOutcome(point, to_json(lab_results(point.scenario, point.index)), None, 30.0))
    return made


RUN = {"started": "2026-01-01T00:00:00+00:00", "duration_s": 5.0, "repeat": 1, "seed": None}


def test_jains_index_is_one_for_equal_shares_and_one_over_n_for_one_taker() -> None:
    assert jain_fairness([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain_fairness([9.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_fairness([6.0, 4.0]) == pytest.approx(100 / 104)
    assert jain_fairness([0.0, 0.0]) is None


def test_sweep_json_has_every_workload_of_every_point(points: list[sweep.Point], tmp_path: Path) -> None:
    data = sweep_json(points[0] and sweep.load(tmp_path / "s.toml"), outcomes(points), RUN)
    assert data["sweep"] == "s" and data["workloads"] == ["tcp-wifi", "mptcp", "steered", "steered-new"]
    assert [axis["values"] for axis in data["axes"]] == [["1:1", "3:1"], ["1", "2"]]
    first, second, third, fourth = data["points"]
    assert first["axes"] == {"ratio": "1:1", "ues": "1"} and first["status"] == "ok"
    tcp = second["workloads"]["tcp-wifi"]
    assert tcp["status"] == "ok" and tcp["goodput_mbps"] == 14.0 and tcp["delay_p95_ms"] == 42.0
    assert tcp["utilization"] == pytest.approx(0.35) and tcp["ue_goodput_mbps"] == [8.0, 6.0]
    assert tcp["fairness"] == pytest.approx(round(196 / 200, 3))
    assert tcp["load"] == {
        "loadavg_max": 2.5,
        "machine_cpu_percent": 60.0,
        "cpu_percent": {"client": 4.0, "server": 2.0, "linkem": 30.0},
    }
    assert second["workloads"]["steered"] == {
        "status": "skipped",
        "reason": "switch-steered TCP needs BMv2 as the switch",
    }
    assert second["workloads"]["steered-new"]["reason"].startswith("steering mode 'teleport' is not one")
    assert third["status"] == "failed" and third["error"].startswith("linkem (lte) exited")
    assert third["workloads"]["tcp-wifi"] == {"status": "failed", "reason": third["error"]}
    assert third["workloads"]["steered-new"]["status"] == "skipped"  # left out before the run, whatever it did
    assert fourth["status"] == "failed" and fourth["workloads"]["mptcp"]["reason"].endswith("boom")
    assert "goodput_mbps" not in fourth["workloads"]["mptcp"]
    json.dumps(data)  # sweep.json is plain JSON


def test_sweep_markdown_tables_one_row_per_point(points: list[sweep.Point], tmp_path: Path) -> None:
    data = sweep_json(sweep.load(tmp_path / "s.toml"), outcomes(points), RUN)
    text = sweep_markdown(data, [tmp_path / "goodput.png"])
    assert text.startswith("# s\n\nA hand-made sweep.\n")
    lines = text.splitlines()
    header = "| Wi-Fi:LTE | UEs | tcp-wifi | mptcp | steered | steered-new | load avg | machine CPU % |"
    assert header in lines
    start = lines.index(header)
    assert lines[start + 2] == "| 1:1 | 1 | 11.00 | 22.00 | skip | skip | 2.5 | 60 |"
    assert lines[start + 3] == "| 1:1 | 2 | 14.00 | 28.00 | skip | skip | 2.5 | 60 |"
    failed_lab = "| 3:1 | 1 | fail | fail | fail | skip | - | - |"  # the lab failed before the runner skipped any
    assert lines[start + 4] == failed_lab
    assert lines[start + 5] == "| 3:1 | 2 | 18.00 | fail | skip | skip | 2.5 | 60 |"
    assert "| 1:1 | 2 | 42.0 | 90.0 | skip | skip |" in lines  # p95 delay
    assert "| 1:1 | 2 | 0.980 | 0.980 | skip | skip |" in lines  # Jain's index, shown since a point has 2 UEs
    assert "- `steered` skipped at point(s) 1-2, 4: switch-steered TCP needs BMv2 as the switch" in lines
    assert "- `tcp-wifi` failed at point(s) 3: linkem (lte) exited with status 1: gone" in lines
    assert "- `mptcp` failed at point(s) 3-4: " not in text  # two reasons, two lines
    assert "- `mptcp` failed at point(s) 4: client exited with status 1: boom" in lines
    assert "- point 3 (ratio=3:1, ues=1) failed: linkem (lte) exited with status 1: gone" in lines
    assert "[goodput.png](goodput.png)" in text
    data["points"][0]["workloads"]["tcp-wifi"]["load"]["cpu_percent"]["bmv2"] = 80.0  # as a point with BMv2 has
    lines = sweep_markdown(data, []).splitlines()
    start = lines.index(header + " BMv2 CPU % |")
    assert lines[start + 2] == "| 1:1 | 1 | 11.00 | 22.00 | skip | skip | 2.5 | 60 | 80 |"
    assert lines[start + 3] == "| 1:1 | 2 | 14.00 | 28.00 | skip | skip | 2.5 | 60 | - |"


def test_sweep_plots_are_pngs_and_need_a_measurement(points: list[sweep.Point], tmp_path: Path) -> None:
    data = sweep_json(sweep.load(tmp_path / "s.toml"), outcomes(points), RUN)
    plots = plot_sweep(data, tmp_path)
    assert [plot.name for plot in plots] == ["goodput.png", "delay_p95.png"]
    for plot in plots:
        content = plot.read_bytes()
        assert content.startswith(PNG_MAGIC) and len(content) > 10_000
    nothing = sweep_json(sweep.load(tmp_path / "s.toml"), outcomes(points)[2:3], RUN)
    assert plot_sweep(nothing, tmp_path / "none") == []


def fake_lab(monkeypatch: pytest.MonkeyPatch, interrupt_at: int | None = None) -> list[runner.RunOptions]:
    """runner.run answers with hand-made results (the lab fails at point 3) and records what it was asked."""
    asked: list[runner.RunOptions] = []

    def run(options: runner.RunOptions) -> LabResults:
        asked.append(options)
        index = int(options.scenario.name.rsplit("-", 1)[1])
        if index == interrupt_at:
            raise KeyboardInterrupt
        if index == 3:
            raise LabError("linkem (lte) exited with status 1: gone")
        return lab_results(options.scenario, index)

    monkeypatch.setattr(runner, "run", run)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return asked


def sweep_options(tmp_path: Path) -> sweep_run.SweepOptions:
    binaries = runner.Binaries(Path("/bin/tng"), Path("/bin/linkem"))
    return sweep_run.SweepOptions(sweep.load(tmp_path / "s.toml"), tmp_path / "out", 5.0, 1, None, binaries)


def test_a_sweep_runs_every_point_in_its_directory_and_goes_on_after_a_failure(
    points: list[sweep.Point], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = fake_lab(monkeypatch)
    outputs = sweep_run.run(sweep_options(tmp_path))
    assert [options.out_dir.name for options in asked] == [point.id for point in points]
    assert [options.scenario.ues for options in asked] == [1, 2, 1, 2]
    assert all(options.duration_s == 5.0 and options.seed == 1 for options in asked)  # the scenario's seed
    out = tmp_path / "out"
    for point in points:
        assert (out / point.id / "scenario.toml").is_file()
    assert (out / points[0].id / "results.json").is_file() and (out / points[0].id / "summary.md").is_file()
    assert not (out / points[2].id / "results.json").exists()  # the failed point
    assert json.loads((out / "sweep.json").read_text()) == outputs.data
    assert [p.name for p in outputs.plots] == ["goodput.png", "delay_p95.png"] and outputs.failed()
    assert (out / "sweep.md").read_text().startswith("# s\n")
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tng-lab sweep: [")]
    assert len(progress) == 4
    assert (
        progress[0].startswith("tng-lab sweep: [1/4] ratio=1:1, ues=1: 2 ok, 2 skipped (") and "; ETA " in progress[0]
    )
    assert (
        "- `steered-new` skipped at every point (4): steering mode 'teleport'"
        in (tmp_path / "out" / "sweep.md").read_text()
    )
    assert "[3/4] ratio=3:1, ues=1: FAILED: linkem (lte) exited" in progress[2]
    assert "[4/4] ratio=3:1, ues=2: 1 ok, 2 skipped, 1 failed (" in progress[3] and "; done in " in progress[3]


def test_an_interrupted_sweep_keeps_the_points_it_finished(
    points: list[sweep.Point], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_lab(monkeypatch, interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        sweep_run.run(sweep_options(tmp_path))
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [point["index"] for point in data["points"]] == [1]


def test_a_sweep_with_a_wrong_point_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "s.toml").write_text(SWEEP.replace("values = [1, 2]", "values = [1, 20]"))
    asked = fake_lab(monkeypatch)
    with pytest.raises(sweep.ScenarioError, match="point 2"):
        sweep_run.run(sweep_options(tmp_path))
    assert asked == [] and not (tmp_path / "out").exists()


def test_a_workload_refused_at_setup_is_failed_with_the_reason(points: list[sweep.Point]) -> None:
    lab = lab_results(points[0].scenario, 1)
    steered = next(w for w in points[0].scenario.workloads if w.name == "steered")
    lab.workloads[2] = WorkloadResult(steered, None, error="the controller refused its steering policy: no")
    entry = workload_entry(to_json(lab)["workloads"][2])
    assert entry == {"status": "failed", "reason": "the controller refused its steering policy: no"}
