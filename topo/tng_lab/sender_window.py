"""The data sender's congestion window during a kernel TCP (or MPTCP) run, from `ss -tin` in the server namespace.

One TCP connection steered over two links must keep in flight both links' bandwidth-delay products plus whatever
queue the steering builds on the faster link before it uses the slower one. Whether the sender's window got there
tells a mode that lacked packets to send from one that lost or reordered them: the counters of tcpstats say what
reordering cost, this series says what the window allowed. A thread runs `ss` every interval; times are on the
lab's clock (time.monotonic), relative to the run's time 0.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass

DATA_CONNECTION_BYTES = 64 * 1024  # a connection that carried less is the perf tool's control connection
SS_TIMEOUT_S = 2.0
_FIELD = re.compile(r"(?<![\w(])(cwnd|ssthresh|unacked|rtt|bytes_acked|mss):([\d.]+)")


@dataclass(frozen=True, slots=True)
class SocketSample:
    peer: str  # the receiver's address:port: one per TCP connection (MPTCP: per subflow)
    cwnd: int  # packets
    ssthresh: int | None  # packets; None while the kernel has not set one (initial slow start)
    unacked: int  # packets in flight
    srtt_ms: float
    bytes_acked: int


@dataclass(frozen=True, slots=True)
class WindowSeries:
    """The data connections' window over a run, one point per sample (MPTCP: its subflows added up)."""

    t_s: list[float]
    cwnd_packets: list[int]
    in_flight_packets: list[int]
    ssthresh_packets: list[int | None]  # the largest data connection's
    srtt_ms: list[float]  # the largest data connection's
    connections: int  # data connections seen (MPTCP: subflows)
    # Full-size packets in flight that keep the links busy at their base RTTs (None on a trace link, whose rate
    # varies): each link's rate x RTT for a connection per link (MPTCP); the links' summed rate x the longest RTT for
    # one connection steered across them, whose packets arrive in order only as late as the slowest link's.
    needed_packets: float | None
    cwnd_mean_packets: float
    cwnd_max_packets: int


def parse(output: str) -> list[SocketSample]:
    """`ss -tinHO` lines (one connection each, established only) to samples; lines without a window are skipped."""
    samples = []
    for line in output.splitlines():
        columns = line.split()
        if len(columns) < 4:
            continue
        values = dict(_FIELD.findall(line))
        if "cwnd" not in values:
            continue
        samples.append(
            SocketSample(
                peer=columns[3],
                cwnd=int(values["cwnd"]),
                ssthresh=int(values["ssthresh"]) if "ssthresh" in values else None,
                unacked=int(values.get("unacked", "0")),
                srtt_ms=float(values.get("rtt", "0")),
                bytes_acked=int(values.get("bytes_acked", "0")),
            )
        )
    return samples


def series(samples: list[tuple[float, list[SocketSample]]], needed_packets: float | None) -> WindowSeries | None:
    """The data connections' series from timed samples; None when no connection carried data."""
    carried: dict[str, int] = {}
    for _, sockets in samples:
        for sock in sockets:
            carried[sock.peer] = max(carried.get(sock.peer, 0), sock.bytes_acked)
    data = {peer for peer, acked in carried.items() if acked >= DATA_CONNECTION_BYTES}
    if not data:
        return None
    largest = max(data, key=carried.__getitem__)
    t_s, cwnd, in_flight, ssthresh, srtt = [], [], [], [], []
    for t, sockets in samples:
        mine = [sock for sock in sockets if sock.peer in data]
        if not mine:
            continue
        t_s.append(round(t, 3))
        cwnd.append(sum(sock.cwnd for sock in mine))
        in_flight.append(sum(sock.unacked for sock in mine))
        main = next((sock for sock in mine if sock.peer == largest), None)
        ssthresh.append(main.ssthresh if main else None)
        srtt.append(main.srtt_ms if main else 0.0)
    return WindowSeries(
        t_s=t_s,
        cwnd_packets=cwnd,
        in_flight_packets=in_flight,
        ssthresh_packets=ssthresh,
        srtt_ms=srtt,
        connections=len(data),
        needed_packets=needed_packets,
        cwnd_mean_packets=round(sum(cwnd) / len(cwnd), 1),
        cwnd_max_packets=max(cwnd),
    )


class SenderWindowSampler:
    """Samples the sockets of `port` in `namespace` every `interval_s` from start() until stop()."""

    def __init__(
        self, namespace: str, port: int, origin: float, interval_s: float, needed_packets: float | None
    ) -> None:
        self._argv = ["ip", "netns", "exec", namespace, "ss", "-tinHO", "state", "established", f"( sport = :{port} )"]
        self._origin = origin
        self._interval_s = interval_s
        self._needed_packets = needed_packets
        self._samples: list[tuple[float, list[SocketSample]]] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ss {namespace}:{port}", daemon=True)

    def start(self) -> SenderWindowSampler:
        self._thread.start()
        return self

    def stop(self) -> WindowSeries | None:
        self._stopped.set()
        self._thread.join()
        return series(self._samples, self._needed_packets)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stopped.is_set():
            taken = time.monotonic()
            try:
                done = subprocess.run(self._argv, capture_output=True, text=True, timeout=SS_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                done = None  # a machine too busy to run ss this interval: the series has a gap, not a wrong point
            if done is not None and done.returncode == 0:
                self._samples.append((taken - self._origin, parse(done.stdout)))
            next_at += self._interval_s
            self._stopped.wait(max(0.0, next_at - time.monotonic()))
