"""EtcdClient.answer without etcd: a call that waits while a fake member answers the client's looks (`Status`) with
its raft term, or refuses them for want of a leader."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aetcd
import grpc
import pytest
from aetcd import rpc
from tng_controller.etcd_client import LEADER_CHECK_S, NO_LEADER, EtcdClient


class _Member:
    """Answers each look with the next of `terms` (the last one again once they run out); None: no leader."""

    def __init__(self, *terms: int | None) -> None:
        self._terms = list(terms)
        self.looks = 0

    async def Status(self, request: object, timeout: float, metadata: object) -> rpc.StatusResponse:
        term = self._terms[min(self.looks, len(self._terms) - 1)]
        self.looks += 1
        if term is None:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), NO_LEADER)
        return rpc.StatusResponse(raftTerm=term)


@pytest.fixture
async def client() -> AsyncIterator[EtcdClient]:
    made = EtcdClient(["http://127.0.0.1:1"])  # a channel is opened but never used: the member is faked
    await made.connect()
    try:
        yield made
    finally:
        await made.close()


async def _answered_after(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "answered"


async def test_a_slow_member_under_the_same_leader_is_waited_for(client: EtcdClient) -> None:
    client.maintenancestub = member = _Member(5)
    assert await client.answer(_answered_after(3 * LEADER_CHECK_S + 0.2)) == "answered"
    assert member.looks >= 2  # three on time; fewer if the loop runs late


async def test_a_call_is_given_up_once_its_member_elected_a_new_leader(client: EtcdClient) -> None:
    client.maintenancestub = _Member(5, 5, 6)
    started = time.monotonic()
    with pytest.raises(aetcd.ClientError, match="elected a new leader while the call waited"):
        await client.answer(_answered_after(60))
    assert time.monotonic() - started < 4 * LEADER_CHECK_S  # at the third look


async def test_a_call_is_given_up_once_its_member_has_no_leader(client: EtcdClient) -> None:
    client.maintenancestub = _Member(5, None)
    with pytest.raises(aetcd.ClientError, match="lost its leader while the call waited"):
        await client.answer(_answered_after(60))


async def test_a_call_is_given_up_once_the_client_left_its_member(client: EtcdClient) -> None:
    client.maintenancestub = _Member(5)
    waiting = asyncio.create_task(client.answer(_answered_after(60)))
    await asyncio.sleep(LEADER_CHECK_S / 2)
    client.fail_over("left a lease renewal unanswered")  # one endpoint: a new channel to the same member
    with pytest.raises(aetcd.ClientError, match="was left for another member while the call waited"):
        await waiting
