"""Batched policy changes: what waits while a batch is written goes out as one change, each caller gets its own
answer, a policy changed twice is written once, and a refused batch is retried one change at a time."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from conftest import FakeFleet
from tng_controller.api import PolicyServicer, start_server
from tng_controller.changes import Applied, ChangeBatcher
from tng_controller.config import ApiConfig
from tng_controller.fleet import RolloutError
from tng_controller.metrics import Metrics
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.policy import PolicyConflict
from tng_controller.store import NotFound, PolicyStore, RevisionConflict

KIND = pb.PolicyEvent


def weighted(name: str, lte: int, port: int | None = None, revision: int = 0) -> pb.Policy:
    return pb.Policy(
        name=name,
        revision=revision,
        match=pb.Match(
            ip_protocol=17, dst_port=pb.PortMatch(value=port or 1000 + zlib.crc32(name.encode()) % 10000, mask=0xFFFF)
        ),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_IN_NETWORK, steering=pb.STEERING_MODE_WEIGHTED, lte_weight=lte, wifi_weight=1
        ),
    )


@dataclass
class Held:
    """A running API whose change lock the test holds, so that changes pile up into one batch until released."""

    stub: pb_grpc.PolicyServiceStub
    fleet: FakeFleet
    store: PolicyStore
    servicer: PolicyServicer
    lock: asyncio.Lock

    @property
    def changes(self) -> ChangeBatcher:
        return self.servicer.changes

    async def batch(self, *calls):
        """Starts `calls` (coroutines of the batcher, queued in this order) while the lock is held, waits until all
        are pending, releases the lock and returns their outcomes (the result or the exception)."""
        await self.lock.acquire()
        tasks = [asyncio.ensure_future(call) for call in calls]
        while self.servicer.changes.pending < len(tasks):
            await asyncio.sleep(0.01)
        self.fleet.changes.clear()
        self.lock.release()
        return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
async def held(tmp_path) -> AsyncIterator[Held]:
    store = PolicyStore(tmp_path / "controller.db")
    fleet = FakeFleet(["s1", "s2"])
    lock = asyncio.Lock()
    servicer = PolicyServicer(store, fleet, lock)
    server, port = await start_server(servicer, ApiConfig(listen="127.0.0.1:0"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Held(pb_grpc.PolicyServiceStub(channel), fleet, store, servicer, lock)
    await server.stop(None)
    await servicer.changes.close()
    store.close()


async def test_changes_that_wait_are_written_as_one_change_per_switch(held) -> None:
    await held.stub.SetPolicy(pb.SetPolicyRequest(policy=weighted("gone", 1)))
    watch = held.stub.WatchPolicies(pb.WatchPoliciesRequest())
    assert [(await watch.read()).kind for _ in range(2)] == [KIND.KIND_SNAPSHOT, KIND.KIND_SYNCED]
    outcomes = await held.batch(
        held.changes.set(weighted("a", 1)),
        held.changes.set(weighted("b", 2)),
        held.changes.set(weighted("a", 3)),
        held.changes.delete("gone"),
    )
    assert [o.new.revision for o in outcomes] == [2, 3, 4, 5]
    assert [o.switches for o in outcomes] == [["s1", "s2"]] * 4
    assert [(o.old is None, o.deleted) for o in outcomes] == [
        (True, False),
        (True, False),
        (False, False),
        (False, True),
    ]
    assert len(held.fleet.changes) == 2  # one change, to each switch
    change = held.fleet.changes[0]
    assert [(p.name, p.revision) for p in change.old] == [("gone", 1)]
    assert [(p.name, p.revision, p.policy.switch_policy.lte_weight) for p in change.new] == [("a", 4, 3), ("b", 3, 2)]
    assert held.fleet.installed == {s: [("a", 4, 2), ("b", 3, 3)] for s in ("s1", "s2")}
    assert held.store.revision() == 5
    events = [await asyncio.wait_for(watch.read(), 5) for _ in range(4)]
    assert [(e.kind, e.policy.name, e.policy.revision) for e in events] == [
        (KIND.KIND_SET, "a", 2),
        (KIND.KIND_SET, "b", 3),
        (KIND.KIND_SET, "a", 4),
        (KIND.KIND_DELETED, "gone", 5),
    ]
    watch.cancel()


async def test_a_change_the_store_refuses_fails_alone(held) -> None:
    await held.stub.SetPolicy(pb.SetPolicyRequest(policy=weighted("a", 1, port=1001)))
    outcomes = await held.batch(
        held.changes.set(weighted("a", 2, port=1001, revision=7)),  # a stale compare-and-set
        held.changes.set(weighted("b", 2, port=1001)),  # a's match
        held.changes.set(weighted("c", 2)),
        held.changes.delete("nobody"),
        held.changes.set(weighted("a", 5, port=1001, revision=1)),
    )
    assert [type(o) for o in outcomes] == [RevisionConflict, PolicyConflict, Applied, NotFound, Applied]
    assert "same addresses, protocol, ports" in str(outcomes[1])
    assert len(held.fleet.changes) == 2
    assert held.fleet.installed["s1"] == [("a", 3, 1), ("c", 2, 2)]


async def test_a_refused_batch_is_applied_one_change_at_a_time(held) -> None:
    held.fleet.refuse = {"too-big"}
    outcomes = await held.batch(
        held.changes.set(weighted("a", 1)),
        held.changes.set(weighted("too-big", 1)),
        held.changes.set(weighted("c", 1)),
    )
    assert isinstance(outcomes[1], RolloutError)
    assert outcomes[1].code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert [o.new.revision for o in (outcomes[0], outcomes[2])] == [1, 2]  # the refused one's revision is reused
    assert held.fleet.installed == {s: [("a", 1, 1), ("c", 2, 2)] for s in ("s1", "s2")}
    assert [p.name for p in held.store.list()] == ["a", "c"]


async def test_a_batch_is_bounded(held, monkeypatch) -> None:
    monkeypatch.setattr("tng_controller.changes.MAX_BATCH", 3)
    outcomes = await held.batch(*(held.changes.set(weighted(f"p{i}", 1, port=2000 + i)) for i in range(7)))
    assert [o.new.revision for o in outcomes] == list(range(1, 8))
    assert [len(c.new) for c in held.fleet.changes[::2]] == [3, 3, 1]


async def test_a_change_whose_caller_gave_up_before_its_batch_is_not_applied(held) -> None:
    await held.lock.acquire()
    gone = asyncio.ensure_future(held.changes.set(weighted("gone", 1)))
    kept = asyncio.ensure_future(held.changes.set(weighted("kept", 1)))
    while held.changes.pending < 2:
        await asyncio.sleep(0.01)
    gone.cancel()
    held.lock.release()
    assert (await kept).new.revision == 1
    assert [p.name for p in held.store.list()] == ["kept"]


async def test_after_a_batch_of_several_the_next_waits_for_as_many_changes(tmp_path) -> None:
    store = PolicyStore(tmp_path / "controller.db")
    fleet = FakeFleet(["s1"])
    batcher = ChangeBatcher(store, fleet, asyncio.Lock(), lambda _: None, Metrics())
    try:
        # Eight changes at once make a batch of eight: the controller is loaded.
        await asyncio.gather(*(batcher.set(weighted(f"a{i}", 1)) for i in range(8)))
        assert len(fleet.writes) == 1
        # Then the callers it answered send their next changes one per event-loop turn: the next batch waits for
        # eight and takes them all, instead of going out with the first few.
        calls = []
        for i in range(8):
            calls.append(asyncio.ensure_future(batcher.set(weighted(f"c{i}", 2))))
            await asyncio.sleep(0)
        await asyncio.gather(*calls)
        assert len(fleet.writes) == 2, f"8 changes went out in {len(fleet.writes) - 1} batches"
        assert {p.name for p in fleet.changes[-1].new} == {f"c{i}" for i in range(8)}
    finally:
        await batcher.close()
        store.close()
