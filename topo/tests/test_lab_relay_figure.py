"""tng_lab.relay_figure: three tng-sim runs (split, end to end, end-to-end Vegas) drawn over time."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from tng_lab import relay_figure


def report(goodput: float, srtt: float | None) -> dict[str, object]:
    timeline = [
        {"t_s": 2.5, "goodput_mbps": goodput, "cross_goodput_mbps": 0.0, "sender_srtt_ms": None},
        {"t_s": 5.0, "goodput_mbps": goodput, "cross_goodput_mbps": 3.0, "sender_srtt_ms": srtt},
    ]
    return {"timeline": timeline, "cross_traffic": [{"cc": "cubic", "start_s": 3.0}]}


def fake_sim(tmp_path: Path, body: str) -> Path:
    """An executable standing in for tng-sim that records its arguments."""
    script = tmp_path / "tng-sim"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_it_runs_the_three_schemes_and_writes_their_reports_and_two_plots(tmp_path: Path) -> None:
    answer = json.dumps(report(9.0, 180.0))
    sim = fake_sim(tmp_path, f"echo '{answer}'")
    out = tmp_path / "out"
    scenario = tmp_path / "dsl.toml"
    code = relay_figure.main([str(scenario), "--sim", str(sim), "--out", str(out), "--set", "duration_s=5"])
    assert code == 0
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 3
    assert all(f"run {scenario} --json --deterministic --timeline 2500" in call for call in calls)
    assert all(call.endswith("--set duration_s=5") for call in calls)
    assert "--without-relays" not in calls[0]
    assert '--without-relays --set transport.cc="cubic"' in calls[1]
    assert '--without-relays --set transport.cc="vegas"' in calls[2]
    reports = json.loads((out / "relay-figure.json").read_text())
    assert sorted(reports) == sorted(scheme.label for scheme in relay_figure.SCHEMES)
    for name in ("goodput.png", "delay.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failing_simulator_run_is_reported_with_its_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = fake_sim(tmp_path, "echo 'dsl.toml: cross_traffic.0.cc: unknown' >&2; exit 1")
    code = relay_figure.main([str(tmp_path / "dsl.toml"), "--sim", str(sim), "--out", str(tmp_path / "out")])
    assert code == 1
    err = capsys.readouterr().err
    assert "split (relay): tng-sim failed: dsl.toml: cross_traffic.0.cc: unknown" in err
    assert not (tmp_path / "out" / "relay-figure.json").exists()


def test_a_missing_simulator_binary_names_the_build_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = relay_figure.main([str(tmp_path / "dsl.toml"), "--sim", str(tmp_path / "absent")])
    assert code == 2
    assert "cargo build --release -p tng-sim" in capsys.readouterr().err
