"""Reconciliation of desired and actual entry sets."""

from __future__ import annotations

import random

import pytest
from tng_controller.reconcile import DuplicateEntry, Op, Update, apply, index, reconcile, undo


def ops(updates: list[Update]) -> list[tuple[str, str, str]]:
    return [(u.op.value, u.key, u.value) for u in updates]


def test_equal_sets_need_no_update() -> None:
    entries = [("a", "1"), ("b", "2")]
    assert reconcile(entries, list(reversed(entries))) == []
    assert reconcile([], []) == []


def test_insert_missing_delete_stale_modify_changed() -> None:
    desired = [("keep", "1"), ("change", "new"), ("add", "3")]
    actual = [("stale", "9"), ("keep", "1"), ("change", "old")]
    updates = reconcile(desired, actual)
    assert ops(updates) == [("delete", "stale", "9"), ("modify", "change", "new"), ("insert", "add", "3")]
    assert updates[1].previous == "old"
    assert apply(actual, updates) == dict(desired)


def test_empty_desired_deletes_everything_and_empty_actual_inserts_everything() -> None:
    entries = [("x", "1"), ("y", "2")]
    assert ops(reconcile([], entries)) == [("delete", "x", "1"), ("delete", "y", "2")]
    assert ops(reconcile(entries, [])) == [("insert", "x", "1"), ("insert", "y", "2")]


def test_duplicates_never_cause_double_inserts() -> None:
    assert ops(reconcile([("a", "1"), ("a", "1")], [])) == [("insert", "a", "1")]
    assert reconcile([("a", "1")], [("a", "1"), ("a", "1")]) == []


def test_conflicting_duplicates_are_refused() -> None:
    with pytest.raises(DuplicateEntry, match="desired: key 'a' has two values: '1' and '2'"):
        reconcile([("a", "1"), ("a", "2")], [])
    with pytest.raises(DuplicateEntry, match="actual"):
        index([("k", 1), ("k", 2)], "actual")


def test_undo_restores_the_actual_set_even_after_a_partial_write() -> None:
    actual = [("stale", "9"), ("change", "old")]
    updates = reconcile([("change", "new"), ("add", "3")], actual)
    for applied in range(len(updates) + 1):
        done = updates[:applied]
        assert apply(apply(actual, done).items(), undo(done)) == dict(actual)
    assert [u.op for u in undo(updates)] == [Op.DELETE, Op.MODIFY, Op.INSERT]


def test_apply_rejects_what_a_switch_would_reject() -> None:
    with pytest.raises(ValueError, match="insert of existing key"):
        apply([("a", "1")], [Update(Op.INSERT, "a", "2")])
    with pytest.raises(KeyError):
        apply([], [Update(Op.MODIFY, "a", "2", "1")])
    with pytest.raises(KeyError):
        apply([], [Update(Op.DELETE, "a", "1")])


def test_random_sets_converge_minimally() -> None:
    rng = random.Random(7)
    for _ in range(500):
        keys = rng.sample(range(40), rng.randrange(0, 40))
        actual = [(k, rng.randrange(3)) for k in keys]
        desired = [(k, rng.randrange(3)) for k in rng.sample(range(40), rng.randrange(0, 40))]
        updates = reconcile(desired, actual)
        have, want = dict(actual), dict(desired)
        assert apply(actual, updates) == want
        changed = sum(1 for k in want.keys() & have.keys() if want[k] != have[k])
        assert len(updates) == len(want.keys() ^ have.keys()) + changed
        kinds = [u.op for u in updates]
        assert kinds == sorted(kinds, key=[Op.DELETE, Op.MODIFY, Op.INSERT].index)
        assert apply(want.items(), undo(updates)) == have
