"""The VISIBLE retransmission helper: copies kept until the receiver acknowledges them, re-injection, health."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
from collections.abc import AsyncIterator, Iterable, Iterator

import finsy as fy
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from tng_controller.helper_frames import (
    HELPER_ETHERTYPE,
    Flow,
    Reason,
    helper_frame,
    parse_helper_frame,
    parse_tcp,
    seq_before,
)
from tng_controller.retransmit_helper import (
    FLOW_IDLE_S,
    HELPER_DOWN,
    HELPER_TABLE,
    HELPER_UP,
    IDLE_SWEEP_S,
    PACKET_IN_QUEUE,
    RELEASE_AFTER_BYTES,
    SILENT_RECEIVER_BYTES,
    SILENT_RECEIVER_S,
    Health,
    HelperStatus,
    RetransmitHelper,
    keep_switch_informed,
    probe_health,
    serve_health,
    serve_interface,
    serve_p4runtime,
)

SERVER, UE = "198.51.100.1", "192.0.2.1"
SERVER_PORT, UE_PORT = 80, 40000
DOWNLINK = Flow(SERVER, SERVER_PORT, UE, UE_PORT)
MSS = 100
ETH_P_ALL = 0x0003


def timestamps(tsval: int, tsecr: int) -> list[tuple[str, object]]:
    """TCP options as Linux sends them on an established connection without SACK."""
    return [("NOP", None), ("NOP", None), ("Timestamp", (tsval, tsecr))]


def segment(seq: int, length: int = MSS, flags: str = "A", options: list[tuple[str, object]] | None = None) -> bytes:
    """A downlink data segment as the switch received it from the server."""
    return bytes(
        Ether(src="00:00:5e:00:53:10", dst="00:00:5e:00:53:ff")
        / IP(src=SERVER, dst=UE)
        / TCP(sport=SERVER_PORT, dport=UE_PORT, seq=seq, ack=1, flags=flags, options=options or [])
        / Raw(load=bytes(length))
    )


def ack(number: int, options: list[tuple[str, object]] | None = None) -> bytes:
    """A pure ACK from the receiver (the UE)."""
    return bytes(
        Ether(src="00:00:5e:00:53:11", dst="00:00:5e:00:53:ff")
        / IP(src=UE, dst=SERVER)
        / TCP(sport=UE_PORT, dport=SERVER_PORT, seq=1, ack=number, flags="A", options=options or [])
    )


def confirmed_ranges(frames: list[bytes]) -> list[tuple[int, int]]:
    """The [start, end) of every COPIES_HELD frame among `frames` (all of them must be one)."""
    ranges = []
    for frame in frames:
        reason, inner = parse_helper_frame(frame)
        assert reason == Reason.COPIES_HELD
        held = parse_tcp(inner)
        assert (held.flow, held.length) == (DOWNLINK, 0)
        ranges.append((held.seq, held.ack))
    return ranges


def copy(helper: RetransmitHelper, seq: int, length: int = MSS) -> bytes:
    frame = segment(seq, length)
    confirmed_ranges(helper.handle(helper_frame(Reason.DATA_COPY, frame)))
    return frame


def report(helper: RetransmitHelper, number: int) -> list[tuple[int, int]]:
    return confirmed_ranges(helper.handle(helper_frame(Reason.ACK_REPORT, ack(number))))


def request(helper: RetransmitHelper, number: int, options: list[tuple[str, object]] | None = None) -> list[bytes]:
    """What the helper re-injects for a request (without the confirmations it may add)."""
    frames = helper.handle(helper_frame(Reason.RETRANSMIT, ack(number, options)))
    return [frame for frame in frames if not is_confirmation(frame)]


def is_confirmation(frame: bytes) -> bool:
    return frame[12:14] == HELPER_ETHERTYPE.to_bytes(2, "big") and parse_helper_frame(frame)[0] == Reason.COPIES_HELD


def test_seq_before_wraps_around() -> None:
    assert seq_before(0xFFFFFF00, 0x10)
    assert not seq_before(0x10, 0xFFFFFF00)
    assert not seq_before(5, 5)


def test_parse_tcp_reads_flow_seq_and_length() -> None:
    parsed = parse_tcp(segment(1000, 300, flags="FA"))
    assert (parsed.flow, parsed.seq, parsed.length, parsed.end) == (DOWNLINK, 1000, 301, 1301)
    assert parse_tcp(ack(77)).flow == DOWNLINK.reversed()


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (bytes(10), "too short"),
        (bytes(Ether(type=0x86DD) / Raw(load=bytes(60))), "not IPv4"),
        (bytes(Ether() / IP(src=UE, dst=SERVER, proto=17) / Raw(load=bytes(30))), "not an IPv4 TCP"),
        (segment(1, 50)[:-10], "total length"),
    ],
)
def test_parse_tcp_rejects_other_frames(frame: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tcp(frame)


def test_helper_frame_round_trip_and_errors() -> None:
    inner = segment(1)
    assert parse_helper_frame(helper_frame(Reason.RETRANSMIT, inner)) == (Reason.RETRANSMIT, inner)
    with pytest.raises(ValueError, match="ethertype"):
        parse_helper_frame(inner)
    with pytest.raises(ValueError, match="reason 9"):
        parse_helper_frame(helper_frame(Reason.DATA_COPY, inner)[:14] + b"\x09\x00" + inner)


def test_retransmit_request_returns_the_copy_holding_the_ack_number() -> None:
    helper = RetransmitHelper(generation=1)
    copy(helper, 1000)
    second = copy(helper, 1100)
    copy(helper, 1200)
    assert request(helper, 1100) == [second]
    assert request(helper, 1150) == [second]
    assert helper.stats.retransmitted == 2
    assert helper.health().generation == 1


def test_a_copy_older_than_the_receivers_timestamp_echo_is_re_injected_with_that_echo() -> None:
    """PAWS (RFC 7323): the receiver drops a segment with a TSval older than the one its ACKs echo. The expected
    frames are built by scapy, so the TCP checksum is the one the receiver checks."""
    helper = RetransmitHelper(generation=1)
    helper.handle(helper_frame(Reason.DATA_COPY, segment(1000, options=timestamps(100, 7))))
    helper.handle(helper_frame(Reason.DATA_COPY, segment(1100, options=timestamps(900, 7))))
    assert request(helper, 1000, timestamps(9, 500)) == [segment(1000, options=timestamps(500, 7))]
    assert request(helper, 1100, timestamps(9, 500)) == [segment(1100, options=timestamps(900, 7))]


def test_a_copy_is_re_injected_unchanged_when_the_request_or_the_copy_has_no_timestamps() -> None:
    helper = RetransmitHelper(generation=1)
    with_timestamps = segment(1000, options=timestamps(100, 7))
    helper.handle(helper_frame(Reason.DATA_COPY, with_timestamps))
    without = copy(helper, 1100)
    assert request(helper, 1000) == [with_timestamps]
    assert request(helper, 1100, timestamps(9, 500)) == [without]


def test_the_receivers_ack_frees_only_copies_wholly_below_it() -> None:
    helper = RetransmitHelper(generation=1)
    for seq in (1000, 1100, 1200):
        copy(helper, seq)
    report(helper, 1150)
    assert not helper.covered(DOWNLINK, 1000, 1100)
    assert helper.covered(DOWNLINK, 1100, 1300)
    assert helper.health().stored_segments == 2
    report(helper, 1300)
    assert helper.health() == Health(healthy=True, generation=1, stored_bytes=0, stored_segments=0, reason="started")


def test_a_stale_report_frees_nothing() -> None:
    helper = RetransmitHelper(generation=1)
    copy(helper, 1000)
    copy(helper, 1100)
    report(helper, 1100)
    report(helper, 1000)
    assert helper.covered(DOWNLINK, 1100, 1200)


def test_copies_survive_sequence_wraparound() -> None:
    helper = RetransmitHelper(generation=1)
    start = 0xFFFFFFFF - 150
    for seq in (start, start + MSS, start + 2 * MSS):
        copy(helper, seq & 0xFFFFFFFF)
    report(helper, (start + MSS) & 0xFFFFFFFF)
    assert helper.covered(DOWNLINK, (start + MSS) & 0xFFFFFFFF, (start + 3 * MSS) & 0xFFFFFFFF)
    assert request(helper, 10) == [segment((start + MSS) & 0xFFFFFFFF)]
    assert request(helper, 60) == [segment((start + 2 * MSS) & 0xFFFFFFFF)]


def test_a_request_without_a_copy_is_counted_and_changes_nothing_else() -> None:
    """A copy that never arrived was never confirmed, so the switch did not boost past it: no new generation."""
    helper = RetransmitHelper(generation=7)
    copy(helper, 1000)
    assert request(helper, 5000) == []
    health = helper.health()
    assert (health.healthy, health.generation, helper.stats.misses) == (True, 7, 1)


def test_confirmations_stop_at_a_lost_copy_until_the_receiver_acks_past_it() -> None:
    """The clone of [1200, 1300) is lost: the helper confirms up to 1200 only, however many copies follow; the
    receiver's ACK 1300 (it got the segment the switch forwarded) restarts the range there."""
    helper = RetransmitHelper(generation=1, confirm_bytes=0)
    assert confirmed_ranges(helper.handle(helper_frame(Reason.DATA_COPY, segment(1000)))) == [(1000, 1100)]
    assert confirmed_ranges(helper.handle(helper_frame(Reason.DATA_COPY, segment(1100)))) == [(1000, 1200)]
    for seq in (1300, 1400):
        assert helper.handle(helper_frame(Reason.DATA_COPY, segment(seq))) == []
    assert helper.held(DOWNLINK) == (1000, 1200)
    assert report(helper, 1150) == [(1000, 1200)]  # the receiver's first ACK: repeated
    assert report(helper, 1300) == [(1300, 1500)]
    assert helper.stats.confirmations == 4


