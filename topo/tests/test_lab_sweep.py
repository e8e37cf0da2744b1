"""Sweep files, the points they span, and the generated scenarios (no root: nothing runs here)."""

import tomllib
from pathlib import Path

import pytest
from tng_lab import scenario, sweep, tomlwrite
from tng_lab.scenario import ScenarioError

SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"

BASE = """
name = "base"
description = "Two links."
[switch]
lte = "lte"
wifi = "wifi"
[[links]]
name = "lte"
down = { rate = "10mbit", delay = "25ms", queue = "100pkt" }
[[links]]
name = "wifi"
down = { rate = "30mbit", delay = "5ms" }
[[workloads]]
name = "tcp-lte"
transport = "tcp"
paths = ["lte"]
"""

SWEEP = """
name = "s"
base = "base.toml"
[[axes]]
name = "rate"
title = "LTE rate"
values = [
  { label = "slow", set = { "links.lte.down.rate" = "5mbit", "links.0.down.queue" = "50pkt" } },
  { label = "fast", set = { "links.lte.down.rate" = "20mbit" } },
]
[[axes]]
name = "ues"
key = "ues"
values = [1, 3]
[[workloads]]
name = "tcp-wifi"
transport = "tcp"
paths = ["wifi"]
[[workloads]]
name = "steered-new"
transport = "tcp"
steering = "teleport"
"""


def write_sweep(tmp_path: Path, text: str = SWEEP, base: str = BASE) -> Path:
    (tmp_path / "base.toml").write_text(base)
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_points_span_the_product_of_the_axes_first_axis_slowest(tmp_path: Path) -> None:
    loaded = sweep.load(write_sweep(tmp_path))
    assert [axis.title for axis in loaded.axes] == ["LTE rate", "ues"] and loaded.size() == 4
    points = sweep.points(loaded, tmp_path / "out")
    assert [point.label for point in points] == [
        "rate=slow, ues=1",
        "rate=slow, ues=3",
        "rate=fast, ues=1",
        "rate=fast, ues=3",
    ]
    assert points[1].id == "002_rate-slow_ues-3"
    slow_three = points[1].scenario
    assert slow_three is not None and slow_three.ues == 3
    assert slow_three.link("lte").down.rate_bps == 5e6 and ("queue", "50pkt") in slow_three.link("lte").down.extra
    assert points[2].scenario.link("lte").down.rate_bps == 20e6
    assert points[2].scenario.link("lte").down.extra == (("queue", "100pkt"),)  # each point starts from the base
    assert slow_three.name == "s-2" and slow_three.description.endswith("Point 2 of sweep s (rate=slow, ues=3).")
    assert slow_three.file == tmp_path / "out" / "002_rate-slow_ues-3" / "scenario.toml"


def test_the_sweeps_workloads_replace_the_bases_and_unknown_steering_is_skipped(tmp_path: Path) -> None:
    point = sweep.points(sweep.load(write_sweep(tmp_path)), tmp_path)[0]
    assert point.workloads == ("tcp-wifi", "steered-new")
    assert [w.name for w in point.scenario.workloads] == ["tcp-wifi"]
    ((name, reason),) = point.skipped
    assert name == "steered-new" and reason.startswith("steering mode 'teleport' is not one this lab knows (")


def test_a_point_with_nothing_left_to_run_has_no_scenario(tmp_path: Path) -> None:
    only_new = (
        SWEEP[: SWEEP.index('[[workloads]]\nname = "tcp-wifi"')]
        + SWEEP[SWEEP.index('[[workloads]]\nname = "steered-new"') :]
    )
    point = sweep.points(sweep.load(write_sweep(tmp_path, only_new)), tmp_path)[0]
    assert point.scenario is None and point.workloads == ("steered-new",)


def test_a_cut_keeps_the_values_and_workloads_named(tmp_path: Path) -> None:
    loaded = sweep.load(write_sweep(tmp_path))
    cut = sweep.restrict(loaded, {"ues": ["3"]}, ["steered-new"])
    points = sweep.points(cut, tmp_path / "out")
    assert [point.label for point in points] == ["rate=slow, ues=3", "rate=fast, ues=3"]
    assert all(point.workloads == ("steered-new",) for point in points)
    from_base = sweep.restrict(write_base_only(tmp_path, loaded), {}, ["tcp-lte"])
    assert sweep.points(from_base, tmp_path / "b")[0].workloads == ("tcp-lte",)  # the base's workloads


