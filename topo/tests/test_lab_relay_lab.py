"""tng_lab.relay_lab: Tng's DSL experiment with a real `tng relay` process, real `tng perf` and kernel CUBIC cross
traffic in namespaces, at reduced length (download only, 2 levels of 4 s), and its numbers from fabricated input.

The end-to-end test needs root and the release binaries (lab_binaries: TNG_LAB_BIN_DIR or cargo). It asserts what
can be observed whatever the machine's load: every transfer intact, the split run carried by the relay, the cross
flow started on schedule, the report's per-level numbers; never a goodput or delay target.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import lab_binaries
import pytest
from tng_lab import relay_lab_repeats, relay_lab_report
from tng_lab.linkem import Counters, LinkCounters
from tng_lab.netns import list_namespaces, run_prefix
from tng_lab.relay_lab import DIRECTIONS, SCHEMES, Options, run_name, run_scheme
from tng_lab.relay_lab_net import Links, Net, QueueSample
from tng_lab.runner import REPO, Binaries

bin_dir = lab_binaries.bin_dir  # the shared fixture, collected in this module too

LEVEL_S, MAX_CROSS = 4, 1
SECTION_PAYLOAD_MAX = 1429  # an end-to-end datagram through a relay is at most this long (docs/architecture.md)


@pytest.mark.needs_root
def test_three_schemes_on_real_processes_are_intact_and_the_relay_carries_the_split(
    bin_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "relay-lab"
    argv = [sys.executable, "-m", "tng_lab.relay_lab", "--out", str(out), "--direction", "download"]
    argv += ["--level-seconds", str(LEVEL_S), "--max-cross", str(MAX_CROSS), "--bin-dir", str(bin_dir)]
    run = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = run.communicate(timeout=180)
    assert run.returncode == 0, stderr[-3000:]
    assert "download, split (relay): 1 cross flow(s) from" in stderr  # progress on stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"tlab{run.pid}-" not in listed  # every namespace of the run is gone
    report = json.loads((out / "relay-lab.json").read_text())
    assert report["verified"] is True
    assert list(report["directions"]) == ["download"]
    assert report["repeat"] == 1
    (run_result,) = report["directions"]["download"]["runs"]
    schemes = run_result["schemes"]
    assert list(schemes) == [scheme.label for scheme in SCHEMES]
    for label, scheme in schemes.items():
        transfer = scheme["transfer"]
        assert transfer["exit_status"] == 0 and transfer["verified"], label
        assert transfer["bytes_corrupted"] == 0, label
        assert transfer["bytes_checked"] > 1_000_000, label  # 8 s on a 10 Mbit/s DSL
        # One cross flow, started one level in, intact.
        (flow,) = scheme["cross_traffic"]
        assert flow["start_s"] == LEVEL_S and abs(flow["started_s"] - LEVEL_S) < 1.0, label
        assert flow["exit_status"] == 0 and flow["bytes_corrupted"] == 0 and flow["bytes_received"] > 0, label
        assert flow["sender_cc"] == "cubic", label
        assert [level["cross_flows"] for level in scheme["levels"]] == [0, 1], label
        for level in scheme["levels"]:
            for key in ("goodput_mbps", "p95_srtt_ms", "p95_dsl_queue_ms"):
                assert level[key] is not None and level[key] >= 0, (label, level)
        assert len(scheme["timeline"]) == LEVEL_S * (MAX_CROSS + 1), label
        assert scheme["queue_samples"] > 0 and scheme["srtt_samples"] > 0 and scheme["in_flight_samples"] > 0, label
    split = schemes["split (relay)"]
    assert split["split"] is True and split["sender_cc"] == "cubic"
    # Every data datagram of the split run crossed the relay in a SECTION of its own: at least as many forwarded.
    assert split["relay"]["forwarded"] >= split["transfer"]["bytes_checked"] / SECTION_PAYLOAD_MAX
    # The relay's trace: about ten samples a second, the data's direction forwarded what the client checked.
    relay = split["relay"]
    assert len(relay["samples"]) >= 5 * LEVEL_S * (MAX_CROSS + 1)
    assert relay["samples"][-1]["forwarded"] >= split["transfer"]["bytes_checked"] / SECTION_PAYLOAD_MAX
    assert [level["cross_flows"] for level in relay["levels"]] == [0, 1]
    assert sum(second["forwarded_per_s"] or 0 for second in relay["seconds"]) <= relay["forwarded"]
    assert schemes["end-to-end CUBIC"]["relay"] is None and schemes["end-to-end Vegas"]["relay"] is None
    assert schemes["end-to-end Vegas"]["sender_cc"] == "vegas"
    comparison = report["directions"]["download"]["comparison"]
    assert [row["cross_flows"] for row in comparison] == [0, 1]
    for row in comparison:
        assert row["split_over_cubic_goodput"] is not None and row["split_over_cubic_p95_srtt"] is not None
        assert set(row["targets"]) == {"goodput_at_least_0_95", "p95_delay_at_most_0_2"}
    ratio = run_result["comparison"][1]["split_over_cubic_goodput"]
    assert comparison[1]["per_run"]["split_over_cubic_goodput"] == [ratio]
    for name in ("goodput", "delay", "dsl-queue", "relay", "levels"):
        assert (out / f"download-{name}.png").stat().st_size > 10_000


@pytest.mark.needs_root
def test_a_relay_on_the_path_splits_a_connection_addressed_to_the_server(bin_dir: Path, tmp_path: Path) -> None:
    """The split scheme with `tng relay --on-path` in the routing namespace and the client's `--relay on-path`: the
    client sends its SECTIONs to the server's address, the namespace diverts them to the relay, and the relay answers
    as the server. Intact, and carried by the relay, or the interception did not happen."""
    on_path = Options(tmp_path, Binaries.locate(bin_dir), Links(), LEVEL_S, max_cross=0, relay_queue=64, on_path=True)
    split = SCHEMES[0]
    assert split.split
    report = run_scheme(on_path, DIRECTIONS["download"], split)
    transfer = report["transfer"]
    assert transfer["exit_status"] == 0 and transfer["verified"] and transfer["bytes_corrupted"] == 0, transfer
    assert transfer["bytes_checked"] > 1_000_000, transfer  # 4 s on a 10 Mbit/s DSL
    assert report["relay"]["forwarded"] >= transfer["bytes_checked"] / SECTION_PAYLOAD_MAX, report["relay"]
    assert not [ns for ns in list_namespaces() if ns.startswith(run_prefix())]


def options(tmp_path: Path) -> Options:
    binaries = Binaries(tmp_path / "tng", tmp_path / "linkem")
    return Options(tmp_path, binaries, Links(), level_s=2.0, max_cross=1, relay_queue=64)


def counters(queue_bytes: int, forwarded: int) -> dict[str, int]:
    names = ["packets_in", "bytes_in", "forwarded_packets", "dropped_queue", "dropped_loss", "dropped_send"]
    names += ["dropped_oversize", "dropped_kernel", "ecn_marked", "checksum_completed", "queue_packets"]
    names += ["delay_line_packets"]
    return {**dict.fromkeys(names, 0), "queue_bytes": queue_bytes, "forwarded_bytes": forwarded}


def sample(t: float, dsl_queue_bytes: int, core_forwarded: int) -> QueueSample:
    dsl = LinkCounters(Counters.from_json(counters(dsl_queue_bytes, 0)), Counters.from_json(counters(0, 0)))
    core = LinkCounters(Counters.from_json(counters(0, core_forwarded)), Counters.from_json(counters(0, 0)))
    return QueueSample(t, dsl, core)


def test_a_scheme_s_levels_come_from_its_seconds_its_sender_s_srtt_and_the_dsl_queue(tmp_path: Path) -> None:
    t0 = 1000.0
    transfer = {"goodput_per_second": [(1, 4.0), (2, 9.0), (3, 8.0), (4, 6.0)], "bytes_checked": 1}
    sender = relay_lab_report.SenderMetrics(
        srtt_ms=[(t0 + 0.5, 100.0), (t0 + 2.5, 300.0)],
        in_flight_bytes=[(t0 + 0.5, 20_000.0), (t0 + 3.0, 60_000.0)],
        section_window_bytes=[(t0 + 1.5, 30_000.0)],
    )
    # 12,500 bytes in the 10 Mbit/s DSL's queue are 10 ms; the core carried 1.25 MB between the second level's first
    # and last samples (2.0 and 3.9 s).
    samples = [sample(t0 + t / 10, 12_500 if t < 20 else 25_000, 0 if t < 21 else 1_250_000) for t in range(41)]
    samples[-1] = sample(t0 + 4.0, 25_000, 1_250_000)
    samples[20] = sample(t0 + 2.0, 25_000, 0)
    report = relay_lab_report.scheme_report(
        options(tmp_path), DIRECTIONS["download"], t0, transfer, sender, samples, []
    )
    first, second = report["levels"]
    assert (first["from_s"], first["to_s"], second["from_s"]) == (1.0, 2.0, 2.0)
    assert first["goodput_mbps"] == 9.0  # second 1 is before measure_after_s
    assert second["goodput_mbps"] == 7.0
    assert first["p95_srtt_ms"] == 100.0 and second["p50_srtt_ms"] == 300.0
    assert first["p95_dsl_queue_ms"] == 10.0 and second["p95_dsl_queue_ms"] == 20.0
    assert second["core_mbit_sending_direction"] == round(1.25e6 * 8 / 1e6 / 1.9, 2)
    assert [point["t_s"] for point in report["timeline"]] == [1, 2, 3, 4]
    assert report["timeline"][2]["sender_srtt_ms"] == 300.0
    assert [point["sender_in_flight_kb"] for point in report["timeline"]] == [20.0, 20.0, 60.0, 60.0]
    assert [point["sender_section_window_kb"] for point in report["timeline"]] == [None, 30.0, 30.0, 30.0]
    # On the 100 ms grid the second level (2.0-3.9 s) holds 20 kB ten times and 60 kB ten times (from 3.0 s).
    assert first["sender_in_flight_mean_kb"] == 20.0 and second["sender_in_flight_mean_kb"] == 40.0
    assert "goodput_per_second" not in report["transfer"]


def trace_line(unix_s: float, received: int, forwarded: int, queued: int, queue_full: int) -> dict[str, object]:
    toward_client = {"queued": queued, "received": received, "forwarded": forwarded, "queue_full": queue_full}
    toward_client |= {"window": 20_000, "in_flight": 10_000, "srtt_ms": 25.0, "lost": 0, "cc": "vegas"}
    idle = {**toward_client, "received": 0, "forwarded": 0, "queued": 0, "queue_full": 0}
    connection = {"id": "00000000000000ab", "toward_client": toward_client, "toward_server": idle}
    stats = {"forwarded": forwarded, "queue_full": queue_full, "dropped": 0}
    return {"t_s": unix_s - 990.0, "unix_s": unix_s, "stats": stats, "connections": [connection]}


def test_the_relay_s_trace_gives_its_queue_per_level_and_the_seconds_it_starved(tmp_path: Path) -> None:
    t0 = 1000.0
    # Second 1 and 2 (level 0, from 1 s): 800 SECTIONs a second, queue 10. Second 3 (level 1): the upstream sends
    # 300, the queue is empty and goodput falls; second 4: back to 800, two queue-full drops.
    trace = [trace_line(t0 + 0.05, 0, 0, 0, 0)]
    received = forwarded = 0
    for tenth in range(1, 41):
        per_tenth = 30 if 20 < tenth <= 30 else 80
        received, forwarded = received + per_tenth, forwarded + per_tenth
        queued = 0 if 20 < tenth <= 30 else 10
        trace.append(trace_line(t0 + tenth / 10, received, forwarded, queued, 2 if tenth > 35 else 0))
    timeline = [{"t_s": k, "goodput_mbps": 3.5 if k == 3 else 9.4} for k in range(1, 5)]
    levels = [{"cross_flows": 0, "from_s": 1.0, "to_s": 2.0}, {"cross_flows": 1, "from_s": 2.0, "to_s": 4.0}]
    relay = relay_lab_report.relay_report(options(tmp_path), t0, trace, {"timeline": timeline, "levels": levels})
    assert (relay["forwarded"], relay["queue_full"], relay["dropped"]) == (2700, 2, 0)
    assert len(relay["samples"]) == 41 and relay["samples"][0]["t_s"] == 0.05
    assert [second["received_per_s"] for second in relay["seconds"]] == [800, 800, 300, 800]
    assert [second["queue_full_per_s"] for second in relay["seconds"]] == [0, 0, 0, 2]
    assert relay["seconds"][2]["queue_empty_share"] == 1.0 and relay["seconds"][1]["queue_empty_share"] == 0.0
    first, second = relay["levels"]
    assert (
        first["queued_mean"] == 10.0 and first["queue_empty_share"] == 0.0 and first["seconds_starved_upstream"] == []
    )
    assert second["seconds_starved_upstream"] == [3] and second["queue_full"] == 2
    assert second["queue_empty_share"] == 0.5


def level(flows: int, goodput: float, p95: float) -> dict[str, object]:
    return {"cross_flows": flows, "goodput_mbps": goodput, "p95_srtt_ms": p95, "p95_dsl_queue_ms": p95 / 2}


def test_the_comparison_gives_the_ratios_to_end_to_end_cubic_and_tng_s_targets() -> None:
    schemes = {
        "split (relay)": {"levels": [level(0, 9.5, 200.0), level(1, 8.0, 300.0)]},
        "end-to-end CUBIC": {"levels": [level(0, 9.5, 1000.0), level(1, 9.6, 1000.0)]},
        "end-to-end Vegas": {"levels": [level(0, 9.4, 300.0), level(1, 2.4, 300.0)]},
    }
    rows = relay_lab_report.compare(schemes)
    assert rows[0]["split_over_cubic_goodput"] == 1.0 and rows[0]["split_over_cubic_p95_srtt"] == 0.2
    assert rows[0]["targets"] == {"goodput_at_least_0_95": True, "p95_delay_at_most_0_2": True}
    assert rows[1]["split_over_cubic_goodput"] == 0.833 and rows[1]["vegas_over_cubic_goodput"] == 0.25
    assert rows[1]["targets"] == {"goodput_at_least_0_95": False, "p95_delay_at_most_0_2": False}


def comparison_row(flows: int, split: tuple[float, float], cubic: tuple[float, float]) -> dict[str, object]:
    """One level of one run as relay_lab_report.compare gives it: (goodput, p95 SRTT) per scheme, Vegas at half."""
    schemes = {
        "split (relay)": {"levels": [level(flows, *split)]},
        "end-to-end CUBIC": {"levels": [level(flows, *cubic)]},
        "end-to-end Vegas": {"levels": [level(flows, cubic[0] / 2, cubic[1])]},
    }
    (row,) = relay_lab_report.compare(schemes)
    return row


def test_repeated_runs_pool_per_level_mean_goodput_and_median_p95_with_every_run_s_ratios_kept(tmp_path: Path) -> None:
    runs = [
        [comparison_row(0, (9.0, 200.0), (9.5, 1000.0)), comparison_row(1, (6.0, 300.0), (9.5, 1000.0))],
        [comparison_row(0, (9.5, 190.0), (9.5, 1100.0)), comparison_row(1, (9.0, 250.0), (9.5, 1100.0))],
        [comparison_row(0, (9.4, 900.0), (9.5, 1200.0)), comparison_row(1, (9.3, 260.0), (9.5, 1200.0))],
    ]
    pooled = relay_lab_repeats.pool(runs)
    assert [row["cross_flows"] for row in pooled] == [0, 1] and pooled[0]["runs"] == 3
    # Goodput: the mean of the runs' (9.3 against 9.5); p95: the median (200 against 1100), so one run's 900 ms
    # outlier does not decide it.
    assert pooled[0]["goodput_mbps"]["split (relay)"] == 9.3 and pooled[0]["p95_srtt_ms"]["split (relay)"] == 200.0
    assert pooled[0]["split_over_cubic_goodput"] == 0.979 and pooled[0]["split_over_cubic_p95_srtt"] == 0.182
    assert pooled[0]["targets"] == {"goodput_at_least_0_95": True, "p95_delay_at_most_0_2": True}
    assert pooled[0]["per_run"]["split_over_cubic_p95_srtt"] == [0.2, 0.173, 0.75]
    # One run's bad spell (6.0 Mbit/s) weighs as one of three: 8.1 / 9.5.
    assert pooled[1]["split_over_cubic_goodput"] == 0.853 and pooled[1]["vegas_over_cubic_goodput"] == 0.5
    assert pooled[1]["per_run"]["split_over_cubic_goodput"] == [0.632, 0.947, 0.979]
    assert pooled[1]["targets"] == {"goodput_at_least_0_95": False, "p95_delay_at_most_0_2": False}
    path = relay_lab_repeats.plot_levels("download", pooled, tmp_path, "test")
    assert path == tmp_path / "download-levels.png" and path.stat().st_size > 10_000


def test_runs_that_do_not_share_their_levels_are_not_pooled() -> None:
    with pytest.raises(ValueError, match="different numbers of levels"):
        relay_lab_repeats.pool([[comparison_row(0, (9.0, 200.0), (9.5, 1000.0))], []])
    with pytest.raises(ValueError, match="no runs"):
        relay_lab_repeats.pool([])


def test_repeated_runs_are_named_by_their_number_and_a_single_run_keeps_the_direction_s_name(tmp_path: Path) -> None:
    single, repeated = options(tmp_path), dataclasses.replace(options(tmp_path), repeat=2)
    assert run_name(single, DIRECTIONS["download"], 1) == "download"
    assert run_name(repeated, DIRECTIONS["upload"], 2) == "upload-run2"
    refused = subprocess.run(
        [sys.executable, "-m", "tng_lab.relay_lab", "--repeat", "0", "--out", str(tmp_path / "x")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2 and "--repeat must be at least 1, not 0" in refused.stderr
    assert not (tmp_path / "x").exists()


def test_the_sender_s_srtt_flight_and_section_window_are_read_from_its_qlog_even_when_its_last_line_is_cut(
    tmp_path: Path,
) -> None:
    header = {"trace": {"common_fields": {"reference_time": 1_000_000.0}}}
    events = [
        {"time": 10.0, "name": "recovery:metrics_updated", "data": {"channel": 0, "smoothed_rtt": 120.5}},
        {"time": 20.0, "name": "transport:packet_sent", "data": {"channel": 0}},
        {"time": 30.0, "name": "recovery:metrics_updated", "data": {"channel": 0, "bytes_in_flight": 1000}},
        {"time": 40.0, "name": "recovery:metrics_updated", "data": {"channel": 0, "smoothed_rtt": 150.0}},
        {"time": 45.0, "name": "recovery:metrics_updated", "data": {"channel": 1, "bytes_in_flight": 500}},
        {
            "time": 46.0,
            "name": "tng:section_updated",
            "data": {"remote": "10.20.2.1:4477", "congestion_window": 14720, "smoothed_rtt": None},
        },
        {"time": 47.0, "name": "tng:section_updated", "data": {"remote": "10.20.2.1:4477", "congestion_window": 20000}},
    ]
    lines = [json.dumps(header), *(json.dumps(event) for event in events)]
    cut_short = '{"time":50.0,"name":"recovery:metrics_updated","data":{"channel":0,"smoothed_rtt":16'
    (tmp_path / "abc-server.sqlog").write_text("\n".join("\x1e" + line for line in lines) + "\n" + cut_short)
    metrics = relay_lab_report.sender_metrics(tmp_path)
    assert metrics.srtt_ms == [(1000.01, 120.5), (1000.04, 150.0)]
    assert metrics.in_flight_bytes == [(1000.03, 1000.0), (1000.045, 1500.0)]  # the channels' added up
    assert metrics.section_window_bytes == [(1000.046, 14720.0), (1000.047, 20000.0)]  # one section, as it changed


def test_the_network_routes_every_host_through_the_relay_namespace(tmp_path: Path) -> None:
    commands = [" ".join(command) for command in Net("tlab1-", tmp_path).commands()]
    assert "ip -n tlab1-client route add default via 10.20.1.1" in commands
    assert "ip -n tlab1-server route add default via 10.20.2.1" in commands
    assert "ip -n tlab1-cross route add default via 10.20.3.1" in commands
    assert "ip netns exec tlab1-relay sysctl -qw net.ipv4.ip_forward=1" in commands
    assert Links().core_queue_bytes == 1_250_000  # one BDP of 100 Mbit/s over 100 ms
