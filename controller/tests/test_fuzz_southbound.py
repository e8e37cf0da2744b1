"""Property tests (Hypothesis) of invalid policy changes against the real southbound: the controller's SwitchFleet
connected over P4Runtime to a fake switch that records every Write (test_southbound's TableServer). Each invalid
change, through SetPolicy, DeletePolicy or an ApplyPolicies stream, is refused with a message naming its field, and
the switch sees no write at all."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import finsy as fy
import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_inputs import WORDS, message_of
from test_southbound import TableServer, free_port, until
from tng_controller import policy as policies
from tng_controller.api import PolicyServicer
from tng_controller.pb import policy_pb2 as pb
from tng_controller.southbound import SwitchFleet
from tng_controller.store import PolicyStore
from tng_controller.switch_config import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, SwitchConfig

INVALID_POLICIES = message_of(pb.Policy.DESCRIPTOR).filter(lambda policy: any(policies.validate(policy)))
INVALID_NAMES = st.one_of(st.sampled_from(WORDS), st.text(max_size=70)).filter(
    lambda name: any(policies._name_errors(name, "delete"))
)
INVALID_CHANGES = st.one_of(
    INVALID_POLICIES.map(lambda policy: pb.PolicyChange(set=policy)),
    INVALID_NAMES.map(lambda name: pb.PolicyChange(delete=name)),
    st.just(pb.PolicyChange()),
    INVALID_POLICIES.map(lambda policy: pb.PolicyChange(set=policy, delete="x")),
)


def _fields(change: pb.PolicyChange, root: str) -> list[str]:
    """The fields the refusal of `change` must name, `root` being what the request calls the change."""
    if change.HasField("set") == bool(change.delete):
        return ["change"]
    if change.HasField("set"):
        return [error.field for error in policies.validate(change.set, root)]
    return [root]


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code, self.details = code, details


class _Context:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


async def _stream(changes: list[pb.PolicyChange]) -> AsyncIterator[pb.PolicyChange]:
    for change in changes:
        yield change


async def _refusals(servicer: PolicyServicer, changes: list[pb.PolicyChange]) -> list[tuple[str, list[str]]]:
    """Every change that is one set or one delete sent alone (SetPolicy or DeletePolicy), then all on one
    ApplyPolicies stream: (message, fields it must name) for each refusal."""
    refused = []
    for change in changes:
        if change.HasField("set") and not change.delete:
            try:
                await servicer.SetPolicy(pb.SetPolicyRequest(policy=change.set), _Context())
            except _Aborted as aborted:
                assert aborted.code == grpc.StatusCode.INVALID_ARGUMENT, aborted
                refused.append((aborted.details, _fields(change, "policy")))
        elif change.delete and not change.HasField("set"):
            try:
                await servicer.DeletePolicy(pb.DeletePolicyRequest(name=change.delete), _Context())
            except _Aborted as aborted:
                assert aborted.code == grpc.StatusCode.INVALID_ARGUMENT, aborted
                refused.append((aborted.details, _fields(change, "name")))
    results = [r async for r in servicer.ApplyPolicies(_stream(changes), _Context())]
    assert len(results) == len(changes)
    for result, change in zip(results, changes, strict=True):
        assert result.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], result
        refused.append((result.message, _fields(change, "delete" if change.delete else "set")))
    return refused


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
@given(st.lists(INVALID_CHANGES, min_size=1, max_size=10))
def test_invalid_changes_are_refused_naming_their_field_and_no_write_reaches_the_switch(
    changes: list[pb.PolicyChange],
) -> None:
    async def run() -> tuple[list[tuple[str, list[str]]], int, int]:
        with tempfile.TemporaryDirectory() as directory:
            store = PolicyStore(Path(directory) / "controller.db")
            lock = asyncio.Lock()
            port = free_port()
            switch = TableServer(f"127.0.0.1:{port}")
            config = SwitchConfig(
                name="s1", address=f"127.0.0.1:{port}", device_id=1, p4info=DEFAULT_P4INFO, bmv2_json=DEFAULT_BMV2_JSON
            )
            fleet = SwitchFleet([config], store, lock)
            servicer = PolicyServicer(store, fleet, lock)
            try:
                async with switch.run(), fy.Controller(fleet.switches()):
                    await until(lambda: fleet.writable() == ["s1"])
                    synced = len(switch.updates)
                    refused = await _refusals(servicer, changes)
                    return refused, len(switch.updates) - synced, len(store.list())
            finally:
                await servicer.changes.close()
                store.close()

    refused, writes, stored = asyncio.run(run())
    for message, fields in refused:
        assert fields, message
        for field in fields:
            assert f"{field}: " in message, (field, message)
    assert writes == 0, "an invalid change reached the switch"
    assert stored == 0
