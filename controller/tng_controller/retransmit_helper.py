"""VISIBLE local-retransmission helper: keeps copies of downlink TCP segments, re-injects one when the switch asks.

The tng pipeline (p4src/v1model/visible.p4) clones three kinds of frames to the helper, each behind an Ethernet
header of type 0x88b5 and a 2-byte helper header (reason, reserved):

- DATA_COPY: a downlink segment of a VISIBLE flow, as the switch received it. The helper keeps it.
- ACK_REPORT: the receiver's own ACK. Copies wholly below its ACK number are freed: the receiver has those bytes.
- RETRANSMIT: a dup-ACK past the hold budget. The helper sends the copy holding its ACK number back to the switch,
  which routes it toward the receiver (packet-out to the CPU port, or a frame on the helper port). A receiver drops
  a segment whose timestamp is older than the newest it took in order (RFC 7323, PAWS), which its dup-ACK echoes;
  a copy sent before that (say, before a sender retransmission filled an earlier hole) gets that echo as its
  timestamp, or the receiver would drop it every time.

Copies are freed only by the receiver's own ACK numbers, never by what the switch sent upstream (a boosted ACK).

A clone can be lost on its way (BMv2's CPU port queue, the packet-in stream, a full packet-in queue in the
controller), and the switch cannot see that. So the helper tells the switch what it holds: a COPIES_HELD frame (the
helper header, then an IPv4/TCP header of the data direction whose sequence number starts, and ACK number ends, a
range of which the helper holds every byte) whenever that range grew by `confirm_bytes`. The range starts at the
receiver's ACK (or the flow's first copy) and ends at the first byte missing; the switch boosts only up to its end.
Together: a copy of every byte the switch acknowledged on the receiver's behalf exists until the receiver
acknowledges it.

Health: the switch boosts only while the controller says the helper is up (table ingress.visible.helper). The
helper reports `healthy` (it has room for more copies) and a `generation` that changes whenever copies it confirmed
may be gone or it rejected one (start, store full). HelperStatus turns health reports into that table's default
entry, with a new epoch for every generation.

Transports: `serve_p4runtime` runs inside a controller that holds the switch's P4Runtime stream (packet-in and
packet-out); `serve_interface` and the command line attach to the switch's helper port through an AF_PACKET socket
(needs CAP_NET_RAW) and answer health probes on a TCP port (`probe_health`).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Protocol

import finsy as fy

from tng_controller.helper_frames import (
    HELPER_ETHERTYPE,
    Flow,
    Reason,
    TcpSegment,
    copies_held_frame,
    parse_helper_frame,
    parse_tcp,
    seq_before,
    seq_distance,
    timestamp_echo,
    with_timestamp_at_least,
)

LOGGER = logging.getLogger(__name__)

CPU_PORT = 255
DEFAULT_MAX_BYTES = 64 << 20
# A confirmation every ~6 MSS-sized copies: boosts need confirmed bytes ahead of the receiver's ACK, and the receiver
# lags what was forwarded by a round trip, so coarser confirmations cost little boosting and save packet-outs.
DEFAULT_CONFIRM_BYTES = 8 << 10
# A flow whose copies saw neither a new copy nor an ACK for this long is forgotten: its sender was killed, its
# receiver went away or moved, or it gave up; TCP's own retransmission timer has fired many times over by then, so a
# held copy no longer helps anyone and would only fill the store for good.
FLOW_IDLE_S = 60.0
# How often handle() looks for idle flows (a look costs one pass over the flows held).
IDLE_SWEEP_S = 5.0
# A flow holding this much with none of its copies freed for SILENT_RECEIVER_S gets one warning: the switch copies its
# segments but none of the receiver's ACKs it reports frees any, so nothing does until the flow goes idle.
SILENT_RECEIVER_BYTES = 4 << 20
SILENT_RECEIVER_S = 5.0
# Copies are a few hundred to a thousand bytes each, which glibc's malloc keeps in its heap once freed: without help
# the helper's memory would stay at the most it ever held (a delay burst, a receiver gone with a full window). When
# this much was freed since the last time, the next sweep hands free pages back to the system.
RELEASE_AFTER_BYTES = 4 << 20
# finsy drops packet-ins ("packet ignored") while the helper's queue is full; its default holds 50.
PACKET_IN_QUEUE = 8192

# P4Info names of the helper status table (p4src/README.md, "tng: the main pipeline").
HELPER_TABLE = "ingress.visible.helper"
HELPER_UP = "ingress.visible.helper_up"
HELPER_DOWN = "ingress.visible.helper_down"


@dataclass(frozen=True, slots=True)
class Health:
    """What a health probe reports."""

    healthy: bool
    generation: int
    stored_bytes: int
    stored_segments: int
    reason: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Health:
        data = json.loads(text)
        return cls(
            healthy=bool(data["healthy"]),
            generation=int(data["generation"]),
            stored_bytes=int(data["stored_bytes"]),
            stored_segments=int(data["stored_segments"]),
            reason=str(data["reason"]),
        )


@dataclass(slots=True)
class Stats:
    """Event counts since start."""

    copies: int = 0
    rejected_copies: int = 0
    reports: int = 0
    requests: int = 0
    retransmitted: int = 0
    misses: int = 0
    freed_segments: int = 0
    expired_flows: int = 0
    silent_receivers: int = 0  # flows warned of: copies piling up that no reported ACK frees
    memory_releases: int = 0
    confirmations: int = 0
    malformed: int = 0


@dataclass(frozen=True, slots=True)
class _Copy:
    seq: int
    end: int
    frame: bytes


@dataclass(slots=True)
class _Held:
    """A flow's range with a copy of every byte, and how far the switch was told so."""

    start: int
    end: int
    confirmed: int


