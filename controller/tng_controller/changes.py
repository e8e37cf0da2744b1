"""Policy changes in batches: the changes that arrive while one batch is written are checked one by one in a single
store transaction, written to all switches at once as one change (a policy changed twice is written once, in its
last form), committed together and answered each with its own result. A batch that a switch refuses is taken apart
and its changes applied one at a time, so that each gets the answer it would have had alone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from tng_controller.fleet import Change, Fleet, rollout
from tng_controller.metrics import Metrics
from tng_controller.pb import policy_pb2 as pb
from tng_controller.policy import check_conflicts
from tng_controller.store import NotFound, PolicyStore, StoredPolicy, Transaction

LOGGER = logging.getLogger(__name__)
MAX_BATCH = 256  # changes written in one batch at most (one WriteRequest per switch holds all their updates)
# Turns of the event loop let pass before a batch is taken: the answers of the last batch go out and the calls gRPC
# has already received join this one, so that a loaded controller writes fewer, larger batches (on BMv2, 4 clients:
# about 4.5 changes a batch instead of 3, and a quarter less CPU per change); an idle one waits some microseconds.
GATHER_TURNS = 3
# After a batch of several changes (a loaded controller), the next one waits for as many changes as that batch
# answered, for at most GATHER_MAX_S: callers answered by the last batch send their next changes a millisecond or
# two later, and without the wait those would miss the batch and form another (with 16 changes in flight, two
# alternating batches of 8, each written to every switch). One change at a time never waits.
GATHER_MAX_S = 0.002


@dataclass(frozen=True, slots=True)
class Applied:
    """One change as committed: the switches written, the policy before (None: it did not exist) and after (for a
    delete: the deleted policy with the revision of its deletion)."""

    switches: list[str]
    old: StoredPolicy | None
    new: StoredPolicy
    deleted: bool


@dataclass(slots=True, eq=False)
class _Request:
    policy: pb.Policy | None  # None: delete `name`
    name: str
    future: asyncio.Future[Applied] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


Announce = Callable[[Applied], None]


class ChangeBatcher:
    """Applies policy changes to the fleet and the store in batches, in arrival order, one batch at a time."""

    def __init__(
        self, store: PolicyStore, fleet: Fleet, lock: asyncio.Lock, announce: Announce, metrics: Metrics
    ) -> None:
        self._store = store
        self._fleet = fleet
        self._lock = lock  # the fleet holds it too while it syncs a switch
        self._announce = announce
        self._pending: list[_Request] = []
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._metrics = metrics
        self._awaited = 0  # the changes the worker waits for before its next batch (0: it waits for none)
        self._enough = asyncio.Event()

    async def set(self, policy: pb.Policy) -> Applied:
        """Stores `policy` (validated by the caller) after writing it to every writable switch."""
        return await self._submit(_Request(policy, policy.name))

    async def delete(self, name: str) -> Applied:
        """Deletes the policy `name` from every writable switch, then from the store."""
        return await self._submit(_Request(None, name))

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None

    async def _submit(self, request: _Request) -> Applied:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="policy-changes")
        self._pending.append(request)
        self._wake.set()
        if len(self._pending) >= self._awaited:
            self._enough.set()
        return await request.future

    @property
    def pending(self) -> int:
        """Changes waiting for the next batch."""
        return len(self._pending)

    async def _run(self) -> None:
        last_batch = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                for _ in range(GATHER_TURNS):
                    await asyncio.sleep(0)
                if last_batch > 1:
                    await self._gather(last_batch)
                async with self._lock:  # the batch is taken once the lock is ours: it holds all that waited
                    batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                    last_batch = len(batch)
                    try:
                        await self._apply(batch)
                    except Exception as exc:  # never leave a caller waiting
                        LOGGER.exception("policy change batch failed")
                        for request in batch:
                            self._fail(request, exc)

    async def _gather(self, expected: int) -> None:
        """Waits until `expected` changes are pending (or MAX_BATCH), for at most GATHER_MAX_S."""
        self._awaited = min(expected, MAX_BATCH)
        self._enough.clear()
        try:
            if len(self._pending) < self._awaited:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._enough.wait(), GATHER_MAX_S)
        finally:
            self._awaited = 0

    async def _apply(self, batch: list[_Request]) -> None:
        applied = await self._write(batch)
        if applied is None:  # a switch refused the batch: one at a time
            for request in batch:
                if not request.future.done():
                    await self._apply([request])
            return
        if applied:
            self._metrics.policy_batches.inc()
            self._metrics.policy_batch_size.observe(len(applied))
        self._metrics.policy_changes.labels("applied").inc(len(applied))
        for request, result in applied:
            self._announce(result)
            if not request.future.done():
                request.future.set_result(result)

    def _fail(self, request: _Request, exc: Exception) -> None:
        if not request.future.done():  # a caller that gave up has cancelled it
            self._metrics.policy_changes.labels("refused").inc()
            request.future.set_exception(exc)

    async def _write(self, batch: list[_Request]) -> list[tuple[_Request, Applied]] | None:
        """Checks, writes and commits `batch`; returns each valid request's result, or None when the switches refused
        a batch of several changes (nothing applied; the caller retries them one by one). A change the store refuses
        gets its error at once and is left out."""
        before = self._store.list()
        olds: dict[str, StoredPolicy | None] = {}  # each changed policy as it was before the batch
        results: list[tuple[_Request, StoredPolicy | None, StoredPolicy, bool]] = []
        with self._store.transaction() as tx:
            for request in batch:
                if request.future.cancelled():
                    continue  # its caller gave up (deadline, disconnect) before it was applied: it is not
                try:
                    old, new = change_in(tx, request.policy, request.name)
                except Exception as exc:
                    self._fail(request, exc)
                    continue
                olds.setdefault(request.name, old)
                results.append((request, old, new, request.policy is None))
            if not results:
                return []
            change = Change(
                old=[p for p in olds.values() if p is not None],
                new=[p for name in olds if (p := tx.get(name)) is not None],
                policies=tx.list(),
            )
            try:
                switches = await rollout(self._fleet, change, before)
            except Exception as exc:
                if len(results) > 1:
                    return None
                self._fail(results[0][0], exc)
                return []
            try:
                tx.commit()
            except sqlite3.Error:
                LOGGER.exception("store commit failed after the switches took the change: rolling them back")
                await rollout(self._fleet, change.undo(before), change.policies)
                raise
        return [(request, Applied(switches, old, new, deleted)) for request, old, new, deleted in results]


def change_in(tx: Transaction, policy: pb.Policy | None, name: str) -> tuple[StoredPolicy | None, StoredPolicy]:
    """Applies one change inside `tx` (`policy` None: delete `name`): (the policy before, the policy after or as
    deleted)."""
    old = tx.get(name)
    if policy is None:
        if old is None:
            raise NotFound(f"no policy named {name!r}")
        return old, tx.delete(name)
    holder = tx.match_holder(policy)
    if holder is not None:
        check_conflicts(policy, [holder.policy])
    return old, tx.put(policy, policy.revision)
