"""A finsy P4Runtime switch driven from synchronous code (PTF's unittest style) that undoes its writes on close."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import finsy as fy
from finsy.p4entity import P4Entity

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CounterValue:
    """One counter cell."""

    packets: int
    bytes: int


class SyncSwitch:
    """One P4Runtime connection as primary controller; pushes the pipeline on open unless its cookie matches.

    Every entity inserted through `insert` is deleted again, newest first, by `undo_writes` and `close`.
    """

    def __init__(self, address: str, *, p4info: Path, p4blob: Path, device_id: int, timeout_s: float = 30.0) -> None:
        # A higher election id than any earlier connection's, even one whose stream the switch has not closed yet
        # (the previous test's, on a busy machine): this connection is primary at once.
        election_id = time.time_ns() // 1000
        options = fy.SwitchOptions(p4info=p4info, p4blob=p4blob, device_id=device_id, initial_election_id=election_id)
        self._switch = fy.Switch("sync", address, options)
        self._timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"p4runtime-{address}", daemon=True)
        self._inserted: list[P4Entity] = []

    @property
    def schema(self) -> fy.P4Schema:
        """The P4Info of the pipeline, for lookups by name."""
        return self._switch.p4info

    def open(self) -> None:
        """Connect, win arbitration and make sure the pipeline is installed."""
        self._thread.start()
        try:
            self._call(self._switch.__aenter__())
            deadline = time.monotonic() + self._timeout_s
            while not self._switch.is_primary:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not primary on {self._switch.address} within {self._timeout_s:.0f} s")
                time.sleep(0.01)
        except BaseException:
            self._stop_loop()
            raise

    def close(self) -> None:
        """Undo this connection's writes, then disconnect."""
        try:
            self.undo_writes()
        finally:
            try:
                self._call(self._switch.__aexit__(None, None, None))
            finally:
                self._stop_loop()

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def insert(self, *entities: P4Entity) -> None:
        """Insert entities and remember them for undo_writes."""
        self._call(self._switch.insert(entities))
        self._inserted.extend(entities)

    def undo_writes(self) -> None:
        """Delete everything `insert` wrote, newest first."""
        if self._inserted:
            entities = list(reversed(self._inserted))
            self._inserted.clear()
            self._call(self._switch.delete(entities))

    def read(self, entity: P4Entity) -> list[P4Entity]:
        """Every entity the switch returns for a (possibly wildcard) read."""

        async def collect() -> list[P4Entity]:
            return [found async for found in self._switch.read(entity)]

        return self._call(collect())

    def counters(self, name: str) -> dict[int, CounterValue]:
        """Every cell of an indexed counter, by index."""
        cells: dict[int, CounterValue] = {}
        for entry in self.read(fy.P4CounterEntry(name)):
            assert isinstance(entry, fy.P4CounterEntry) and entry.index is not None
            cells[entry.index] = CounterValue(entry.packet_count, entry.byte_count)
        return cells

    def modify(self, *entities: P4Entity) -> None:
        """Modify entities, e.g. a table's default action (not undone by undo_writes: the caller restores them)."""
        self._call(self._switch.modify(entities))

    def packet_out(self, payload: bytes, **metadata: int) -> None:
        """Send one PacketOut; `metadata` names every field of the program's packet_out header."""
        self._call(self._switch.write([fy.P4PacketOut(payload, **metadata)]))

    def receive_packets(self) -> queue.Queue[fy.P4PacketIn]:
        """Collect every PacketIn from now on (until close) in the returned queue."""
        return self._collect(self._switch.read_packets())

    def receive_digests(self, digest: str) -> queue.Queue[fy.P4DigestList]:
        """Collect the digest lists of `digest` from now on (until close), acknowledging each one.

        The switch sends them only after a P4DigestEntry for `digest` has been inserted.
        """

        async def acknowledged() -> AsyncIterator[fy.P4DigestList]:
            async for digest_list in self._switch.read_digests(digest):
                await self._switch.write([digest_list.ack()])
                yield digest_list

        return self._collect(acknowledged())

    def _collect(self, stream: AsyncIterator[T]) -> queue.Queue[T]:
        received: queue.Queue[T] = queue.Queue()

        async def pump() -> None:
            async for item in stream:
                received.put(item)

        async def start() -> None:
            self._switch.create_task(pump(), background=True)
            await asyncio.sleep(0)  # pump() registers its stream queue before the caller sends anything

        self._call(start())
        return received

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self._timeout_s)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self._timeout_s)
        self._loop.close()
