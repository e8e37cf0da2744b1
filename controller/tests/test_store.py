"""The SQLite policy store: round trips, revisions, stable policy ids, atomic transactions, persistence."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from tng_controller.pb import policy_pb2 as pb
from tng_controller.store import MAX_POLICY_ID, Full, NotFound, PolicyStore, RevisionConflict


def policy(name: str, cc: str = "cubic") -> pb.Policy:
    return pb.Policy(
        name=name,
        match=pb.Match(priority=3, dst_prefix="10.0.0.0/8", ip_protocol=6),
        switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK, steering=pb.STEERING_MODE_QDEPL),
        host_policy=pb.HostPolicy(congestion_control=cc, congestion_control_per_path={0: "bbr"}),
    )


def test_round_trip_sets_revisions_and_ids() -> None:
    store = PolicyStore(":memory:")
    assert store.revision() == 0
    first = store.put(policy("bulk"))
    second = store.put(policy("video"))
    assert (first.revision, first.policy_id) == (1, 1)
    assert (second.revision, second.policy_id) == (2, 2)
    got = store.get("bulk")
    assert got is not None
    expected = policy("bulk")
    expected.revision = 1
    assert got.policy == expected
    assert [p.name for p in store.list()] == ["bulk", "video"]
    assert store.get("absent") is None


def test_replacing_keeps_the_id_and_raises_the_revision() -> None:
    store = PolicyStore(":memory:")
    store.put(policy("a"))
    store.put(policy("b"))
    replaced = store.put(policy("a", cc="vegas"))
    assert (replaced.policy_id, replaced.revision) == (1, 3)
    assert store.get("a").policy.host_policy.congestion_control == "vegas"
    assert store.revision() == 3


def test_expected_revision_is_compare_and_set() -> None:
    store = PolicyStore(":memory:")
    store.put(policy("a"))
    with pytest.raises(RevisionConflict, match="'a' is at revision 1, not at revision 7"):
        store.put(policy("a", cc="bbr"), expected_revision=7)
    with pytest.raises(RevisionConflict, match="'new' does not exist"):
        store.put(policy("new"), expected_revision=1)
    assert store.put(policy("a", cc="bbr"), expected_revision=1).revision == 2
    assert store.get("a").policy.host_policy.congestion_control == "bbr"


def test_delete_frees_the_id_and_counts_a_revision() -> None:
    store = PolicyStore(":memory:")
    store.put(policy("a"))
    store.put(policy("b"))
    deleted = store.delete("a")
    assert (deleted.name, deleted.revision, deleted.policy_id) == ("a", 3, 1)
    assert store.get("a") is None
    with pytest.raises(NotFound):
        store.delete("a")
    assert store.put(policy("c")).policy_id == 1


def test_uncommitted_transaction_changes_nothing() -> None:
    store = PolicyStore(":memory:")
    store.put(policy("a"))
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.put(policy("b"))
        tx.delete("a")
        assert [p.name for p in tx.list()] == ["b"]
        raise RuntimeError("switch write failed")
    assert [p.name for p in store.list()] == ["a"]
    assert store.revision() == 1
    with store.transaction() as tx:
        tx.put(policy("b"))
    assert store.get("b") is None


def switched(name: str) -> pb.Policy:
    return pb.Policy(name=name, switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_AT_HOSTS))


def test_ids_run_out_at_255_policies_with_a_switch_half() -> None:
    store = PolicyStore(":memory:")
    for i in range(MAX_POLICY_ID):
        store.put(switched(f"p{i}"))
    with pytest.raises(Full, match="all 255 policy ids are in use"):
        store.put(switched("one-more"))
    for i in range(1000):  # host-only policies need no id
        assert store.put(pb.Policy(name=f"host-{i}")).policy_id == 0
    assert len(store.list()) == MAX_POLICY_ID + 1000


def test_a_policy_gets_its_id_with_its_first_switch_half_and_keeps_it() -> None:
    store = PolicyStore(":memory:")
    assert store.put(pb.Policy(name="a")).policy_id == 0
    assert store.put(switched("b")).policy_id == 1
    assert store.put(switched("a")).policy_id == 2
    assert store.put(pb.Policy(name="a")).policy_id == 2


def test_match_holder_sees_the_transaction_and_the_committed_set() -> None:
    store = PolicyStore(":memory:")
    store.put(policy("a"))
    with store.transaction() as tx:
        assert tx.match_holder(policy("b")).name == "a"
        assert tx.match_holder(policy("a")) is None  # itself
        tx.delete("a")
        assert tx.match_holder(policy("b")) is None
        tx.put(policy("c"))
        assert tx.match_holder(policy("b")).name == "c"
        moved = policy("c")
        moved.match.priority = 4
        tx.put(moved)
        assert tx.match_holder(policy("b")) is None
    assert store.get("a") is not None


def test_ids_freed_in_a_transaction_are_not_reused_before_it_commits() -> None:
    store = PolicyStore(":memory:")
    store.put(policy("a"))
    with store.transaction() as tx:
        tx.delete("a")
        assert tx.put(switched("b")).policy_id == 2
        tx.commit()
    assert store.put(switched("c")).policy_id == 1


def test_a_version_1_store_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
        "CREATE TABLE policies (name TEXT PRIMARY KEY, policy_id INTEGER NOT NULL UNIQUE"
        " CHECK (policy_id BETWEEN 1 AND 255), revision INTEGER NOT NULL, body BLOB NOT NULL);"
        "INSERT INTO meta VALUES ('revision', 5), ('schema', 1);"
    )
    body = pb.Policy(name="old", revision=5).SerializeToString()
    db.execute("INSERT INTO policies VALUES ('old', 7, 5, ?)", (body,))
    db.close()
    store = PolicyStore(path)
    assert [(p.name, p.policy_id, p.revision) for p in store.list()] == [("old", 7, 5)]
    assert store.put(pb.Policy(name="host")).policy_id == 0
    store.close()
    assert [(p.name, p.policy_id) for p in PolicyStore(path).list()] == [("host", 0), ("old", 7)]


def test_policies_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "controller.db"
    store = PolicyStore(path)
    store.put(policy("a"))
    store.put(policy("b"))
    store.delete("a")
    store.close()
    reopened = PolicyStore(path)
    assert [(p.name, p.revision, p.policy_id) for p in reopened.list()] == [("b", 2, 2)]
    assert reopened.revision() == 3
    assert reopened.put(policy("c")).revision == 4


def test_lists_stay_in_name_order_through_random_changes() -> None:
    store = PolicyStore(":memory:")
    rng = random.Random(7)
    names = [f"p{i:02d}" for i in range(40)]
    for _ in range(30):
        with store.transaction() as tx:
            for _ in range(rng.randrange(1, 6)):
                name = rng.choice(names)
                if tx.get(name) is not None and rng.random() < 0.4:
                    tx.delete(name)
                else:
                    tx.put(pb.Policy(name=name))
            listed = [p.name for p in tx.list()]
            assert listed == sorted(listed) and len(set(listed)) == len(listed)
            assert listed == [n for n in names if tx.get(n) is not None]
            tx.commit()
        assert [p.name for p in store.list()] == listed