def test_confirmations_come_every_confirm_bytes() -> None:
    helper = RetransmitHelper(generation=1, confirm_bytes=3 * MSS)
    confirmations = [
        confirmed_ranges(helper.handle(helper_frame(Reason.DATA_COPY, segment(seq)))) for seq in range(1000, 1700, MSS)
    ]
    assert confirmations == [[], [], [(1000, 1300)], [], [], [(1000, 1600)], []]


def test_the_receivers_first_ack_repeats_the_confirmation_and_a_later_one_past_a_gap_confirms_anew() -> None:
    """The switch ignores confirmations before the receiver's first ACK, so the helper repeats its range then. A
    request whose ACK number passes a lost clone restarts the range at the copy holding that ACK number."""
    helper = RetransmitHelper(generation=1, confirm_bytes=0)
    first = copy(helper, 1000)
    copy(helper, 1200)  # the clone of [1100, 1200) is lost
    answer = helper.handle(helper_frame(Reason.RETRANSMIT, ack(1050)))
    assert answer[0] == first and confirmed_ranges(answer[1:]) == [(1000, 1100)]
    answer = helper.handle(helper_frame(Reason.RETRANSMIT, ack(1250)))
    assert answer[0] == segment(1200) and confirmed_ranges(answer[1:]) == [(1250, 1300)]


