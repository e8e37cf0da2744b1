"""results.json, summary.md and the plots, from results built by hand."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from tng_lab.load import Load
from tng_lab.perf import Fct
from tng_lab.plots import plot_all
from tng_lab.results import (
    Delay,
    LabResults,
    PathResult,
    PathSeries,
    RunResult,
    WorkloadResult,
    summary_table,
    where_packets_went_table,
    write_json,
    write_summary,
)
from tng_lab.scenario import Workload
from tng_lab.switch_counters import LinkCounts, SwitchCounts, kernel_rx_packets
from tng_lab.tcpstats import ReceiverStats, SenderStats, TcpStats
from tng_p4.pipeline import VisibleDecision

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def path_result(mbps: float, capacity: float | None) -> PathResult:
    t_s = [0.2 * (i + 1) for i in range(20)]
    return PathResult(
        down_bytes=int(mbps * 4 / 8 * 1e6),
        up_bytes=10_000,
        down_mbps=mbps,
        capacity_mbps=capacity,
        measured_down_mbps=mbps,
        dropped_queue=3,
        dropped_loss=0,
        dropped_other=0,
        ecn_marked=0,
        series=PathSeries(
            t_s=t_s,
            down_mbps=[mbps] * 20,
            up_mbps=[0.3] * 20,
            capacity_mbps=[capacity] * 20,
            delay_ms=[20.0 + i for i in range(20)],
            packets=[100] * 20,
        ),
    )


def run(goodput: float, repetition: int = 0, fct: Fct | None = None, samples: list[float] | None = None) -> RunResult:
    return RunResult(
        repetition=repetition,
        seed=1 + repetition,
        link_seed=1 + repetition,
        duration_s=4.0,
        goodput_mbps=goodput,
        capacity_mbps=10.0,
        utilization=goodput * 0.4 / 10.0,
        bytes_received=int(goodput * 4 / 8 * 1e6),
        bytes_corrupted=0,
        retransmitted_packets=5,
        sent_packets=4000,
        delay_ms=Delay(p50=30.0, p95=38.0, mean=29.5),
        fct_ms=fct or Fct(0.0, 0.0, 0.0, 0),
        fct_samples_ms=samples or [],
        paths={"lte": path_result(goodput * 0.4, 10.0), "wifi": path_result(goodput * 0.6, None)},
        perf_paths=[],
        load=Load(1.0, 1.5, 2.0, 55.0, {"server": 3.0, "linkem-lte": 12.0, "linkem-wifi": 10.0, "client": 4.0}),
    )


def results() -> LabResults:
    both = ("lte", "wifi")
    lab = LabResults(
        scenario="demo",
        scenario_file=Path("topo/scenarios/demo.toml"),
        description="Hand-made results.",
        started="2026-01-01T00:00:00+00:00",
        duration_s=4.0,
        repeat=2,
        seed=1,
        sample_ms=200,
        switch="Linux forwarding (test)",
        links={"lte": {"down": "10 Mbit/s, 25 ms", "up": "5 Mbit/s, 25 ms"}, "wifi": {"down": "x", "up": "y"}},
        host={"cores": 2, "kernel": "6.1"},
    )
    lab.workloads = [
        WorkloadResult(Workload("tcp-lte", "tcp", "bulk", ("lte",), "cubic"), "cubic", [run(9.0), run(9.4, 1)]),
        WorkloadResult(
            Workload("mptcp-flows", "mptcp", "shortflows", both),
            "bbr",
            [run(20.0, fct=Fct(50.0, 40.0, 300.0, 120))],
        ),
        WorkloadResult(
            Workload("tng-flows", "tng", "shortflows", both),
            None,
            [run(25.0, fct=Fct(30.0, 25.0, 90.0, 3), samples=[20.0, 25.0, 90.0])],
        ),
        WorkloadResult(Workload("tng-bulk", "tng", "bulk", both), None, skipped="no --transport tng"),
        WorkloadResult(
            Workload("broken", "tcp", "bulk", ("wifi",)),
            "cubic",
            [replace(run(0.0), error="client exited with status 1: boom")],
        ),
    ]
    return lab


@pytest.fixture
def lab() -> LabResults:
    return results()


def test_results_json_has_summaries_statuses_and_series(lab: LabResults, tmp_path: Path) -> None:
    data = json.loads(write_json(lab, tmp_path / "results.json").read_text())
    assert data["scenario"] == "demo" and data["delay_method"].startswith("one-way downlink delay")
    statuses = {w["workload"]["name"]: w["status"] for w in data["workloads"]}
    assert statuses == {
        "tcp-lte": "ok",
        "mptcp-flows": "ok",
        "tng-flows": "ok",
        "tng-bulk": "skipped",
        "broken": "failed",
    }
    tcp = data["workloads"][0]
    assert tcp["summary"]["goodput_mbps"] == {"mean": 9.2, "sd": 0.283, "min": 9.0, "max": 9.4}
    assert tcp["summary"]["delay_p95_ms"]["mean"] == 38.0
    assert tcp["summary"]["capacity_mbps"] == {"mean": 10.0, "sd": 0.0, "min": 10.0, "max": 10.0}
    assert tcp["summary"]["utilization"]["mean"] == pytest.approx(0.368)
    assert tcp["runs"][0]["utilization"] == pytest.approx(0.36) and tcp["runs"][0]["link_seed"] == 1
    assert data["capacity_method"].startswith("capacity_mbps: mean downlink capacity")
    assert tcp["summary"]["path_mbytes"] == {"lte": pytest.approx(1.84)}
    series = tcp["runs"][0]["paths"]["lte"]["series"]
    assert len(series["t_s"]) == len(series["down_mbps"]) == len(series["delay_ms"]) == 20
    assert data["workloads"][3]["skipped"] == "no --transport tng"
    assert lab.failed()[0].workload.name == "broken"


def test_summary_table_has_one_row_per_workload(lab: LabResults) -> None:
    lines = summary_table(lab).strip().splitlines()
    assert len(lines) == 2 + len(lab.workloads)
    assert lines[0].startswith(
        "| workload | transport | cc | mode | paths | goodput Mbit/s | capacity Mbit/s | utilization % | p95 delay ms"
    )
    tcp = lines[2].split(" | ")
    assert tcp[:5] == ["| tcp-lte", "tcp", "cubic", "bulk", "lte"]
    assert tcp[5:9] == ["9.20 ± 0.28", "10.00", "36.8 ± 1.1", "38.0"]
    assert "40.0 / 300.0" in lines[3]  # FCT p50 / p99
    assert "4, 3, 22" in lines[3]  # CPU % of client, server and both linkems
    assert "skipped: no --transport tng" in lines[5]
    assert "failed: client exited with status 1: boom" in lines[6]


def test_summary_markdown_describes_the_run_and_links_the_plots(lab: LabResults, tmp_path: Path) -> None:
    text = write_summary(lab, [tmp_path / "throughput.png"], tmp_path / "summary.md").read_text()
    assert text.startswith("# demo\n")
    assert "in-path switch: Linux forwarding (test)" in text
    assert "link `lte`: down 10 Mbit/s, 25 ms; up 5 Mbit/s, 25 ms" in text
    assert "[throughput.png](throughput.png)" in text


def test_plots_are_written_as_non_empty_pngs(lab: LabResults, tmp_path: Path) -> None:
    plots = plot_all(lab, tmp_path)
    names = sorted(plot.name for plot in plots)
    assert names == ["comparison.png", "delay_cdf.png", "fct_cdf.png", "throughput.png", "throughput_delay.png"]
    for plot in plots:
        data = plot.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_no_fct_plot_without_flows_and_no_plots_without_measurements(lab: LabResults, tmp_path: Path) -> None:
    lab.workloads = [lab.workloads[0]]  # bulk only: no flow completion times
    names = [plot.name for plot in plot_all(lab, tmp_path)]
    assert names == ["throughput.png", "delay_cdf.png", "comparison.png", "throughput_delay.png"]
    lab.workloads[0].runs.clear()
    assert plot_all(lab, tmp_path) == []


def test_where_the_packets_went_for_a_steered_visible_workload(lab: LabResults, tmp_path: Path) -> None:
    steered = Workload("steered", "tcp", "bulk", ("lte", "wifi"), "cubic", steering="qdepl", visible="full")
    tcp = TcpStats(ReceiverStats(9000, 400, 12), SenderStats(9500, 60, 40, 1, 12, 0, 3, 2))
    links = {"lte": LinkCounts(3000, 2990, 10), "wifi": LinkCounts(6000, 6000, 0)}
    visible = {decision.name.lower(): 0 for decision in VisibleDecision} | {"held": 50, "sack_hidden": 7, "boosted": 4}
    counts = [SwitchCounts(links, visible, 0, input_losses) for input_losses in (30, 10)]
    runs = [replace(run(30.0, repetition), tcp=tcp, switch=counts[repetition]) for repetition in (0, 1)]
    lab.workloads = [lab.workloads[0], WorkloadResult(steered, "cubic", runs)]
    summary = lab.workloads[1].summary()
    assert summary["tcp"]["receiver"]["out_of_order_queued"] == 400
    assert summary["switch"]["links"]["lte"] == {"steered": 3000, "sent": 2990, "queue_drops": 10}
    rows = where_packets_went_table(lab).strip().splitlines()
    assert len(rows) == 3  # the header, its rule and the steered workload; tcp-lte has no counters
    assert rows[2] == "| steered | 400 | 12 | 60 | 3 / 2 | lte 3000, wifi 6000 | lte 10, wifi 0 | 20 | 50 / 7 / 4 / 0 |"
    text = write_summary(lab, [], tmp_path / "summary.md").read_text()
    assert "Where the packets went" in text
    assert json.loads(write_json(lab, tmp_path / "r.json").read_text())["workloads"][1]["runs"][0]["switch"]["links"]


def test_switch_counts_between_two_snapshots() -> None:
    before = {
        "ingress.steering.steered": {2: 100, 3: 50},
        "ingress.forwarded": {2: 100, 3: 50, 4: 10},
        "egress.port_tx": {2: 100, 3: 50, 4: 10},
        "ingress.drops": {},
    }
    after = {
        "ingress.steering.steered": {2: 400, 3: 650},
        "ingress.forwarded": {2: 400, 3: 650, 4: 210, 1: 80},
        "egress.port_tx": {2: 395, 3: 650, 4: 190, 1: 80},
        "ingress.drops": {14: 2},
        "ingress.visible.decisions": {5: 7},
    }
    counts = SwitchCounts.between(before, after, {"lte": 2, "wifi": 3, "dsl": 4})
    assert counts.links == {
        "lte": LinkCounts(300, 295, 5),
        "wifi": LinkCounts(600, 600, 0),
        "dsl": LinkCounts(0, 180, 20),  # routed, not steered: its queue drops count all the same
    }
    assert counts.visible["held"] == 7 and counts.dropped == 2
    assert counts.input_losses is None  # the snapshots have no kernel receive counts


def test_losses_before_the_pipeline_are_what_the_interfaces_received_and_the_pipeline_never_handled() -> None:
    before = {"kernel.rx_packets": {0: 1000}, "ingress.forwarded": {2: 500}, "ingress.drops": {14: 5}}
    after = {
        "kernel.rx_packets": {0: 2000},
        "ingress.forwarded": {2: 1400, 3: 50},  # 950 forwarded
        "ingress.drops": {14: 15},  # 10 dropped
        "ingress.visible.decisions": {5: 12},  # 12 dup-ACKs held
    }
    assert SwitchCounts.between(before, after, {"lte": 2}).input_losses == 1000 - 950 - 10 - 12
    helper = {**after, "ingress.visible.decisions": {5: 12, 1: 3}}  # data copied: the helper's packet-outs enter too
    assert SwitchCounts.between(before, helper, {"lte": 2}).input_losses is None


def test_kernel_receive_counts_leave_out_loopback(tmp_path: Path) -> None:
    for name, packets in (("lo", 7), ("srv", 100), ("l-lte", 20)):
        (tmp_path / name / "statistics").mkdir(parents=True)
        (tmp_path / name / "statistics" / "rx_packets").write_text(f"{packets}\n")
    assert kernel_rx_packets(tmp_path) == 120


def test_a_workload_that_could_not_be_set_up_failed_with_its_reason(lab: LabResults) -> None:
    refused = WorkloadResult(
        Workload("steered-lowrtt", "tcp", "bulk", ("lte", "wifi"), steering="lowest-rtt"),
        None,
        error="the controller refused its steering policy: lte_weight is used only by ...",
    )
    lab.workloads.append(refused)
    assert refused.status() == "failed" and refused.reason().startswith("the controller refused")
    assert lab.failed()[-1] is refused
    row = summary_table(lab).strip().splitlines()[-1]
    assert row.startswith("| steered-lowrtt | tcp | - | bulk | lte+wifi (switch: lowest-rtt) | failed: the controller")
    assert lab.workloads[0].reason() is None and lab.workloads[3].reason() == "no --transport tng"
