"""ingress.steering.link_state: the delay difference and times per packet the controller writes for each LWIP route,
the hysteresis that keeps noise from rewriting them, and what policies that leave their spill depth or hold budget
at 0 get from them (docs/controller.md, "Link prober")."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import finsy as fy

from tng_controller.compile import Link, Tuning
from tng_controller.config import MonitorConfig
from tng_controller.monitor import LinkRates
from tng_controller.pb import policy_pb2 as pb
from tng_controller.policy import parse_prefix
from tng_controller.prober import LinkProber
from tng_controller.queue_rates import PACKET_BITS
from tng_controller.switch_config import RouteConfig, SwitchConfig

LINK_STATE = "ingress.steering.link_state"
SET_LINK_STATE = "ingress.steering.set_link_state"
# VISIBLE holds a dup-ACK for |d| (the later link's head start) plus this many packet times of the slower link: a
# segment sent on the slower link also waits for the one ahead of it there.
HOLD_PACKET_TIMES = 4
MAX_US = 0xFFFFFFFF
MAX_SLACK = 0xFFFF  # visible_on's hold_slack is 16 bits


def packet_time_us(rate_bps: float | None) -> int | None:
    """Time per 1500-byte packet at `rate_bps`, in microseconds (at least 1); None for an unknown rate."""
    if rate_bps is None or rate_bps <= 0:
        return None
    return min(MAX_US, max(1, round(PACKET_BITS / rate_bps * 1e6)))


def reorder_allowance_us(
    difference_us: float | None, later_rtt_us: float | None, earlier_queue_us: float | None, sender_backoff: float
) -> int | None:
    """How much smaller than d earliest-arrival steering takes the delay difference; None while an input is unknown.

    In order, the later link gets packets only while the earlier link's queue holds |d|, so the queue a flow has
    before the earlier link tail-drops is that link's queue capacity (in time) less |d|. One flow keeps both links
    busy after a loss only if that band holds (1 - b) / b of its round trip through the later link, b being its
    sender's back-off (the buffer-sizing rule: Reno's b = 0.5 needs a whole round trip). Where the band is shorter,
    steering takes d as smaller by the shortfall (never below 0): the later link starts carrying earlier, and the
    flow sees that much reordering, which RACK's reordering window absorbs, instead of losses its window cannot
    ride out."""
    if difference_us is None or later_rtt_us is None or earlier_queue_us is None:
        return None
    needed = (1 - sender_backoff) / sender_backoff * later_rtt_us
    band = earlier_queue_us - abs(difference_us)
    return round(min(abs(difference_us), max(0.0, needed - band)))


@dataclass(frozen=True, slots=True)
class LinkState:
    """One LWIP route's links: d = delay_down(LTE) - delay_down(Wi-Fi), each link's time per packet and the reorder
    allowance (`reorder_allowance_us`), in microseconds; None where unknown."""

    difference_us: int | None = None
    lte_packet_us: int | None = None
    wifi_packet_us: int | None = None
    reorder_allowance_us: int | None = None

    @property
    def known(self) -> bool:
        return any(value is not None for value in _values(self))

    def action(self) -> fy.Action:
        """set_link_state: only the difference of the delays matters, so the earlier link's is 0, and steering takes
        it as `steered_difference_us`; unknown values are 0 (the pipeline measures its own time per packet once a
        port was backlogged)."""
        d = self.steered_difference_us()
        return fy.Action(
            SET_LINK_STATE,
            lte_delay_us=min(MAX_US, max(d, 0)),
            wifi_delay_us=min(MAX_US, max(-d, 0)),
            lte_packet_us=self.lte_packet_us or 0,
            wifi_packet_us=self.wifi_packet_us or 0,
        )

    def steered_difference_us(self) -> int:
        """d less the reorder allowance, towards 0 (0 while d is unknown)."""
        d = self.difference_us or 0
        allowance = min(self.reorder_allowance_us or 0, abs(d))
        return d - allowance if d > 0 else d + allowance

    def preferred_link(self, default: Link, tie_us: int) -> Link:
        """The lower-delay link; `default` while d is unknown or within `tie_us` of 0."""
        if self.difference_us is None or abs(self.difference_us) <= tie_us:
            return default
        return Link.WIFI if self.difference_us > 0 else Link.LTE

    def spill_depth(self, preferred: Link) -> int | None:
        """LOWEST_RTT_FIRST's spill depth: a packet behind more than ceil(|d| / time per packet) packets on the
        preferred link arrives later than on the other, plus the one in service."""
        packet_us = self.lte_packet_us if preferred == Link.LTE else self.wifi_packet_us
        if self.difference_us is None or packet_us is None:
            return None
        return math.ceil(abs(self.difference_us) / packet_us) + 1

    def hold_budget_us(self) -> int | None:
        """VISIBLE's hold budget: |d| plus HOLD_PACKET_TIMES packet times of the slower link (those known)."""
        if self.difference_us is None:
            return None
        slower = max(self.lte_packet_us or 0, self.wifi_packet_us or 0)
        return min(MAX_US, abs(self.difference_us) + HOLD_PACKET_TIMES * slower)

    def hold_slack(self) -> int | None:
        """VISIBLE's hold slack: the dup-ACKs the faster link can cause within the hold budget (one per packet it
        delivers past the late one), so that the budget, not a guess at burst lengths, ends a hold."""
        budget = self.hold_budget_us()
        known = [t for t in (self.lte_packet_us, self.wifi_packet_us) if t]
        if budget is None or not known:
            return None
        return min(MAX_SLACK, math.ceil(budget / min(known)))


