"""The link prober: its ICMP frames (checked with Scapy), the arithmetic of windowed minima and the delay difference
(fake clock), and its loop against a fake switch whose UE answers each link's probes after a controlled delay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import finsy as fy
import pytest
from scapy.layers.inet import ICMP, IP
from scapy.layers.l2 import Ether
from tng_controller.config import MonitorConfig, parse
from tng_controller.probe import MIN_ANSWERS, DelayDifference, Outstanding, RouteProbe, RttWindow
from tng_controller.probe_frames import echo_request, parse_echo_reply
from tng_controller.prober import LinkProber

LTE, WIFI, CORE = 2, 3, 1
SOURCE, TARGET = IPv4Address("10.0.0.254"), IPv4Address("10.2.0.2")
LTE_MAC, WIFI_MAC = 0x0200000002AA, 0x0200000003AA


def test_an_echo_request_is_a_valid_frame_and_its_reply_parses() -> None:
    frame = echo_request(0x020000000201, 0x020000000002, SOURCE, TARGET, identifier=0x1234, sequence=7)
    packet = Ether(frame)
    assert (packet.dst, packet.src) == ("02:00:00:00:02:01", "02:00:00:00:00:02")
    assert (packet[IP].src, packet[IP].dst, packet[IP].ttl) == ("10.0.0.254", "10.2.0.2", 64)
    assert (packet[ICMP].type, packet[ICMP].id, packet[ICMP].seq) == (8, 0x1234, 7)
    rebuilt = packet.copy()
    del rebuilt[IP].chksum, rebuilt[ICMP].chksum
    assert bytes(Ether(bytes(rebuilt))) == frame  # Scapy computes the same checksums

    reply = answer(frame)
    parsed = parse_echo_reply(reply)
    assert parsed is not None
    assert (parsed.source, parsed.destination, parsed.identifier, parsed.sequence) == (TARGET, SOURCE, 0x1234, 7)
    assert parse_echo_reply(frame) is None  # a request, not a reply
    assert parse_echo_reply(reply[:30]) is None
    corrupted = bytearray(reply)
    corrupted[-1] ^= 0xFF
    assert parse_echo_reply(bytes(corrupted)) is None
    fragment = Ether(reply)
    fragment[IP].flags = "MF"
    del fragment[IP].chksum
    assert parse_echo_reply(bytes(fragment)) is None


def answer(request: bytes) -> bytes:
    """The target's echo reply to `request`."""
    packet = Ether(request)
    reply = (
        Ether(src=packet.dst, dst=packet.src)
        / IP(src=packet[IP].dst, dst=packet[IP].src)
        / ICMP(type=0, id=packet[ICMP].id, seq=packet[ICMP].seq)
        / bytes(packet[ICMP].payload)
    )
    return bytes(reply)


def test_the_window_keeps_the_minimum_of_its_last_seconds() -> None:
    window = RttWindow(window_s=10.0)
    assert window.minimum(0.0) is None
    window.add(0.050, now=0.0)
    window.add(0.080, now=4.0)  # queueing
    window.add(0.060, now=8.0)
    assert window.minimum(9.0) == (0.050, 3)
    assert window.minimum(12.0) == (0.060, 2)  # the 50 ms answer left the window
    assert window.minimum(30.0) is None


QUEUEING_S = 0.010


def probe_with(*answers: tuple[int, int, float, float]) -> RouteProbe:
    """A route probe with (sent on, answered on, round trip, at) answers recorded, each with MIN_ANSWERS - 1 more that
    waited QUEUEING_S longer (a minimum counts from MIN_ANSWERS answers on)."""
    probe = RouteProbe(LTE, WIFI, window_s=10.0)
    for sent_on, answered_on, rtt, at in answers:
        probe.sent[sent_on] += MIN_ANSWERS
        probe.answered(sent_on, answered_on, rtt, at)
        for _ in range(MIN_ANSWERS - 1):
            probe.answered(sent_on, answered_on, rtt + QUEUEING_S, at)
    return probe


def test_answers_on_a_common_port_give_the_downlink_difference() -> None:
    probe = probe_with(
        (LTE, WIFI, 0.0450, 0.0),  # LTE down 25 ms + queueing 10 ms + Wi-Fi up 5 ms + target 5 ms
        (LTE, WIFI, 0.0350, 1.0),
        (WIFI, WIFI, 0.0150, 1.0),
        (WIFI, WIFI, 0.0200, 2.0),
    )
    difference = probe.difference(now=2.0)
    assert difference.us == pytest.approx(20_000)
    assert difference.state == "both links' probes answered on wifi"
    rtts = [(r.sent_on, r.answered_on, round(r.min_rtt_s * 1e6), r.answers) for r in probe.rtts(2.0)]
    assert rtts == [(LTE, WIFI, 35_000, 2 * MIN_ANSWERS), (WIFI, WIFI, 15_000, 2 * MIN_ANSWERS)]


