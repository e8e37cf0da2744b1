"""`tng perf` command lines, the transports a binary offers, and report parsing."""

import json
from pathlib import Path

import pytest
from tng_lab import perf
from tng_lab.netns import LabError
from tng_lab.scenario import Workload

REPORT = {
    "transport": "mptcp",
    "mode": "shortflows",
    "cc": "cubic",
    "started_unix_s": 1_790_000_000.0,
    "duration_s": 5.0,
    "goodput_mbps": 12.5,
    "bytes_received": 7_800_000,
    "bytes_corrupted": 0,
    "fct_ms": {"mean": 80.0, "p50": 60.0, "p99": 400.0, "count": 120},
    "rtt_ms": {"subflow0": 50.1},
    "retransmitted_packets": 3,
    "sent_packets": 5400,
    "cpu_percent": 4.5,
    "paths": [{"name": "subflow0", "bytes": 7_800_000, "rtt_ms": 50.1}],
}

HELP_LISTED = """Options:
      --mode <MODE>
          Workload
      --transport <TRANSPORT>
          Transport carrying the workload

          [default: tcp]
          [possible values: tcp, mptcp]

      --cc <CC>
"""

HELP_BULLETS = """Options:
      --transport <TRANSPORT>
          Transport carrying the workload

          Possible values:
          - tng:   tng over UDP
          - tcp:   kernel TCP
          - mptcp: Linux MPTCP

      --cc <CC>
          Congestion control
"""


def workload(transport: str, **extra) -> Workload:
    return Workload("w", transport, extra.pop("mode", "bulk"), ("lte", "wifi"), **extra)


def test_tng_gets_one_local_address_per_path() -> None:
    argv = perf.client_command(Path("/b/tng"), "ue", workload("tng", cc="copa"), "10.0.0.1:5201", ["a", "b"], 5, 3)
    assert argv[:5] == ["ip", "netns", "exec", "ue", "/b/tng"]
    assert argv.count("--local") == 2 and "a:0" in argv and "b:0" in argv
    assert argv[argv.index("--cc") + 1] == "copa"
    assert argv[-3:] == ["--seed", "3", "--json"]


def test_mptcp_binds_only_the_initial_subflow_and_passes_workload_options() -> None:
    flows = workload("mptcp", mode="shortflows", parallel=8, flow_size=20000)
    argv = perf.client_command(Path("tng"), "ue", flows, "s:1", ["a", "b"], 2.5, 1)
    assert argv.count("--local") == 1 and "a:0" in argv
    text = " ".join(argv)
    assert "--mode shortflows --duration 2.5 --transport mptcp" in text
    assert "--parallel 8 --flow-size 20000" in text and "--cc" not in text


def test_an_alcc_workload_names_its_controller_and_the_kernels() -> None:
    argv = perf.client_command(Path("tng"), "ue", workload("tcp", cc="cubic", alcc="verus"), "s:1", ["a"], 5, 1)
    text = " ".join(argv)
    assert "--transport tcp --cc cubic --alcc verus" in text
    assert "--alcc" not in " ".join(perf.client_command(Path("tng"), "ue", workload("tcp"), "s:1", ["a"], 5, 1))


def test_report_fields_are_read() -> None:
    report = perf.parse_report(json.dumps(REPORT))
    assert report.goodput_mbps == 12.5 and report.fct_ms.count == 120 and report.fct_ms.p99 == 400.0
    assert report.fct_samples_ms == []
    with_samples = perf.parse_report(json.dumps({**REPORT, "fct_samples_ms": [1, 2.5]}))
    assert with_samples.fct_samples_ms == [1.0, 2.5]


def test_run_time_and_sender_queueing_are_read_when_present() -> None:
    assert perf.parse_report(json.dumps(REPORT)).sender_queueing_ms is None
    tng = {**REPORT, "transport": "tng", "run_s": 20.4, "sender_queueing_ms": {"p50": 120.5, "p95": 310.0}}
    report = perf.parse_report(json.dumps(tng))
    assert report.run_s == 20.4 and report.sender_queueing_ms == {"p50": 120.5, "p95": 310.0}


def test_report_without_a_field_names_it() -> None:
    broken = {key: value for key, value in REPORT.items() if key != "goodput_mbps"}
    with pytest.raises(LabError, match="goodput_mbps"):
        perf.parse_report(json.dumps(broken))
    with pytest.raises(LabError, match="no JSON report"):
        perf.parse_report("")


@pytest.mark.parametrize(
    ("help_text", "expected"), [(HELP_LISTED, {"tcp", "mptcp"}), (HELP_BULLETS, {"tng", "tcp", "mptcp"})]
)
def test_supported_transports_come_from_the_help(tmp_path: Path, help_text: str, expected: set[str]) -> None:
    fake = tmp_path / "tng"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{help_text}EOF\n")
    fake.chmod(0o755)
    assert perf.supported_transports(fake) == expected


def test_one_report_stays_as_it_is() -> None:
    report = perf.parse_report(json.dumps(REPORT))
    assert perf.combined([report]) is report


def test_reports_of_clients_that_ran_at_once_add_up() -> None:
    first = perf.parse_report(json.dumps(REPORT))
    second = perf.parse_report(
        json.dumps(REPORT | {"goodput_mbps": 7.5, "fct_ms": {"mean": 20.0, "p50": 10.0, "p99": 100.0, "count": 40}})
    )
    both = perf.combined([first, second])
    assert both.goodput_mbps == 20.0 and both.bytes_received == 2 * 7_800_000
    assert (both.started_unix_s, both.duration_s) == (1_790_000_000.0, 5.0)
    assert (both.retransmitted_packets, both.sent_packets, both.cpu_percent) == (6, 10800, 9.0)
    assert both.fct_ms == perf.Fct(65.0, 47.5, 325.0, 160)  # weighted by each client's flows
    assert [(path["name"], path["ue"]) for path in both.paths] == [("subflow0", 1), ("subflow0", 2)]


def test_clients_that_started_apart_share_the_span_they_covered() -> None:
    """12.5 Mbit/s for 5 s from t, and 10 Mbit/s for 5 s from t + 1 s: 112.5 Mbit over 6 s, not 22.5 Mbit/s."""
    first = perf.parse_report(json.dumps(REPORT))
    second = perf.parse_report(json.dumps(REPORT | {"goodput_mbps": 10.0, "started_unix_s": 1_790_000_001.0}))
    both = perf.combined([first, second])
    assert both.goodput_mbps == pytest.approx(18.75)
    assert (both.started_unix_s, both.duration_s) == (1_790_000_000.0, 6.0)


def test_clients_at_once_last_as_long_as_the_longest_and_queue_like_the_worst() -> None:
    first = perf.parse_report(json.dumps(REPORT | {"run_s": 20.1, "sender_queueing_ms": {"p50": 90.0, "p95": 200.0}}))
    second = perf.parse_report(json.dumps(REPORT | {"run_s": 20.4, "sender_queueing_ms": {"p50": 120.0, "p95": 180.0}}))
    both = perf.combined([first, second])
    assert both.run_s == 20.4
    assert both.sender_queueing_ms == {"p50": 120.0, "p95": 200.0}
    kernel = perf.combined([perf.parse_report(json.dumps(REPORT))] * 2)
    assert kernel.run_s is None and kernel.sender_queueing_ms is None