class LinkStateBand:
    """The link state last written for one route. A measured state replaces it when a value becomes known, or
    when d moved by more than `delay_band_us` or a time per packet by more than `packet_time_band` of itself, and
    then at most once per `interval_s`. A value that becomes unknown keeps its last written value."""

    def __init__(self, delay_band_us: int, packet_time_band: float, interval_s: float) -> None:
        self.delay_band_us = delay_band_us
        self.packet_time_band = packet_time_band
        self.interval_s = interval_s
        self.written = LinkState()
        self._written_at = -math.inf

    def update(self, measured: LinkState, now: float) -> bool:
        """Takes the current measurement; True when `written` changed (the switch needs the new state)."""
        old = self.written
        new = LinkState(*(_keep(after, before) for after, before in zip(_values(measured), _values(old), strict=True)))
        if new == old:
            return False
        newly_known = any(
            before is None and after is not None for before, after in zip(_values(old), _values(new), strict=True)
        )
        if not newly_known and (not self._moved(old, new) or now - self._written_at < self.interval_s):
            return False
        self.written = new
        self._written_at = now
        return True

    def _moved(self, old: LinkState, new: LinkState) -> bool:
        bands = (
            (old.difference_us, new.difference_us, self.delay_band_us),
            (old.lte_packet_us, new.lte_packet_us, self.packet_time_band * (old.lte_packet_us or 0)),
            (old.wifi_packet_us, new.wifi_packet_us, self.packet_time_band * (old.wifi_packet_us or 0)),
            (old.reorder_allowance_us, new.reorder_allowance_us, self.delay_band_us),
        )
        return any(
            before is not None and after is not None and abs(after - before) > band for before, after, band in bands
        )


