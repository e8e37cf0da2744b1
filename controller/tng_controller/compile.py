"""Policies -> P4Runtime table entries of the tng pipeline (the P4Info names of p4src/README.md, "tng")."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network

import finsy as fy

from tng_controller.pb import policy_pb2 as pb
from tng_controller.policy import matches_on_switches, parse_prefix
from tng_controller.store import StoredPolicy

# The tables the controller owns: it writes every entry in them and never touches any other table.
CONNECTION_POLICY = "ingress.classify.connection_policy"
FLOW_POLICY = "ingress.classify.flow_policy"
STEERING_MODES = "ingress.steering.modes"
VISIBLE_PARAMS = "ingress.visible.params"
BACKPRESSURE_THRESHOLDS = "egress.backpressure.thresholds"
POLICY_TABLES = (CONNECTION_POLICY, FLOW_POLICY, STEERING_MODES, VISIBLE_PARAMS, BACKPRESSURE_THRESHOLDS)

SET_POLICY = "ingress.classify.set_policy"
VISIBLE_ON = "ingress.visible.visible_on"
SET_THRESHOLDS = "egress.backpressure.set_thresholds"
POLICY_COUNTER = "ingress.classify.policy_packets"

DEFAULT_SEGMENT_SIZE = 1448
DEFAULT_IDLE_TIMEOUT_US = 1_000_000
DEFAULT_EWMA_ALPHA = 64  # 1/4, in 1/256 units
DEFAULT_EWMA_BETA = 32  # 1/8
NEVER_US = 0xFFFFFFFF  # a threshold no queueing delay exceeds


class Link(enum.IntEnum):
    """The two links of an LWIP next hop, as the pipeline numbers them."""

    LTE = 0
    WIFI = 1


_STEERING_ACTIONS = {
    pb.STEERING_MODE_UNSPECIFIED: "ingress.steering.steer_flow_hash",
    pb.STEERING_MODE_FLOW_HASH: "ingress.steering.steer_flow_hash",
    pb.STEERING_MODE_WEIGHTED: "ingress.steering.steer_weighted",
    pb.STEERING_MODE_QDEPL: "ingress.steering.steer_qdepl",
    pb.STEERING_MODE_QDEPL_DATAPLANE: "ingress.steering.steer_qdepl_measured",
    pb.STEERING_MODE_LOWEST_RTT_FIRST: "ingress.steering.steer_lowest_rtt",
    pb.STEERING_MODE_LTE_ONLY: "ingress.steering.steer_lte_only",
    pb.STEERING_MODE_WIFI_ONLY: "ingress.steering.steer_wifi_only",
    pb.STEERING_MODE_EARLIEST_ARRIVAL: "ingress.steering.steer_earliest_arrival",
}
# Modes that split packets by rate whatever the links' delays: a segment may wait behind a queue while later ones
# overtake it on the other link, so VISIBLE's hold budget adds the flow's deeper queue (visible.p4). Earliest-arrival
# and lowest-rtt-first steer by delay, and their reordering stays within the links' propagation difference.
_RATE_SPLITTING_MODES = (pb.STEERING_MODE_WEIGHTED, pb.STEERING_MODE_QDEPL, pb.STEERING_MODE_QDEPL_DATAPLANE)


@dataclass(frozen=True, slots=True)
class Tuning:
    """What a policy's zeros become on one switch: the link LOWEST_RTT_FIRST prefers, and the spill depth and VISIBLE
    hold budget and slack the controller derived from the measured delay difference of the policy's route (None: not
    derived, the policy's 0 is written as it is)."""

    lowest_rtt_link: Link = Link.WIFI
    spill_depth: int | None = None
    hold_budget_us: int | None = None
    hold_slack: int | None = None


def compile_policies(
    policies: Sequence[StoredPolicy], tuning: Tuning | None = None, qdepl_rates: tuple[int, int] | None = None
) -> list[fy.P4TableEntry]:
    """The entries of the policy tables for `policies` (validated), by policy id; `tuning` says what their zeros
    become on this switch, `qdepl_rates` are the (LTE, Wi-Fi) rates the link monitor measured (None: QDEPL policies
    use their weights)."""
    return [
        entry
        for stored in sorted(policies, key=lambda p: p.policy_id)
        for entry in policy_entries(stored, tuning, qdepl_rates)
    ]


