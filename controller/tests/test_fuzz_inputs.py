"""Property tests (Hypothesis) of what the controller accepts from users: policies from the API and its
configuration file. Invalid input gets an error naming the field; valid input always becomes entries the pipeline
takes, so nothing invalid reaches a switch and nothing valid is refused by one."""

from __future__ import annotations

import asyncio
import json
import re
import string
import tempfile
from pathlib import Path
from typing import Any

import finsy as fy
import grpc
import pytest
from conftest import FakeFleet
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tng_controller import policy as policies
from tng_controller.api import PolicyServicer
from tng_controller.compile import Link, Tuning, policy_entries
from tng_controller.config import ConfigError, parse
from tng_controller.pb import policy_pb2 as pb
from tng_controller.store import PolicyStore, StoredPolicy
from tng_controller.switch_config import DEFAULT_BMV2_JSON, DEFAULT_P4INFO

# Values near the edges of what the fields and the pipeline's parameters hold, and a few ordinary ones.
EDGE_INTS = (0, 1, 2, 7, 8, 100, 255, 256, 1000, 1460, 65535, 65536, 10**6, 2**31 - 1, 2**32 - 1)
WORDS = (
    "", "a", "web", "video-1", "Bad Name", "x" * 64, "cubic", "copa", "vegas", "bbr", "newreno", "verus", "sprout",
    "reno",
    "ack-clocked", "lowest-rtt", "weighted", "same-path", "alternate-path", "bulk.download", "-lead",
    "10.0.0.0/8", "10.1.2.0/24", "192.0.2.1/32", "0.0.0.0/0", "10.0.0.1/8", "300.1.1.1/8", "10.0.0.0/33", "10.0.0.0",
)  # fmt: skip
POLICY_SETTINGS = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def message_of(descriptor, *, wild: bool = True) -> st.SearchStrategy[Message]:
    """Messages of `descriptor` (a top-level message of policy.proto) with each field left unset or drawn from the
    edges of its type (`wild`: also any value of it, so most messages are invalid)."""
    optional = {field.name: field_values(field, wild) for field in descriptor.fields}
    return st.fixed_dictionaries({}, optional=optional).map(lambda values: _build(getattr(pb, descriptor.name), values))


def _build(cls: type[Message], values: dict[str, Any]) -> Message:
    message = cls()
    for name, value in values.items():
        if isinstance(value, Message):
            getattr(message, name).CopyFrom(value)
        elif isinstance(value, dict):
            getattr(message, name).update(value)
        else:
            setattr(message, name, value)
    return message


def field_values(field: FieldDescriptor, wild: bool) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return st.dictionaries(scalar(key, wild), scalar(value, wild), max_size=3)
    if field.message_type is not None:
        return message_of(field.message_type, wild=wild)
    return scalar(field, wild)


def scalar(field: FieldDescriptor, wild: bool) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_STRING:
        words = st.sampled_from(WORDS)
        return st.one_of(words, st.text(string.printable, max_size=80)) if wild else words
    if kind == FieldDescriptor.TYPE_ENUM:
        numbers = st.sampled_from([value.number for value in field.enum_type.values])
        return st.one_of(numbers, st.integers(0, 100)) if wild else numbers
    if kind == FieldDescriptor.TYPE_DOUBLE:
        edges = st.sampled_from((0.0, 0.1, 0.5, 1.0))
        return st.one_of(st.floats(), edges) if wild else edges
    bits = 64 if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_INT64) else 32
    edges = st.sampled_from([value for value in EDGE_INTS if value < 2**bits])
    return st.one_of(edges, st.integers(0, 2**bits - 1)) if wild else edges


SCHEMA = fy.P4Schema(DEFAULT_P4INFO, DEFAULT_BMV2_JSON)  # the committed build of the tng pipeline


@POLICY_SETTINGS
@given(message_of(pb.Policy.DESCRIPTOR))
def test_validation_names_a_field_for_every_error(policy: pb.Policy) -> None:
    for error in policies.validate(policy):
        assert error.field == "policy" or error.field.startswith("policy."), error
        assert error.reason, error