def write_base_only(tmp_path: Path, loaded: sweep.Sweep) -> sweep.Sweep:
    return sweep.Sweep(loaded.file, loaded.name, "", loaded.base, loaded.axes, None)


@pytest.mark.parametrize(
    ("only", "workloads", "problem"),
    [
        ({"rate": ["slow", "medium"]}, None, "axis 'rate' has no value 'medium' (slow, fast)"),
        ({"ratio": ["1:1"]}, None, "no axis named 'ratio' (rate, ues)"),
        ({}, ["tcp-wifi", "mptcp"], "no workload named 'mptcp' (tcp-wifi, steered-new)"),
    ],
)
def test_a_cut_names_what_the_sweep_does_not_have(tmp_path: Path, only, workloads, problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        sweep.restrict(sweep.load(write_sweep(tmp_path)), only, workloads)
    assert caught.value.problem == problem


def test_generated_scenarios_are_written_as_toml_that_loads_the_same(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "wifi.trace").write_text("1\n2\n")
    base = BASE.replace('[switch]\nlte = "lte"\nwifi = "wifi"\n', "")  # a trace link cannot be an LWIP link
    base = base.replace('rate = "30mbit", delay = "5ms"', 'delay = "5ms", trace = "traces/wifi.trace"')
    (tmp_path / "base.toml").write_text(base)
    fast_on_linux = '"links.lte.down.rate" = "20mbit", "switch.use" = "linux"'  # creates the [switch] table
    (tmp_path / "s.toml").write_text(SWEEP.replace('"links.lte.down.rate" = "20mbit"', fast_on_linux))
    points = sweep.points(sweep.load(tmp_path / "s.toml"), tmp_path / "out")
    for point in points:
        written = tomlwrite.dumps(point.data)
        assert tomllib.loads(written) == point.data
        file = point.scenario.file
        file.parent.mkdir(parents=True)
        file.write_text(written)
        assert scenario.load(file) == point.scenario  # `tng-lab run` of the written file runs the same point
        assert point.data["links"][1]["down"]["trace"] == str(tmp_path / "traces" / "wifi.trace")
    assert [point.scenario.switch.use for point in points] == ["auto", "auto", "linux", "linux"]


def test_toml_writer_quotes_keys_and_strings() -> None:
    data = {"a b": 'x"y\\\n\x7fé', "n": 1.5, "flag": False, "t": {"k.l": [1, 2]}, "rows": [{"name": "r"}], "e": {}}
    assert tomllib.loads(tomlwrite.dumps(data)) == data
    with pytest.raises(ValueError, match="cannot write"):
        tomlwrite.dumps({"when": object()})


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        ('name = "s"', 'name = "s/1"', "name", "must be letters, digits"),
        ('base = "base.toml"', 'base = "nowhere.toml"', "base", "no scenario file at"),
        ('key = "ues"', 'key = "ues"\ncolour = 1', "axes[1].colour", "unknown key"),
        ("values = [1, 3]", "values = []", "axes[1].values", "needs at least one value"),
        ("values = [1, 3]", 'values = [{ label = "one", set = { ues = 1 } }]', "axes[1].values[0]", "is a table, but"),
        ('{ label = "fast", set', '{ label = "slow", set', "axes[0].values[1]", "label 'slow' is used twice"),
        (
            '{ label = "fast", set = { "links.lte.down.rate" = "20mbit" } }',
            '{ label = "fast" }',
            "axes[0].values[1].set",
            "missing",
        ),
        (
            '{ label = "fast", set = { "links.lte.down.rate" = "20mbit" } }',
            '{ label = "fast", set = {} }',
            "axes[0].values[1].set",
            "at least one key",
        ),
        ('{ label = "fast", set', '2, { label = "fast", set', "axes[0].values[1]", "expected a table { label"),
        ('name = "ues"\nkey', 'name = "rate"\nkey', "axes[1].name", "'rate' is used twice"),
        ('name = "ues"\nkey', 'name = "Ues"\nkey', "axes[1].name", "must be a lowercase letter"),
        (
            'key = "ues"',
            'key = "links.lte.down.rate"',
            "axes[1]",
            "changes 'links.lte.down.rate', which axis 'rate' changes",
        ),
    ],
)
def test_sweep_file_errors_name_the_key(tmp_path: Path, old: str, new: str, key: str, problem: str) -> None:
    assert old in SWEEP
    with pytest.raises(ScenarioError) as caught:
        sweep.load(write_sweep(tmp_path, SWEEP.replace(old, new, 1)))
    assert caught.value.key == key and problem in caught.value.problem, caught.value


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        ("values = [1, 3]", "values = [1, 9]", "point 2 (rate=slow, ues=9)", "ues: must be 1 to 8"),
        (
            '"links.lte.down.rate" = "5mbit"',
            '"links.lten.down.rate" = "5mbit"',
            "axes 'rate' value 'slow'",
            "no entry named 'lten' (lte, wifi)",
        ),
        (
            '"links.0.down.queue"',
            '"links.7.down.queue"',
            "axes 'rate' value 'slow'",
            "'links.7': no entry 7 (there are 2)",
        ),
        ('"links.0.down.queue"', '"links.down"', "axes 'rate' value 'slow'", "names an entry of an array"),
        ('"links.0.down.queue"', '"name.first"', "axes 'rate' value 'slow'", "'name' is a value, not a table"),
        (
            '"links.lte.down.rate" = "20mbit"',
            '"links.lte.down.rate" = "20"',
            "point 3 (rate=fast, ues=1)",
            "links[0].down.rate: `20` needs a rate unit",
        ),
    ],
)
def test_errors_of_a_point_name_the_point_before_anything_runs(tmp_path: Path, old, new, key, problem) -> None:
    loaded = sweep.load(write_sweep(tmp_path, SWEEP.replace(old, new, 1)))
    with pytest.raises(ScenarioError) as caught:
        sweep.points(loaded, tmp_path)
    assert caught.value.file == tmp_path / "s.toml"
    assert caught.value.key == key and problem in caught.value.problem, caught.value


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_sweeps_generate_runnable_points(path: Path, tmp_path: Path) -> None:
    points = sweep.points(sweep.load(path), tmp_path)
    assert points and all(point.scenario is not None for point in points)


