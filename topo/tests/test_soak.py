"""`make soak`'s parts (the schedule, the invariants, the HTTP body check) and, as root, a 3-minute soak on real
namespaces: every scheduled fault injected and healed, every invariant held, traffic of every kind verified.

With BMv2 (the P4 toolchain present) the soak includes the switch, controller and partition faults and steered TCP;
with TNG_HIDE_P4_TOOLCHAIN=1 it runs on Linux forwarding and says which faults and traffic it left out."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from itertools import pairwise
from pathlib import Path

import lab_binaries
import pytest
from tng_lab.soak import http_bodies
from tng_lab.soak.invariants import SLACK_FDS, Violation, Window, delivery, processes, resources
from tng_lab.soak.processes import Exit, Registry
from tng_lab.soak.sampler import ProcessSample
from tng_lab.soak.schedule import END_MARGIN_S, make_schedule
from tng_lab.soak.traffic import Fetch, Round

bin_dir = lab_binaries.bin_dir  # the shared fixture, collected in this module too

REPO = Path(__file__).resolve().parents[2]
SHORT_SOAK_MINUTES = 3


def test_schedule_is_seeded_and_meets_every_fault_in_a_cycle() -> None:
    holds = [(5.0, 10.0), (1.0, 2.0), (8.0, 16.0)]
    first = make_schedule(holds, seed=7, duration_s=600, warmup_s=60, interval_s=(30, 120))
    assert first == make_schedule(holds, seed=7, duration_s=600, warmup_s=60, interval_s=(30, 120))
    assert first != make_schedule(holds, seed=8, duration_s=600, warmup_s=60, interval_s=(30, 120))
    assert sorted(p.fault for p in first[:3]) == [0, 1, 2]
    assert first[0].at_s >= 60 + 30
    for before, after in pairwise(first):
        assert after.at_s - (before.at_s + before.hold_s) == pytest.approx(after.gap_s, abs=0.2)
        assert 30 <= after.gap_s <= 120
    for planned in first:
        low, high = holds[planned.fault]
        assert low <= planned.hold_s <= high
        assert planned.at_s + planned.hold_s + END_MARGIN_S <= 600


def test_schedule_without_faults_is_empty() -> None:
    assert make_schedule([], seed=1, duration_s=600, warmup_s=60) == []


def _round(start: float, end: float, error: str | None = None, corrupted: int = 0) -> Round:
    return Round("tng-bulk", start, end, 0 if error else 1000, corrupted, 1.0, error)


def test_delivery_excuses_stops_only_during_and_shortly_after_faults() -> None:
    windows = [Window("link-down (lte)", 100.0, 110.0)]
    rounds = [
        _round(90, 111, "exit status 1"),  # straddles the fault
        _round(115, 125, "exit status 1"),  # within the recovery after it
        _round(200, 220, "exit status 1"),  # long after: a violation
        _round(300, 320, corrupted=5),  # corruption is never excused
        _round(400, 420, "stopped at the end of the soak"),
    ]
    found = delivery(rounds, [], windows)
    assert [v.invariant for v in found] == ["delivery", "delivery"]
    assert "200-220 s failed with no fault in force: exit status 1" in found[0].line
    assert "5 bytes corrupted" in found[1].line


def test_delivery_flags_a_wrong_http_body_even_during_a_fault() -> None:
    windows = [Window("kill-tng-server", 0.0, 1000.0)]
    fetches = [
        Fetch(10.0, 10.5, 1000, 1000, True, None),
        Fetch(20.0, 20.5, 1000, 999, False, "body of 999 bytes does not match the 1000 bytes sent (SHA-256)"),
        Fetch(30.0, 90.0, 1000, 0, None, "TimeoutError: timed out"),
    ]
    found = delivery([], fetches, windows)
    assert found == [Violation("delivery", "HTTP body at 20 s through tng proxy: " + fetches[1].error)]
    assert len(delivery([], fetches, [])) == 2  # without the fault, the interrupted fetch counts too


def test_delivery_excuses_a_fetch_that_started_before_a_fault_and_failed_in_it() -> None:
    windows = [Window("kill-tng-serve", 68.0, 70.0)]
    cut = Fetch(67.4, 69.0, 1000, 350, None, "ConnectionResetError: [Errno 104] Connection reset by peer")
    assert delivery([], [cut], windows) == []
    earlier = Fetch(20.0, 21.0, 1000, 350, None, "ConnectionResetError: [Errno 104] Connection reset by peer")
    assert [v.line for v in delivery([], [earlier], windows)] == [
        "HTTP fetch at 20 s through tng proxy failed with no fault in force: " + earlier.error
    ]


def _samples(role: str, pid: int, fds: list[int], start: float = 0.0) -> list[ProcessSample]:
    return [ProcessSample(start + 10.0 * i, role, pid, 10_000, n) for i, n in enumerate(fds)]


def test_resources_compare_with_the_level_after_warm_up() -> None:
    steady = _samples("tng-serve", 10, [20, 30, 31, 32, 33, 31])
    leaking = _samples("tng-proxy", 11, [20, 30, 31, 40, 50, 60])
    found = resources(steady + leaking, warmup_s=20.0)
    assert len(found) == 1
    assert found[0].line.startswith("tng-proxy (pid 11): open fds 60 at 50 s")
    assert 31 + SLACK_FDS < 40  # the leak exceeds both the 10% and the slack


def test_resources_give_a_restarted_process_its_own_warm_up() -> None:
    first = _samples("perf-server", 10, [10, 12, 12])
    successor = _samples("perf-server", 20, [50, 50, 51, 51], start=100.0)
    assert resources(first + successor, warmup_s=20.0) == []
    # A successor that took a while to be ready (a controller syncing the switch) is judged from then on.
    starting = _samples("controller", 30, [3, 3, 9, 19, 19, 19, 19], start=100.0)
    assert len(resources(starting, warmup_s=20.0)) == 1
    assert resources(starting, warmup_s=20.0, ready_at={30: 130.0}) == []


def test_resources_leave_out_what_a_process_holds_in_its_bounded_store() -> None:
    mib = 1024
    # The helper holds 18 MiB of copies while a receiver is gone, then frees them: not growth.
    rss = [40 * mib, 41 * mib, 41 * mib, 59 * mib, 41 * mib]
    held = [0, 0, 0, 18 * mib, 0]
    helper = [ProcessSample(10.0 * i, "helper", 12, r, 9, h) for i, (r, h) in enumerate(zip(rss, held, strict=True))]
    assert resources(helper, warmup_s=20.0) == []
    # The same RSS with an empty store is growth, and the line says what was left out when something was.
    bare = [ProcessSample(p.t, p.role, p.pid, p.rss_kib, p.fds) for p in helper]
    assert [v.line for v in resources(bare, warmup_s=20.0)] == [
        "helper (pid 12): RSS 60416 KiB at 30 s, over 50176 KiB (level after warm-up 41984 KiB)"
    ]
    leaking = [*helper[:4], ProcessSample(40.0, "helper", 12, 70 * mib, 9, 18 * mib)]
    assert [v.line for v in resources(leaking, warmup_s=20.0)] == [
        "helper (pid 12): RSS less 18432 KiB held in its store 53248 KiB at 40 s, over 50176 KiB "
        "(level after warm-up 41984 KiB)"
    ]


def test_an_unannounced_exit_is_a_violation_a_killed_process_is_not() -> None:
    registry = Registry(started=0.0)
    victim = subprocess.Popen(["sleep", "30"])
    bystander = subprocess.Popen(["sleep", "30"])
    registry.register("perf-server", victim.pid)
    registry.register("linkem-lte", bystander.pid)
    assert registry.killing("perf-server") == victim.pid
    for child in (victim, bystander):
        child.kill()
        child.wait()
    exits = registry.check()
    assert [(e.role, e.pid) for e in exits] == [("linkem-lte", bystander.pid)]
    assert registry.check() == []  # reported once
    assert processes(exits) == [
        Violation(
            "processes", f"linkem-lte (pid {bystander.pid}) exited without being killed (noticed at {exits[0].t:.0f} s)"
        )
    ]
    assert isinstance(exits[0], Exit)


@pytest.fixture
def body_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), http_bodies._Bodies)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_http_body_is_verified_against_the_fetchers_own_copy(body_server: int, monkeypatch) -> None:
    good = http_bodies.fetch_one("127.0.0.1", body_server, seed=3, size=200_000)
    assert (good["ok"], good["received"]) == (True, 200_000)
    # A server whose bytes differ from what the fetcher expects (one changed byte) is caught.
    original = http_bodies.body_chunks

    def changed(seed: int, size: int):
        chunks = list(original(seed, size))
        chunks[0] = bytes([chunks[0][0] ^ 1]) + chunks[0][1:]
        return iter(chunks)

    monkeypatch.setattr(http_bodies, "body_chunks", changed)
    monkeypatch.setattr(http_bodies, "expected_digest", lambda seed, size: _digest(original(seed, size)))
    bad = http_bodies.fetch_one("127.0.0.1", body_server, seed=3, size=200_000)
    assert bad["ok"] is False and "does not match" in bad["error"]


def _digest(chunks) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def test_an_unreachable_server_is_an_interrupted_fetch_not_a_wrong_one() -> None:
    record = http_bodies.fetch_one("127.0.0.1", 9, seed=1, size=1000)  # discard port: nothing listens
    assert record["ok"] is None and record["error"]


def test_faults_option_names_the_unknown_kind_and_lists_the_known_ones(capsys) -> None:
    from tng_lab.soak import cli

    assert cli.parser().parse_args(["--faults", "kill-helper, link-down"]).faults == {"kill-helper", "link-down"}
    with pytest.raises(SystemExit) as exit_info:
        cli.parser().parse_args(["--faults", "kill-helper,kill-switch"])
    assert exit_info.value.code == 2
    said = capsys.readouterr().err
    assert "no such fault: kill-switch" in said and "kill-tng-serve" in said


@pytest.mark.needs_root
def test_three_minute_soak(bin_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak"
    argv = [sys.executable, "-m", "tng_lab.soak", "--minutes", str(SHORT_SOAK_MINUTES), "--warmup", "60"]
    # The recoveries of the switch's helper, the controller and the proxy's server, and link outages. Seed 5 puts
    # kill-tng-serve and kill-helper first with BMv2; kill-tng-serve third on Linux forwarding (no switch faults).
    argv += ["--faults", "kill-tng-serve,kill-helper,kill-controller,link-down", "--fault-interval", "5-10"]
    argv += ["--seed", "5", "--out", str(out), "--bin-dir", str(bin_dir)]
    soak = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = soak.communicate(timeout=SHORT_SOAK_MINUTES * 60 + 600)
    said = f"stdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-4000:]}"
    assert soak.returncode == 0, said
    report = json.loads((out / "soak.json").read_text())
    assert report["violations"] == [], said
    assert all(invariant["held"] for invariant in report["invariants"].values())
    assert report["faults_injected"] >= 1 and report["faults_not_injected"] == 0, said
    if report["switch"].startswith("BMv2"):
        assert "BMv2 RSS" in report["switch_buffers_filled"], said
        if report["switch_pool"].startswith("counted"):  # where the kernel lets the soak set a uprobe
            assert "KiB each" in report["switch_buffers_filled"], said
        else:
            assert report["switch_pool"].startswith("not counted ("), said
    traffic = report["traffic"]
    assert traffic["http-proxy"]["verified"] > 0 and traffic["http-proxy"]["mismatched"] == 0
    for kind in ("tng-bulk", "tng-short", "mptcp", "steered-tcp"):
        if kind in report["skipped_traffic"]:
            continue
        assert traffic[kind]["bytes"] > 0 and traffic[kind]["corrupted"] == 0, kind
    # The proxy connected again after its server was restarted: bodies fetched after that were verified.
    serve_kills = [f for f in report["faults"] if f["label"] == "kill-tng-serve" and f["injected"]]
    assert serve_kills, said
    assert any(f["ok"] for f in report["fetches"] if f["t"] > serve_kills[0]["end"]), said
    if report["switch"].startswith("BMv2"):
        assert report["churn"] and all(c["problem"] is None for c in report["churn"])
        helper_kills = [f for f in report["faults"] if f["label"] == "kill-helper" and f["injected"]]
        assert helper_kills, said  # VISIBLE off while the helper is gone, back on under a new epoch
        assert "helper down" in helper_kills[0]["evidence"] and "helper up (epoch" in helper_kills[0]["healed"]
    else:
        assert "steered-tcp" in report["skipped_traffic"]
        assert {"kill-bmv2", "kill-helper"} <= set(report["unavailable_faults"])
    assert (out / "timeline.png").stat().st_size > 10_000
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"tlab{soak.pid}-" not in listed  # everything the soak created is gone


def test_report_names_every_invariant_and_plots_the_timeline(tmp_path: Path) -> None:
    from tng_lab import runner, scenario
    from tng_lab.soak import report
    from tng_lab.soak.runner import FaultRecord, SoakOptions, SoakRecord
    from tng_lab.soak.sampler import LinkSample

    options = SoakOptions(
        scenario.load(REPO / "topo" / "scenarios" / "soak.toml"),
        tmp_path,
        duration_s=120.0,
        warmup_s=20.0,
        seed=5,
        interval_s=(5.0, 10.0),
        round_s=20.0,
        binaries=runner.Binaries(Path("tng"), Path("linkem")),
    )
    record = SoakRecord(options, "2026-11-27T00:00:00+00:00", "Linux forwarding", 1.0)
    record.faults = [
        FaultRecord("link-down (lte)", 30.0, 5.0, True, 30.0, 35.0, "lte: linkem now loss=100%", "spec restored"),
        FaultRecord("kill-tng-server", 50.0, 2.0, False, 50.0, 50.5, "no perf-server process is registered"),
    ]
    record.rounds = [_round(0.0, 20.0), _round(21.0, 41.0, "exit status 1")]
    record.fetches = [Fetch(10.0, 10.5, 1000, 1000, True, None)]
    record.process_samples = _samples("tng-serve", 10, [12, 12, 12, 12, 40], start=0.0)
    record.link_samples = [LinkSample(10.0 * i, 1_000_000 * i) for i in range(6)]
    record.check()
    data = report.to_json(record)
    assert set(data["invariants"]) == {"delivery", "policies", "resources", "processes", "faults"}
    assert data["invariants"]["resources"]["held"] is False and data["invariants"]["delivery"]["held"] is True
    assert data["faults_injected"] == 1 and data["faults_not_injected"] == 1 and data["seed"] == 5
    assert data["traffic"]["http-proxy"]["verified"] == 1
    printed = report.lines(record)
    assert any(line.startswith("  VIOLATED resources: tng-serve (pid 10): open fds 40") for line in printed)
    json_file, png = report.write(record, tmp_path)
    assert json.loads(json_file.read_text())["violations"] == data["violations"]
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 10_000