class _Aborted(Exception):
    """What a grpc.aio context's abort() does: end the call with a status and a message."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code, self.details = code, details


class _RecordingContext:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


@settings(POLICY_SETTINGS, max_examples=200)
@given(message_of(pb.Policy.DESCRIPTOR))
def test_the_api_refuses_an_invalid_policy_naming_every_field_and_writes_no_switch(policy: pb.Policy) -> None:
    errors = list(policies.validate(policy))
    assume(errors)

    async def set_policy() -> tuple[_Aborted, FakeFleet, list]:
        with tempfile.TemporaryDirectory() as directory:
            store = PolicyStore(Path(directory) / "controller.db")
            fleet = FakeFleet(["s1", "s2"])
            servicer = PolicyServicer(store, fleet)
            try:
                with pytest.raises(_Aborted) as aborted:
                    await servicer.SetPolicy(pb.SetPolicyRequest(policy=policy), _RecordingContext())
                return aborted.value, fleet, store.list()
            finally:
                await servicer.changes.close()
                store.close()

    aborted, fleet, stored = asyncio.run(set_policy())
    assert aborted.code == grpc.StatusCode.INVALID_ARGUMENT
    for error in errors:
        assert f"{error.field}: " in aborted.details, (error, aborted.details)
    assert fleet.writes == [] and fleet.changes == [], "an invalid policy reached a switch"
    assert stored == []


@settings(POLICY_SETTINGS, max_examples=150)  # ~1 in 30 tame policies is valid: the rest are drawn and discarded
@given(message_of(pb.Policy.DESCRIPTOR, wild=False), st.sampled_from((Link.LTE, Link.WIFI)), st.booleans())
def test_a_valid_policy_becomes_entries_the_pipeline_accepts(policy: pb.Policy, link: Link, measured: bool) -> None:
    assume(not list(policies.validate(policy)))
    stored = StoredPolicy(policy, policy_id=1 + len(policy.name))
    for entry in policy_entries(stored, Tuning(link), (833, 2500) if measured else None):
        entry.encode_entry(SCHEMA)  # raises if a value does not fit its parameter, or names what P4Info lacks


VALID_CONFIG: dict[str, Any] = {
    "api": {"listen": "127.0.0.1:50051"},
    "store": {"path": "policies.db"},
    "switch": [
        {
            "name": "lwip",
            "address": "127.0.0.1:9559",
            "device_id": 1,
            "thrift": "127.0.0.1:9090",
            "port": [
                {"port": 1, "role": "core", "mac": "00:00:5e:00:53:01"},
                {"port": 2, "role": "lte", "mac": "00:00:5e:00:53:02", "capacity": "10mbit", "queue": 100},
                {"port": 3, "role": "wifi", "mac": "00:00:5e:00:53:03", "capacity": "30mbit"},
            ],
            "route": [
                {"prefix": "10.0.0.0/24", "port": 1, "dst_mac": "00:00:5e:00:53:10"},
                {
                    "prefix": "10.2.0.0/24",
                    "lte": {"port": 2, "dst_mac": "00:00:5e:00:53:11"},
                    "wifi": {"port": 3, "dst_mac": "00:00:5e:00:53:12"},
                },
            ],
        }
    ],
    "monitor": {},
    "metrics": {"listen": "127.0.0.1:9464"},
}
TOML_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.sampled_from(WORDS), st.text()
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(WORDS), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    paths = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            paths += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths += _paths(item, (*prefix, index))
    return paths


def _mutate(config: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy = dict(config) if isinstance(config, dict) else list(config)
    if delete and not rest:
        del copy[head]
    else:
        copy[head] = _mutate(config[head], rest, value, delete)
    return copy


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_config_either_parses_or_names_the_key_it_rejects(data: st.DataObject) -> None:
    config = VALID_CONFIG
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(config)
        path = data.draw(st.sampled_from(paths[1:]))
        config = _mutate(config, path, data.draw(TOML_VALUES), delete=data.draw(st.booleans()))
    try:
        parse(config, Path("/etc/tng"), "controller.toml")
    except ConfigError as error:
        match = CONFIG_ERROR.fullmatch(str(error))
        assert match, f"not 'controller.toml: <key>: <reason>': {error}"
        assert _names_a_key_of(config, match["key"]), f"{match['key']!r} is no key of the config: {error}"


# `controller.toml: switch[0].port[1].mac: <reason>`: the file, then the key's path (names as TOML writes them:
# bare or quoted, each maybe indexed), then what is wrong.
KEY_STEP = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*")(?:\[\d+\])?'
CONFIG_ERROR = re.compile(rf"controller\.toml: (?P<key>{KEY_STEP}(?:\.{KEY_STEP})*): (?P<reason>.+)", re.DOTALL)


def _names_a_key_of(config: Any, key: str) -> bool:
    """Whether every table and array on `key`'s path exists in `config` (the last name may be missing: "is
    required")."""
    steps: list[str | int] = []
    for bare, quoted, index in re.findall(r'(?:([A-Za-z0-9_-]+)|"((?:[^"\\]|\\.)*)")(?:\[(\d+)\])?', key):
        steps.append(bare or json.loads(f'"{quoted}"'))
        if index:
            steps.append(int(index))
    node = config
    for step in steps[:-1]:
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                return False
        elif not isinstance(node, dict) or step not in node:
            return False
        node = node[step]
    return isinstance(node, dict | list)


def test_the_unmutated_config_parses() -> None:
    """The seed of the test above is valid, so the errors it finds come from the mutations."""
    assert parse(VALID_CONFIG, Path("/etc/tng")).switches[0].name == "lwip"