def test_a_full_store_rejects_copies_and_reports_unhealthy() -> None:
    frame_bytes = len(segment(0))
    helper = RetransmitHelper(max_bytes=2 * frame_bytes, generation=1)
    copy(helper, 1000)
    copy(helper, 1100)
    copy(helper, 1200)
    health = helper.health()
    assert (health.healthy, health.generation, health.reason) == (False, 2, "store full")
    assert helper.stats.rejected_copies == 1
    report(helper, 1100)
    assert helper.health().healthy


def test_a_longer_copy_replaces_a_shorter_one_at_the_same_sequence_number() -> None:
    helper = RetransmitHelper(generation=1)
    copy(helper, 1000, 50)
    longer = copy(helper, 1000, 100)
    copy(helper, 1000, 20)
    assert request(helper, 1060) == [longer]
    assert helper.health().stored_bytes == len(longer)


def test_malformed_frames_are_counted_and_ignored() -> None:
    helper = RetransmitHelper(generation=1)
    assert helper.handle(b"\x00" * 20) == []
    assert helper.handle(helper_frame(Reason.DATA_COPY, b"\x00" * 30)) == []
    assert helper.stats.malformed == 2


def test_invariant_every_byte_between_the_receivers_ack_and_what_the_switch_may_boost_to_has_a_copy() -> None:
    """Random downlink segments (in order, with retransmissions), a fifth of whose clones are lost on the way, and
    receiver ACKs that lag behind what was forwarded. The switch takes a confirmation only if it starts at or below
    the receiver's ACK, and boosts at most to its end: every byte from the receiver's ACK up to there has a copy."""
    rng = random.Random(1)
    helper = RetransmitHelper(generation=1, confirm_bytes=2 * MSS)
    start = 0xFFFFF000  # crosses the 32-bit wraparound
    forwarded = start
    receiver = start
    boost_limit = start  # what the switch's confirmed_end would be

    def switch_reads(frames: list[bytes]) -> None:
        nonlocal boost_limit
        for held_from, held_to in confirmed_ranges(frames):
            if not seq_before(receiver & 0xFFFFFFFF, held_from) and seq_before(boost_limit & 0xFFFFFFFF, held_to):
                boost_limit = receiver + ((held_to - receiver) & 0xFFFFFFFF)

    for _ in range(3000):
        roll = rng.random()
        if roll < 0.6:
            length = rng.randint(1, 3 * MSS)
            if rng.random() > 0.2:
                switch_reads(helper.handle(helper_frame(Reason.DATA_COPY, segment(forwarded & 0xFFFFFFFF, length))))
            forwarded += length
        elif roll < 0.7 and forwarded > receiver:
            back = rng.randint(receiver, forwarded - 1)  # a sender retransmission of old data
            switch_reads(helper.handle(helper_frame(Reason.DATA_COPY, segment(back & 0xFFFFFFFF, forwarded - back))))
        else:
            receiver = rng.randint(receiver, forwarded)
            switch_reads(helper.handle(helper_frame(Reason.ACK_REPORT, ack(receiver & 0xFFFFFFFF))))
        assert boost_limit <= forwarded
        if boost_limit > receiver:
            assert helper.covered(DOWNLINK, receiver & 0xFFFFFFFF, boost_limit & 0xFFFFFFFF)
    assert helper.stats.confirmations > 100
    report(helper, forwarded & 0xFFFFFFFF)
    assert helper.health().stored_segments == 0


