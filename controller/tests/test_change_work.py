"""A change's work shared between switches: worked out once per group of alike switches and change, and the same
updates give the same P4Runtime messages, never another switch's for a different entry."""

from __future__ import annotations

from finsy.proto import p4r
from tng_controller.change_work import ChangeWork
from tng_controller.entries import Entry
from tng_controller.fleet import Change
from tng_controller.reconcile import Op, Update


def entry(action: bytes) -> Entry:
    return Entry(action, p4r.TableEntry(table_id=7))


def test_alike_switches_share_a_changes_entries_and_a_new_change_starts_over() -> None:
    work, calls = ChangeWork(), []

    def work_out(name: str):
        def compute():
            calls.append(name)
            return {b"k": entry(name.encode())}, frozenset({b"k"})

        return compute

    change, later = Change([], [], []), Change([], [], [])
    first = work.entries(change, ("pipeline", 1), work_out("s1"))
    assert work.entries(change, ("pipeline", 1), work_out("s2")) is first
    other_tuning = work.entries(change, ("pipeline", 2), work_out("s3"))
    assert other_tuning is not first
    assert work.entries(later, ("pipeline", 1), work_out("s4")) is not first
    assert calls == ["s1", "s3", "s4"]


def test_the_same_update_gets_the_same_message_and_another_entry_its_own() -> None:
    work, change = ChangeWork(), Change([], [], [])
    a, b = entry(b"a"), entry(b"b")
    (first,) = work.messages(change, [Update(Op.MODIFY, b"k", a, b)])
    (again,) = work.messages(change, [Update(Op.MODIFY, b"k", a, b)])
    assert again is first and first.type == p4r.Update.MODIFY
    (other,) = work.messages(change, [Update(Op.MODIFY, b"k", b, a)])
    assert other is not first
    (deleted,) = work.messages(change, [Update(Op.DELETE, b"k", a)])
    assert deleted.type == p4r.Update.DELETE and deleted is not first
