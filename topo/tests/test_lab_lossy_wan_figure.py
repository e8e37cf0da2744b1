"""tng_lab.lossy_wan_figure: split and end-to-end tng-sim runs per controller, drawn as cumulative bytes."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from tng_lab import lossy_wan_figure


def fake_sim(tmp_path: Path, body: str) -> Path:
    """An executable standing in for tng-sim that records its arguments."""
    script = tmp_path / "tng-sim"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def report(split_mbps: float, end_to_end_mbps: float) -> str:
    """A report whose goodput depends on whether the run is end to end (the fake sees its own arguments)."""

    def level(mbps: float, loss: float, start: float) -> dict[str, object]:
        return {"from_s": start, "to_s": start + 1, "cross_flows": 0, "random_loss": loss, "goodput_mbps": mbps}

    def body(mbps: float) -> str:
        timeline = [{"t_s": 0.5, "goodput_mbps": mbps}, {"t_s": 1.0, "goodput_mbps": mbps}]
        return json.dumps({"timeline": timeline, "levels": [level(mbps, 0.0, 0.0), level(mbps / 4, 0.01, 1.0)]})

    split, end_to_end = body(split_mbps), body(end_to_end_mbps)
    return f"case \"$*\" in *--without-relays*) echo '{end_to_end}';; *) echo '{split}';; esac"


def test_it_runs_each_controller_split_and_end_to_end_and_writes_the_ratios_and_a_plot(tmp_path: Path) -> None:
    sim = fake_sim(tmp_path, report(16.0, 8.0))
    out = tmp_path / "out"
    scenario = tmp_path / "wan.toml"
    assert lossy_wan_figure.main([str(scenario), "--sim", str(sim), "--out", str(out)]) == 0
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4
    assert all(f"run {scenario} --json --deterministic --timeline 500" in call for call in calls)
    assert calls[0].endswith('--set transport.cc="newreno"') and "--without-relays" not in calls[0]
    assert calls[1].endswith('--without-relays --set transport.cc="newreno"')
    assert calls[2].endswith('--set transport.cc="vegas"') and "--without-relays" not in calls[2]
    assert calls[3].endswith('--without-relays --set transport.cc="vegas"')
    summary = json.loads((out / "lossy-wan.json").read_text())
    assert [row["random_loss"] for row in summary["levels"]] == [0.0, 0.01]
    assert summary["levels"][1]["vegas"] == {"split_mbps": 4.0, "end_to_end_mbps": 2.0, "split_over_end_to_end": 2.0}
    assert sorted(summary["reports"]) == ["end-to-end newreno", "end-to-end vegas", "split, newreno", "split, vegas"]
    assert (out / "cumulative.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cumulative_bytes_add_each_interval_s_goodput_times_its_length() -> None:
    timeline = [{"t_s": 0.5, "goodput_mbps": 8.0}, {"t_s": 1.0, "goodput_mbps": 16.0}]
    assert lossy_wan_figure.cumulative_mb({"timeline": timeline}) == ([0.0, 0.5, 1.0], [0.0, 0.5, 1.5])


def test_a_scenario_without_loss_steps_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = fake_sim(tmp_path, 'echo \'{"timeline": [], "levels": []}\'')
    code = lossy_wan_figure.main([str(tmp_path / "dsl.toml"), "--sim", str(sim), "--out", str(tmp_path / "out")])
    assert code == 1
    assert "has no loss_steps" in capsys.readouterr().err
    assert not (tmp_path / "out" / "lossy-wan.json").exists()


def test_a_missing_simulator_binary_names_the_build_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lossy_wan_figure.main([str(tmp_path / "wan.toml"), "--sim", str(tmp_path / "absent")]) == 2
    assert "cargo build --release -p tng-sim" in capsys.readouterr().err
