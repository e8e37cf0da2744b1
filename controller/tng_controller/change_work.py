"""What one policy change costs every switch alike, worked out for the first switch and taken by the others. A change
goes to every switch at once; switches with the same pipeline, rates and tuning of the changed policies get the same
entries for them, and the same updates get the same P4Runtime `Update` messages, so a batch is not worked out once
per switch (with eight switches that was a third of the controller's time per change). Kept for the change being
written only: the next change starts over."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from finsy.proto import p4r

from tng_controller.entries import Entries, Entry
from tng_controller.fleet import Change
from tng_controller.reconcile import Op, Update

_UPDATE_TYPES = {Op.INSERT: p4r.Update.INSERT, Op.MODIFY: p4r.Update.MODIFY, Op.DELETE: p4r.Update.DELETE}

ChangedEntries = tuple[Entries, frozenset[bytes]]  # the changed policies' entries, and every key the change touches


def update_message(update: Update[bytes, Entry]) -> p4r.Update:
    return p4r.Update(type=_UPDATE_TYPES[update.op], entity=p4r.Entity(table_entry=update.value.message))


class ChangeWork:
    """The fleet's work for the change it is writing, by group of alike switches."""

    def __init__(self) -> None:
        self._change: Change | None = None
        self._entries: dict[Hashable, ChangedEntries] = {}
        self._messages: dict[tuple[Op, bytes, int], tuple[Entry, p4r.Update]] = {}

    def entries(self, change: Change, group: Hashable, work_out: Callable[[], ChangedEntries]) -> ChangedEntries:
        """The entries of `change` for the switches of `group` (everything they depend on besides the change),
        worked out by the first switch of the group that asks."""
        self._start(change)
        found = self._entries.get(group)
        if found is None:
            found = self._entries[group] = work_out()
        return found

    def messages(self, change: Change, updates: Sequence[Update[bytes, Entry]]) -> list[p4r.Update]:
        """The `Update` messages of `updates`; one made for another switch is taken when it writes the same entry."""
        self._start(change)
        messages = []
        for update in updates:
            key = (update.op, update.key, id(update.value))
            found = self._messages.get(key)
            if found is None or found[0] is not update.value:
                found = self._messages[key] = (update.value, update_message(update))
            messages.append(found[1])
        return messages

    def _start(self, change: Change) -> None:
        if change is not self._change:
            self._change, self._entries, self._messages = change, {}, {}
