"""tng_lab.lossy_wan_lab: Tng's lossy WAN with two real `tng relay` processes and real `tng perf` in namespaces, at
reduced length (NewReno only, two loss steps of 4 s: none, then 2 %), and its numbers from fabricated input.

The end-to-end test needs root and the release binaries (lab_binaries: TNG_LAB_BIN_DIR or cargo). It asserts what
can be observed whatever the machine's load: every transfer intact, the split run carried by both relays, the WAN
dropping packets once its loss is raised; never a goodput or a ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import lab_binaries
import pytest
from tng_lab.lossy_wan_lab import Options, levels, parse_losses
from tng_lab.lossy_wan_lab_net import Links, Net
from tng_lab.runner import REPO, Binaries

bin_dir = lab_binaries.bin_dir  # the shared fixture, collected in this module too

STEP_S = 4
SECTION_PAYLOAD_MAX = 1429  # an end-to-end datagram through a relay is at most this long (docs/architecture.md)


@pytest.mark.needs_root
def test_split_and_end_to_end_on_real_processes_are_intact_and_both_relays_carry_the_split(
    bin_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "lossy-wan-lab"
    argv = [sys.executable, "-m", "tng_lab.lossy_wan_lab", "--out", str(out), "--controllers", "newreno"]
    argv += ["--step-seconds", str(STEP_S), "--losses", "0,2", "--bin-dir", str(bin_dir)]
    run = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = run.communicate(timeout=180)
    assert run.returncode == 0, stderr[-3000:]
    assert "split, newreno: 8 s on a fresh topology" in stderr  # progress on stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"tlab{run.pid}-" not in listed  # every namespace of the run is gone
    report = json.loads((out / "lossy-wan-lab.json").read_text())
    assert report["verified"] is True and json.loads(stdout)["verified"] is True
    assert list(report["runs"]) == ["split, newreno", "end-to-end newreno"]
    for label, run_report in report["runs"].items():
        transfer = run_report["transfer"]
        assert transfer["exit_status"] == 0 and transfer["verified"] and transfer["bytes_corrupted"] == 0, label
        assert transfer["bytes_checked"] > 1_000_000, label  # 8 s of a 20 Mbit/s WAN
        assert [step["random_loss"] for step in run_report["loss_applied"]] == [0.0, 0.02], label
        assert abs(run_report["loss_applied"][1]["at_s"] - STEP_S) < 1.0, label
        # The WAN dropped packets for its loss model only once it was raised, in both directions.
        wan = run_report["wan"]
        assert wan["toward_receiver"]["dropped_loss"] > 0 and wan["toward_sender"]["dropped_loss"] > 0, label
        assert [(level["from_s"], level["random_loss"]) for level in run_report["levels"]] == [(0, 0.0), (4, 0.02)]
        assert all(level["goodput_mbps"] > 0 for level in run_report["levels"]), label
    split = report["runs"]["split, newreno"]
    assert split["split"] is True and split["controller"] == "newreno"
    # Every data datagram crossed both relays in a SECTION of its own: each forwarded at least as many.
    for name in ("relay-a", "relay-b"):
        relay = split["relays"][name]
        assert relay["forwarded"] >= split["transfer"]["bytes_checked"] / SECTION_PAYLOAD_MAX, name
        assert relay["samples"] >= 5 * 2 * STEP_S, name  # a trace line every 100 ms
    assert report["runs"]["end-to-end newreno"]["relays"] == {}
    (row_none, row_lossy) = report["levels"]
    assert row_none["random_loss"] == 0.0 and row_lossy["random_loss"] == 0.02
    for row in report["levels"]:
        assert row["newreno"]["split_over_end_to_end"] is not None
    assert (out / "cumulative.png").stat().st_size > 10_000


def options(losses: tuple[float, ...], step_s: float = 10.0) -> Options:
    return Options(Path("/nonexistent"), Binaries(Path("tng"), Path("linkem")), Links(), step_s, losses, 256)


def test_a_level_is_the_mean_of_the_whole_seconds_inside_its_step() -> None:
    seconds = [(1, 10.0), (2, 20.0), (3, 30.0), (4, 1.0), (5, 3.0)]
    rows = levels(options((0.0, 0.01, 0.02), step_s=2.0), seconds)
    assert rows == [
        {"from_s": 0.0, "to_s": 2.0, "random_loss": 0.0, "goodput_mbps": 15.0},
        {"from_s": 2.0, "to_s": 4.0, "random_loss": 0.01, "goodput_mbps": 15.5},
        {"from_s": 4.0, "to_s": 6.0, "random_loss": 0.02, "goodput_mbps": 3.0},
    ]
    # A step the transfer never reached delivered nothing.
    assert levels(options((0.0, 0.5)), [(1, 8.0)])[1]["goodput_mbps"] == 0.0


def test_loss_rates_are_percentages_and_bad_ones_are_refused_with_the_reason() -> None:
    assert parse_losses("0, 0.05,2") == (0.0, 0.0005, 0.02)
    for bad in ("", "1,x", "-1", "100"):
        with pytest.raises(argparse.ArgumentTypeError, match="--losses"):
            parse_losses(bad)


def test_the_network_routes_each_site_through_the_relay_namespaces_across_the_wan(tmp_path: Path) -> None:
    commands = [" ".join(command) for command in Net("tlab1-", tmp_path).commands()]
    assert "ip -n tlab1-sender route add default via 10.21.1.1" in commands
    assert "ip -n tlab1-receiver route add default via 10.21.3.1" in commands
    assert "ip -n tlab1-relay-a route add 10.21.3.0/24 via 10.21.2.2" in commands
    assert "ip -n tlab1-relay-b route add 10.21.1.0/24 via 10.21.2.1" in commands
    for relay in ("relay-a", "relay-b"):
        assert f"ip netns exec tlab1-{relay} sysctl -qw net.ipv4.ip_forward=1" in commands
    assert Links().wan_queue_bytes == 250_000  # one BDP of 20 Mbit/s over 100 ms
