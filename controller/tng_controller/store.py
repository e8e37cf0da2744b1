"""Policies persisted in SQLite: one row per policy with its revision and switch id, changed only in transactions.
The committed policies are also held in memory (parsed once, indexed by name, switch id and switch-visible match), so
that reading them and checking a change cost the same with 10 or 1000 stored policies."""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tng_controller.pb import policy_pb2 as pb
from tng_controller.policy import switch_match_key

MAX_POLICY_ID = 255  # policy ids are 8 bits on the switches; 0 is the switches' default policy
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS policies (
    name TEXT PRIMARY KEY,
    policy_id INTEGER UNIQUE CHECK (policy_id IS NULL OR policy_id BETWEEN 1 AND 255),
    revision INTEGER NOT NULL,
    body BLOB NOT NULL
);
"""
# Version 1 gave every policy an id (NOT NULL); version 2 only policies that have had a switch half.
_MIGRATE_FROM_1 = """
CREATE TABLE policies_v2 (
    name TEXT PRIMARY KEY,
    policy_id INTEGER UNIQUE CHECK (policy_id IS NULL OR policy_id BETWEEN 1 AND 255),
    revision INTEGER NOT NULL,
    body BLOB NOT NULL
);
INSERT INTO policies_v2 SELECT name, policy_id, revision, body FROM policies;
DROP TABLE policies;
ALTER TABLE policies_v2 RENAME TO policies;
UPDATE meta SET value = 2 WHERE key = 'schema';
"""

MatchKey = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class StoredPolicy:
    """A policy as stored: its revision is set, and `policy_id` names it on the switches (1-255, stable from the
    first time the policy was stored with a switch half until it is deleted; 0 for a policy that never had one)."""

    policy: pb.Policy
    policy_id: int

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def revision(self) -> int:
        return self.policy.revision


class PolicyReader(Protocol):
    """The committed policies as the API and the switches read them (SQLite's store, or the etcd store's mirror)."""

    def get(self, name: str) -> StoredPolicy | None: ...

    def list(self) -> list[StoredPolicy]: ...

    def revision(self) -> int: ...

    def __len__(self) -> int: ...


class StoreError(Exception):
    """A change the store refuses; the message says why."""


class StoreUnavailable(StoreError):
    """The store cannot be reached (etcd); the change was not made."""


class NotFound(StoreError):
    """No policy has this name."""


class RevisionConflict(StoreError):
    """The caller expected another revision of the policy than the stored one."""


class Full(StoreError):
    """Every policy id is taken."""


def _match_key(policy: pb.Policy) -> MatchKey | None:
    """The switch-visible match of a policy with a switch half (two such policies must differ in it)."""
    return switch_match_key(policy.match) if policy.HasField("switch_policy") else None


def _by_name(stored: StoredPolicy) -> str:
    return stored.policy.name


def _place(ordered: list[StoredPolicy], name: str, stored: StoredPolicy | None) -> None:
    """Puts `stored` (None: nothing) where the policy `name` is or belongs in `ordered`, a list sorted by name."""
    at = bisect.bisect_left(ordered, name, key=_by_name)
    present = at < len(ordered) and ordered[at].policy.name == name
    if stored is None:
        if present:
            del ordered[at]
    elif present:
        ordered[at] = stored
    else:
        ordered.insert(at, stored)


class Committed:
    """The committed policies in memory: by name (and in name order), their ids and the holders of switch-visible
    matches."""

    def __init__(self, rows: list[tuple[bytes, int | None]], revision: int) -> None:
        self.policies: dict[str, StoredPolicy] = {}
        self.ordered: list[StoredPolicy] = []
        self.matches: dict[MatchKey, str] = {}
        self.ids: set[int] = set()
        self.revision = revision
        for body, policy_id in rows:
            self.set(StoredPolicy(pb.Policy.FromString(body), policy_id or 0))

    def set(self, stored: StoredPolicy) -> None:
        self._unindex(stored.name)
        self.policies[stored.name] = stored
        _place(self.ordered, stored.name, stored)
        key = _match_key(stored.policy)
        if key is not None:
            self.matches[key] = stored.name
        if stored.policy_id:
            self.ids.add(stored.policy_id)

    def remove(self, name: str) -> None:
        self._unindex(name)
        self.policies.pop(name, None)
        _place(self.ordered, name, None)

    def _unindex(self, name: str) -> None:
        old = self.policies.get(name)
        if old is None:
            return
        key = _match_key(old.policy)
        if key is not None and self.matches.get(key) == name:
            del self.matches[key]
        self.ids.discard(old.policy_id)


class CommittedView:
    """A store's reads (PolicyReader), from the committed policies it keeps in memory."""

    _committed: Committed

    def get(self, name: str) -> StoredPolicy | None:
        return self._committed.policies.get(name)

    def list(self) -> list[StoredPolicy]:
        """Every policy, by name."""
        return list(self._committed.ordered)

    def revision(self) -> int:
        """The revision of the latest change this store has committed or seen (0 before the first)."""
        return self._committed.revision

    def __len__(self) -> int:
        return len(self._committed.policies)