def test_helper_status_gives_a_new_epoch_per_generation_and_after_every_down() -> None:
    status = HelperStatus()

    def action(health: Health | None) -> fy.Action:
        entry = status.entry(health)
        assert entry.table_id == HELPER_TABLE and entry.is_default_action
        assert isinstance(entry.action, fy.Action)
        return entry.action

    def healthy(generation: int) -> Health:
        return Health(healthy=True, generation=generation, stored_bytes=0, stored_segments=0, reason="")

    assert action(healthy(5)) == fy.Action(HELPER_UP, epoch=1)
    assert action(healthy(5)) == fy.Action(HELPER_UP, epoch=1)
    assert action(healthy(6)) == fy.Action(HELPER_UP, epoch=2)
    assert action(None) == fy.Action(HELPER_DOWN)
    assert action(healthy(6)) == fy.Action(HELPER_UP, epoch=3)
    assert action(Health(healthy=False, generation=6, stored_bytes=1, stored_segments=1, reason="")) == fy.Action(
        HELPER_DOWN
    )


def test_helper_status_epochs_skip_zero_when_they_wrap() -> None:
    status = HelperStatus()
    epochs = set()
    for generation in range(0x10000):
        entry = status.entry(Health(healthy=True, generation=generation, stored_bytes=0, stored_segments=0, reason=""))
        assert isinstance(entry.action, fy.Action)
        epochs.add(entry.action.args["epoch"])
    assert 0 not in epochs and len(epochs) == 0xFFFF


