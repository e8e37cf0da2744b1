"""A controller replica whose policies and leadership live in etcd: every replica serves the policy API (reads and
watches from its mirror of the store, changes committed to etcd); the leader alone connects to the switches, as
P4Runtime primary with its election id, syncs them and writes each committed change to them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import suppress

import finsy as fy

from tng_controller.changes import Applied, change_in
from tng_controller.etcd_store import EtcdPolicyStore, Observed
from tng_controller.fleet import Change, NoSwitches, SwitchWriteError
from tng_controller.pb import policy_pb2 as pb
from tng_controller.southbound import SwitchFleet
from tng_controller.store import StoredPolicy

LOGGER = logging.getLogger(__name__)
FOLLOWER_STATE = "STANDBY"  # a switch as a follower reports it: the leader writes it


class ReplicaChanges:
    """Commits the API's changes to etcd, checked against this replica's mirror (checked again when another
    replica's change came first); answers once the mirror has the change, so that a read after it sees it."""

    def __init__(self, store: EtcdPolicyStore) -> None:
        self._store = store
        self._lock = asyncio.Lock()  # this replica's changes one at a time: each is checked against the last

    async def set(self, policy: pb.Policy) -> Applied:
        return await self._commit(policy, policy.name)

    async def delete(self, name: str) -> Applied:
        return await self._commit(None, name)

    async def close(self) -> None:
        """Nothing is queued: each change is committed by its own call."""

    async def _commit(self, policy: pb.Policy | None, name: str) -> Applied:
        async with self._lock:
            while True:
                tx = self._store.transaction()
                old, new = change_in(tx, policy, name)
                revision = await self._store.commit(tx)
                if revision is not None:
                    break
            await self._store.caught_up(revision)
        new.policy.revision = revision
        return Applied([], old, new, policy is None)


class LeaderFleet:
    """The switches as the policy API sees them on a replica: the leader's connected fleet, or, on a follower, the
    configured switches in standby."""

    def __init__(self, fleet: SwitchFleet | None) -> None:
        self.fleet = fleet
        self.leading = False

    def writable(self) -> list[str]:
        return self.fleet.writable() if self.fleet is not None and self.leading else []

    async def write(self, switch: str, change: Change) -> None:
        if self.fleet is None or not self.leading:
            raise SwitchWriteError(switch, "this replica does not lead")
        await self.fleet.write(switch, change)

    def statuses(self) -> list[pb.SwitchStatus]:
        if self.fleet is None:
            return []
        statuses = self.fleet.statuses()
        if not self.leading:
            for status in statuses:
                status.state = FOLLOWER_STATE
        return statuses

    async def stats(self, policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
        if self.fleet is None or not self.leading:
            return await NoSwitches().stats(policies)
        return await self.fleet.stats(policies)


class SwitchLeader:
    """Runs the switches while this replica leads and writes each committed change to them."""

    def __init__(self, fleet: LeaderFleet, lock: asyncio.Lock, store: EtcdPolicyStore) -> None:
        self._fleet = fleet
        self._lock = lock  # held by the store's follower for each change and by the fleet for each sync
        self._store = store
        self._running: asyncio.Task[None] | None = None
        self._resyncs: set[asyncio.Task[None]] = set()

    async def elected(self, election_id: int) -> None:
        switches = self._fleet.fleet
        if switches is None:
            self._fleet.leading = True
            return
        switches.set_election_id(election_id)
        self._fleet.leading = True
        self._running = asyncio.get_running_loop().create_task(self._run(switches), name="switches")

    async def deposed(self) -> None:
        """Stops writing and drops the switch connections, so that no write of this replica reaches a switch."""
        self._fleet.leading = False
        running, self._running = self._running, None
        for task in (running, *self._resyncs):
            if task is not None:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task

    async def changed(self, before: list[StoredPolicy], observed: list[Observed]) -> None:
        """Writes a committed change to every switch in sync (the lock is held); a switch that refuses it is synced
        anew."""
        if self._fleet.fleet is None or not self._fleet.leading:
            return
        change = Change(
            old=[o.old for o in observed if o.old is not None],
            new=[o.new for o in observed if o.new is not None],
            policies=self._store.list(),
        )
        for switch in self._fleet.writable():
            try:
                await self._fleet.write(switch, change)
            except SwitchWriteError as exc:
                LOGGER.warning("%s; syncing it again", exc)
                task = asyncio.get_running_loop().create_task(self._fleet.fleet.resync(switch))
                self._resyncs.add(task)
                task.add_done_callback(self._resyncs.discard)

    async def _run(self, switches: SwitchFleet) -> None:
        async with fy.Controller(switches.switches()):
            await asyncio.Event().wait()


def announcer(announce: Callable[[Applied], None]) -> Callable[[Observed], None]:
    """Announces an observed change as the API announces an applied one."""

    def observed(change: Observed) -> None:
        if change.new is not None:
            announce(Applied([], change.old, change.new, False))
        elif change.old is not None:
            deleted = pb.Policy()
            deleted.CopyFrom(change.old.policy)
            deleted.revision = change.revision
            announce(Applied([], change.old, StoredPolicy(deleted, change.old.policy_id), True))

    return observed