class Transaction:
    """Reads and changes checked against the committed policies and held here; nothing is visible to others until
    the store that made the transaction commits it."""

    def __init__(self, committed: Committed) -> None:
        self._committed = committed
        self._changed: dict[str, StoredPolicy | None] = {}  # by name; None: deleted
        self._matches: dict[MatchKey, str] = {}  # switch-visible matches of the changed policies
        self._ids: set[int] = set()  # ids given out in this transaction
        self._revision = committed.revision
        self.committed = False

    def get(self, name: str) -> StoredPolicy | None:
        if name in self._changed:
            return self._changed[name]
        return self._committed.policies.get(name)

    def list(self) -> list[StoredPolicy]:
        ordered = list(self._committed.ordered)
        for name, stored in self._changed.items():
            _place(ordered, name, stored)
        return ordered

    def revision(self) -> int:
        return self._revision

    def match_holder(self, policy: pb.Policy) -> StoredPolicy | None:
        """The policy, other than `policy` itself, that has a switch half with `policy`'s switch-visible match."""
        key = _match_key(policy)
        if key is None:
            return None
        for name in (self._matches.get(key), self._committed.matches.get(key)):
            holder = self.get(name) if name is not None else None
            if holder is not None and holder.name != policy.name and _match_key(holder.policy) == key:
                return holder
        return None

    def put(self, policy: pb.Policy, expected_revision: int = 0) -> StoredPolicy:
        """Creates or replaces `policy`; a non-zero `expected_revision` must be the stored policy's revision."""
        current = self.get(policy.name)
        if expected_revision and (current is None or current.revision != expected_revision):
            have = "does not exist" if current is None else f"is at revision {current.revision}"
            raise RevisionConflict(f"policy {policy.name!r} {have}, not at revision {expected_revision}")
        policy_id = current.policy_id if current else 0
        if not policy_id and policy.HasField("switch_policy"):
            policy_id = self._free_id()
        stored = pb.Policy()
        stored.CopyFrom(policy)
        stored.revision = self._bump()
        result = StoredPolicy(stored, policy_id)
        self._write(result)
        self._changed[stored.name] = result
        key = _match_key(stored)
        if key is not None:
            self._matches[key] = stored.name
        return result

    def delete(self, name: str) -> StoredPolicy:
        """Deletes the policy `name` and returns it, with the revision of its deletion."""
        current = self.get(name)
        if current is None:
            raise NotFound(f"no policy named {name!r}")
        self._erase(name)
        deleted = pb.Policy()
        deleted.CopyFrom(current.policy)
        deleted.revision = self._bump()
        self._changed[name] = None
        return StoredPolicy(deleted, current.policy_id)

    @property
    def changed(self) -> dict[str, StoredPolicy | None]:
        """The policies this transaction changed, by name (None: deleted), as they are in it."""
        return dict(self._changed)

    def commit(self) -> None:
        """Makes the changes the committed ones (the store has made them durable)."""
        self.committed = True
        for name, stored in self._changed.items():
            if stored is None:
                self._committed.remove(name)
            else:
                self._committed.set(stored)
        self._committed.revision = self._revision

    def _free_id(self) -> int:
        # An id freed in this transaction is not given out again before it commits.
        used = self._committed.ids | self._ids
        for policy_id in range(1, MAX_POLICY_ID + 1):
            if policy_id not in used:
                self._ids.add(policy_id)
                return policy_id
        raise Full(f"all {MAX_POLICY_ID} policy ids are in use: delete a policy with a switch half first")

    def _bump(self) -> int:
        self._revision += 1
        return self._revision

    def _write(self, stored: StoredPolicy) -> None:
        """Called for each put; a store that writes as it goes does it here."""

    def _erase(self, name: str) -> None:
        """Called for each delete; a store that writes as it goes does it here."""


class _SqliteTransaction(Transaction):
    """A transaction that writes its rows into an open SQLite transaction and commits that."""

    def __init__(self, db: sqlite3.Connection, committed: Committed) -> None:
        super().__init__(committed)
        self._db = db

    def _write(self, stored: StoredPolicy) -> None:
        self._db.execute(
            "INSERT INTO policies (name, policy_id, revision, body) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET policy_id = excluded.policy_id, revision = excluded.revision, "
            "body = excluded.body",
            (
                stored.name,
                stored.policy_id or None,
                stored.revision,
                stored.policy.SerializeToString(deterministic=True),
            ),
        )

    def _erase(self, name: str) -> None:
        self._db.execute("DELETE FROM policies WHERE name = ?", (name,))

    def commit(self) -> None:
        self._db.execute("UPDATE meta SET value = ? WHERE key = 'revision'", (self.revision(),))
        self._db.execute("COMMIT")
        super().commit()


class PolicyStore(CommittedView):
    """The policies of one controller in an SQLite file (or in memory for ":memory:")."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL" if self.path != ":memory:" else "PRAGMA journal_mode = MEMORY")
        # A commit survives the process (WAL), but not a power loss before the next checkpoint: then the switches,
        # which took the change, are reconciled to the store when they next connect. Not waiting for fsync on every
        # commit is what lets a batch answer in well under a millisecond.
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0)")
        self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
        schema = self._meta("schema")
        if schema == 1:
            self._db.executescript(f"BEGIN IMMEDIATE; {_MIGRATE_FROM_1} COMMIT;")
            schema = self._meta("schema")
        if schema != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {schema}, this controller reads {SCHEMA_VERSION}")
        rows = self._db.execute("SELECT body, policy_id FROM policies").fetchall()
        self._committed = Committed(rows, self._meta("revision"))

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """An exclusive transaction; it is rolled back unless the block calls `commit()`."""
        self._db.execute("BEGIN IMMEDIATE")
        tx = _SqliteTransaction(self._db, self._committed)
        try:
            yield tx
        finally:
            if not tx.committed:
                self._db.execute("ROLLBACK")

    def put(self, policy: pb.Policy, expected_revision: int = 0) -> StoredPolicy:
        with self.transaction() as tx:
            stored = tx.put(policy, expected_revision)
            tx.commit()
        return stored

    def delete(self, name: str) -> StoredPolicy:
        with self.transaction() as tx:
            deleted = tx.delete(name)
            tx.commit()
        return deleted

    def close(self) -> None:
        self._db.close()

    def _meta(self, key: str) -> int:
        return self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]
