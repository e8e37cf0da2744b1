"""New flows from the switches' digests: their traffic class (the configuration's [[traffic_class]] rules), and the
flow_policy entries that give each classified flow the policy of its class.

Switches never see traffic classes. A flow the switch classified with the default policy (no switch-visible policy
matched it) is looked up in the class rules; if a stored policy is for that class only (its match has the class and
no switch-visible field), the flow gets an exact flow_policy entry with that policy's id. Entries exist only while the
flow is remembered (at most `max_flows` per switch, the least recently digested forgotten first)."""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import finsy as fy

from tng_controller.compile import FLOW_POLICY, SET_POLICY
from tng_controller.config import TrafficClassRule
from tng_controller.pb import policy_pb2 as pb
from tng_controller.policy import matches_on_switches, parse_prefix
from tng_controller.store import StoredPolicy

NEW_FLOW_DIGEST = "new_flow_digest_t"
FLOW_ENTRY_PRIORITY = 1  # below every policy's entry: a flow only gets one when no switch-visible policy matches
_FULL = {"src_addr": 0xFFFFFFFF, "dst_addr": 0xFFFFFFFF, "protocol": 0xFF, "src_port": 0xFFFF, "dst_port": 0xFFFF}


@dataclass(frozen=True, slots=True)
class FlowKey:
    """One direction of a 5-tuple (ports 0 for protocols without ports), as the pipeline hashes it."""

    src_addr: int
    dst_addr: int
    protocol: int
    src_port: int
    dst_port: int

    def __str__(self) -> str:
        src, dst = ipaddress.IPv4Address(self.src_addr), ipaddress.IPv4Address(self.dst_addr)
        return f"{src}:{self.src_port} -> {dst}:{self.dst_port} proto {self.protocol}"


@dataclass(frozen=True, slots=True)
class NewFlow:
    """One new_flow_digest_t."""

    key: FlowKey
    ingress_port: int
    policy: int  # the policy the switch gave the flow; 0 = the default
    connection_id: int

    @classmethod
    def from_digest(cls, data: Mapping[str, Any]) -> NewFlow:
        key = FlowKey(*(int(data[name]) for name in _FULL))
        return cls(key, int(data["ingress_port"]), int(data["policy"]), int(data["connection_id"]))


def classify(flow: NewFlow, rules: Iterable[TrafficClassRule]) -> str | None:
    """The class of the first rule the flow matches, or None."""
    key = flow.key
    for rule in rules:
        if (
            _in(key.src_addr, rule.src_prefix)
            and _in(key.dst_addr, rule.dst_prefix)
            and rule.protocol in (None, key.protocol)
            and rule.src_port in (None, key.src_port)
            and rule.dst_port in (None, key.dst_port)
            and rule.ingress_port in (None, flow.ingress_port)
        ):
            return rule.name
    return None


class FlowTable:
    """The classified flows of one switch, least recently digested first; `forgotten` counts flows dropped to stay
    within `max_flows` (their seen-flow bits are still set, so they are digested again only after a reset)."""

    def __init__(self, max_flows: int) -> None:
        self._max_flows = max_flows
        self._flows: OrderedDict[FlowKey, str] = OrderedDict()
        self.forgotten = 0

    def learn(self, key: FlowKey, traffic_class: str) -> bool:
        """Remembers the flow's class; True if that changes the flow entries (a new flow or a new class)."""
        changed = self._flows.get(key) != traffic_class
        self._flows[key] = traffic_class
        self._flows.move_to_end(key)
        while len(self._flows) > self._max_flows:
            self._flows.popitem(last=False)
            self.forgotten += 1
        return changed

    def items(self) -> list[tuple[FlowKey, str]]:
        return list(self._flows.items())

    def __len__(self) -> int:
        return len(self._flows)


def class_policy(traffic_class: str, policies: Iterable[StoredPolicy]) -> StoredPolicy | None:
    """The policy for flows of `traffic_class` that switches cannot match themselves: the class-only policy with a
    switch half and the highest priority (then the first by name)."""
    candidates = [
        p
        for p in policies
        if p.policy.match.traffic_class == traffic_class
        and p.policy.HasField("switch_policy")
        and not matches_on_switches(p.policy.match)
    ]
    return min(candidates, key=lambda p: (-p.policy.match.priority, p.name), default=None)


def flow_entries(flows: Iterable[tuple[FlowKey, str]], policies: Sequence[StoredPolicy]) -> Iterator[fy.P4TableEntry]:
    """An exact flow_policy entry for every remembered flow whose class has a class-only policy, unless a policy the
    switch matches itself now covers the flow (that one's entry decides)."""
    visible = [p.policy.match for p in policies if p.policy.HasField("switch_policy") and _flow_match(p.policy.match)]
    for key, traffic_class in flows:
        stored = class_policy(traffic_class, policies)
        if stored is None or any(_matches(match, key) for match in visible):
            continue
        fields = fy.Match({name: (getattr(key, name), mask) for name, mask in _FULL.items()})
        action = fy.Action(SET_POLICY, policy=stored.policy_id)
        yield fy.P4TableEntry(FLOW_POLICY, match=fields, action=action, priority=FLOW_ENTRY_PRIORITY)


def _flow_match(match: pb.Match) -> bool:
    """Whether a policy's match is a flow_policy entry (a switch-visible 5-tuple match, or no match at all)."""
    return not match.has_connection_id and (matches_on_switches(match) or not match.traffic_class)


def _matches(match: pb.Match, key: FlowKey) -> bool:
    for prefix, address in ((match.src_prefix, key.src_addr), (match.dst_prefix, key.dst_addr)):
        if prefix and not _in(address, parse_prefix(prefix)):
            return False
    if match.ip_protocol and match.ip_protocol != key.protocol:
        return False
    return all(
        (value & port.mask) == port.value
        for port, value in ((match.src_port, key.src_port), (match.dst_port, key.dst_port))
    )


def _in(address: int, network: ipaddress.IPv4Network | None) -> bool:
    return network is None or ipaddress.IPv4Address(address) in network