class RetransmitHelper:
    """The helper's state machine, free of I/O: `handle` takes a frame from the switch, returns frames to send back."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        generation: int | None = None,
        confirm_bytes: int = DEFAULT_CONFIRM_BYTES,
        clock: Callable[[], float] = time.monotonic,
        release_memory: Callable[[], None] | None = None,
    ) -> None:
        """`release_memory` gives freed memory back to the system (default: glibc's malloc_trim, where there is one)."""
        self.max_bytes = max_bytes
        self.confirm_bytes = confirm_bytes
        self.stats = Stats()
        self._generation = generation if generation is not None else int.from_bytes(os.urandom(4), "big")
        self._copies: dict[Flow, dict[int, _Copy]] = {}
        self._held: dict[Flow, _Held] = {}
        self._acked: dict[Flow, int] = {}
        self._last_active: dict[Flow, float] = {}  # of each flow with copies: its last copy or ACK
        self._flow_bytes: dict[Flow, int] = {}  # stored bytes per flow
        self._last_freed: dict[Flow, float] = {}  # of each flow with copies: when an ACK last freed some (or 1st copy)
        self._last_report: dict[Flow, int] = {}  # the receiver's ACK number the switch last sent, stale or not
        self._warned_silent: set[Flow] = set()
        self._stored_bytes = 0
        self._stored_peak = 0  # the most stored since memory was last released
        self._reason = "started"
        self._clock = clock
        self._next_sweep = clock() + IDLE_SWEEP_S
        self._release_memory = release_memory if release_memory is not None else _malloc_trim()

    def handle(self, frame: bytes) -> list[bytes]:
        """Process one frame from the switch; the result is what to send back to it: re-injected copies (routed
        toward the receiver) and confirmations of the copies held (COPIES_HELD frames)."""
        try:
            reason, inner = parse_helper_frame(frame)
            segment = parse_tcp(inner)
        except ValueError as error:
            self.stats.malformed += 1
            LOGGER.warning("ignoring frame from the switch: %s", error)
            return []
        self._forget_idle_flows()
        if reason == Reason.COPIES_HELD:
            return []  # our own confirmation, seen again by a packet socket on the helper port
        if reason == Reason.DATA_COPY:
            self._keep(segment, inner)
            return self._confirmation(segment.flow)
        data_flow = segment.flow.reversed()
        # The switch ignores confirmations until it has seen the receiver's first ACK: repeat them at the first.
        first_ack = data_flow not in self._acked
        self._acknowledge(data_flow, segment.ack)
        if reason == Reason.ACK_REPORT:
            self.stats.reports += 1
            return self._confirmation(data_flow, repeat=first_ack)
        self.stats.requests += 1
        found = self.copy_at(data_flow, segment.ack)
        if found is None:
            # Never confirmed (its clone was lost), so the switch has not boosted past it: the sender repairs it.
            self.stats.misses += 1
            LOGGER.info("no copy of %s at %d: its clone never reached the helper", data_flow, segment.ack)
            return self._confirmation(data_flow, repeat=first_ack)
        self.stats.retransmitted += 1
        echo = timestamp_echo(inner)
        if echo is not None:
            found = with_timestamp_at_least(found, echo)
        return [found, *self._confirmation(data_flow, repeat=first_ack)]

    def held(self, flow: Flow) -> tuple[int, int] | None:
        """The range [start, end) of `flow` the helper holds every byte of and confirms to the switch, if any."""
        held = self._held.get(flow)
        return None if held is None else (held.start, held.end)

    def copy_at(self, flow: Flow, seq: int) -> bytes | None:
        """The stored frame whose segment holds sequence number `seq` of `flow`, if any."""
        found = self._holding(flow, seq)
        return None if found is None else found.frame

    def _holding(self, flow: Flow, seq: int) -> _Copy | None:
        for copy in self._copies.get(flow, {}).values():
            if not seq_before(seq, copy.seq) and seq_before(seq, copy.end):
                return copy
        return None

    def covered(self, flow: Flow, start: int, end: int) -> bool:
        """Every sequence number in [start, end) of `flow` is in a stored copy."""
        position = start
        for copy in sorted(self._copies.get(flow, {}).values(), key=lambda c: seq_distance(start, c.seq)):
            if not seq_before(position, end) or seq_before(position, copy.seq):
                break
            if seq_before(position, copy.end):
                position = copy.end
        return not seq_before(position, end)

    def health(self) -> Health:
        full = self._stored_bytes >= self.max_bytes
        return Health(
            healthy=not full,
            generation=self._generation,
            stored_bytes=self._stored_bytes,
            stored_segments=sum(len(copies) for copies in self._copies.values()),
            reason="store full" if full else self._reason,
        )

    def _keep(self, segment: TcpSegment, frame: bytes) -> None:
        if segment.length == 0:
            return
        acked = self._acked.get(segment.flow)
        if acked is not None and not seq_before(acked, segment.end):
            return  # the receiver already has every byte of it
        copies = self._copies.setdefault(segment.flow, {})
        now = self._clock()
        self._last_active[segment.flow] = now
        self._last_freed.setdefault(segment.flow, now)
        known = copies.get(segment.seq)
        if known is not None and not seq_before(known.end, segment.end):
            return
        if self._stored_bytes + len(frame) > self.max_bytes:
            self.stats.rejected_copies += 1
            self._new_generation("store full: a copy was rejected")
            return
        if known is not None:
            self._count(segment.flow, -len(known.frame))
        copies[segment.seq] = _Copy(segment.seq, segment.end, frame)
        self._count(segment.flow, len(frame))
        self._stored_peak = max(self._stored_peak, self._stored_bytes)
        self.stats.copies += 1
        held = self._held.setdefault(segment.flow, _Held(segment.seq, segment.seq, segment.seq))
        self._extend(copies, held)

    def _extend(self, copies: dict[int, _Copy], held: _Held) -> None:
        """Grow the held range over the copies that continue it. Copies of one sender line up (each starts where
        one ends), so a lookup by sequence number finds them; one that does not stops the range until the receiver's
        ACK passes it."""
        while (copy := copies.get(held.end)) is not None and seq_before(held.end, copy.end):
            held.end = copy.end

    def _confirmation(self, flow: Flow, *, repeat: bool = False) -> list[bytes]:
        """A COPIES_HELD frame if the held range grew by confirm_bytes since the last one was sent, or, to `repeat`
        it, if it holds anything."""
        held = self._held.get(flow)
        if held is None or held.start == held.end:
            return []
        grown = held.end != held.confirmed and seq_distance(held.confirmed, held.end) >= self.confirm_bytes
        if not (grown or repeat):
            return []
        held.confirmed = held.end
        self.stats.confirmations += 1
        return [copies_held_frame(flow, held.start, held.end)]

    def _acknowledge(self, flow: Flow, ack: int) -> None:
        copies = self._copies.get(flow)
        known = self._acked.get(flow)
        if not copies:
            return
        self._last_report[flow] = ack
        if known is not None and seq_before(ack, known):
            return
        now = self._clock()
        freed = [seq for seq, copy in copies.items() if not seq_before(ack, copy.end)]
        for seq in freed:
            self._count(flow, -len(copies.pop(seq).frame))
            self.stats.freed_segments += 1
        if freed:
            self._last_freed[flow] = now
            self._warned_silent.discard(flow)
        if not copies:
            self._forget(flow)
            return
        self._acked[flow] = ack
        self._last_active[flow] = now
        held = self._held[flow]
        if seq_before(held.end, ack):
            # The receiver has the bytes up to ack, missing copies included: hold from there on, starting with the
            # copy that holds ack (it may begin before it).
            straddling = self._holding(flow, ack)
            held.start = ack
            held.end = ack if straddling is None else straddling.end
            self._extend(copies, held)

    def _count(self, flow: Flow, change: int) -> None:
        self._stored_bytes += change
        self._flow_bytes[flow] = self._flow_bytes.get(flow, 0) + change

    def _forget(self, flow: Flow) -> None:
        self._copies.pop(flow, None)
        self._stored_bytes -= self._flow_bytes.pop(flow, 0)
        self._acked.pop(flow, None)
        self._held.pop(flow, None)
        self._last_active.pop(flow, None)
        self._last_freed.pop(flow, None)
        self._last_report.pop(flow, None)
        self._warned_silent.discard(flow)

    def _forget_idle_flows(self) -> None:
        now = self._clock()
        if now < self._next_sweep:
            return
        self._next_sweep = now + IDLE_SWEEP_S
        for flow in [flow for flow, last in self._last_active.items() if now - last >= FLOW_IDLE_S]:
            LOGGER.info("forgetting %s: no copy or ACK for %.0f s", flow, now - self._last_active[flow])
            self._forget(flow)
            self.stats.expired_flows += 1
        self._warn_of_silent_receivers(now)
        if self._stored_peak - self._stored_bytes >= RELEASE_AFTER_BYTES:
            self._release_memory()
            self.stats.memory_releases += 1
            self._stored_peak = self._stored_bytes

    def _warn_of_silent_receivers(self, now: float) -> None:
        for flow, freed in self._last_freed.items():
            held = self._flow_bytes.get(flow, 0)
            if now - freed < SILENT_RECEIVER_S or held < SILENT_RECEIVER_BYTES or flow in self._warned_silent:
                continue
            self._warned_silent.add(flow)
            self.stats.silent_receivers += 1
            copies = self._copies[flow].values()
            lowest = min(copies, key=lambda copy: seq_distance(self._held[flow].start, copy.seq)).seq
            LOGGER.warning(
                "%s holds %.1f MiB of copies from %d on and no ACK freed any for %.0f s (last ACK reported: %s, "
                "acknowledged up to: %s)",
                flow,
                held / (1 << 20),
                lowest,
                now - freed,
                self._last_report.get(flow, "none"),
                self._acked.get(flow, "none"),
            )

    def _new_generation(self, reason: str) -> None:
        self._generation = (self._generation + 1) & 0xFFFFFFFF
        self._reason = reason
        LOGGER.warning("helper generation %d: %s", self._generation, reason)


def _malloc_trim() -> Callable[[], None]:
    """glibc's malloc_trim(0), which returns every free page of the heap, or nothing to do without glibc."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]

    def release() -> None:
        trim(0)

    return release


class HelperStatus:
    """Turns health reports into the default entry of ingress.visible.helper.

    The switch boosts ACKs only for flows whose copies belong to the current epoch, so every helper_up after a
    helper_down or a new generation carries a new epoch (1-65535; 0 means "no copies" in the switch).
    """

    def __init__(self) -> None:
        self._epoch = 0
        self._generation: int | None = None

    def entry(self, health: Health | None) -> fy.P4TableEntry:
        """helper_up(epoch) for a healthy helper, helper_down() for an unhealthy or unreachable one (None)."""
        if health is None or not health.healthy:
            self._generation = None
            return fy.P4TableEntry(HELPER_TABLE, action=fy.Action(HELPER_DOWN), is_default_action=True)
        if health.generation != self._generation:
            self._epoch = self._epoch % 0xFFFF + 1
            self._generation = health.generation
        return fy.P4TableEntry(HELPER_TABLE, action=fy.Action(HELPER_UP, epoch=self._epoch), is_default_action=True)


class PacketSwitch(Protocol):
    """What serve_p4runtime needs of a finsy Switch."""

    def read_packets(
        self, *, queue_size: int, eth_types: Iterable[int] | None = None
    ) -> AsyncIterator[fy.P4PacketIn]: ...

    async def write(self, entities: Iterable[fy.P4PacketOut]) -> None: ...


class TableSwitch(Protocol):
    """What keep_switch_informed needs of a finsy Switch."""

    async def modify(self, entities: Iterable[fy.P4TableEntry]) -> None: ...


async def serve_p4runtime(switch: PacketSwitch, helper: RetransmitHelper, *, cpu_port: int = CPU_PORT) -> None:
    """Serve the helper over a switch's P4Runtime stream until cancelled.

    Helper frames arrive as packet-ins (ethertype 0x88b5); copies and confirmations go back as packet-outs to the
    CPU port, which the pipeline routes like a packet from the helper (confirmations it reads and drops).
    """
    async for packet in switch.read_packets(queue_size=PACKET_IN_QUEUE, eth_types={HELPER_ETHERTYPE}):
        answers = helper.handle(packet.payload)
        if answers:
            await switch.write([fy.P4PacketOut(frame, egress_port=cpu_port, _pad=0) for frame in answers])


async def keep_switch_informed(
    switch: TableSwitch, probe: Callable[[], Awaitable[Health | None]], *, interval_s: float = 0.5
) -> None:
    """Write ingress.visible.helper whenever the helper's health changes what the switch must know; until cancelled."""
    status = HelperStatus()
    written: fy.P4TableEntry | None = None
    while True:
        entry = status.entry(await probe())
        if entry != written:
            await switch.modify([entry])
            written = entry
        await asyncio.sleep(interval_s)


async def serve_interface(interface: str, helper: RetransmitHelper) -> None:
    """Serve the helper on the switch's helper port (an AF_PACKET socket on `interface`) until cancelled."""
    loop = asyncio.get_running_loop()
    with (
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(HELPER_ETHERTYPE)) as receiver,
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) as sender,
    ):
        receiver.bind((interface, HELPER_ETHERTYPE))
        sender.bind((interface, 0))
        receiver.setblocking(False)
        sender.setblocking(False)
        while True:
            frame = await loop.sock_recv(receiver, 65535)
            for answer in helper.handle(frame):
                await loop.sock_sendall(sender, answer)


