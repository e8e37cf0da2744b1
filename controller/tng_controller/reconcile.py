"""Reconciliation: the updates that turn the entries a switch has into the entries it should have, and their undo."""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Op(enum.Enum):
    INSERT = "insert"
    MODIFY = "modify"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Update(Generic[K, V]):
    """One write: `value` is the entry's value after an insert or modify, or the value a delete removes."""

    op: Op
    key: K
    value: V
    previous: V | None = None  # the value a modify replaces

    def inverse(self) -> Update[K, V]:
        """The update that undoes this one."""
        if self.op is Op.INSERT:
            return Update(Op.DELETE, self.key, self.value)
        if self.op is Op.DELETE:
            return Update(Op.INSERT, self.key, self.value)
        assert self.previous is not None
        return Update(Op.MODIFY, self.key, self.previous, self.value)


class DuplicateEntry(ValueError):
    """Two entries of one set share a key but differ in value: the set is ambiguous."""


def index(entries: Iterable[tuple[K, V]], what: str = "entries") -> dict[K, V]:
    """The entries by key, in first-seen order; equal duplicates collapse, conflicting ones raise DuplicateEntry."""
    indexed: dict[K, V] = {}
    for key, value in entries:
        if key in indexed and indexed[key] != value:
            raise DuplicateEntry(f"{what}: key {key!r} has two values: {indexed[key]!r} and {value!r}")
        indexed[key] = value
    return indexed


def reconcile(desired: Iterable[tuple[K, V]], actual: Iterable[tuple[K, V]]) -> list[Update[K, V]]:
    """Deletes of stale entries (in `actual`'s order), then modifies of changed ones and inserts of missing ones (in
    `desired`'s order). Applying them to `actual` gives `desired`; nothing already right is written, no key is
    inserted twice, and deletes come first so that a full table has room for the inserts."""
    want = index(desired, "desired")
    have = index(actual, "actual")
    deletes = [Update(Op.DELETE, key, value) for key, value in have.items() if key not in want]
    modifies = [
        Update(Op.MODIFY, key, value, have[key]) for key, value in want.items() if key in have and have[key] != value
    ]
    inserts = [Update(Op.INSERT, key, value) for key, value in want.items() if key not in have]
    return [*deletes, *modifies, *inserts]


def undo(applied: Sequence[Update[K, V]]) -> list[Update[K, V]]:
    """The updates that restore what was there before `applied` (in reverse order)."""
    return [update.inverse() for update in reversed(applied)]


def apply(entries: Iterable[tuple[K, V]], updates: Iterable[Update[K, V]]) -> dict[K, V]:
    """The entries after `updates`; raises KeyError or ValueError on an update a switch would reject."""
    result = index(entries)
    for update in updates:
        if update.op is Op.INSERT:
            if update.key in result:
                raise ValueError(f"insert of existing key {update.key!r}")
            result[update.key] = update.value
        elif update.op is Op.MODIFY:
            if update.key not in result:
                raise KeyError(update.key)
            result[update.key] = update.value
        else:
            del result[update.key]
    return result
