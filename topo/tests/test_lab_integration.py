"""tng-lab end to end on real namespaces: topo/scenarios/smoke.toml, then runs that are interrupted or killed.

Needs root and the release binaries: the test builds them with cargo (or uses TNG_LAB_BIN_DIR when set).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lab_binaries
import pytest

bin_dir = lab_binaries.bin_dir  # the shared fixture, collected in this module too

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "topo" / "scenarios" / "smoke.toml"
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")

pytestmark = pytest.mark.needs_root


def start(bin_dir: Path, out: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tng_lab", "run", str(SMOKE), "--out", str(out), "--bin-dir", str(bin_dir)]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def namespaces_of(pid: int) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(f"tlab{pid}-")]


def pids_in(namespaces: list[str]) -> set[int]:
    pids: set[int] = set()
    for ns in namespaces:
        listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
        pids.update(int(pid) for pid in listed.split())
    return pids


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def is_perf_client(pid: int) -> bool:
    try:
        return b"perf\0client" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def wait_for_client(runner: subprocess.Popen[str]) -> set[int]:
    """Waits until a perf client runs in the UE namespace (setup also runs short commands there); returns every
    process in the run's namespaces then."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert runner.poll() is None, runner.stderr.read() if runner.stderr else ""
        if any(is_perf_client(pid) for pid in pids_in([f"tlab{runner.pid}-ue"])):
            return pids_in(namespaces_of(runner.pid))
        time.sleep(0.2)
    raise AssertionError("no perf client started within 60 s")


def assert_allowed_cc_restored(before: str) -> None:
    """What a run added to the allowed congestion controls is gone (unless it was there already, e.g. from a
    concurrent run, which keeps it until the last run ends)."""
    after = ALLOWED_CC.read_text().split()
    assert [name for name in after if name not in before.split()] == []