def test_answers_on_each_own_link_are_halved_as_symmetric_links() -> None:
    probe = probe_with((LTE, LTE, 0.050, 0.0), (WIFI, WIFI, 0.010, 0.0))
    difference = probe.difference(now=1.0)
    assert difference.us == pytest.approx(20_000)
    assert difference.state == "each link's probes answered on that link (links taken as symmetric)"


def test_a_common_port_wins_over_own_links_and_the_latest_common_port_over_others() -> None:
    probe = probe_with(
        (LTE, LTE, 0.050, 0.0),
        (WIFI, WIFI, 0.010, 0.0),
        (LTE, CORE, 0.070, 1.0),
        (WIFI, CORE, 0.040, 1.0),
        (LTE, WIFI, 0.031, 2.0),
        (WIFI, WIFI, 0.012, 2.0),
    )
    difference = probe.difference(now=2.0)
    assert difference.us == pytest.approx(21_000)  # on wifi, answered last: 31 - 10 ms
    assert difference.state == "both links' probes answered on wifi"


def test_missing_and_crossed_answers_leave_the_difference_unknown_with_the_reason() -> None:
    silent = RouteProbe(LTE, WIFI, window_s=10.0)
    assert silent.difference(0.0).state == "no lte probe sent yet"
    outstanding = Outstanding(timeout_s=1.0)
    sent = [outstanding.sent(silent, port, now=0.0) for port in (LTE, WIFI)]
    assert outstanding.answered(sent[1], WIFI, now=0.01) is silent
    assert outstanding.answered(sent[1], WIFI, now=0.02) is None  # a duplicate
    outstanding.expire(now=0.5)
    assert silent.unanswered == {LTE: 0, WIFI: 0}  # not yet past the timeout
    outstanding.expire(now=1.0)
    assert silent.unanswered == {LTE: 1, WIFI: 0}
    assert outstanding.answered(sent[0], WIFI, now=1.2) is None  # too late: already counted unanswered
    difference = silent.difference(now=1.2)
    assert difference.us is None
    assert difference.state == "no answer to lte probes within the last 10 s (1 sent, 1 unanswered)"

    crossed = probe_with((LTE, WIFI, 0.030, 0.0), (WIFI, LTE, 0.030, 0.0))
    assert crossed.difference(1.0).us is None
    assert crossed.difference(1.0).state == (
        "answers came back crossed (lte probes on wifi; wifi probes on lte): no common uplink"
    )
    stale = probe_with((LTE, WIFI, 0.030, 0.0), (WIFI, WIFI, 0.010, 0.0))
    assert stale.difference(11.0).us is None  # every answer left the window

    few = RouteProbe(LTE, WIFI, window_s=10.0)
    for port in (LTE, WIFI):
        few.sent[port] += MIN_ANSWERS
        for _ in range(MIN_ANSWERS - 1):
            few.answered(port, WIFI, 0.030, now=0.0)
    assert few.difference(1.0) == DelayDifference(
        None, f"{MIN_ANSWERS - 1} answers to lte probes within the last 10 s (the minimum needs 5 on one port)"
    )
    few.answered(LTE, WIFI, 0.030, now=0.5)
    few.answered(WIFI, WIFI, 0.010, now=0.5)
    assert few.difference(1.0).us == pytest.approx(20_000)


def test_sequence_numbers_wrap_and_skip_probes_in_flight() -> None:
    probe = RouteProbe(LTE, WIFI, window_s=10.0)
    outstanding = Outstanding(timeout_s=1e9)
    first = outstanding.sent(probe, LTE, now=0.0)
    sequences = [outstanding.sent(probe, WIFI, now=0.0) for _ in range(65_535)]
    assert first == 0 and sequences[-1] == 65_535
    outstanding.answered(10, WIFI, now=1.0)
    assert outstanding.sent(probe, WIFI, now=2.0) == 10  # 0 is still in flight, 10 was answered


