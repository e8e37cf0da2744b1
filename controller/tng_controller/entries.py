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
    """A table entry as reconciliation compares it: by its encoded action; `message` is what is written (encoded
    once: writing it costs no encoding)."""

    action: bytes
    message: p4r.TableEntry = field(compare=False)


Entries = dict[bytes, Entry]  # by encoded match (table, match fields, priority)


def encode(schema: fy.P4Schema, entry: fy.P4TableEntry) -> tuple[bytes, Entry]:
    """One entry's key (table, match fields by id, priority) and its Entry."""
    message = entry.encode_entry(schema)
    key = p4r.TableEntry(
        table_id=message.table_id,
        match=sorted(message.match, key=lambda m: m.field_id),
        priority=message.priority,
    )
    return key.SerializeToString(deterministic=True), Entry(
        message.action.SerializeToString(deterministic=True), message
    )


def index(schema: fy.P4Schema, entries: Iterable[fy.P4TableEntry], memo: EntryMemo | None = None) -> Entries:
    """The entries by encoded match; of two with one match, the later one stays."""
    indexed: Entries = {}
    for entry in entries:
        key, encoded = memo.encode(schema, entry) if memo is not None else encode(schema, entry)
        indexed[key] = encoded
    return indexed


class EntryMemo:
    """Encodings of single entries by their repr (which holds every field, and costs a fraction of finsy's encoding):
    a change to a policy's steering weights encodes its steering entry again, not its classification entry."""

    LIMIT = 8192  # entries remembered; past it the memo starts over

    def __init__(self) -> None:
        self._encoded: dict[str, tuple[bytes, Entry]] = {}

    def encode(self, schema: fy.P4Schema, entry: fy.P4TableEntry) -> tuple[bytes, Entry]:
        text = repr(entry)
        found = self._encoded.get(text)
        if found is None:
            if len(self._encoded) >= self.LIMIT:
                self._encoded.clear()
            found = self._encoded[text] = encode(schema, entry)
        return found

    def clear(self) -> None:
        self._encoded.clear()


# A source of entries: its identity (one policy, the topology, ...), a key holding everything its entries depend on,
# and how to make them.
Source = tuple[Hashable, Hashable, Callable[[], Iterable[fy.P4TableEntry]]]


class EncodedEntries:
    """One switch's encoded entries, one slot per source identity. A source's key must hold everything its entries
    depend on (a policy's stored bytes and id, not its revision alone: a revision a failed change used is used again
    by the next change). `peers` are other switches' caches: a source another switch with the same pipeline has
    encoded under the same key is taken from there (a fleet encodes a change once, not once per switch)."""

    def __init__(self, peers: Callable[[], Iterable[EncodedEntries]] = tuple) -> None:
        self._schema: fy.P4Schema | None = None
        self._cookie: object = None
        self._cached: dict[Hashable, tuple[Hashable, Entries]] = {}
        self._memo = EntryMemo()
        self._peers = peers

    def collect(self, schema: fy.P4Schema, sources: Iterable[Source]) -> Entries:
        """The entries of `sources`, merged in order; only sources not cached are compiled and encoded. Keeps only
        these sources' encodings, so that changed and deleted sources are forgotten."""
        self._use(schema)
        merged: Entries = {}
        identities = set()
        for source in sources:
            identities.add(source[0])
            merged.update(self.encode(schema, source))
        for identity in self._cached.keys() - identities:
            del self._cached[identity]
        return merged

    def encode(self, schema: fy.P4Schema, source: Source, *, keep: bool = True) -> Entries:
        """The entries of one source, from the cache when its key is there; `keep` puts them in its slot."""
        self._use(schema)
        identity, key, make = source
        slot = self._cached.get(identity)
        if slot is not None and slot[0] == key:
            return slot[1]
        encoded = self._from_peers(identity, key)
        if encoded is None:
            encoded = index(schema, make(), self._memo)
        if keep:
            self._cached[identity] = (key, encoded)
        return encoded

    def forget(self, identity: Hashable) -> None:
        self._cached.pop(identity, None)

    def _use(self, schema: fy.P4Schema) -> None:
        if schema is not self._schema:  # a new pipeline: nothing cached is known to be right for it
            self._schema, self._cookie, self._cached = schema, _cookie(schema), {}
            self._memo.clear()

    def _from_peers(self, identity: Hashable, key: Hashable) -> Entries | None:
        for peer in self._peers():
            if peer is not self and peer._schema is not None and peer._cookie == self._cookie:
                slot = peer._cached.get(identity)
                if slot is not None and slot[0] == key:
                    return slot[1]
        return None


def _cookie(schema: fy.P4Schema) -> object:
    """What identifies a pipeline across switches (finsy derives the cookie from P4Info and device config); 0 is no
    pipeline loaded, shared with nobody."""
    return schema.p4cookie or object()
