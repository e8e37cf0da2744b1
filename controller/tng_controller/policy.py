"""Policies of the tng policy API: validation whose every error names the field and the reason."""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tng_controller.pb import policy_pb2 as pb

NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,62}"
TRAFFIC_CLASS_PATTERN = r"[a-z0-9][a-z0-9._-]{0,62}"
CONGESTION_CONTROLS = ("newreno", "cubic", "vegas", "copa", "bbr", "verus", "sprout")
SCHEDULERS = ("ack-clocked", "lowest-rtt", "weighted")
TAIL_LOSS_MODES = ("same-path", "alternate-path")
RELAY_ON_PATH = "on-path"  # host_policy.relay for a relay on the path rather than at an address
MAX_PRIORITY = 0xFFFF
MAX_CHANNEL = 255
PROTOCOLS_WITH_PORTS = {6: "TCP", 17: "UDP"}
TCP = 6
UDP = 17

_NAME = re.compile(NAME_PATTERN)
_TRAFFIC_CLASS = re.compile(TRAFFIC_CLASS_PATTERN)
_PREFIX = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/(\d{1,2})")
_WEIGHTED_MODES = (pb.STEERING_MODE_WEIGHTED, pb.STEERING_MODE_QDEPL)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One reason a request is invalid: the field's path in the request and what is wrong with its value."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class PolicyError(ValueError):
    """A policy (or a policy name) that fails validation; str() lists every error, one per `; `."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(str(error) for error in errors))
        self.errors = tuple(errors)


def check(policy: pb.Policy, field: str = "policy") -> None:
    """Raises PolicyError unless `policy` is valid."""
    errors = list(validate(policy, field))
    if errors:
        raise PolicyError(errors)


class PolicyConflict(PolicyError):
    """A valid policy that clashes with another stored policy."""


def check_conflicts(policy: pb.Policy, others: Iterable[pb.Policy], field: str = "policy") -> None:
    """Raises PolicyConflict if switches could not tell `policy` from another policy: both have a switch half and the
    same switch-visible match at the same priority."""
    if not policy.HasField("switch_policy"):
        return
    key = switch_match_key(policy.match)
    for other in others:
        if other.name != policy.name and other.HasField("switch_policy") and switch_match_key(other.match) == key:
            raise PolicyConflict(
                [
                    FieldError(
                        f"{field}.match",
                        f"switches would match the same flows as policy {_quote(other.name)} (same addresses, "
                        "protocol, ports, connection id and priority): change the priority or the match",
                    )
                ]
            )


def switch_match_key(match: pb.Match) -> tuple[object, ...]:
    """What switches match on, canonically: two policies with equal keys are one table entry to a switch."""
    if match.has_connection_id:
        return ("connection", match.connection_id)
    if match.traffic_class and not matches_on_switches(match):
        return ("class", match.traffic_class, match.priority)  # switches get its flows one by one (digests)
    networks = [parse_prefix(prefix) if prefix else None for prefix in (match.src_prefix, match.dst_prefix)]
    addresses = [network if network and network.prefixlen else None for network in networks]
    ports = [(port.value, port.mask) if port.mask else None for port in (match.src_port, match.dst_port)]
    return ("flow", match.priority, *addresses, match.ip_protocol, *ports)


def check_name(name: str, field: str = "name") -> None:
    """Raises PolicyError unless `name` is a valid policy name."""
    errors = list(_name_errors(name, field))
    if errors:
        raise PolicyError(errors)


def validate(policy: pb.Policy, field: str = "policy") -> Iterator[FieldError]:
    """Every error of `policy`, in field order; nothing when it is valid."""
    yield from _name_errors(policy.name, f"{field}.name")
    yield from _match_errors(policy, f"{field}.match")
    if policy.HasField("switch_policy"):
        yield from _switch_errors(policy, f"{field}.switch_policy")
    yield from _host_errors(policy.host_policy, f"{field}.host_policy")
    if policy.host_policy.relay and policy.match.ip_protocol not in (0, UDP):
        yield FieldError(
            f"{field}.host_policy.relay",
            f"a relay carries tng connections (UDP), but the policy matches ip_protocol {policy.match.ip_protocol}",
        )


def traffic_class_errors(traffic_class: str, field: str) -> Iterator[FieldError]:
    """The error of a traffic class label that does not match TRAFFIC_CLASS_PATTERN."""
    if not _TRAFFIC_CLASS.fullmatch(traffic_class):
        yield FieldError(field, f"{_quote(traffic_class)} does not match {TRAFFIC_CLASS_PATTERN}")


@functools.lru_cache(maxsize=4096)  # every change compares the new policy's match with each stored policy's
def parse_prefix(text: str) -> ipaddress.IPv4Network | None:
    """The network of an "a.b.c.d/len" prefix without host bits, or None if `text` is not one."""
    if not _PREFIX.fullmatch(text):
        return None
    try:
        return ipaddress.IPv4Network(text, strict=True)
    except ValueError:
        return None


def matches_on_switches(match: pb.Match) -> bool:
    """Whether switches can tell a match's flows apart from others (they never see traffic classes)."""
    return bool(
        match.has_connection_id
        or match.src_prefix
        or match.dst_prefix
        or match.ip_protocol
        or match.src_port.mask
        or match.dst_port.mask
    )


