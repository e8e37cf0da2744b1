"""`tng-lab run --pcap`: where the captures run, what tcpdump is asked, the bounds, and that a capture of tng traffic
on a namespace's interface decodes with the Wireshark dissector."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tng_lab import capture, cli, scenario
from tng_lab.netns import namespaces, sh
from tng_lab.plan import make_plan
from tng_lab.procs import running
from tng_lab.results import LabResults, summary_markdown

REPO = Path(__file__).resolve().parents[2]
DATA_TYPICAL = REPO / "testdata" / "wire" / "data-typical.json"
SCENARIO = """
name = "p"
ues = {ues}
[[links]]
name = "lte"
down = {{ rate = "10mbit" }}
[[links]]
name = "wifi"
down = {{ rate = "30mbit" }}
[[workloads]]
name = "w"
transport = "tcp"
paths = ["lte"]
"""


def plan_with(tmp_path: Path, ues: int):
    path = tmp_path / "p.toml"
    path.write_text(SCENARIO.format(ues=ues))
    return make_plan(scenario.load(path), "tlab42-", Path("/run/tng-lab/tlab42"))


@pytest.mark.parametrize(("ues", "far_end"), [(1, "tlab42-ue"), (2, "tlab42-gw")])
def test_both_ends_of_every_link_are_captured(tmp_path: Path, ues: int, far_end: str) -> None:
    plan = plan_with(tmp_path, ues)
    points = capture.capture_points(plan)
    assert [(p.link, p.end) for p in points] == [("lte", "switch"), ("lte", "ue"), ("wifi", "switch"), ("wifi", "ue")]
    by_end = {(p.link, p.end): p for p in points}
    for path in plan.paths:
        assert (by_end[path.name, "switch"].namespace, by_end[path.name, "switch"].interface) == (
            plan.switch_ns,
            path.switch_if,
        )
        assert (by_end[path.name, "ue"].namespace, by_end[path.name, "ue"].interface) == (far_end, path.ue_if)
    files = {p.file(tmp_path) for p in points}
    assert files == {tmp_path / "pcap" / f"{link}-{end}.pcap" for link in ("lte", "wifi") for end in ("switch", "ue")}


def test_tcpdump_is_bounded_by_snap_length_and_size_cap(tmp_path: Path) -> None:
    options = capture.PcapOptions(snaplen=128, max_bytes=1_000_000)
    point = capture.CapturePoint("lte", "ue", "tlab42-ue", "lte")
    argv = capture.tcpdump_command(point, tmp_path, options)
    assert argv[:5] == ["ip", "netns", "exec", "tlab42-ue", "tcpdump"]
    assert "--immediate-mode" in argv

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("-i") == "lte"
    assert value("-s") == "128"
    assert value("-w") == str(tmp_path / "pcap" / "lte-ue.pcap")
    assert value("-Z") == "root"
    limit = int(value("-c"))
    record = capture.PCAP_RECORD_HEADER + options.snaplen
    assert capture.PCAP_FILE_HEADER + limit * record <= options.max_bytes
    assert capture.PCAP_FILE_HEADER + (limit + 1) * record > options.max_bytes


def test_bounds_outside_what_tcpdump_takes_are_refused() -> None:
    with pytest.raises(ValueError, match="snap length 10"):
        capture.PcapOptions(snaplen=10)
    with pytest.raises(ValueError, match="holds no packet"):
        capture.PcapOptions(snaplen=256, max_bytes=100)


def test_the_cli_turns_pcap_flags_into_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.parser().parse_args(["run", "s.toml", "--pcap", "--pcap-snaplen", "96", "--pcap-max-mb", "5"])
    assert cli.pcap_options(args) == capture.PcapOptions(snaplen=96, max_bytes=5_000_000)
    assert cli.pcap_options(cli.parser().parse_args(["run", "s.toml"])) is None
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["run", "s.toml", "--pcap", "--pcap-snaplen", "20"])
    assert "--pcap-snaplen: 20 is outside 64..262144" in capsys.readouterr().err


def test_the_summary_says_where_the_pcaps_are(tmp_path: Path) -> None:
    results = LabResults(
        scenario="p",
        scenario_file=tmp_path / "p.toml",
        description="d",
        started="now",
        duration_s=1,
        repeat=1,
        seed=1,
        sample_ms=100,
        switch="Linux forwarding",
        links={},
        host={},
        pcap_dir=tmp_path / "pcap",
    )
    assert f"`{tmp_path / 'pcap'}`" in summary_markdown(results, [])
    results.pcap_dir = None
    assert "packet captures" not in summary_markdown(results, [])


@pytest.mark.needs_root
def test_a_capture_of_tng_traffic_decodes_with_the_dissector(tmp_path: Path) -> None:
    """tcpdump as the lab starts it, in a namespace, captures a tng datagram that tshark then decodes field by field."""
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    if shutil.which("tcpdump") is None or shutil.which("tshark") is None:
        pytest.skip("tcpdump or tshark not installed (make deps installs both)")
    vector = json.loads(DATA_TYPICAL.read_text())
    # Not a run's tlab<pid>- name: another run's `tng-lab clean` would take it for a leftover (pytest is no tng-lab).
    namespace = f"tngcap{os.getpid()}"
    point = capture.CapturePoint("lo", "ue", namespace, "lo")
    (tmp_path / capture.PCAP_DIR).mkdir()
    with namespaces([namespace]):
        sh(["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"])
        argv = capture.tcpdump_command(point, tmp_path, capture.PcapOptions())
        with running("tcpdump", argv, tmp_path / "tcpdump.log") as child:
            capture.wait_listening(child)
            datagram = f"bytes.fromhex({vector['hex']!r}), ('127.0.0.1', 5201)"
            send = f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto({datagram})"
            sh(["ip", "netns", "exec", namespace, sys.executable, "-c", send])
    tshark = ["tshark", "-X", f"lua_script:{REPO / 'tools' / 'wireshark' / 'tng.lua'}", "-r", str(point.file(tmp_path))]
    fields = ["tng.connection_id", "tng.packet_number", "tng.channel_id", "tng.flags"]
    done = subprocess.run(
        [
            *tshark,
            "-Y",
            "not icmp",  # nothing listens: the port-unreachable answer quotes the datagram again
            "-T",
            "fields",
            *(arg for field in fields for arg in ("-e", field)),
            "-E",
            "separator=,",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    decoded = [int(value, 0) for value in done.stdout.strip().split(",")]
    expected = vector["fields"]
    assert decoded == [expected["connection_id"], expected["packet_number"], expected["channel_id"], expected["flags"]]
