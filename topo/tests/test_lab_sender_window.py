"""The data sender's window from `ss -tinHO`: the fields read, the connections counted, what the series adds up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tng_lab.scenario import load
from tng_lab.sender_window import SenderWindowSampler, SocketSample, parse, series
from tng_lab.workload_run import needed_packets

# Two lines as iproute2 6.1 prints them with -tinHO and a state filter (no State column): the data connection in
# congestion avoidance with BBR's nested fields, which must not be read as the top-level ones, and the perf tool's
# control connection.
SS_OUTPUT = (
    "0      1448000 10.0.0.1:5201 10.1.0.2:40000 cubic wscale:7,7 rto:232 rtt:31.5/2.1 ato:40 mss:1448 pmtu:1500 "
    "rcvmss:536 advmss:1448 cwnd:87 ssthresh:61 bytes_sent:9000000 bytes_acked:8800000 segs_out:6300 "
    "bbr:(bw:1bps,mrtt:9.9,pacing_gain:2) send 32Mbps lastsnd:1 pacing_rate 38Mbps delivery_rate 29Mbps "
    "delivered:6100 unacked:80 retrans:0/12 reordering:30 rcv_rtt:1.5 rcv_space:14480 rcv_ssthresh:64088 "
    "minrtt:10.2 snd_wnd:3000000\n"
    "0      0      10.0.0.1:5201 10.1.0.2:39998 cubic wscale:7,7 rto:204 rtt:0.5/0.25 mss:1448 cwnd:10 "
    "bytes_sent:120 bytes_acked:121 segs_out:3 minrtt:0.4\n"
)


def test_parse_reads_the_top_level_window_fields_of_each_connection() -> None:
    data, control = parse(SS_OUTPUT)
    assert data == SocketSample(
        peer="10.1.0.2:40000", cwnd=87, ssthresh=61, unacked=80, srtt_ms=31.5, bytes_acked=8800000
    )
    assert control == SocketSample(
        peer="10.1.0.2:39998", cwnd=10, ssthresh=None, unacked=0, srtt_ms=0.5, bytes_acked=121
    )


def test_parse_skips_lines_without_a_window() -> None:
    assert parse("\n0 0 10.0.0.1:5201 10.1.0.2:1 cubic\nshort line\n") == []


def sample(peer: str, cwnd: int, acked: int, unacked: int = 0, ssthresh: int | None = None) -> SocketSample:
    return SocketSample(peer, cwnd, ssthresh, unacked, srtt_ms=20.0, bytes_acked=acked)


def test_series_adds_up_the_data_connections_and_leaves_out_the_control_connection() -> None:
    control = "10.1.0.2:1"
    samples = [
        (0.1, [sample(control, 10, 100), sample("10.1.0.2:2", 10, 0)]),
        (0.2, [sample(control, 10, 100), sample("10.1.0.2:2", 40, 90_000, unacked=35), sample("10.2.0.2:3", 20, 0)]),
        (0.3, [sample("10.1.0.2:2", 60, 500_000, unacked=50, ssthresh=44), sample("10.2.0.2:3", 30, 70_000)]),
    ]
    window = series(samples, needed_packets=67.5)
    assert window is not None
    assert window.connections == 2  # MPTCP's two subflows; the control connection carried 100 bytes
    assert window.t_s == [0.1, 0.2, 0.3]
    assert window.cwnd_packets == [10, 60, 90]
    assert window.in_flight_packets == [0, 35, 50]
    assert window.ssthresh_packets == [None, None, 44]  # the connection that carried the most
    assert window.cwnd_mean_packets == 53.3 and window.cwnd_max_packets == 90
    assert window.needed_packets == 67.5


def test_series_is_none_when_no_connection_carried_data() -> None:
    assert series([(0.1, [sample("10.1.0.2:1", 10, 100)])], needed_packets=None) is None


SENDER = """
import socket, time
with socket.create_server(("127.0.0.1", 5299)) as listener:
    print("listening", flush=True)
    connection, _ = listener.accept()
    with connection:
        for _ in range(64):
            connection.sendall(b"x" * 65536)
            time.sleep(0.01)
        connection.recv(1)
"""
RECEIVER = """
import socket, time
with socket.create_connection(("127.0.0.1", 5299)) as client:
    left = 64 * 65536
    while left:
        left -= len(client.recv(65536))
    time.sleep(0.3)
    client.send(b"!")
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ss") is None, reason="needs root and ss (iproute2)")
def test_sampler_follows_a_real_connection_in_a_namespace() -> None:
    namespace = f"tngsw{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True)
        inside = ["ip", "netns", "exec", namespace, sys.executable, "-c"]
        with subprocess.Popen([*inside, SENDER], stdout=subprocess.PIPE, text=True) as sender:
            assert sender.stdout is not None and sender.stdout.readline() == "listening\n"
            sampler = SenderWindowSampler(namespace, 5299, time.monotonic(), 0.05, needed_packets=None).start()
            subprocess.run([*inside, RECEIVER], check=True, timeout=20)
            sender.wait(timeout=10)
            window = sampler.stop()
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    assert window is not None, "the sampler saw no data connection"
    assert window.connections == 1
    assert len(window.t_s) >= 3 and min(window.cwnd_packets) >= 1


def test_a_steered_connection_needs_the_summed_rate_over_the_slowest_round_trip() -> None:
    scenario = load(Path(__file__).resolve().parents[1] / "scenarios" / "lwip.toml")
    workloads = {workload.name: workload for workload in scenario.workloads}
    # LTE 10 Mbit/s at 50 ms, Wi-Fi 30 Mbit/s at 10 ms, in 1500-byte packets
    assert needed_packets(scenario, workloads["mptcp"]) == 66.7  # 41.7 + 25: each subflow its own RTT
    # 40 Mbit/s x 30 ms: LTE's 25 ms down, the ACKs 5 ms back over Wi-Fi (where the UE answers)
    assert needed_packets(scenario, workloads["earliest-arrival"]) == 100.0
    assert needed_packets(scenario, workloads["tcp-wifi"]) == 25.0