def _name_errors(name: str, field: str) -> Iterator[FieldError]:
    if not name:
        yield FieldError(field, "is required")
    elif not _NAME.fullmatch(name):
        yield FieldError(field, f"{_quote(name)} does not match {NAME_PATTERN}")


def _match_errors(policy: pb.Policy, field: str) -> Iterator[FieldError]:
    match = policy.match
    if match.priority > MAX_PRIORITY:
        yield FieldError(f"{field}.priority", f"{match.priority} is above {MAX_PRIORITY}")
    if match.traffic_class:
        yield from traffic_class_errors(match.traffic_class, f"{field}.traffic_class")
    for name in ("src_prefix", "dst_prefix"):
        yield from _prefix_errors(getattr(match, name), f"{field}.{name}")
    if match.ip_protocol > 0xFF:
        yield FieldError(f"{field}.ip_protocol", f"{match.ip_protocol} is not an IP protocol number (0-255)")
    for name in ("src_port", "dst_port"):
        yield from _port_errors(getattr(match, name), match.ip_protocol, f"{field}.{name}")
    if match.connection_id and not match.has_connection_id:
        yield FieldError(f"{field}.connection_id", "is set but has_connection_id is false")
    five_tuple = [
        name
        for name in ("src_prefix", "dst_prefix", "ip_protocol", "src_port", "dst_port")
        if (getattr(match, name).mask if name.endswith("_port") else getattr(match, name))
    ]
    if match.has_connection_id and five_tuple:
        yield FieldError(
            f"{field}.connection_id",
            f"cannot be combined with {', '.join(five_tuple)}: switches look a tng connection up by its id alone",
        )


def _prefix_errors(text: str, field: str) -> Iterator[FieldError]:
    if not text or parse_prefix(text):
        return
    try:
        network = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        network = None
    if network is not None and _PREFIX.fullmatch(text):
        yield FieldError(field, f"{_quote(text)} has host bits set (the prefix is {_quote(str(network))})")
    else:
        yield FieldError(field, f"{_quote(text)} is not an IPv4 prefix a.b.c.d/len")


def _port_errors(port: pb.PortMatch, protocol: int, field: str) -> Iterator[FieldError]:
    if port.value > 0xFFFF:
        yield FieldError(f"{field}.value", f"{port.value} is not a port (0-65535)")
    if port.mask > 0xFFFF:
        yield FieldError(f"{field}.mask", f"{port.mask:#x} is wider than 16 bits")
    elif port.value & ~port.mask & 0xFFFF:
        yield FieldError(f"{field}.value", f"{port.value} has bits outside mask {port.mask:#06x}")
    if port.mask and protocol not in PROTOCOLS_WITH_PORTS:
        yield FieldError(field, "needs ip_protocol 6 (TCP) or 17 (UDP): other protocols have no ports")


def _switch_errors(policy: pb.Policy, field: str) -> Iterator[FieldError]:
    switch = policy.switch_policy
    aggregation = switch.aggregation
    if aggregation == pb.AGGREGATION_UNSPECIFIED:
        yield FieldError(f"{field}.aggregation", "is required: AGGREGATION_IN_NETWORK or AGGREGATION_AT_HOSTS")
    elif aggregation not in pb.Aggregation.values():
        yield FieldError(f"{field}.aggregation", _not_one_of(aggregation, pb.Aggregation.keys()[1:]))
    steering = switch.steering
    if steering not in pb.SteeringMode.values():
        yield FieldError(f"{field}.steering", _not_one_of(steering, pb.SteeringMode.keys()[1:]))
    elif aggregation == pb.AGGREGATION_AT_HOSTS and steering != pb.STEERING_MODE_UNSPECIFIED:
        yield FieldError(
            f"{field}.steering",
            f"must be unset with AGGREGATION_AT_HOSTS (the agents schedule across paths), not "
            f"{pb.SteeringMode.Name(steering)}",
        )
    mode = _steering_name(switch)
    for name in ("lte_weight", "wifi_weight"):
        weight = getattr(switch, name)
        if weight > 0xFFFF:
            yield FieldError(f"{field}.{name}", f"{weight} is above 65535")
        elif weight and steering not in _WEIGHTED_MODES:
            yield FieldError(
                f"{field}.{name}", f"is used only by STEERING_MODE_WEIGHTED and STEERING_MODE_QDEPL, not by {mode}"
            )
    if switch.spill_threshold_packets and steering != pb.STEERING_MODE_LOWEST_RTT_FIRST:
        yield FieldError(
            f"{field}.spill_threshold_packets", f"is used only by STEERING_MODE_LOWEST_RTT_FIRST, not by {mode}"
        )
    if switch.visible.enabled:
        yield from _visible_errors(policy, f"{field}.visible")


