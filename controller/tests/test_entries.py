"""The per-switch cache of encoded entries: a source is compiled and encoded again only when its key changed, and
changed or deleted sources are forgotten."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import finsy as fy
import pytest
from tng_controller.compile import compile_policies, policy_entries
from tng_controller.entries import EncodedEntries, Source, index
from tng_controller.pb import policy_pb2 as pb
from tng_controller.store import StoredPolicy


def weighted(policy_id: int, lte: int, revision: int) -> StoredPolicy:
    policy = pb.Policy(
        name=f"p{policy_id}",
        revision=revision,
        match=pb.Match(dst_prefix=f"10.0.{policy_id}.0/24"),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_IN_NETWORK, steering=pb.STEERING_MODE_WEIGHTED, lte_weight=lte, wifi_weight=1
        ),
    )
    return StoredPolicy(policy, policy_id)


class Compiles:
    """Sources keyed as southbound keys policies (id and stored bytes), recording which policies were compiled."""

    def __init__(self) -> None:
        self.compiled: list[int] = []

    def sources(self, policies: Iterable[StoredPolicy]) -> list[Source]:
        return [self.source(p) for p in policies]

    def source(self, p: StoredPolicy) -> Source:
        return ("policy", p.policy_id), p.policy.SerializeToString(deterministic=True), self._make(p)

    def _make(self, stored: StoredPolicy) -> Callable[[], Iterable[fy.P4TableEntry]]:
        def make() -> Iterable[fy.P4TableEntry]:
            self.compiled.append(stored.policy_id)
            return policy_entries(stored)

        return make


def test_only_changed_policies_are_encoded_again_and_deleted_ones_are_forgotten(
    contract_pipeline: tuple[Path, Path],
) -> None:
    schema = fy.P4Schema(*contract_pipeline)
    cache, compiles = EncodedEntries(), Compiles()
    policies = [weighted(1, 3, 1), weighted(2, 1, 2), weighted(3, 2, 3)]

    assert cache.collect(schema, compiles.sources(policies)) == index(schema, compile_policies(policies))
    assert compiles.compiled == [1, 2, 3]
    cache.collect(schema, compiles.sources(policies))
    assert compiles.compiled == [1, 2, 3]  # nothing changed: nothing encoded

    changed = [policies[0], weighted(2, 5, 4), policies[2]]
    assert cache.collect(schema, compiles.sources(changed)) == index(schema, compile_policies(changed))
    assert compiles.compiled == [1, 2, 3, 2]

    without_3 = changed[:2]
    assert cache.collect(schema, compiles.sources(without_3)) == index(schema, compile_policies(without_3))
    cache.collect(schema, compiles.sources(changed))
    assert compiles.compiled == [1, 2, 3, 2, 3]  # deleted, then back: encoded anew

    cache.collect(fy.P4Schema(*contract_pipeline), compiles.sources(changed))
    assert compiles.compiled == [1, 2, 3, 2, 3, 1, 2, 3]  # another pipeline: everything encoded anew


def test_a_source_another_switch_encoded_is_shared_and_keep_false_leaves_the_slot(
    contract_pipeline: tuple[Path, Path],
) -> None:
    caches: list[EncodedEntries] = []
    first, second = (EncodedEntries(lambda: caches) for _ in range(2))
    caches += [first, second]
    schema_a, schema_b = fy.P4Schema(*contract_pipeline), fy.P4Schema(*contract_pipeline)
    compiles = Compiles()
    policy, changed = weighted(1, 3, 1), weighted(1, 4, 2)
    expected = index(schema_a, compile_policies([policy]))
    assert first.encode(schema_a, compiles.source(policy)) == expected
    assert second.encode(schema_b, compiles.source(policy)) == expected
    assert compiles.compiled == [1]  # the second switch took the first one's encoding

    assert first.encode(schema_a, compiles.source(changed), keep=False) == index(schema_a, compile_policies([changed]))
    assert compiles.compiled == [1, 1]
    first.encode(schema_a, compiles.source(policy))
    assert compiles.compiled == [1, 1]  # the slot still holds the first version
    first.encode(schema_a, compiles.source(changed))
    assert compiles.compiled == [1, 1, 1]

    first.forget(("policy", 1))
    second.forget(("policy", 1))
    first.encode(schema_a, compiles.source(policy))
    assert compiles.compiled == [1, 1, 1, 1]


def test_a_changed_policy_encodes_only_its_changed_entries_again(
    contract_pipeline: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = fy.P4Schema(*contract_pipeline)
    encoded: list[str] = []
    real = fy.P4TableEntry.encode_entry

    def counting(entry: fy.P4TableEntry, schema: fy.P4Schema) -> object:
        encoded.append(entry.table_id)
        return real(entry, schema)

    monkeypatch.setattr(fy.P4TableEntry, "encode_entry", counting)
    cache, compiles = EncodedEntries(), Compiles()
    first = cache.encode(schema, compiles.source(weighted(1, 3, 1)))
    assert sorted(encoded) == ["ingress.classify.flow_policy", "ingress.steering.modes"]
    encoded.clear()
    changed = weighted(1, 4, 2)
    second = cache.encode(schema, compiles.source(changed))
    assert encoded == ["ingress.steering.modes"]  # the classification entry is the same: remembered
    assert second == index(schema, compile_policies([changed])) != first
