"""SyncSwitch against finsy's fake P4Runtime server: pipeline push, recorded writes undone, counter reads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import finsy as fy
import pytest
from finsy.proto import p4r
from finsy.test.p4runtime_server import P4RuntimeServer
from tng_p4 import pipeline
from tng_p4.bmv2 import LOCALHOST, free_tcp_ports
from tng_p4.p4rt import CounterValue, SyncSwitch

ARTIFACTS = pipeline.artifacts("tng_wire", pipeline.repo_root() / pipeline.BUILD_DIR)


class RecordingServer(P4RuntimeServer):
    """Accepts everything like finsy's test server, and records writes and pipeline pushes; reads return `reply`."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.address = address
        self.updates: list[tuple[int, p4r.Entity]] = []
        self.pipelines = 0
        self.reply: list[p4r.Entity] = []

    async def SetForwardingPipelineConfig(self, request, context):  # type: ignore[no-untyped-def]
        self.pipelines += 1
        return await super().SetForwardingPipelineConfig(request, context)

    async def Write(self, request, context):  # type: ignore[no-untyped-def]
        self.updates += [(update.type, update.entity) for update in request.updates]
        return p4r.WriteResponse()

    async def Read(self, request, context) -> AsyncIterator[p4r.ReadResponse]:  # type: ignore[no-untyped-def]
        yield p4r.ReadResponse(entities=self.reply)


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    (port,) = free_tcp_ports(1)
    fake = RecordingServer(f"{LOCALHOST}:{port}")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    stop = asyncio.Event()
    started = threading.Event()

    async def serve() -> None:
        async with fake.run():
            started.set()
            await stop.wait()

    serving = asyncio.run_coroutine_threadsafe(serve(), loop)
    assert started.wait(10)
    yield fake
    loop.call_soon_threadsafe(stop.set)
    serving.result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def connect(fake: RecordingServer) -> SyncSwitch:
    return SyncSwitch(fake.address, p4info=ARTIFACTS.p4info, p4blob=ARTIFACTS.bmv2_json, device_id=1)


def forward(in_port: int, out_port: int) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        pipeline.PORT_FORWARD,
        match=fy.Match(ingress_port=in_port),
        action=fy.Action(pipeline.FORWARD, port=out_port),
    )


def test_open_pushes_the_pipeline(server: RecordingServer) -> None:
    with connect(server) as switch:
        assert switch.schema.tables[pipeline.PORT_FORWARD].name == pipeline.PORT_FORWARD
    assert server.pipelines == 1


def test_inserts_are_deleted_newest_first_on_close(server: RecordingServer) -> None:
    with connect(server) as switch:
        switch.insert(forward(1, 2))
        switch.insert(forward(2, 1))
        schema = switch.schema
    insert, delete = p4r.Update.INSERT, p4r.Update.DELETE
    first, second = (entry.encode(schema) for entry in (forward(1, 2), forward(2, 1)))
    assert server.updates == [(insert, first), (insert, second), (delete, second), (delete, first)]


def test_undo_writes_forgets_what_it_deleted(server: RecordingServer) -> None:
    with connect(server) as switch:
        switch.insert(forward(1, 2))
        switch.undo_writes()
        switch.undo_writes()
    assert [kind for kind, _entity in server.updates] == [p4r.Update.INSERT, p4r.Update.DELETE]


def test_counters_by_index(server: RecordingServer) -> None:
    with connect(server) as switch:
        counter_id = switch.schema.counters[pipeline.WIRE_DROPS].id
        server.reply = [
            p4r.Entity(
                counter_entry=p4r.CounterEntry(
                    counter_id=counter_id,
                    index=p4r.Index(index=index),
                    data=p4r.CounterData(packet_count=packets, byte_count=100 * packets),
                )
            )
            for index, packets in ((0, 0), (3, 2))
        ]
        assert switch.counters(pipeline.WIRE_DROPS) == {0: CounterValue(0, 0), 3: CounterValue(2, 200)}


def test_open_fails_without_a_server() -> None:
    (port,) = free_tcp_ports(1)
    switch = SyncSwitch(
        f"{LOCALHOST}:{port}", p4info=ARTIFACTS.p4info, p4blob=ARTIFACTS.bmv2_json, device_id=1, timeout_s=10
    )
    with pytest.raises(Exception, match=r"UNAVAILABLE|unavailable|connect"):
        switch.open()
