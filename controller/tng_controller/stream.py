"""The P4Runtime stream of one switch, shared by the controller's tasks that write to it (the VISIBLE helper's
packet-outs, the link prober's probes, digest acks). gRPC takes one write at a time on a stream, and finsy does not
serialize them: two tasks writing at once fail with INTERNAL ("Internal error from Core") and finsy drops the
channel, so every stream write goes through one lock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

import finsy as fy


class SharedStream:
    """A finsy switch's stream: packet-ins as finsy dispatches them, writes one at a time."""

    def __init__(self, switch: fy.Switch) -> None:
        self._switch = switch
        self._writing = asyncio.Lock()

    def read_packets(self, *, queue_size: int, eth_types: Iterable[int] | None = None) -> AsyncIterator[fy.P4PacketIn]:
        return self._switch.read_packets(queue_size=queue_size, eth_types=eth_types)

    async def write(self, entities: Iterable[fy.P4PacketOut | fy.P4DigestListAck]) -> None:
        async with self._writing:
            await self._switch.write(entities)
