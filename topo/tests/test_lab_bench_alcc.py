"""The ALCC benchmark's ratios to kernel BBR of the same run, and issue 15's targets read from them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_lab_bench_lwip import workload
from test_lab_results import results
from tng_lab import scenario
from tng_lab.bench_alcc import SCENARIOS, lagged_sender, ratios, with_trace_file


def cell(name: str, transport: str, goodput: float, p95: float, **kw: object):
    return workload(name, transport, ("lte",), goodput, p95, **kw)  # the fabricated runs have lte and wifi


def test_every_workload_against_bbr_and_the_targets() -> None:
    lab = results()
    lab.workloads = [
        cell("tcp-bbr", "tcp", 8.0, 200.0),
        cell("tcp-cubic", "tcp", 8.4, 240.0),
        cell("tng-copa", "tng", 7.6, 50.0),
        cell("alcc-copa", "tcp", 6.4, 70.0, alcc="copa"),
        cell("tng-verus", "tng", 7.2, 180.0),
        cell("alcc-verus", "tcp", 7.5, 185.0, alcc="verus"),
    ]
    report = ratios(lab)
    assert report["bbr"] == {"goodput_mbps": 8.0, "p95_delay_ms": 200.0}
    assert report["workloads"]["tng-copa"]["goodput_over_bbr"] == 0.95
    assert report["workloads"]["tng-copa"]["p95_delay_over_bbr"] == 0.25
    assert report["workloads"]["tcp-cubic"]["goodput_over_bbr"] == 1.05
    targets = report["targets"]
    assert targets["best_delay_based"] == {"met_by": ["tng-copa"], "met": True}
    assert targets["none_under_floor"] == {"under": [], "met": True}  # alcc-copa at 0.8 x is above 0.75 x
    assert targets["alcc_within_ten_percent"] == {
        "alcc-copa": {"goodput_change": -0.158, "p95_change": 0.4, "within": False},
        "alcc-verus": {"goodput_change": 0.042, "p95_change": 0.028, "within": True},
    }


def test_a_controller_under_the_floor_and_no_best_are_reported() -> None:
    lab = results()
    lab.workloads = [cell("tcp-bbr", "tcp", 8.0, 200.0), cell("tng-sprout", "tng", 5.0, 50.0)]
    targets = ratios(lab)["targets"]
    assert targets["best_delay_based"] == {"met_by": [], "met": False}
    assert targets["none_under_floor"] == {"under": ["tng-sprout"], "met": False}


def test_without_bbr_there_is_nothing_to_compare_with() -> None:
    lab = results()
    lab.workloads = [cell("tng-copa", "tng", 7.6, 50.0)]
    assert ratios(lab) == {"error": "the peer workload tcp-bbr did not run"}


def test_a_mahimahi_file_replaces_the_first_link_s_downlink_trace(tmp_path: Path) -> None:
    trace = tmp_path / "Verizon-LTE-short.down"
    trace.write_text("1\n2\n")
    loaded = scenario.load(SCENARIOS / "alcc.toml")
    replayed = with_trace_file(loaded, trace)
    assert replayed.name == "alcc-Verizon-LTE-short"
    down = replayed.links[0].down
    assert (down.trace_file, down.trace_model, down.rate_bps) == (trace.resolve(), None, None)
    assert down.delay_s == loaded.links[0].down.delay_s
    assert replayed.links[0].up == loaded.links[0].up
    assert replayed.workloads == loaded.workloads


def test_the_lagged_sender_is_measured_on_the_run_s_trace_at_bbr_s_share(tmp_path: Path) -> None:
    trace = tmp_path / "constant.trace"
    trace.write_text("".join(f"{ms}\n" for ms in range(1, 1001)))  # 12 Mbit/s, constant
    loaded = with_trace_file(scenario.load(SCENARIOS / "alcc.toml"), trace)
    lab = results()
    bbr = cell("tcp-bbr", "tcp", 11.0, 150.0)
    bbr.runs = [replace(r, utilization=0.95) for r in bbr.runs]
    lab.workloads = [bbr]
    found = lagged_sender(loaded, tmp_path, lab, seconds=2)
    assert found["utilization_floor"] == 0.855  # 0.9 of the share BBR used
    # On a constant link it needs no more than the one-way delay (20 ms) and a packet's wait.
    assert found["lowest_p95_delay_ms"] <= 21.0
    assert found["p95_delay_over_bbr"] == round(found["lowest_p95_delay_ms"] / 150.0, 3)
    assert found["delay_target_within_reach"] is True
    assert Path(found["plot"]).read_bytes().startswith(b"\x89PNG")
    lab.workloads = []
    assert "skipped" in lagged_sender(loaded, tmp_path, lab, seconds=2)
