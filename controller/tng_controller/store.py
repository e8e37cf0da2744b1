"""Policies persisted in SQLite: one row per policy with its revision and switch id, changed only in transactions."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tng_controller.pb import policy_pb2 as pb

MAX_POLICY_ID = 255  # policy ids are 8 bits on the switches; 0 is the switches' default policy
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS policies (
    name TEXT PRIMARY KEY,
    policy_id INTEGER NOT NULL UNIQUE CHECK (policy_id BETWEEN 1 AND 255),
    revision INTEGER NOT NULL,
    body BLOB NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class StoredPolicy:
    """A policy as stored: its revision is set, and `policy_id` names it on the switches (1-255, stable)."""

    policy: pb.Policy
    policy_id: int

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def revision(self) -> int:
        return self.policy.revision


class StoreError(Exception):
    """A change the store refuses; the message says why."""


class NotFound(StoreError):
    """No policy has this name."""


class RevisionConflict(StoreError):
    """The caller expected another revision of the policy than the stored one."""


class Full(StoreError):
    """Every policy id is taken."""


class Transaction:
    """Reads and changes inside one SQLite transaction; nothing is visible to others until `commit`."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.committed = False

    def get(self, name: str) -> StoredPolicy | None:
        return _get(self._db, name)

    def list(self) -> list[StoredPolicy]:
        return _list(self._db)

    def revision(self) -> int:
        return _revision(self._db)

    def put(self, policy: pb.Policy, expected_revision: int = 0) -> StoredPolicy:
        """Creates or replaces `policy`; a non-zero `expected_revision` must be the stored policy's revision."""
        current = self.get(policy.name)
        if expected_revision and (current is None or current.revision != expected_revision):
            have = "does not exist" if current is None else f"is at revision {current.revision}"
            raise RevisionConflict(f"policy {policy.name!r} {have}, not at revision {expected_revision}")
        policy_id = current.policy_id if current else self._free_id()
        stored = pb.Policy()
        stored.CopyFrom(policy)
        stored.revision = self._bump()
        self._db.execute(
            "INSERT INTO policies (name, policy_id, revision, body) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET revision = excluded.revision, body = excluded.body",
            (stored.name, policy_id, stored.revision, stored.SerializeToString(deterministic=True)),
        )
        return StoredPolicy(stored, policy_id)

    def delete(self, name: str) -> StoredPolicy:
        """Deletes the policy `name` and returns it, with the revision of its deletion."""
        current = self.get(name)
        if current is None:
            raise NotFound(f"no policy named {name!r}")
        self._db.execute("DELETE FROM policies WHERE name = ?", (name,))
        deleted = pb.Policy()
        deleted.CopyFrom(current.policy)
        deleted.revision = self._bump()
        return StoredPolicy(deleted, current.policy_id)

    def commit(self) -> None:
        self._db.execute("COMMIT")
        self.committed = True

    def _free_id(self) -> int:
        used = {row[0] for row in self._db.execute("SELECT policy_id FROM policies")}
        for policy_id in range(1, MAX_POLICY_ID + 1):
            if policy_id not in used:
                return policy_id
        raise Full(f"all {MAX_POLICY_ID} policy ids are in use: delete a policy first")

    def _bump(self) -> int:
        revision = _revision(self._db) + 1
        self._db.execute("UPDATE meta SET value = ? WHERE key = 'revision'", (revision,))
        return revision


class PolicyStore:
    """The policies of one controller in an SQLite file (or in memory for ":memory:")."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL" if self.path != ":memory:" else "PRAGMA journal_mode = MEMORY")
        self._db.executescript(_SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0)")
        self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
        schema = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        if schema != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {schema}, this controller reads {SCHEMA_VERSION}")

    def get(self, name: str) -> StoredPolicy | None:
        return _get(self._db, name)

    def list(self) -> list[StoredPolicy]:
        """Every policy, by name."""
        return _list(self._db)

    def revision(self) -> int:
        """The revision of the latest change (0 before the first)."""
        return _revision(self._db)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """An exclusive transaction; it is rolled back unless the block calls `commit()`."""
        self._db.execute("BEGIN IMMEDIATE")
        tx = Transaction(self._db)
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


def _get(db: sqlite3.Connection, name: str) -> StoredPolicy | None:
    row = db.execute("SELECT body, policy_id FROM policies WHERE name = ?", (name,)).fetchone()
    return None if row is None else StoredPolicy(pb.Policy.FromString(row[0]), row[1])


def _list(db: sqlite3.Connection) -> list[StoredPolicy]:
    rows = db.execute("SELECT body, policy_id FROM policies ORDER BY name").fetchall()
    return [StoredPolicy(pb.Policy.FromString(body), policy_id) for body, policy_id in rows]


def _revision(db: sqlite3.Connection) -> int:
    return db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0]