def test_the_issue_12_sweep(tmp_path: Path) -> None:
    loaded = sweep.load(SWEEPS / "lwip.toml")
    assert [(axis.name, [v.label for v in axis.values]) for axis in loaded.axes] == [
        ("ratio", ["1:1", "3:1", "10:1"]),
        ("rtt_diff", ["0ms", "20ms", "60ms"]),
        ("ues", ["1", "2", "3", "4"]),
    ]
    points = sweep.points(loaded, tmp_path)
    assert len(points) == 36
    for point in points:
        lte, wifi = point.scenario.link("lte"), point.scenario.link("wifi")
        assert lte.down.rate_bps + wifi.down.rate_bps == pytest.approx(40e6, rel=1e-3)  # 40 Mbit/s split by the ratio
        ratio = dict(point.coordinates)["ratio"].split(":")
        assert wifi.down.rate_bps / lte.down.rate_bps == pytest.approx(int(ratio[0]) / int(ratio[1]), rel=1e-3)
        difference = lte.down.delay_s + lte.up.delay_s - wifi.down.delay_s - wifi.up.delay_s
        assert difference * 1e3 == pytest.approx(float(dict(point.coordinates)["rtt_diff"].removesuffix("ms")))
        assert wifi.down.delay_s + wifi.up.delay_s == pytest.approx(0.010)
        queues = {link.name: dict(link.down.extra)["queue"] for link in (lte, wifi)}
        assert queues["lte"].endswith("b") and queues["wifi"].endswith("b")
        steered = {w.steering for w in point.scenario.workloads if w.steering}
        assert {"qdepl", "lowest-rtt"} <= steered
    names = points[0].workloads
    assert names[:4] == ("tcp-lte", "tcp-wifi", "mptcp", "tng") and len(names) == 11
    visible = [w.name for w in points[0].scenario.workloads if w.visible]
    assert "steered-qdepl-visible" in visible and "steered-lowrtt-visible" in visible