def _show(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def _keep(measured: int | None, written: int | None) -> int | None:
    return written if measured is None else measured


def _values(state: LinkState) -> tuple[int | None, int | None, int | None, int | None]:
    return state.difference_us, state.lte_packet_us, state.wifi_packet_us, state.reorder_allowance_us


def link_state_entry(lte_port: int, state: LinkState) -> fy.P4TableEntry:
    return fy.P4TableEntry(LINK_STATE, match=fy.Match(lte_port=lte_port), action=state.action())


def tuning(
    policy: pb.Policy,
    routes: Sequence[tuple[ipaddress.IPv4Network, LinkState]],
    default_link: Link,
    tie_us: int,
) -> Tuning:
    """What `policy`'s zeros become, from the link state of the LWIP route its flows are steered over: the switch's
    only LWIP route, or of several the one whose prefix holds the policy's dst_prefix; with none of these, the
    policy's values are written as they are."""
    state = _route_of(policy.match, routes)
    if state is None:
        return Tuning(lowest_rtt_link=default_link)
    preferred = state.preferred_link(default_link, tie_us)
    return Tuning(preferred, state.spill_depth(preferred), state.hold_budget_us(), state.hold_slack())


def _route_of(match: pb.Match, routes: Sequence[tuple[ipaddress.IPv4Network, LinkState]]) -> LinkState | None:
    if len(routes) == 1:
        return routes[0][1]
    destination = parse_prefix(match.dst_prefix) if match.dst_prefix else None
    if destination is not None:
        for prefix, state in routes:
            if destination.subnet_of(prefix):
                return state
    return None


class RouteLinkStates:
    """The link state of each LWIP route of one switch: measured (d from the prober, times per packet from the links'
    configured capacities, else the link monitor's estimates), written with hysteresis, and what policies get."""

    def __init__(
        self, config: SwitchConfig, monitor: MonitorConfig, rates: LinkRates, prober: LinkProber | None
    ) -> None:
        self._rates = rates
        self._prober = prober
        self._capacities = {port.port: port.capacity_bps for port in config.ports if port.capacity_bps is not None}
        self._queues = {port.port: port.queue_packets for port in config.ports if port.queue_packets is not None}
        self._sender_backoff = monitor.sender_backoff
        self._default_link = Link.LTE if config.lowest_rtt_link == "lte" else Link.WIFI
        self._tie_us = monitor.delay_band_us
        self._routes = [
            (route, LinkStateBand(monitor.delay_band_us, monitor.packet_time_band, monitor.rewrite_interval_s))
            for route in config.routes
            if route.lte is not None and route.wifi is not None
        ]
        self._tuned_for: tuple[LinkState, ...] | None = None  # the written states `_tuned` was computed from
        self._tuned: dict[str, Tuning] = {}
        self.update(-math.inf)  # configured capacities, until measured

    def update(self, now: float) -> bool:
        """Measures every route; True when a route's written state changed (the switch needs new entries)."""
        changed = False
        for route, band in self._routes:
            changed |= band.update(self.measure(route, now), now)
        return changed

    def measure(self, route: RouteConfig, now: float) -> LinkState:
        assert route.lte is not None and route.wifi is not None
        probe = self._prober.probe_of(route) if self._prober is not None else None
        measured = probe.difference(now) if probe is not None else None
        difference = measured.us if measured is not None else None
        lte_packet_us = packet_time_us(self._rate(route.lte.port))
        wifi_packet_us = packet_time_us(self._rate(route.wifi.port))
        allowance = None
        if difference is not None:
            earlier, earlier_packet_us = (route.wifi, wifi_packet_us) if difference > 0 else (route.lte, lte_packet_us)
            queue = self._queues.get(earlier.port)
            queue_us = queue * earlier_packet_us if queue is not None and earlier_packet_us is not None else None
            assert measured is not None
            allowance = reorder_allowance_us(difference, measured.later_rtt_us, queue_us, self._sender_backoff)
        return LinkState(
            round(difference) if difference is not None else None, lte_packet_us, wifi_packet_us, allowance
        )

    def written(self) -> tuple[LinkState, ...]:
        """The written states, in route order: what the entries depend on."""
        return tuple(band.written for _, band in self._routes)

    def entries(self) -> Iterator[fy.P4TableEntry]:
        """One entry per LTE port with anything known; routes sharing an LTE port share its entry (the first
        route's), as the pipeline keys the table by LTE port."""
        ports: set[int] = set()
        for route, band in self._routes:
            assert route.lte is not None
            if band.written.known and route.lte.port not in ports:
                ports.add(route.lte.port)
                yield link_state_entry(route.lte.port, band.written)

    def tuning(self, policy: pb.Policy) -> Tuning:
        """What `policy` gets; remembered per destination prefix (all of the policy it depends on) while the written
        states stay: a batch of changes asks it for every changed policy on every switch."""
        written = self.written()
        if written != self._tuned_for:
            self._tuned_for, self._tuned = written, {}
        found = self._tuned.get(policy.match.dst_prefix)
        if found is None:
            routes = [(route.prefix, state) for (route, _), state in zip(self._routes, written, strict=True)]
            found = self._tuned[policy.match.dst_prefix] = tuning(policy, routes, self._default_link, self._tie_us)
        return found

    def describe(self) -> str:
        """The written states, for the log."""
        return "; ".join(
            f"{route.prefix} d {_show(band.written.difference_us)} us, time per packet LTE "
            f"{_show(band.written.lte_packet_us)} us, Wi-Fi {_show(band.written.wifi_packet_us)} us, reorder "
            f"allowance {_show(band.written.reorder_allowance_us)} us"
            for route, band in self._routes
        )

    def statuses(self, now: float) -> list[pb.RouteLinkState]:
        return [self._status(route, band.written, now) for route, band in self._routes]

    def _status(self, route: RouteConfig, written: LinkState, now: float) -> pb.RouteLinkState:
        args = written.action().args
        preferred = written.preferred_link(self._default_link, self._tie_us)
        status = pb.RouteLinkState(
            prefix=str(route.prefix),
            probe_target=str(route.probe or ""),
            lte_delay_us=args["lte_delay_us"],
            wifi_delay_us=args["wifi_delay_us"],
            lte_packet_us=args["lte_packet_us"],
            wifi_packet_us=args["wifi_packet_us"],
            preferred_link=preferred.name.lower(),
            spill_depth_packets=written.spill_depth(preferred) or 0,
            hold_budget_us=written.hold_budget_us() or 0,
            hold_slack_packets=written.hold_slack() or 0,
            reorder_allowance_us=min(written.reorder_allowance_us or 0, abs(written.difference_us or 0)),
        )
        probe = self._prober.probe_of(route) if self._prober is not None else None
        if probe is None:
            status.delay_state = "not probed (no probe target configured for the route)"
            return status
        difference = probe.difference(now)
        status.delay_measured = difference.us is not None
        status.delay_difference_us = round(difference.us or 0)
        status.delay_state = difference.state
        status.probes_sent = sum(probe.sent.values())
        status.probes_unanswered = sum(probe.unanswered.values())
        for rtt in probe.rtts(now):
            status.rtts.add(
                sent_on=probe.link_name(rtt.sent_on),
                answered_on=probe.link_name(rtt.answered_on),
                min_rtt_us=round(rtt.min_rtt_s * 1e6),
                answers=rtt.answers,
            )
        return status

    def _rate(self, port: int) -> float | None:
        capacity = self._capacities.get(port)
        return float(capacity) if capacity is not None else self._rates.estimate(port)