def policy_entries(
    stored: StoredPolicy, tuning: Tuning | None = None, qdepl_rates: tuple[int, int] | None = None
) -> Iterator[fy.P4TableEntry]:
    """The entries of one policy: none without a switch half. A policy for a traffic class with no switch-visible
    field gets no classification entry: its flows get one each when they are digested (digests.py)."""
    tuning = tuning or Tuning()
    policy, policy_id = stored.policy, stored.policy_id
    if not policy.HasField("switch_policy"):
        return
    if matches_on_switches(policy.match) or not policy.match.traffic_class:
        yield _classify(policy.match, policy_id)
    switch = policy.switch_policy
    if switch.aggregation == pb.AGGREGATION_IN_NETWORK:
        yield fy.P4TableEntry(
            STEERING_MODES, match=fy.Match(policy=policy_id), action=_steering(switch, tuning, qdepl_rates)
        )
    if switch.visible.enabled:
        action = _visible(switch.visible, tuning, queue_aware_hold=switch.steering in _RATE_SPLITTING_MODES)
        yield fy.P4TableEntry(VISIBLE_PARAMS, match=fy.Match(policy=policy_id), action=action)
    backpressure = switch.backpressure
    if backpressure.feedback or backpressure.ecn_threshold_us:
        action = fy.Action(
            SET_THRESHOLDS,
            feedback_min_us=0 if backpressure.feedback else NEVER_US,
            ecn_mark_us=backpressure.ecn_threshold_us or NEVER_US,
        )
        yield fy.P4TableEntry(BACKPRESSURE_THRESHOLDS, match=fy.Match(policy=policy_id), action=action)


def _classify(match: pb.Match, policy_id: int) -> fy.P4TableEntry:
    action = fy.Action(SET_POLICY, policy=policy_id)
    if match.has_connection_id:
        return fy.P4TableEntry(CONNECTION_POLICY, match=fy.Match(connection_id=match.connection_id), action=action)
    fields = fy.Match()
    for name, prefix in (("src_addr", match.src_prefix), ("dst_addr", match.dst_prefix)):
        network = parse_prefix(prefix) if prefix else None
        if network is not None and network.prefixlen:
            fields[name] = _ternary_network(network)
    if match.ip_protocol:
        fields["protocol"] = (match.ip_protocol, 0xFF)
    for name in ("src_port", "dst_port"):
        port: pb.PortMatch = getattr(match, name)
        if port.mask:
            fields[name] = (port.value, port.mask)
    # P4Runtime priorities are positive; the policy's 0 (the lowest) becomes 1.
    return fy.P4TableEntry(FLOW_POLICY, match=fields, action=action, priority=match.priority + 1)


def _ternary_network(network: IPv4Network) -> tuple[int, int]:
    return int(network.network_address), int(network.netmask)


def _steering(switch: pb.SwitchPolicy, tuning: Tuning, qdepl_rates: tuple[int, int] | None) -> fy.Action:
    name = _STEERING_ACTIONS[switch.steering]
    lte, wifi = (switch.lte_weight, switch.wifi_weight) if switch.lte_weight or switch.wifi_weight else (1, 1)
    if switch.steering == pb.STEERING_MODE_WEIGHTED:
        return fy.Action(name, lte_weight=lte, wifi_weight=wifi)
    if switch.steering == pb.STEERING_MODE_QDEPL:
        lte, wifi = qdepl_rates or (lte, wifi)
        return fy.Action(name, lte_rate=lte, wifi_rate=wifi)
    if switch.steering == pb.STEERING_MODE_LOWEST_RTT_FIRST:
        spill = switch.spill_threshold_packets or tuning.spill_depth or 0
        return fy.Action(name, preferred_link=int(tuning.lowest_rtt_link), spill_depth=spill)
    return fy.Action(name)


def _visible(visible: pb.Visible, tuning: Tuning, *, queue_aware_hold: bool) -> fy.Action:
    return fy.Action(
        VISIBLE_ON,
        segment_size=visible.segment_size or DEFAULT_SEGMENT_SIZE,
        hold_budget_us=visible.hold_budget_us or tuning.hold_budget_us or 0,
        hold_slack=visible.hold_slack or tuning.hold_slack or 0,
        boost_max_depth=visible.boost_threshold_packets,
        boost_max=visible.max_boosts,
        retransmit_max=visible.max_retransmissions,
        alpha_shift=_shift(visible.ewma_alpha or DEFAULT_EWMA_ALPHA),
        beta_shift=_shift(visible.ewma_beta or DEFAULT_EWMA_BETA),
        idle_timeout_us=visible.idle_timeout_us or DEFAULT_IDLE_TIMEOUT_US,
        report_bytes=visible.report_bytes,
        queue_aware_hold=int(queue_aware_hold),
    )


def _shift(gain_256ths: int) -> int:
    """k such that gain/256 = 2^-k, for a power-of-two gain from 1 to 256."""
    return 8 - (gain_256ths.bit_length() - 1)