async def serve_health(helper: RetransmitHelper, host: str, port: int) -> asyncio.Server:
    """Answer every TCP connection on (host, port) with one JSON line: the helper's Health."""

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(helper.health().to_json().encode() + b"\n")
        try:
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(answer, host, port)


async def probe_health(host: str, port: int, *, timeout_s: float = 1.0) -> Health | None:
    """The helper's health, or None if it does not answer within timeout_s."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                line = await reader.readline()
            finally:
                writer.close()
        return Health.from_json(line.decode())
    except (OSError, TimeoutError, ValueError, KeyError) as error:
        LOGGER.info("helper health probe %s:%d failed: %s", host, port, error)
        return None


async def _run(interface: str, host: str, port: int, max_bytes: int) -> None:
    helper = RetransmitHelper(max_bytes=max_bytes)
    server = await serve_health(helper, host, port)
    async with server:
        LOGGER.info("helper on %s, health on %s:%d", interface, host, port)
        await serve_interface(interface, helper)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tng_controller.retransmit_helper",
        description="VISIBLE local-retransmission helper on the switch's helper port.",
    )
    parser.add_argument("--interface", required=True, help="the interface attached to the switch's helper port")
    parser.add_argument("--health", default="127.0.0.1:9601", help="HOST:PORT answering health probes")
    parser.add_argument("--max-mbytes", type=int, default=DEFAULT_MAX_BYTES >> 20, help="copy store size, MiB")
    args = parser.parse_args(argv)
    host, _, port = args.health.rpartition(":")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        asyncio.run(_run(args.interface, host, int(port), args.max_mbytes << 20))
    except KeyboardInterrupt:
        return 0
    except PermissionError:
        print("retransmit_helper: an AF_PACKET socket needs root or CAP_NET_RAW", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