async def test_health_probe_round_trip_and_unreachable_helper() -> None:
    helper = RetransmitHelper(generation=3)
    copy(helper, 1000)
    server = await serve_health(helper, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        assert await probe_health("127.0.0.1", port) == helper.health()
    assert await probe_health("127.0.0.1", port, timeout_s=0.5) is None


class FakeSwitch:
    """Packet-ins from a list; packet-outs recorded."""

    def __init__(self, payloads: list[bytes]) -> None:
        self.payloads = payloads
        self.written: list[fy.P4PacketOut] = []
        self.eth_types: Iterable[int] | None = None
        self.queue_size = 0

    async def read_packets(
        self, *, queue_size: int, eth_types: Iterable[int] | None = None
    ) -> AsyncIterator[fy.P4PacketIn]:
        self.queue_size = queue_size
        self.eth_types = eth_types
        for payload in self.payloads:
            yield fy.P4PacketIn(payload, metadata={"ingress_port": 1, "_pad": 0})

    async def write(self, entities: Iterable[fy.P4PacketOut]) -> None:
        self.written.extend(entities)


async def test_serve_p4runtime_answers_a_request_with_a_packet_out_to_the_cpu_port() -> None:
    data = segment(1000)
    switch = FakeSwitch([helper_frame(Reason.DATA_COPY, data), helper_frame(Reason.RETRANSMIT, ack(1000)), data])
    await asyncio.wait_for(serve_p4runtime(switch, RetransmitHelper(generation=1)), 5)
    assert [is_confirmation(out.payload) for out in switch.written] == [False, True]  # the first ACK: a repeat
    del switch.written[1]
    assert switch.eth_types == {HELPER_ETHERTYPE}
    assert switch.queue_size == PACKET_IN_QUEUE > 50  # finsy's default queue drops packet-ins when the helper lags
    assert [(out.payload, out.metadata) for out in switch.written] == [(data, {"egress_port": 255, "_pad": 0})]


async def test_keep_switch_informed_writes_only_changes() -> None:
    healthy = Health(healthy=True, generation=1, stored_bytes=0, stored_segments=0, reason="")
    reports: list[Health | None] = [healthy, healthy, None, None, healthy]
    written: list[fy.P4TableEntry] = []
    done = asyncio.Event()

    class RecordingSwitch:
        async def modify(self, entities: Iterable[fy.P4TableEntry]) -> None:
            written.extend(entities)

    async def probe() -> Health | None:
        if not reports:
            done.set()
            await asyncio.Event().wait()
        return reports.pop(0)

    task = asyncio.create_task(keep_switch_informed(RecordingSwitch(), probe, interval_s=0))
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    actions = [entry.action for entry in written]
    assert actions == [fy.Action(HELPER_UP, epoch=1), fy.Action(HELPER_DOWN), fy.Action(HELPER_UP, epoch=2)]


@pytest.fixture
def veth_pair() -> Iterator[tuple[str, str]]:
    """Two ends of a fresh veth pair, up; deleted afterwards. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a veth pair")
    ends = (f"tngh{os.getpid() % 100000}a", f"tngh{os.getpid() % 100000}b")
    subprocess.run(["ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1]], check=True)
    try:
        for end in ends:
            subprocess.run(["ip", "link", "set", end, "up"], check=True)
        yield ends
    finally:
        subprocess.run(["ip", "link", "del", ends[0]], check=False)


@pytest.mark.needs_root
async def test_serve_interface_answers_on_the_helper_port(veth_pair: tuple[str, str]) -> None:
    """Frames from the switch arrive on the helper's interface; the copy goes back out of it."""
    helper_end, switch_end = veth_pair
    data = segment(1000)
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)) as switch:
        switch.bind((switch_end, 0))
        switch.setblocking(False)
        task = asyncio.create_task(serve_interface(helper_end, RetransmitHelper(generation=1)))
        try:
            await asyncio.sleep(0.2)  # the helper's sockets are bound
            await loop.sock_sendall(switch, helper_frame(Reason.DATA_COPY, data))
            await loop.sock_sendall(switch, helper_frame(Reason.RETRANSMIT, ack(1000)))
            async with asyncio.timeout(5):
                while (frame := await loop.sock_recv(switch, 65535)) != data:
                    assert not frame.startswith(data[:12]), "the helper sent something else"
        finally:
            task.cancel()


