"""Policies in etcd, for replicated controllers: every replica holds them in memory (the same index as the SQLite
store's) and follows etcd's watch, so that reads, checks and watches cost what they cost with SQLite.

Keys under the prefix P:
- `P/policies/<name>`: one byte, the policy id (0: none), then the Policy message with revision 0. A policy's
  revision is the etcd revision of its last change (its key's mod_revision).
- `P/revision`: empty; each change's etcd transaction compares its mod_revision with the revision the change was
  checked against and puts it last. So changes from all replicas are serialised (a change checked against an old
  set is refused and checked again), and its mod_revision is the store's revision."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aetcd
import aetcd.utils
from aetcd import rtypes

from tng_controller.etcd_client import EtcdClient, EtcdError
from tng_controller.pb import policy_pb2 as pb
from tng_controller.store import Committed, CommittedView, StoredPolicy, Transaction

LOGGER = logging.getLogger(__name__)
RESUME_DELAY_S = 0.5  # between attempts to watch again after etcd went away


@dataclass(frozen=True, slots=True)
class Observed:
    """One policy change as seen in etcd: the policy before (None: new) and after (None: deleted), and the etcd
    revision of the change."""

    old: StoredPolicy | None
    new: StoredPolicy | None
    revision: int


Follower = Callable[[list[StoredPolicy], list[Observed]], Awaitable[None]]


def _decode(kv: rtypes.KeyValue, name: str) -> StoredPolicy:
    policy = pb.Policy.FromString(kv.value[1:])
    policy.name = name
    policy.revision = kv.mod_revision
    return StoredPolicy(policy, kv.value[0])


def _encode(stored: StoredPolicy) -> bytes:
    body = pb.Policy()
    body.CopyFrom(stored.policy)
    body.revision = 0
    return bytes([stored.policy_id]) + body.SerializeToString(deterministic=True)


class EtcdPolicyStore(CommittedView):
    """The policies in etcd under `prefix`, mirrored in memory; `follow` keeps the mirror current."""

    def __init__(self, client: EtcdClient, prefix: str) -> None:
        self.client = client
        self._root = f"{prefix.rstrip('/')}/".encode()
        self._policies = f"{prefix.rstrip('/')}/policies/".encode()
        self._revision_key = f"{prefix.rstrip('/')}/revision".encode()
        self._committed = Committed([], 0)
        self._advanced = asyncio.Condition()

    async def load(self) -> None:
        """Reads every policy and the store's revision (at one etcd revision)."""
        reads = [
            self.client.transactions.get(self._policies, aetcd.utils.prefix_range_end(self._policies)),
            self.client.transactions.get(self._revision_key),
        ]
        _, (rows, marker) = await self.client.call(self.client.transaction([], reads, []), "read the policies")
        committed = Committed([], marker[0][1].mod_revision if marker else 0)
        for _, kv in rows:
            committed.set(_decode(kv, kv.key[len(self._policies) :].decode()))
        self._committed = committed

    def transaction(self) -> Transaction:
        """Changes checked against the policies as this replica has them; `commit` writes them."""
        return Transaction(self._committed)

    async def commit(self, tx: Transaction) -> int | None:
        """Writes the changes of `tx` in one etcd transaction and returns its revision; None when another change
        was committed since this replica's revision (check the changes again once `caught_up` to it)."""
        ops = [
            self.client.transactions.delete(self._policies + name.encode())
            if stored is None
            else self.client.transactions.put(self._policies + name.encode(), _encode(stored))
            for name, stored in tx.changed.items()
        ]
        ops.append(self.client.transactions.put(self._revision_key, b""))
        compare = [self.client.transactions.mod(self._revision_key) == self.revision()]
        read = [self.client.transactions.get(self._revision_key)]
        done, responses = await self.client.call(
            self.client.transaction(compare=compare, success=ops, failure=read), "commit to etcd"
        )
        if not done:
            latest = responses[0][0][1].mod_revision if responses and responses[0] else 0
            await self.caught_up(latest)
            return None
        return int(responses[-1].response_put.header.revision)

    async def caught_up(self, revision: int) -> None:
        """Returns once this replica has seen the change of `revision`."""
        async with self._advanced:
            await self._advanced.wait_for(lambda: self.revision() >= revision)

    async def follow(self, changed: Follower, lock: asyncio.Lock) -> None:
        """Applies etcd's changes to the mirror as they happen, one etcd transaction at a time, and calls
        `changed(before, observed)` after each (with the policies before it), holding `lock` for both; when etcd goes
        away, reads everything again once it is back and reports the difference as one change. Runs until
        cancelled."""
        while True:
            try:
                watch = await self.client.watch_prefix(self._root, start_revision=self.revision() + 1)
                await self._apply(watch, changed, lock)
            except (aetcd.ClientError, TimeoutError, OSError) as exc:
                LOGGER.warning("etcd watch ended (%s): reading the policies again", exc)
            while True:
                await asyncio.sleep(RESUME_DELAY_S)
                try:
                    async with lock:
                        before = self.list()
                        await self.load()
                        await self._publish(before, _difference(before, self.list(), self.revision()), changed)
                    break
                except EtcdError as exc:
                    LOGGER.warning("%s", exc)

    async def _apply(self, watch: rtypes.Watch, changed: Follower, lock: asyncio.Lock) -> None:
        pending: dict[str, tuple[StoredPolicy | None, StoredPolicy | None]] = {}
        async for event in watch:
            key = event.kv.key
            if key == self._revision_key:  # each change's last put: the change is complete
                revision = event.kv.mod_revision
                async with lock:
                    before = self.list()
                    for name, (_, new) in pending.items():
                        if new is None:
                            self._committed.remove(name)
                        else:
                            self._committed.set(new)
                    self._committed.revision = revision
                    observed = [Observed(old, new, revision) for old, new in pending.values()]
                    await self._publish(before, observed, changed)
                pending = {}
            elif key.startswith(self._policies):
                name = key[len(self._policies) :].decode()
                old = pending[name][0] if name in pending else self.get(name)
                pending[name] = (old, _decode(event.kv, name) if event.kind == rtypes.EventKind.PUT else None)

    async def _publish(self, before: list[StoredPolicy], observed: list[Observed], changed: Follower) -> None:
        async with self._advanced:
            self._advanced.notify_all()
        if observed:
            await changed(before, observed)

    async def close(self) -> None:
        await self.client.close()


def _difference(before: list[StoredPolicy], after: list[StoredPolicy], revision: int) -> list[Observed]:
    old = {p.name: p for p in before}
    new = {p.name: p for p in after}
    return [
        Observed(old.get(name), new.get(name), revision)
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    ]