SWITCH = {
    "name": "lwip",
    "address": "127.0.0.1:9559",
    "probe_source": str(SOURCE),
    "port": [
        {"port": CORE, "role": "core"},
        {"port": LTE, "role": "lte", "mac": "02:00:00:00:02:aa", "capacity": "10mbit"},
        {"port": WIFI, "role": "wifi", "mac": "02:00:00:00:03:aa", "capacity": "30mbit"},
    ],
    "route": [
        {"prefix": "10.0.0.0/24", "port": CORE, "dst_mac": "02:00:00:00:01:01"},
        {
            "prefix": "10.2.0.0/24",
            "lte": {"port": LTE, "dst_mac": "02:00:00:00:02:01"},
            "wifi": {"port": WIFI, "dst_mac": "02:00:00:00:03:01"},
            "probe": str(TARGET),
        },
    ],
}


class FakeUe:
    """A switch whose LTE and Wi-Fi ports lead to one UE: it answers each echo request after the delay of the port the
    request left by (none for ports in `silent`), on `answer_on` or, without it, on that same port."""

    def __init__(self, delays_s: dict[int, float], answer_on: int | None = None, silent: Iterable[int] = ()) -> None:
        self.delays_s = delays_s
        self.answer_on = answer_on
        self.silent = set(silent)
        self.sent: list[fy.P4PacketOut] = []
        self._answers: asyncio.Queue[fy.P4PacketIn] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(self, entities: Iterable[fy.P4PacketOut]) -> None:
        for packet in entities:
            self.sent.append(packet)
            port = packet.metadata["egress_port"]
            if port not in self.silent:
                task = asyncio.create_task(self._answer(packet.payload, port))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _answer(self, request: bytes, port: int) -> None:
        await asyncio.sleep(self.delays_s[port])
        reply = answer(request)
        self._answers.put_nowait(fy.P4PacketIn(reply, metadata={"ingress_port": self.answer_on or port, "_pad": 0}))

    async def read_packets(
        self, *, queue_size: int, eth_types: Iterable[int] | None = None
    ) -> AsyncIterator[fy.P4PacketIn]:
        assert set(eth_types or ()) == {0x0800}
        while True:
            yield await self._answers.get()


async def run_prober(ue: FakeUe, seconds: float) -> LinkProber:
    config = parse({"switch": [SWITCH]}, Path(".")).switches[0]
    monitor = MonitorConfig(probe_interval_s=0.02, probe_window_s=5.0, probe_timeout_s=0.3)
    prober = LinkProber(config, monitor, identifier=0x4242)
    tasks = [asyncio.create_task(prober.receive(ue)), asyncio.create_task(prober.send(ue))]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return prober


async def test_the_prober_measures_a_30_ms_later_lte_answered_over_wifi() -> None:
    ue = FakeUe({LTE: 0.035, WIFI: 0.005}, answer_on=WIFI)
    prober = await run_prober(ue, 0.6)
    first_lte = Ether(ue.sent[0].payload)
    assert ue.sent[0].metadata == {"egress_port": LTE, "_pad": 0}
    assert (first_lte.dst, first_lte.src, first_lte[IP].dst, first_lte[ICMP].id) == (
        "02:00:00:00:02:01",
        "02:00:00:00:02:aa",
        str(TARGET),
        0x4242,
    )
    assert ue.sent[1].metadata["egress_port"] == WIFI and Ether(ue.sent[1].payload).src == "02:00:00:00:03:aa"
    (_, probe) = prober.routes[IPv4Network("10.2.0.0/24")]
    difference = probe.difference(asyncio.get_running_loop().time())
    assert difference.us == pytest.approx(30_000, abs=5_000)
    assert difference.state == "both links' probes answered on wifi"
    assert probe.sent[LTE] >= 10 and probe.unanswered == {LTE: 0, WIFI: 0}


async def test_the_prober_halves_own_link_answers_and_counts_silence() -> None:
    symmetric = await run_prober(FakeUe({LTE: 0.070, WIFI: 0.010}), 0.6)
    (_, probe) = symmetric.routes[IPv4Network("10.2.0.0/24")]
    assert probe.difference(asyncio.get_running_loop().time()).us == pytest.approx(30_000, abs=5_000)

    silent = await run_prober(FakeUe({LTE: 0.0, WIFI: 0.0}, silent=[LTE]), 0.6)
    (_, probe) = silent.routes[IPv4Network("10.2.0.0/24")]
    difference = probe.difference(asyncio.get_running_loop().time())
    assert difference.us is None
    assert difference.state.startswith("no answer to lte probes within the last 5 s (")
    assert probe.unanswered[LTE] >= 10 and probe.unanswered[WIFI] == 0