def test_a_flow_without_copies_or_acks_for_a_minute_is_forgotten_and_its_copies_freed() -> None:
    # The soak found the store growing by copies of flows whose sender or receiver was killed: nothing would ever
    # acknowledge them, and a full store disables VISIBLE for good.
    now = 1000.0
    helper = RetransmitHelper(clock=lambda: now)
    for seq in range(1000, 1500, MSS):
        copy(helper, seq)
    other_flow = bytes(
        Ether(src="00:00:5e:00:53:10", dst="00:00:5e:00:53:ff")
        / IP(src=SERVER, dst=UE)
        / TCP(sport=SERVER_PORT, dport=UE_PORT + 1, seq=5000, ack=1, flags="A")
        / Raw(load=bytes(MSS))
    )
    now += 30
    report(helper, 1100)  # the receiver acknowledged one segment: the flow is alive
    now += FLOW_IDLE_S - 10
    helper.handle(helper_frame(Reason.DATA_COPY, other_flow))
    assert helper.health().stored_segments == 4 + 1, "50 s after its last ACK the flow is kept"
    now += 15
    helper.handle(helper_frame(Reason.DATA_COPY, other_flow))
    health = helper.health()
    assert (health.stored_segments, health.stored_bytes) == (1, len(other_flow)), "only the other flow's copy"
    assert helper.stats.expired_flows == 1
    assert helper.held(DOWNLINK) is None and helper.copy_at(DOWNLINK, 1200) is None


def test_once_megabytes_of_copies_are_freed_the_next_sweep_gives_the_memory_back() -> None:
    # glibc keeps freed copies in its heap: without a release the helper's RSS stays at the most it ever held.
    now = 1000.0
    releases: list[float] = []
    helper = RetransmitHelper(clock=lambda: now, release_memory=lambda: releases.append(now))
    length = 1400
    count = RELEASE_AFTER_BYTES // length + 1
    for seq in range(1000, 1000 + count * length, length):
        copy(helper, seq, length)
    now += IDLE_SWEEP_S
    report(helper, 1000 + (count // 2) * length)
    assert releases == [], "half of it freed is not enough"
    report(helper, 1000 + count * length)
    assert releases == [], "the release waits for the next sweep"
    now += IDLE_SWEEP_S
    copy(helper, 1000 + count * length)
    assert releases == [now] and helper.stats.memory_releases == 1
    now += IDLE_SWEEP_S
    copy(helper, 1000 + count * length + MSS)
    assert releases == [now - IDLE_SWEEP_S], "nothing more was freed"


def test_a_flow_piling_up_copies_that_no_ack_frees_gets_one_warning_until_an_ack_frees_some(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The 60-minute soak saw the helper hold a whole 20 s transfer (25 MiB) of one flow: the warning names the flow
    # and says whether the switch reported its receiver's ACKs at all.
    now = 1000.0
    helper = RetransmitHelper(clock=lambda: now)
    length = 1400
    count = SILENT_RECEIVER_BYTES // length + 1
    end = 1000 + count * length
    for seq in range(1000, end, length):
        copy(helper, seq, length)
    now += SILENT_RECEIVER_S
    copy(helper, end, length)
    assert helper.stats.silent_receivers == 1
    assert "no ACK freed any for 5 s (last ACK reported: none, acknowledged up to: none)" in caplog.text
    now += IDLE_SWEEP_S
    copy(helper, end + length, length)
    assert helper.stats.silent_receivers == 1, "one warning per silence"
    report(helper, 1000 + length)
    now += SILENT_RECEIVER_S
    copy(helper, end + 2 * length, length)
    assert helper.stats.silent_receivers == 2, "after an ACK freed copies, a new silence is warned of again"
    assert f"acknowledged up to: {1000 + length}" in caplog.text
