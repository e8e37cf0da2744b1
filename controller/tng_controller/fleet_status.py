"""What the fleet's switches report: their state (ListSwitches and the metrics' gauges) and their counters
(GetStats: each policy's packets and bytes, each port's)."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence

import finsy as fy
from prometheus_client.metrics_core import Metric

from tng_controller.compile import POLICY_COUNTER
from tng_controller.metrics import gauge
from tng_controller.monitor import LinkRates
from tng_controller.pb import policy_pb2 as pb
from tng_controller.store import StoredPolicy
from tng_controller.switch_config import ROLES
from tng_controller.switch_member import SwitchMember, describe, read_all

LOGGER = logging.getLogger(__name__)
PORT_ROLE = "ingress.port_role"
PORT_TX = "egress.port_tx"
STEERED = "ingress.steering.steered"
STATS_TIMEOUT_S = 5.0  # GetStats leaves out a switch that takes longer to read its counters


def gauges(members: Mapping[str, SwitchMember]) -> list[Metric]:
    """The switches' state as gauges, read when scraped."""
    return [
        gauge(
            "switch_connected",
            "1 while the switch's P4Runtime channel is up",
            ["switch"],
            (([n], float(m.switch.is_up)) for n, m in members.items()),
        ),
        gauge(
            "switch_primary",
            "1 while this controller is the switch's primary (arbitration won)",
            ["switch"],
            (([n], float(m.switch.is_up and m.switch.is_primary)) for n, m in members.items()),
        ),
        gauge(
            "switch_in_sync",
            "1 while the switch holds the stored policies and takes writes",
            ["switch"],
            (([n], float(m.state == "CONNECTED")) for n, m in members.items()),
        ),
        gauge(
            "helper_up",
            "1 while the switch's VISIBLE helper is up, 0 while down or not yet probed",
            ["switch"],
            (([n], float(m.helper.state.startswith("up"))) for n, m in members.items() if m.helper is not None),
        ),
        gauge(
            "classified_flows",
            "Flows the controller keeps a flow_policy entry for",
            ["switch"],
            (([n], float(len(m.flows))) for n, m in members.items()),
        ),
        gauge(
            "link_rate_estimate_bps",
            "The link monitor's depletion rate estimate of an LTE or Wi-Fi port",
            ["switch", "port"],
            (
                ([n, str(port)], estimate)
                for n, m in members.items()
                for port in sorted({*m.link_ports[0], *m.link_ports[1]})
                if (estimate := m.links.estimate(port)) is not None
            ),
        ),
        gauge(
            "qdepl_lte_share",
            "The LTE share last written to the switch's qdepl policies",
            ["switch"],
            (([n], m.share.share) for n, m in members.items() if m.share.share is not None),
        ),
    ]


def statuses(members: Mapping[str, SwitchMember]) -> list[pb.SwitchStatus]:
    now = asyncio.get_running_loop().time()
    return [
        pb.SwitchStatus(
            name=name,
            address=m.config.address,
            device_id=m.config.device_id,
            state=m.state,
            pipeline_cookie=m.switch.p4info.p4cookie if m.switch.is_up else 0,
            last_error=m.last_error,
            helper=m.helper.state if m.helper else "",
            classified_flows=len(m.flows),
            qdepl_lte_share=m.share.share or 0.0,
            link_states=m.link_states.statuses(now),
        )
        for name, m in members.items()
    ]


async def stats(members: Mapping[str, SwitchMember], policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
    """The policies' packet and byte counts summed over the switches that are up, and their ports' counters; the
    switches are read at once, and one that does not answer within STATS_TIMEOUT_S is left out (and logged)."""
    up = [(name, member) for name, member in members.items() if member.switch.is_up]
    read = await asyncio.gather(*(_switch_stats(name, member) for name, member in up))
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for cells, _ in read:
        for cell in cells:
            counts[cell.index or 0][0] += cell.packet_count
            counts[cell.index or 0][1] += cell.byte_count
    return pb.GetStatsResponse(
        policies=[
            # A policy without an id has no entries: no packet is counted for it (id 0 is the default policy).
            pb.PolicyStats(name=p.name, packets=counts[p.policy_id][0], bytes=counts[p.policy_id][1])
            if p.policy_id
            else pb.PolicyStats(name=p.name)
            for p in policies
        ],
        ports=[port for _, ports in read for port in ports],
    )


def _role_name(value: int) -> str:
    """A port_role entry's role as the configuration names it ("unknown" for a value no role has)."""
    return ROLES[value] if 0 <= value < len(ROLES) else "unknown"


async def _switch_stats(name: str, member: SwitchMember) -> tuple[list[fy.P4CounterEntry], list[pb.PortStats]]:
    """One switch's policy counter cells and port counters; none when it cannot be read in time."""
    try:
        async with asyncio.timeout(STATS_TIMEOUT_S):
            cells = await read_all(member.switch, fy.P4CounterEntry(POLICY_COUNTER))
            return cells, await _port_stats(name, member.switch, member.links)
    except TimeoutError:
        LOGGER.warning("cannot read counters of %s: no answer within %.0f s", name, STATS_TIMEOUT_S)
    except (fy.P4ClientError, ValueError, KeyError) as exc:
        LOGGER.warning("cannot read counters of %s: %s", name, describe(exc))
    return [], []


async def _port_stats(name: str, switch: fy.Switch, links: LinkRates) -> list[pb.PortStats]:
    roles = {
        int(entry.match["ingress_port"]): _role_name(int(entry.action.args["role"]))
        for entry in await read_all(switch, fy.P4TableEntry(PORT_ROLE))
        if entry.match is not None and isinstance(entry.action, fy.P4TableAction)
    }
    tx = {cell.index: cell for cell in await read_all(switch, fy.P4CounterEntry(PORT_TX))}
    steered = {cell.index: cell.packet_count for cell in await read_all(switch, fy.P4CounterEntry(STEERED))}
    used = sorted({*roles, *(i for i, c in tx.items() if c.packet_count), *(i for i, n in steered.items() if n)})
    return [
        pb.PortStats(
            switch_name=name,
            port=port,
            role=roles.get(port, "core"),
            tx_packets=tx[port].packet_count if port in tx else 0,
            tx_bytes=tx[port].byte_count if port in tx else 0,
            steered_packets=steered.get(port, 0),
            rate_estimate_bps=links.estimate(port) or 0.0,
        )
        for port in used
    ]
