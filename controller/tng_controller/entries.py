"""Table entries as reconciliation compares them (by encoded match and action), and a per-switch cache of their
encodings: finsy's encoding is most of what a policy change costs, so each source of entries (a policy, the topology)
is encoded again only when it changed, and a change costs about the same with 1 or 255 stored policies."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

import finsy as fy
from finsy.proto import p4r


@dataclass(frozen=True, slots=True)
class Entry:
    """A table entry as reconciliation compares it: by its encoded action; `entry` is what is written."""

    action: bytes
    entry: fy.P4TableEntry = field(compare=False)


Entries = dict[bytes, Entry]  # by encoded match (table, match fields, priority)


def index(schema: fy.P4Schema, entries: Iterable[fy.P4TableEntry]) -> Entries:
    """The entries by encoded match; of two with one match, the later one stays."""
    indexed: Entries = {}
    for entry in entries:
        message = entry.encode_entry(schema)
        key = p4r.TableEntry(
            table_id=message.table_id,
            match=sorted(message.match, key=lambda m: m.field_id),
            priority=message.priority,
        )
        indexed[key.SerializeToString(deterministic=True)] = Entry(
            message.action.SerializeToString(deterministic=True), entry
        )
    return indexed


Source = tuple[Hashable, Callable[[], Iterable[fy.P4TableEntry]]]  # what the entries depend on, and how to make them


class EncodedEntries:
    """One switch's encoded entries by source. A source's key must hold everything its entries depend on (a policy's
    stored bytes and id, not its revision alone: a revision a failed change used is used again by the next change)."""

    def __init__(self) -> None:
        self._schema: fy.P4Schema | None = None
        self._cached: dict[Hashable, Entries] = {}

    def collect(self, schema: fy.P4Schema, sources: Iterable[Source]) -> Entries:
        """The entries of `sources`, merged in order; only sources not cached are compiled and encoded. Keeps only
        these sources' encodings, so that changed and deleted sources are forgotten."""
        if schema is not self._schema:
            self._schema, self._cached = schema, {}
        kept: dict[Hashable, Entries] = {}
        merged: Entries = {}
        for key, make in sources:
            encoded = self._cached.get(key)
            if encoded is None:
                encoded = index(schema, make())
            kept[key] = encoded
            merged.update(encoded)
        self._cached = kept
        return merged
