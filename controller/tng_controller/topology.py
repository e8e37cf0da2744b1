"""A switch's topology (config.SwitchConfig) -> entries of the pipeline's port, route and capacity tables (and, on
Tofino, its queue-report tables: tng_controller.targets), and the clone session toward the VISIBLE helper."""

from __future__ import annotations

from collections.abc import Iterator

import finsy as fy

from tng_controller.switch_config import ROLES, HelperConfig, SwitchConfig
from tng_controller.targets import TOFINO_TABLES, queue_report_entries

PORT_ROLE = "ingress.port_role"
ROUTES = "ingress.forwarding.routes"
PORT_MAC = "egress.port_mac"
PORT_CAPACITY = "egress.backpressure.port_capacity"
# The tables a switch with a configured topology has exactly the configured entries in (topology_tables).
TOPOLOGY_TABLES = (PORT_ROLE, ROUTES, PORT_MAC, PORT_CAPACITY)

HELPER_CLONE_SESSION = 1
CPU_PORT = 255


def topology_tables(config: SwitchConfig) -> tuple[str, ...]:
    """The tables that hold exactly the entries of topology_entries(config)."""
    return TOPOLOGY_TABLES + (TOFINO_TABLES if config.tofino is not None else ())


def topology_entries(config: SwitchConfig) -> Iterator[fy.P4TableEntry]:
    """Port roles (core is the table's default, so it has no entry), source MACs, capacities, routes and the punt
    route of the switch's own address."""
    for port in config.ports:
        role = ROLES.index(port.role)
        if role:
            yield fy.P4TableEntry(
                PORT_ROLE, match=fy.Match(ingress_port=port.port), action=fy.Action("ingress.set_port_role", role=role)
            )
        if port.mac is not None:
            yield fy.P4TableEntry(
                PORT_MAC, match=fy.Match(egress_port=port.port), action=fy.Action("egress.set_source_mac", mac=port.mac)
            )
        if port.capacity_bps is not None:
            yield fy.P4TableEntry(
                PORT_CAPACITY,
                match=fy.Match(egress_port=port.port),
                action=fy.Action(
                    "egress.backpressure.set_capacity", rate_kbps=min(port.capacity_bps // 1000, 2**32 - 1)
                ),
            )
    for route in config.routes:
        prefix = (int(route.prefix.network_address), route.prefix.prefixlen)
        if route.next_hop is not None:
            action = fy.Action("ingress.forwarding.route", port=route.next_hop.port, dst_mac=route.next_hop.dst_mac)
        else:
            assert route.lte is not None and route.wifi is not None
            action = fy.Action(
                "ingress.forwarding.route_lwip",
                lte_port=route.lte.port,
                lte_dst_mac=route.lte.dst_mac,
                wifi_port=route.wifi.port,
                wifi_dst_mac=route.wifi.dst_mac,
            )
        # An LPM /0 is a wildcard: P4Runtime wants the field left out.
        match = fy.Match(dst_addr=prefix) if route.prefix.prefixlen else fy.Match()
        yield fy.P4TableEntry(ROUTES, match=match, action=action)
    if config.probe_source is not None:
        # Answers to the link prober's probes come back to the switch's own address: to the controller.
        own = fy.Match(dst_addr=(int(config.probe_source), 32))
        yield fy.P4TableEntry(ROUTES, match=own, action=fy.Action("ingress.forwarding.punt"))
    yield from queue_report_entries(config)


def helper_clone_session(helper: HelperConfig) -> fy.P4CloneSessionEntry:
    """Clone session 1 toward the helper: the CPU port (packet-ins) or the helper's switch port."""
    port = CPU_PORT if helper.attach == "cpu" else helper.port
    assert port is not None
    return fy.P4CloneSessionEntry(HELPER_CLONE_SESSION, replicas=[(port, 1)])
