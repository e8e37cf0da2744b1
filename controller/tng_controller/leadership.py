"""Leadership among controller replicas, on an etcd lease: each replica puts a key under `P/replicas/` bound to its
lease (its name and API address as JSON); the replica whose key was created first (lowest create_revision) leads.

Its election id for P4Runtime arbitration is that create_revision: a later leader's key was created after every
earlier leader's (they were all older than it when they led, or it would not be the oldest now), so each leader's id
is higher than every former leader's, and a switch refuses the writes of a deposed leader that still has its stream.
A replica that cannot renew its lease stops leading before the lease would run out, so before etcd gives it to
another: its deadline is counted from when it sent the last renewal that etcd granted (etcd's from when it got it),
less a tenth of the TTL for its own timers firing late on a loaded machine, whatever renewal is under way then."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass

import aetcd
import grpc
from aetcd import rpc, rtypes

from tng_controller.etcd_client import EtcdClient
from tng_controller.metrics import Metric, ReplicaMetrics, gauge

LOGGER = logging.getLogger(__name__)
RETRY_S = 0.5
LEASE_MARGIN = 0.1  # of the TTL: this replica's deadline comes that much before etcd's


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica as registered in etcd."""

    name: str
    api: str
    election_id: int  # its key's create_revision
    lease: int


def replicas_prefix(prefix: str) -> bytes:
    return f"{prefix.rstrip('/')}/replicas/".encode()


async def replicas(client: EtcdClient, prefix: str) -> list[Replica]:
    """The live replicas, the leader first."""
    rows = await client.answer(client.get_prefix(replicas_prefix(prefix)))
    found = []
    for kv in rows:
        value = json.loads(kv.value)
        found.append(Replica(value["name"], value["api"], kv.create_revision, kv.lease))
    return sorted(found, key=lambda r: r.election_id)


class LeaseLost(Exception):
    """The lease ran out (or etcd forgot it) before it was renewed."""


