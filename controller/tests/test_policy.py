"""Policy validation: valid policies pass, and every invalid field is named with its reason."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from tng_controller import policy
from tng_controller.pb import policy_pb2 as pb
from tng_controller.policy import (
    PolicyConflict,
    PolicyError,
    check,
    check_conflicts,
    check_name,
    matches_on_switches,
    parse_prefix,
    switch_match_key,
    validate,
)


def video() -> pb.Policy:
    return pb.Policy(
        name="video-lte",
        match=pb.Match(
            priority=10,
            traffic_class="video",
            dst_prefix="10.0.1.0/24",
            ip_protocol=6,
            dst_port=pb.PortMatch(value=443, mask=0xFFFF),
        ),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_IN_NETWORK,
            steering=pb.STEERING_MODE_WEIGHTED,
            lte_weight=1,
            wifi_weight=3,
            visible=pb.Visible(enabled=True, hold_budget_us=20_000, max_retransmissions=3, ewma_alpha=64),
            backpressure=pb.Backpressure(feedback=True, ecn_threshold_us=5_000),
        ),
        host_policy=pb.HostPolicy(congestion_control="copa", copa_delta=0.1, congestion_control_per_path={1: "vegas"}),
    )


def errors(policy: pb.Policy) -> list[str]:
    return [str(error) for error in validate(policy)]


def test_valid_policies_have_no_errors() -> None:
    assert errors(video()) == []
    assert errors(pb.Policy(name="default")) == []
    at_hosts = pb.Policy(
        name="hosts",
        match=pb.Match(has_connection_id=True, connection_id=0),
        switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_AT_HOSTS, backpressure=pb.Backpressure(feedback=True)),
        host_policy=pb.HostPolicy(scheduler="ack-clocked", tail_loss="alternate-path"),
    )
    assert errors(at_hosts) == []
    relayed = pb.Policy(name="dsl", match=pb.Match(ip_protocol=17), host_policy=pb.HostPolicy(relay="10.0.0.1:4477"))
    assert errors(relayed) == []
    relayed.host_policy.relay = "[fd00::1]:4477"
    assert errors(relayed) == []
    relayed.host_policy.relay = "on-path"
    assert errors(relayed) == []


def test_a_relay_is_refused_for_a_policy_that_matches_only_tcp() -> None:
    policy = pb.Policy(name="dsl", match=pb.Match(ip_protocol=6), host_policy=pb.HostPolicy(relay="10.0.0.1:4477"))
    assert errors(policy) == [
        "policy.host_policy.relay: a relay carries tng connections (UDP), but the policy matches ip_protocol 6"
    ]
    everything = pb.Policy(name="all", switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK))
    assert errors(everything) == []
    earliest = pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK, steering=pb.STEERING_MODE_EARLIEST_ARRIVAL)
    assert errors(pb.Policy(name="earliest", switch_policy=earliest)) == []
    check(video())


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda p: setattr(p, "name", ""), "policy.name: is required"),
        (lambda p: setattr(p, "name", "Video"), 'policy.name: "Video" does not match [a-z0-9][a-z0-9-]{0,62}'),
        (lambda p: setattr(p, "name", "a" * 64), f'policy.name: "{"a" * 64}" does not match [a-z0-9][a-z0-9-]{{0,62}}'),
        (lambda p: setattr(p.match, "priority", 70000), "policy.match.priority: 70000 is above 65535"),
        (
            lambda p: setattr(p.match, "traffic_class", "Video Calls"),
            'policy.match.traffic_class: "Video Calls" does not match [a-z0-9][a-z0-9._-]{0,62}',
        ),
        (
            lambda p: setattr(p.match, "dst_prefix", "10.0.0.0/33"),
            'policy.match.dst_prefix: "10.0.0.0/33" is not an IPv4 prefix a.b.c.d/len',
        ),
        (
            lambda p: setattr(p.match, "src_prefix", "10.0.0.1"),
            'policy.match.src_prefix: "10.0.0.1" is not an IPv4 prefix a.b.c.d/len',
        ),
        (
            lambda p: setattr(p.match, "src_prefix", "fe80::/10"),
            'policy.match.src_prefix: "fe80::/10" is not an IPv4 prefix a.b.c.d/len',
        ),
        (
            lambda p: setattr(p.match, "dst_prefix", "10.0.1.7/24"),
            'policy.match.dst_prefix: "10.0.1.7/24" has host bits set (the prefix is "10.0.1.0/24")',
        ),
        (
            lambda p: setattr(p.match, "ip_protocol", 300),
            "policy.match.ip_protocol: 300 is not an IP protocol number (0-255)",
        ),
        (lambda p: setattr(p.match.dst_port, "value", 70000), "policy.match.dst_port.value: 70000 is not a port"),
        (lambda p: setattr(p.match.dst_port, "mask", 0x1FFFF), "policy.match.dst_port.mask: 0x1ffff is wider"),
        (
            lambda p: (setattr(p.match.dst_port, "value", 0x1F), setattr(p.match.dst_port, "mask", 0xFFF0)),
            "policy.match.dst_port.value: 31 has bits outside mask 0xfff0",
        ),
        (
            lambda p: p.match.ClearField("ip_protocol"),
            "policy.match.dst_port: needs ip_protocol 6 (TCP) or 17 (UDP)",
        ),
        (
            lambda p: setattr(p.match, "connection_id", 5),
            "policy.match.connection_id: is set but has_connection_id is false",
        ),
        (
            lambda p: setattr(p.match, "has_connection_id", True),
            "policy.match.connection_id: cannot be combined with dst_prefix, ip_protocol, dst_port",
        ),
        (
            lambda p: setattr(p.switch_policy, "aggregation", pb.AGGREGATION_UNSPECIFIED),
            "policy.switch_policy.aggregation: is required: AGGREGATION_IN_NETWORK or AGGREGATION_AT_HOSTS",
        ),
        (
            lambda p: setattr(p.switch_policy, "aggregation", 9),
            "policy.switch_policy.aggregation: 9 is not one of AGGREGATION_IN_NETWORK, AGGREGATION_AT_HOSTS",
        ),
        (lambda p: setattr(p.switch_policy, "steering", 42), "policy.switch_policy.steering: 42 is not one of"),
        (
            lambda p: setattr(p.switch_policy, "lte_weight", 65536),
            "policy.switch_policy.lte_weight: 65536 is above 65535",
        ),
        (
            lambda p: setattr(p.switch_policy, "steering", pb.STEERING_MODE_LTE_ONLY),
            "policy.switch_policy.lte_weight: is used only by STEERING_MODE_WEIGHTED and STEERING_MODE_QDEPL, not by "
            "STEERING_MODE_LTE_ONLY",
        ),
        (
            lambda p: setattr(p.switch_policy, "spill_threshold_packets", 10),
            "policy.switch_policy.spill_threshold_packets: is used only by STEERING_MODE_LOWEST_RTT_FIRST, not by "
            "STEERING_MODE_WEIGHTED",
        ),
        (
            lambda p: setattr(p.switch_policy, "steering", pb.STEERING_MODE_EARLIEST_ARRIVAL),
            "policy.switch_policy.lte_weight: is used only by STEERING_MODE_WEIGHTED and STEERING_MODE_QDEPL, not by "
            "STEERING_MODE_EARLIEST_ARRIVAL",
        ),
        (
            lambda p: (
                setattr(p.switch_policy, "steering", pb.STEERING_MODE_EARLIEST_ARRIVAL),
                p.switch_policy.ClearField("lte_weight"),
                p.switch_policy.ClearField("wifi_weight"),
                setattr(p.switch_policy, "spill_threshold_packets", 50),
            ),
            "policy.switch_policy.spill_threshold_packets: is used only by STEERING_MODE_LOWEST_RTT_FIRST, not by "
            "STEERING_MODE_EARLIEST_ARRIVAL",
        ),
        (
            lambda p: setattr(p.switch_policy.visible, "max_retransmissions", 256),
            "policy.switch_policy.visible.max_retransmissions: 256 is above 255",
        ),
        (
            lambda p: setattr(p.switch_policy.visible, "segment_size", 70000),
            "policy.switch_policy.visible.segment_size: 70000 is above 65535",
        ),
        (
            lambda p: setattr(p.switch_policy.visible, "ewma_beta", 48),
            "policy.switch_policy.visible.ewma_beta: 48 is not a power of two from 1 to 256",
        ),
        (
            lambda p: setattr(p.switch_policy.visible, "ewma_alpha", 512),
            "policy.switch_policy.visible.ewma_alpha: 512 is not a power of two",
        ),
        (
            lambda p: (p.match.dst_port.Clear(), setattr(p.match, "ip_protocol", 17)),
            "policy.switch_policy.visible.enabled: VISIBLE works on TCP, but the policy matches ip_protocol 17",
        ),
        (
            lambda p: setattr(p.host_policy, "congestion_control", "foo"),
            'policy.host_policy.congestion_control: "foo" is not one of '
            "newreno, cubic, vegas, copa, bbr, verus, sprout",
        ),
        (
            lambda p: p.host_policy.congestion_control_per_path.update({300: "bbr"}),
            "policy.host_policy.congestion_control_per_path[300]: channel index 300 is above 255",
        ),
        (
            lambda p: p.host_policy.congestion_control_per_path.update({2: "reno"}),
            'policy.host_policy.congestion_control_per_path[2]: "reno" is not one of newreno',
        ),
        (
            lambda p: setattr(p.host_policy, "scheduler", "round-robin"),
            'policy.host_policy.scheduler: "round-robin" is not one of ack-clocked, lowest-rtt, weighted',
        ),
        (
            lambda p: setattr(p.host_policy, "tail_loss", "other"),
            'policy.host_policy.tail_loss: "other" is not one of same-path, alternate-path',
        ),
        (
            lambda p: setattr(p.host_policy, "copa_delta", -0.5),
            "policy.host_policy.copa_delta: -0.5 is not a non-negative number",
        ),
        (
            lambda p: setattr(p.host_policy, "copa_delta", math.nan),
            "policy.host_policy.copa_delta: nan is not a non-negative number",
        ),
        (
            lambda p: setattr(p.host_policy, "congestion_control", "cubic"),
            "policy.host_policy.copa_delta: is set but no path uses copa",
        ),
        (
            lambda p: setattr(p.host_policy, "relay", "relay.isp.example:4477"),
            'policy.host_policy.relay: "relay.isp.example:4477" is not an address a.b.c.d:port or [v6]:port (a relay '
            "is named by address",
        ),
        (
            lambda p: setattr(p.host_policy, "relay", "10.0.0.1"),
            'policy.host_policy.relay: "10.0.0.1" is not "on-path" or an address a.b.c.d:port',
        ),
        (
            lambda p: setattr(p.host_policy, "relay", "10.0.0.1:70000"),
            'policy.host_policy.relay: "10.0.0.1:70000": port 70000 is not 1-65535',
        ),
        (
            lambda p: setattr(p.host_policy, "relay", "fd00::1:4477"),
            'policy.host_policy.relay: "fd00::1:4477": an IPv6 address goes in brackets, [v6]:port',
        ),
        (
            lambda p: setattr(p.host_policy, "relay", "0.0.0.0:4477"),
            'policy.host_policy.relay: "0.0.0.0:4477": 0.0.0.0 cannot be a relay\'s address',
        ),
    ],
)
def test_each_invalid_field_is_named_with_its_reason(edit, expected: str) -> None:
    policy = video()
    edit(policy)
    found = errors(policy)
    assert found, "no error"
    assert found[0].startswith(expected), found


def test_at_hosts_rejects_steering_and_visible() -> None:
    policy = video()
    policy.switch_policy.aggregation = pb.AGGREGATION_AT_HOSTS
    assert errors(policy) == [
        "policy.switch_policy.steering: must be unset with AGGREGATION_AT_HOSTS (the agents schedule across paths), "
        "not STEERING_MODE_WEIGHTED",
        "policy.switch_policy.visible.enabled: VISIBLE needs AGGREGATION_IN_NETWORK (it works on steered TCP flows)",
    ]


def test_all_errors_are_reported_together() -> None:
    policy = pb.Policy(name="x_y", match=pb.Match(src_prefix="1.2.3.4/40"), host_policy=pb.HostPolicy(scheduler="z"))
    with pytest.raises(PolicyError) as raised:
        check(policy)
    assert [error.field for error in raised.value.errors] == [
        "policy.name",
        "policy.match.src_prefix",
        "policy.host_policy.scheduler",
    ]
    assert str(raised.value).count("; ") == 2


def test_check_name() -> None:
    check_name("lte-only-2")
    with pytest.raises(PolicyError, match=r'^name: "bad name" does not match'):
        check_name("bad name")


def test_parse_prefix_and_switch_visibility() -> None:
    assert str(parse_prefix("192.168.0.0/16")) == "192.168.0.0/16"
    assert parse_prefix("192.168.0.1/16") is None
    assert parse_prefix("0.0.0.0/0") is not None
    assert matches_on_switches(pb.Match(ip_protocol=6))
    assert matches_on_switches(pb.Match(has_connection_id=True))
    assert not matches_on_switches(pb.Match(traffic_class="bulk", priority=3))


def test_policies_switches_cannot_tell_apart_conflict() -> None:
    base = video()
    same = video()
    same.name = "other"
    same.match.dst_prefix = "10.0.1.0/24"
    same.match.traffic_class = "bulk"  # switches do not see it
    with pytest.raises(
        PolicyConflict, match=r'^policy\.match: switches would match the same flows as policy "video-lte"'
    ):
        check_conflicts(same, [base])
    check_conflicts(base, [base])  # replacing a policy does not clash with itself
    same.match.priority = 11
    check_conflicts(same, [base])
    host_only = pb.Policy(name="host-only", match=base.match)
    check_conflicts(host_only, [base])
    by_connection = pb.Policy(
        name="c", match=pb.Match(has_connection_id=True), switch_policy=pb.SwitchPolicy(aggregation=1)
    )
    with pytest.raises(PolicyConflict):
        check_conflicts(
            by_connection, [pb.Policy(name="d", match=by_connection.match, switch_policy=base.switch_policy)]
        )
    assert switch_match_key(pb.Match(src_prefix="0.0.0.0/0")) == switch_match_key(pb.Match())


def test_a_switch_half_for_a_traffic_class_alone_is_valid_and_clashes_only_within_its_class() -> None:
    def for_class(name: str, traffic_class: str, priority: int = 0) -> pb.Policy:
        return pb.Policy(
            name=name,
            match=pb.Match(traffic_class=traffic_class, priority=priority),
            switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK),
        )

    check(for_class("video", "video"))  # its flows get entries one by one, from new-flow digests
    check_conflicts(for_class("video", "video"), [for_class("bulk", "bulk"), for_class("any", "")])
    check_conflicts(for_class("video", "video", 1), [for_class("video-lo", "video", 0)])
    with pytest.raises(PolicyConflict):
        check_conflicts(for_class("video", "video"), [for_class("video-2", "video")])


def test_congestion_controls_are_the_ones_the_host_agent_has() -> None:
    """A host policy names a controller tng-proto implements: the list agrees with CcKind::name (the agent's one
    source of the names), in its order."""
    source = (Path(__file__).parents[2] / "host-agent/crates/tng-proto/src/cc/mod.rs").read_text()
    names = source[source.index("pub fn name(self)") :].split("\n    }\n", 1)[0]
    assert tuple(re.findall(r'CcKind::\w+ => "([a-z]+)"', names)) == policy.CONGESTION_CONTROLS
