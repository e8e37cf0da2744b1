"""Scenario files load into dataclasses; every error names the file, the key and the problem."""

from pathlib import Path

import pytest
from tng_lab import scenario
from tng_lab.scenario import ScenarioError

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

VALID = """
name = "two-links"
duration_s = 5
[[links]]
name = "lte"
down = { rate = "10mbit", delay = "25ms", queue = "100pkt", loss = "0.5%" }
up = { rate = "5mbit", delay = "25ms" }
[[links]]
name = "cell"
down = { trace = { model = "sprout", mean_mbps = 8, seconds = 30, seed = 7, sigma = 150 }, delay = "20ms" }
[[workloads]]
name = "mptcp"
transport = "mptcp"
cc = "cubic"
paths = ["lte", "cell"]
[[workloads]]
name = "flows"
transport = "tng"
mode = "shortflows"
parallel = 4
flow_size = 50000
paths = ["cell"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> ScenarioError:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        scenario.load(path)
    assert str(caught.value).startswith(f"{path}: ")
    return caught.value


def test_valid_scenario_becomes_dataclasses(tmp_path: Path) -> None:
    loaded = scenario.load(write(tmp_path, VALID))
    assert loaded.name == "two-links" and loaded.duration_s == 5.0 and loaded.sample_ms == 200
    lte = loaded.link("lte")
    assert lte.down.rate_bps == 10e6 and lte.down.delay_s == pytest.approx(0.025)
    assert lte.down.spec() == "rate=10000000bit,delay=25000us,loss=0.5%,queue=100pkt"
    cell = loaded.link("cell")
    assert cell.down.trace_model is not None
    assert cell.down.trace_model.argv() == [
        "--model",
        "sprout",
        "--mean-mbps",
        "8",
        "--seconds",
        "30",
        "--seed",
        "7",
        "--sigma",
        "150",
    ]
    assert cell.up.spec() == ""  # no `up` table: straight through


def test_a_steps_trace_takes_its_period_and_spread(tmp_path: Path) -> None:
    steps = 'model = "steps", mean_mbps = 8, seconds = 30, seed = 7, period_seconds = 5, spread = 0.8'
    loaded = scenario.load(
        write(tmp_path, VALID.replace('model = "sprout", mean_mbps = 8, seconds = 30, seed = 7, sigma = 150', steps))
    )
    model = loaded.link("cell").down.trace_model
    assert model is not None
    assert model.argv()[-4:] == ["--period-seconds", "5", "--spread", "0.8"]
    assert loaded.workloads[0].paths == ("lte", "cell")
    assert loaded.workloads[1].parallel == 4 and loaded.workloads[1].mode == "shortflows"


def test_one_ue_unless_the_scenario_says_how_many(tmp_path: Path) -> None:
    assert scenario.load(write(tmp_path, VALID)).ues == 1
    assert scenario.load(write(tmp_path, VALID.replace("duration_s = 5", "duration_s = 5\nues = 8"))).ues == 8


def test_only_the_workloads_named_run_in_the_scenarios_order(tmp_path: Path) -> None:
    loaded = scenario.load(write(tmp_path, VALID))
    names = [w.name for w in loaded.workloads]
    assert [w.name for w in scenario.only_workloads(loaded, names[::-1]).workloads] == names
    assert [w.name for w in scenario.only_workloads(loaded, names[1:]).workloads] == names[1:]
    with pytest.raises(ScenarioError) as caught:
        scenario.only_workloads(loaded, ["nope"])
    assert caught.value.key == "workloads" and caught.value.problem.startswith("no workload named 'nope' (")


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path: Path) -> None:
    loaded = scenario.load(path)
    assert loaded.workloads and loaded.links


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        (("duration_s = 5", 'duration_s = "5"'), "duration_s", "expected a number, got a string '5'"),
        (("duration_s = 5", "duration_s = -1"), "duration_s", "must be a positive number"),
        (('name = "two-links"', 'nam = "x"'), "name", "missing (required)"),
        (('name = "mptcp"', 'name = "mptcp"\ncolor = 1'), "workloads[0].color", "unknown key"),
        (('rate = "10mbit"', 'rate = "10"'), "links[0].down.rate", "needs a rate unit"),
        (('delay = "25ms", queue', 'delay = "25 parsecs", queue'), "links[0].down.delay", "needs a time unit"),
        (('loss = "0.5%"', 'loss = "5"'), "links[0].down.loss", "above 100%"),
        (('queue = "100pkt"', 'queue = "0pkt"'), "links[0].down.queue", "at least one packet"),
        (('"lte", "cell"', '"lte", "wlan"'), "workloads[0].paths[1]", "no link named 'wlan'"),
        (('transport = "mptcp"', 'transport = "quic"'), "workloads[0].transport", "'quic' is not one of"),
        (('mode = "shortflows"', 'mode = "bulk"'), "workloads[1].parallel", "only applies to mode shortflows"),
        (('name = "cell"', 'name = "lte"'), "links[1].name", "'lte' is used twice"),
        (("duration_s = 5", "duration_s = 5\nues = 9"), "ues", "must be 1 to 8 (UEs sharing the links"),
        (("duration_s = 5", "duration_s = 5\nues = 0"), "ues", "must be 1 to 8"),
        (("duration_s = 5", "duration_s = 5\nues = true"), "ues", "expected an integer, got true or false"),
        (('name = "cell"', 'name = "Cell-1"'), "links[1].name", "must be a lowercase letter"),
        (('model = "sprout"', 'model = "verus"'), "links[1].down.trace.model", "'verus' is not one of sprout, steps"),
        (
            ('model = "sprout"', 'model = "steps"'),
            "links[1].down.trace.sigma",
            "an option of the sprout model, not of steps",
        ),
        (('cc = "cubic"', 'alcc = "copa"'), "workloads[0].alcc", "needs transport = 'tcp', not 'mptcp'"),
        (
            ('transport = "mptcp"\ncc = "cubic"', 'transport = "tcp"\nalcc = "cubic"'),
            "workloads[0].alcc",
            "'cubic' is not one of copa, verus, sprout",
        ),
        (
            ('transport = "mptcp"\ncc = "cubic"', 'transport = "tcp"\nmode = "rr"\nalcc = "sprout"'),
            "workloads[0].alcc",
            "needs mode = 'bulk', not 'rr'",
        ),
        (
            ('rate = "5mbit"', 'rate = "5mbit", trace = "x.trace"'),
            "links[0].up.trace",
            "conflicts with rate",
        ),
    ],
)
def test_errors_name_file_key_and_problem(tmp_path: Path, change: tuple[str, str], key: str, problem: str) -> None:
    old, new = change
    assert old in VALID
    error = error_of(tmp_path, VALID.replace(old, new, 1))
    assert error.key == key
    assert problem in error.problem


def test_unknown_direction_key_lists_linkems_keys(tmp_path: Path) -> None:
    error = error_of(tmp_path, VALID.replace('rate = "5mbit"', 'rat = "5mbit"'))
    assert error.key == "links[0].up.rat"
    assert "delay, ecn, ge, jitter, loss, queue, rate, reorder, trace" in error.problem


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    error = error_of(tmp_path, "name = ")
    assert error.key is None and "invalid TOML" in error.problem


def test_missing_trace_file_is_reported_with_its_resolved_path(tmp_path: Path) -> None:
    error = error_of(tmp_path, VALID.replace('rate = "5mbit"', 'trace = "cell.trace"'))
    assert error.key == "links[0].up.trace"
    assert str(tmp_path / "cell.trace") in error.problem


def test_trace_file_is_resolved_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "cell.trace").write_text("1\n2\n")
    loaded = scenario.load(write(tmp_path, VALID.replace('rate = "5mbit"', 'trace = "cell.trace"')))
    assert loaded.link("lte").up.spec() == f"trace={tmp_path / 'cell.trace'},delay=25000us"