def _steering_name(switch: pb.SwitchPolicy) -> str:
    """The steering mode as a reason names it: its enum name, or what an unset mode means."""
    if switch.steering not in pb.SteeringMode.values():
        return f"steering {switch.steering}"
    if switch.steering != pb.STEERING_MODE_UNSPECIFIED:
        return pb.SteeringMode.Name(switch.steering)
    return "AGGREGATION_AT_HOSTS" if switch.aggregation == pb.AGGREGATION_AT_HOSTS else "flow hashing (steering unset)"


def _visible_errors(policy: pb.Policy, field: str) -> Iterator[FieldError]:
    visible = policy.switch_policy.visible
    if policy.switch_policy.aggregation == pb.AGGREGATION_AT_HOSTS:
        yield FieldError(f"{field}.enabled", "VISIBLE needs AGGREGATION_IN_NETWORK (it works on steered TCP flows)")
    if policy.match.ip_protocol not in (0, TCP):
        protocol = policy.match.ip_protocol
        yield FieldError(f"{field}.enabled", f"VISIBLE works on TCP, but the policy matches ip_protocol {protocol}")
    limits = {"segment_size": 0xFFFF, "hold_slack": 0xFFFF, "max_boosts": 0xFFFF, "max_retransmissions": 0xFF}
    for name, limit in limits.items():
        value = getattr(visible, name)
        if value > limit:
            yield FieldError(f"{field}.{name}", f"{value} is above {limit}")
    for name in ("ewma_alpha", "ewma_beta"):
        gain = getattr(visible, name)
        if gain and (gain > 256 or gain & (gain - 1)):
            yield FieldError(
                f"{field}.{name}", f"{gain} is not a power of two from 1 to 256 (the switch moves its EWMA by 2^-k)"
            )


def _host_errors(host: pb.HostPolicy, field: str) -> Iterator[FieldError]:
    if host.congestion_control and host.congestion_control not in CONGESTION_CONTROLS:
        yield FieldError(f"{field}.congestion_control", _not_one_of(host.congestion_control, CONGESTION_CONTROLS))
    for channel, name in sorted(host.congestion_control_per_path.items()):
        entry = f"{field}.congestion_control_per_path[{channel}]"
        if channel > MAX_CHANNEL:
            yield FieldError(entry, f"channel index {channel} is above {MAX_CHANNEL}")
        if name not in CONGESTION_CONTROLS:
            yield FieldError(entry, _not_one_of(name, CONGESTION_CONTROLS))
    if host.scheduler and host.scheduler not in SCHEDULERS:
        yield FieldError(f"{field}.scheduler", _not_one_of(host.scheduler, SCHEDULERS))
    if host.tail_loss and host.tail_loss not in TAIL_LOSS_MODES:
        yield FieldError(f"{field}.tail_loss", _not_one_of(host.tail_loss, TAIL_LOSS_MODES))
    if not (math.isfinite(host.copa_delta) and host.copa_delta >= 0):
        yield FieldError(f"{field}.copa_delta", f"{host.copa_delta} is not a non-negative number")
    elif host.copa_delta and "copa" not in (host.congestion_control, *host.congestion_control_per_path.values()):
        yield FieldError(f"{field}.copa_delta", "is set but no path uses copa")
    if host.relay and (problem := _relay_problem(host.relay)):
        yield FieldError(f"{field}.relay", problem)


def _relay_problem(text: str) -> str | None:
    """Why `text` is not a relay as the agent reads it ("a.b.c.d:port", "[v6]:port" or "on-path"), or None."""
    if text == RELAY_ON_PATH:
        return None
    host, colon, port = text.rpartition(":")
    shown = _quote(text)
    if not colon or not port.isdigit():
        return f"{shown} is not {_quote(RELAY_ON_PATH)} or an address a.b.c.d:port or [v6]:port"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        family = 6
    else:
        family = 4
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"{shown} is not an address a.b.c.d:port or [v6]:port (a relay is named by address, not by host name)"
    if address.version != family:
        return f"{shown}: an IPv6 address goes in brackets, [v6]:port"
    if not 0 < int(port) <= 65535:
        return f"{shown}: port {int(port)} is not 1-65535"
    if address.is_unspecified or address.is_multicast:
        return f"{shown}: {address} cannot be a relay's address"
    return None


def _not_one_of(value: object, allowed: tuple[str, ...] | list[str]) -> str:
    shown = _quote(value) if isinstance(value, str) else str(value)
    return f"{shown} is not one of {', '.join(allowed)}"


def _quote(text: str) -> str:
    return json.dumps(text)