class Leadership:
    """Campaigns for leadership as long as it runs: `elected(election_id)` when this replica becomes the leader,
    `deposed()` when it stops being it (its lease lost or about to run out)."""

    def __init__(
        self,
        client: EtcdClient,
        prefix: str,
        name: str,
        api: str,
        ttl_s: int,
        metrics: ReplicaMetrics | None = None,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._key = replicas_prefix(prefix) + name.encode()
        self._value = json.dumps({"name": name, "api": api}).encode()
        self._ttl_s = ttl_s
        self.election_id = 0  # while leading: the P4Runtime election id
        self.leading = False
        self.lease_deadline = 0.0  # time.monotonic() by which the lease must be renewed (0: no lease)
        self._metrics = metrics or ReplicaMetrics(None)
        self._saw_another_lead = False  # since this replica last led: a takeover if it leads next

    async def run(self, elected: Callable[[int], Awaitable[None]], deposed: Callable[[], Awaitable[None]]) -> None:
        """Until cancelled: registers with a new lease, renews it and follows who leads; starts over when the lease
        is lost."""
        while True:
            try:
                sent = time.monotonic()
                lease = await self._client.answer(self._client.lease(self._ttl_s))
                granted = sent
                # A key left by this replica's former process (same name) goes with its lease; this one replaces it.
                await self._client.answer(self._client.put(self._key, self._value, lease=lease.id))
                try:
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self._renew(lease.id, granted))
                        group.create_task(self._follow(elected, deposed))
                except asyncio.CancelledError:
                    # Stopping: hand leadership over now rather than when the lease runs out.
                    with suppress(aetcd.ClientError, TimeoutError, OSError):
                        await self._client.answer(self._client.revoke_lease(lease.id))
                    raise
            except* (LeaseLost, aetcd.ClientError, TimeoutError, OSError) as group_error:
                LOGGER.warning("leadership: %s", "; ".join(str(e) or type(e).__name__ for e in group_error.exceptions))
            self.lease_deadline = 0.0
            if self.leading:
                self._lost()
                LOGGER.warning("leadership: no longer the leader")
                await deposed()
            await asyncio.sleep(RETRY_S)

    async def _renew(self, lease: int, granted: float) -> None:
        """Renews the lease every third of its TTL on one keep-alive stream (opened again after an error); raises
        LeaseLost at the deadline if no renewal was granted by then, whatever the attempt under way waits for.

        etcd answers a renewal in milliseconds. One left unanswered for a third of the TTL means a member cut off
        from its leader (it holds the renewal and only notices after its election timeout, by when the lease would
        be gone) or one too loaded to serve: the client moves to the next member, if there is one, and renews there
        at once."""
        deadline = self.lease_deadline = self._deadline(granted, self._ttl_s)
        stream = None
        failure = "no renewal granted"
        pause = self._ttl_s / 3
        try:
            while True:
                await asyncio.sleep(min(pause, deadline - time.monotonic()))
                pause = self._ttl_s / 3
                sent = time.monotonic()
                if sent >= deadline:
                    raise LeaseLost(f"lease {lease:x} not renewed in time ({failure})")
                try:
                    if stream is None:
                        await self._client.connect()  # on another endpoint if this one failed
                        stream = self._client.leasestub.LeaseKeepAlive(metadata=self._client.metadata)
                    answer_by = min(deadline - sent, self._ttl_s / 3)
                    reply = await asyncio.wait_for(self._keep_alive(stream, lease), answer_by)
                except (grpc.RpcError, asyncio.InvalidStateError, TimeoutError, OSError) as exc:  # finished: broken
                    if stream is not None:
                        stream.cancel()
                        stream = None
                    failure = type(exc).__name__
                    if isinstance(exc, TimeoutError) and len(self._client.endpoints) > 1:
                        self._client.fail_over("left a lease renewal unanswered")
                        pause = 0.0
                    continue
                if reply is grpc.aio.EOF or reply.TTL <= 0:
                    raise LeaseLost(f"etcd no longer knows lease {lease:x}")
                deadline = self.lease_deadline = self._deadline(sent, reply.TTL)
        finally:
            if stream is not None:
                stream.cancel()

    @staticmethod
    async def _keep_alive(stream: grpc.aio.StreamStreamCall, lease: int) -> rpc.LeaseKeepAliveResponse:
        await stream.write(rpc.LeaseKeepAliveRequest(ID=lease))
        return await stream.read()

    @staticmethod
    def _deadline(sent: float, ttl_s: float) -> float:
        return sent + ttl_s * (1 - LEASE_MARGIN)

    async def _follow(self, elected: Callable[[int], Awaitable[None]], deposed: Callable[[], Awaitable[None]]) -> None:
        """Decides who leads on every change of the replicas' keys. A watch that ends or fails (its etcd endpoint
        went away) is opened again, on another endpoint: the lease alone decides whether this replica may lead."""
        while True:
            try:
                watch = await self._client.watch_prefix(replicas_prefix(self._prefix))
                try:
                    await self._decide(elected, deposed)
                    async for event in watch:
                        if event.kind == rtypes.EventKind.DELETE and event.kv.key == self._key:
                            raise LeaseLost("this replica's key was deleted")
                        await self._decide(elected, deposed)
                finally:
                    await watch.cancel()
            except (aetcd.ClientError, TimeoutError, OSError) as exc:
                LOGGER.warning("leadership: watch of the replicas failed (%s); watching again", exc)
            await asyncio.sleep(RETRY_S)

    async def _decide(self, elected: Callable[[int], Awaitable[None]], deposed: Callable[[], Awaitable[None]]) -> None:
        live = await replicas(self._client, self._prefix)
        mine = next((r for r in live if replicas_prefix(self._prefix) + r.name.encode() == self._key), None)
        if mine is None:
            raise LeaseLost("this replica's key is gone")
        leads = live[0] is mine
        if leads and not self.leading:
            self.leading, self.election_id = True, mine.election_id
            self._metrics.won(takeover=self._saw_another_lead)
            self._saw_another_lead = False
            LOGGER.info("leadership: leading with election id %d", mine.election_id)
            await elected(mine.election_id)
        elif not leads:
            self._saw_another_lead = True
            if self.leading:
                self._lost()
                LOGGER.warning("leadership: %s leads now", live[0].name)
                await deposed()

    def _lost(self) -> None:
        self.leading, self.election_id = False, 0
        self._metrics.lost()

    def gauges(self) -> list[Metric]:
        """This replica's election id while it leads and the seconds left on its lease by its own count."""
        left = max(self.lease_deadline - time.monotonic(), 0.0) if self.lease_deadline else 0.0
        election = "P4Runtime election id while this replica leads (0: it does not)"
        lease = "Seconds left on this replica's etcd lease by its own count (0: none)"
        return [
            gauge("leader_election_id", election, [], [([], float(self.election_id))]),
            gauge("lease_seconds_left", lease, [], [([], left)]),
        ]