def clean() -> str:
    done = subprocess.run([sys.executable, "-m", "tng_lab", "clean"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_smoke_scenario_end_to_end(bin_dir: Path, tmp_path: Path) -> None:
    allowed_before = ALLOWED_CC.read_text()
    runner = start(bin_dir, tmp_path)
    stdout, stderr = runner.communicate(timeout=300)
    assert runner.returncode == 0, stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["scenario"] == "smoke"
    bmv2 = results["switch"].startswith("BMv2")
    assert bmv2 or results["switch"].startswith("Linux forwarding")
    workloads = {w["workload"]["name"]: w for w in results["workloads"]}
    assert {"tcp-lte", "mptcp", "tng", "steered-visible"} == set(workloads)
    steered = workloads["steered-visible"]
    assert (steered["status"] == "skipped") == (not bmv2), steered
    if not bmv2:
        assert "needs BMv2" in steered["skipped"] and "skipped: switch-steered TCP needs BMv2" in stdout
    for name, workload in workloads.items():
        if workload["status"] == "skipped":
            assert name in ("tng", "steered-visible"), workload  # tng: until the agent offers it
            continue
        assert workload["status"] == "ok", workload
        run = workload["runs"][0]
        assert run["bytes_received"] > 500_000 and run["bytes_corrupted"] == 0
        assert run["goodput_mbps"] > 2.0
        assert run["delay_ms"]["p95"] >= 20.0  # at least the propagation delay of the slowest link
        assert run["load"]["cpu_percent"]["linkem-lte"] > 0
        for path in workload["workload"]["paths"]:
            assert run["paths"][path]["down_bytes"] > 100_000, (name, path)
    tcp_lte = workloads["tcp-lte"]["runs"][0]
    assert tcp_lte["capacity_mbps"] == 8.0  # the lte link's downlink rate
    assert 0.5 < tcp_lte["utilization"] <= 1.05, tcp_lte["utilization"]
    assert workloads["mptcp"]["runs"][0]["capacity_mbps"] == 24.0  # both links
    lte_only = workloads["tcp-lte"]["runs"][0]["paths"]
    assert lte_only["wifi"]["down_bytes"] < 10_000  # policy routing kept it on its link
    assert workloads["mptcp"]["runs"][0]["goodput_mbps"] > workloads["tcp-lte"]["runs"][0]["goodput_mbps"]
    for plot in ("throughput.png", "delay_cdf.png", "comparison.png", "throughput_delay.png"):
        assert (tmp_path / plot).stat().st_size > 10_000
    assert "| tcp-lte | tcp | cubic | bulk | lte |" in (tmp_path / "summary.md").read_text()
    assert "| tcp-lte | tcp | cubic | bulk | lte |" in stdout
    assert namespaces_of(runner.pid) == []
    assert not Path(f"/run/tng-lab/tlab{runner.pid}").exists()
    assert_allowed_cc_restored(allowed_before)


TWO_IDENTICAL_ON_A_TRACE = """
name = "same-trace"
duration_s = 3
seed = 3
[[links]]
name = "cell"
down = { trace = { model = "sprout", mean_mbps = 8, seconds = 20, seed = 7 }, delay = "20ms", queue = "150kb" }
up = { rate = "5mbit", delay = "20ms" }
[[workloads]]
name = "first"
transport = "tcp"
cc = "cubic"
paths = ["cell"]
[[workloads]]
name = "second"
transport = "tcp"
cc = "cubic"
paths = ["cell"]
"""


def test_identical_workloads_meet_the_same_trace_capacity(bin_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "same.toml"
    scenario.write_text(TWO_IDENTICAL_ON_A_TRACE)
    argv = [sys.executable, "-m", "tng_lab", "run", str(scenario), "--out", str(tmp_path), "--bin-dir", str(bin_dir)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    workloads = {w["workload"]["name"]: w for w in json.loads((tmp_path / "results.json").read_text())["workloads"]}
    first, second = (workloads[name]["runs"][0] for name in ("first", "second"))
    series = [run["paths"]["cell"]["series"] for run in (first, second)]
    # The second workload starts seconds later; its capacity is still counted from the trace's time 0. Both series
    # lie on one grid from that instant; a sampler that woke late on a busy machine may have skipped a grid point
    # in one run and not the other, and the bin after the gap then spans two intervals. So the runs are compared
    # bin by bin, a bin named by both of its grid points (the first bin's start is not in the series).
    bins = [
        {(a, b): c for a, b, c in zip(s["t_s"][:-1], s["t_s"][1:], s["capacity_mbps"][1:], strict=True)} for s in series
    ]
    common = sorted(bins[0].keys() & bins[1].keys())
    assert len(common) >= 10, [sorted(b) for b in bins]  # of 14 bins: 3 s in 200 ms intervals
    assert [bins[0][b] for b in common] == [bins[1][b] for b in common]
    assert max(series[0]["capacity_mbps"]) > min(series[0]["capacity_mbps"])  # the trace varies: equal is not trivial
    for run in (first, second):
        assert run["link_seed"] == 3 and run["capacity_mbps"] > 1.0
        assert 0.3 < run["utilization"] <= 1.05, run["utilization"]
    assert "| utilization % |" in (tmp_path / "summary.md").read_text()


TWO_UES = """
name = "two-ues"
duration_s = 3
ues = 2
[switch]
lte = "lte"
wifi = "wifi"
[[links]]
name = "lte"
down = { rate = "8mbit", delay = "20ms", queue = "100pkt" }
up = { rate = "5mbit", delay = "20ms" }
[[links]]
name = "wifi"
down = { rate = "16mbit", delay = "5ms", queue = "100pkt" }
up = { rate = "16mbit", delay = "5ms" }
[[workloads]]
name = "tcp-lte"
transport = "tcp"
cc = "cubic"
paths = ["lte"]
[[workloads]]
name = "tcp-wifi"
transport = "tcp"
cc = "cubic"
paths = ["wifi"]
"""


def test_two_ues_share_the_links_through_their_gateway(bin_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "two-ues.toml"
    scenario.write_text(TWO_UES)
    argv = [sys.executable, "-m", "tng_lab", "run", str(scenario), "--out", str(tmp_path), "--bin-dir", str(bin_dir)]
    runner = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = runner.communicate(timeout=180)
    assert runner.returncode == 0, stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["ues"] == 2
    workloads = {w["workload"]["name"]: w for w in results["workloads"]}
    for name, other in (("tcp-lte", "wifi"), ("tcp-wifi", "lte")):
        run = workloads[name]["runs"][0]
        assert run["error"] is None, run["error"]
        ue1, ue2 = run["ues"]
        for ue in (ue1, ue2):  # both UEs moved data at the same time, each with its own seed
            assert ue["bytes_received"] > 100_000 and ue["goodput_mbps"] > 0.5, (name, ue)
            assert (tmp_path / "logs" / f"{name}-r0-ue{ue['ue']}.json").is_file()
        assert ue2["seed"] == ue1["seed"] + 1000
        # Their bytes over the span they covered together: at most the sum of their rates (equal if they started at
        # the same instant), and near it, as they start a fraction of a second apart.
        rates = ue1["goodput_mbps"] + ue2["goodput_mbps"]
        assert 0.8 * rates <= run["goodput_mbps"] <= rates + 1e-3, (run["goodput_mbps"], rates)
        assert 0.5 <= run["fairness"] <= 1.0
        assert run["paths"][other]["down_bytes"] < 10_000, name  # the gateway kept both UEs on the named link
        assert run["paths"][name.removeprefix("tcp-")]["down_bytes"] > ue1["bytes_received"] + ue2["bytes_received"]
    assert "Goodput per UE" in (tmp_path / "summary.md").read_text()
    assert namespaces_of(runner.pid) == []


def test_interrupted_run_removes_everything_it_created(bin_dir: Path, tmp_path: Path) -> None:
    runner = start(bin_dir, tmp_path)
    pids = wait_for_client(runner)
    assert len(pids) >= 3  # two linkems, the server (and the client, unless it just finished)
    runner.send_signal(signal.SIGINT)
    _, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 130, stderr
    assert "interrupted by SIGINT" in stderr
    assert namespaces_of(runner.pid) == []
    assert [pid for pid in pids if running(pid)] == []
    clean()
    assert namespaces_of(runner.pid) == []


DEAD_LINK = """
name = "dead-link"
duration_s = 1
[[links]]
name = "good"
down = { rate = "10mbit", delay = "5ms" }
[[links]]
name = "dead"
down = { loss = "100%" }
[[workloads]]
name = "stuck"
transport = "tcp"
paths = ["dead"]
[[workloads]]
name = "fine"
transport = "tcp"
paths = ["good"]
"""


def test_a_workload_that_cannot_finish_fails_alone(bin_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "dead.toml"
    scenario.write_text(DEAD_LINK)
    argv = [sys.executable, "-m", "tng_lab", "run", str(scenario), "--out", str(tmp_path), "--bin-dir", str(bin_dir)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "1 workload(s) failed: stuck" in done.stderr
    workloads = {w["workload"]["name"]: w for w in json.loads((tmp_path / "results.json").read_text())["workloads"]}
    assert workloads["stuck"]["status"] == "failed"
    assert "still running" in workloads["stuck"]["runs"][0]["error"]
    assert workloads["fine"]["status"] == "ok" and workloads["fine"]["runs"][0]["bytes_received"] > 100_000
    assert "failed: client still running" in (tmp_path / "summary.md").read_text()


def test_a_crashed_linkem_fails_the_run_and_leaves_nothing(bin_dir: Path, tmp_path: Path) -> None:
    runner = start(bin_dir, tmp_path)
    pids = wait_for_client(runner)
    for linkem in pids_in([f"tlab{runner.pid}-link-lte"]):
        os.kill(linkem, signal.SIGKILL)
    _, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 1
    assert "linkem (lte) exited with status" in stderr
    assert namespaces_of(runner.pid) == []
    assert [pid for pid in pids if running(pid)] == []


def test_clean_removes_what_a_killed_run_left(bin_dir: Path, tmp_path: Path) -> None:
    allowed_before = ALLOWED_CC.read_text()
    runner = start(bin_dir, tmp_path)
    pids = wait_for_client(runner)
    runner.send_signal(signal.SIGKILL)  # no chance to clean up
    runner.communicate(timeout=30)
    assert len(namespaces_of(runner.pid)) == 5
    report = clean()
    assert "removed 5 namespaces" in report
    assert namespaces_of(runner.pid) == []
    deadline = time.monotonic() + 5
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in pids if running(pid)] == []
    assert not Path(f"/run/tng-lab/tlab{runner.pid}").exists()
    assert_allowed_cc_restored(allowed_before)
