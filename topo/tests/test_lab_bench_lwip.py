"""The lwip benchmark's ratios: each steered workload against MPTCP and the single links of the same run."""

from __future__ import annotations

from dataclasses import replace

from test_lab_results import results, run
from tng_lab.bench_lwip import ratios
from tng_lab.results import Delay, WorkloadResult
from tng_lab.scenario import Workload


def workload(name: str, transport: str, paths: tuple[str, ...], goodput: float, p95: float, **kw: object):
    runs = [replace(run(goodput), delay_ms=Delay(p50=p95 / 2, p95=p95, mean=p95 / 2))]
    return WorkloadResult(Workload(name, transport, "bulk", paths, "cubic", **kw), "cubic", runs)  # type: ignore[arg-type]


def test_ratios_against_mptcp_and_the_single_links() -> None:
    lab = results()
    both = ("lte", "wifi")
    lab.workloads = [
        workload("tcp-lte", "tcp", ("lte",), 9.5, 140.0),
        workload("tcp-wifi", "tcp", ("wifi",), 28.5, 45.0),
        workload("mptcp", "mptcp", both, 37.0, 130.0),
        workload("earliest-arrival", "tcp", both, 38.0, 52.0, steering="earliest-arrival"),
        workload("qdepl-visible", "tcp", both, 20.0, 90.0, steering="qdepl", visible="full"),
    ]
    report = ratios(lab)
    assert report["peers"] == {"mptcp_goodput_mbps": 37.0, "mptcp_p95_ms": 130.0, "single_links_mbps": 38.0}
    assert report["steered"]["earliest-arrival"] == {
        "steering": "earliest-arrival",
        "visible": "off",
        "goodput_mbps": 38.0,
        "p95_delay_ms": 52.0,
        "goodput_over_mptcp": 1.027,
        "goodput_over_single_links": 1.0,
        "p95_delay_over_mptcp": 0.4,
    }
    assert report["steered"]["qdepl-visible"]["goodput_over_mptcp"] == 0.541
    assert set(report["steered"]) == {"earliest-arrival", "qdepl-visible"}


def test_ratios_need_every_peer() -> None:
    lab = results()
    lab.workloads = [workload("mptcp", "mptcp", ("lte", "wifi"), 37.0, 130.0)]
    assert ratios(lab) == {"error": "peer workloads did not run: tcp-lte, tcp-wifi"}
