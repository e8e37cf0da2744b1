"""The [[switch]] tables of the controller's configuration: a switch's P4Runtime address and pipeline files, its
ports and routes (the topology the controller writes), its VISIBLE helper and, for Tofino, the compiler's output."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tng_controller.config_reader import TableReader, host_of, parse_rate

REPO = Path(__file__).resolve().parents[2]
DEFAULT_P4INFO = REPO / "p4src/build/tng/p4info.txtpb"
DEFAULT_BMV2_JSON = REPO / "p4src/build/tng/bmv2.json"
DEFAULT_TNA_P4INFO = REPO / "p4src/build/tng_tna/p4info.txtpb"
DEFAULT_TNA_CONTEXT = REPO / "p4src/build/tng_tna/context.json"
ROLES = ("core", "lte", "wifi", "helper")  # ingress.port_role values 0-3, in order
MAX_PORT = 511  # 9-bit ports
_SWITCH_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


@dataclass(frozen=True, slots=True)
class PortConfig:
    """A switch port: its role, and optionally its source MAC, capacity and BMv2 egress queue depth."""

    port: int
    role: str = "core"
    mac: int | None = None
    capacity_bps: int | None = None
    queue_packets: int | None = None


@dataclass(frozen=True, slots=True)
class NextHop:
    port: int
    dst_mac: int


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """An IPv4 route: one next hop, or (LWIP) an LTE and a Wi-Fi next hop that steering chooses between."""

    prefix: ipaddress.IPv4Network
    next_hop: NextHop | None = None
    lte: NextHop | None = None
    wifi: NextHop | None = None
    probe: ipaddress.IPv4Address | None = None  # LWIP: the address behind the route the link prober pings


@dataclass(frozen=True, slots=True)
class HelperConfig:
    """The VISIBLE retransmission helper: run by the controller on the P4Runtime stream ("cpu"), or an external
    process on a switch port whose health answers on `health` ("port")."""

    attach: str  # "cpu" | "port"
    port: int | None = None
    health: str | None = None
    probe_interval_s: float = 0.5


@dataclass(frozen=True, slots=True)
class TofinoConfig:
    """A Tofino switch (bf_switchd with P4Runtime) runs p4src/tna/tng.p4: it is given the compiler's binary and
    context.json besides the P4Info, and egress reports each LWIP port's queueing time to steering this often
    (docs/tofino.md)."""

    binary: Path
    context: Path = DEFAULT_TNA_CONTEXT
    queue_report_interval_us: float = 100.0


SWITCH_TLS_KEYS = ("tls_ca", "tls_cert", "tls_key")  # [[switch]] keys of TLS towards its P4Runtime server


@dataclass(frozen=True, slots=True)
class SwitchTls:
    """TLS towards the switch's P4Runtime server: the CA that signed its certificate, and the controller's client
    certificate and key for a switch that asks for one (None: none shown)."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True, slots=True)
class SwitchConfig:
    name: str
    address: str
    device_id: int
    p4info: Path = DEFAULT_P4INFO
    bmv2_json: Path = DEFAULT_BMV2_JSON
    lowest_rtt_link: str = "wifi"  # the link STEERING_MODE_LOWEST_RTT_FIRST prefers: "lte" or "wifi"
    thrift: str | None = None  # BMv2 Thrift host:port, for queue rates and register resets
    ports: tuple[PortConfig, ...] = ()
    routes: tuple[RouteConfig, ...] = ()
    helper: HelperConfig | None = None
    probe_source: ipaddress.IPv4Address | None = None  # the switch's own address: link probes come from it
    tofino: TofinoConfig | None = None  # None: BMv2
    tls: SwitchTls | None = None  # None: P4Runtime in plaintext

    @property
    def has_topology(self) -> bool:
        """Whether the controller owns the topology tables of this switch (ports or routes are configured)."""
        return bool(self.ports or self.routes)


def parse_switch(reader: TableReader, raw: Any, where: str) -> SwitchConfig:
    if not isinstance(raw, dict):
        raise reader.error(where, "must be a table")
    reader.only(
        raw,
        f"{where}.",
        {
            "name",
            "address",
            "device_id",
            "p4info",
            "bmv2_json",
            "lowest_rtt_link",
            "thrift",
            "probe_source",
            "port",
            "route",
            "helper",
            "tofino",
            *SWITCH_TLS_KEYS,
        },
    )
    name = reader.string(raw, f"{where}.name", None)
    if not _SWITCH_NAME.fullmatch(name):
        raise reader.error(f"{where}.name", f"{name!r} does not match {_SWITCH_NAME.pattern}")
    address = reader.string(raw, f"{where}.address", None)
    if host_of(address) is None:
        raise reader.error(f"{where}.address", f"{address!r} is not host:port")
    device_id = raw.get("device_id", 1)
    if not isinstance(device_id, int) or isinstance(device_id, bool) or not 0 <= device_id < 1 << 64:
        raise reader.error(f"{where}.device_id", f"{device_id!r} is not an integer from 0 to 2^64-1")
    lowest_rtt_link = reader.string(raw, f"{where}.lowest_rtt_link", "wifi")
    if lowest_rtt_link not in ("lte", "wifi"):
        raise reader.error(f"{where}.lowest_rtt_link", f"{lowest_rtt_link!r} is not 'lte' or 'wifi'")
    thrift = raw.get("thrift")
    if thrift is not None and (not isinstance(thrift, str) or host_of(thrift) is None):
        raise reader.error(f"{where}.thrift", f"{thrift!r} is not host:port")
    ports = tuple(
        _port(reader, item, f"{where}.port[{i}]") for i, item in enumerate(reader.tables(raw, f"{where}.port"))
    )
    seen: set[int] = set()
    for i, port in enumerate(ports):
        if port.port in seen:
            raise reader.error(f"{where}.port[{i}].port", f"port {port.port} is configured twice")
        seen.add(port.port)
    roles = {port.port: port.role for port in ports}
    routes = tuple(
        _route(reader, item, f"{where}.route[{i}]", roles)
        for i, item in enumerate(reader.tables(raw, f"{where}.route"))
    )
    prefixes: set[ipaddress.IPv4Network] = set()
    for i, route in enumerate(routes):
        if route.prefix in prefixes:
            raise reader.error(f"{where}.route[{i}].prefix", f"{route.prefix} is routed twice")
        prefixes.add(route.prefix)
    probe_source = _probe_source(reader, raw, where, ports, routes)
    helper = None
    if "helper" in raw:
        helper = _helper(reader, reader.table(raw, "helper"), f"{where}.helper")
    tofino = None
    if "tofino" in raw:
        tofino = _tofino(reader, reader.table(raw, "tofino"), f"{where}.tofino")
        for key in ("bmv2_json", "thrift"):
            if key in raw:
                raise reader.error(f"{where}.{key}", f"is for BMv2, not for a switch with {where}.tofino")
    return SwitchConfig(
        name=name,
        address=address,
        device_id=device_id,
        p4info=reader.path(raw, f"{where}.p4info", DEFAULT_TNA_P4INFO if tofino else DEFAULT_P4INFO),
        bmv2_json=reader.path(raw, f"{where}.bmv2_json", DEFAULT_BMV2_JSON),
        lowest_rtt_link=lowest_rtt_link,
        thrift=thrift,
        ports=ports,
        routes=routes,
        helper=helper,
        probe_source=probe_source,
        tofino=tofino,
        tls=_switch_tls(reader, raw, where),
    )


def _switch_tls(reader: TableReader, raw: dict[str, Any], where: str) -> SwitchTls | None:
    ca, cert, key = (reader.optional_path(raw, f"{where}.{name}") for name in SWITCH_TLS_KEYS)
    for name, path in zip(SWITCH_TLS_KEYS, (ca, cert, key), strict=True):
        if path is not None and not path.is_file():
            raise reader.error(f"{where}.{name}", f"{path} does not exist")
    if ca is None:
        if cert is not None or key is not None:
            raise reader.error(f"{where}.tls_cert" if cert else f"{where}.tls_key", "needs tls_ca (it turns TLS on)")
        return None
    if (cert is None) != (key is None):
        raise reader.error(f"{where}.tls_cert" if cert is None else f"{where}.tls_key", "is required with the other")
    return SwitchTls(ca, cert, key)


def _tofino(reader: TableReader, raw: dict[str, Any], where: str) -> TofinoConfig:
    reader.only(raw, f"{where}.", {"binary", "context", "queue_report_interval_us"})
    binary = reader.optional_path(raw, f"{where}.binary")
    if binary is None:
        raise reader.error(f"{where}.binary", "is required: the tofino.bin of a compile of p4src/tna/tng.p4")
    return TofinoConfig(
        binary=binary,
        context=reader.path(raw, f"{where}.context", DEFAULT_TNA_CONTEXT),
        queue_report_interval_us=reader.number(raw, f"{where}.queue_report_interval_us", 100.0),
    )


def _port(reader: TableReader, raw: dict[str, Any], where: str) -> PortConfig:
    reader.only(raw, f"{where}.", {"port", "role", "mac", "capacity", "queue"})
    role = reader.string(raw, f"{where}.role", "core")
    if role not in ROLES:
        raise reader.error(f"{where}.role", f"{role!r} is not one of {', '.join(ROLES)}")
    capacity = None
    if "capacity" in raw:
        capacity = parse_rate(raw["capacity"])
        if capacity is None:
            raise reader.error(
                f"{where}.capacity", f'{raw["capacity"]!r} is not a rate such as "20mbit" (bit, kbit, mbit, gbit)'
            )
    queue = None
    if "queue" in raw:
        queue = reader.integer(raw, f"{where}.queue", 1, 1 << 31, "packets")
    return PortConfig(
        port=reader.integer(raw, f"{where}.port", 0, MAX_PORT, "port"),
        role=role,
        mac=_mac(reader, raw, f"{where}.mac") if "mac" in raw else None,
        capacity_bps=capacity,
        queue_packets=queue,
    )


def _probe_source(
    reader: TableReader, raw: dict[str, Any], where: str, ports: tuple[PortConfig, ...], routes: tuple[RouteConfig, ...]
) -> ipaddress.IPv4Address | None:
    """The switch's own address (punted to the controller); required when a route is probed, whose probes leave by
    packet-out, which skips egress.port_mac: their ports need a configured MAC."""
    probed = [(i, route) for i, route in enumerate(routes) if route.probe is not None]
    if "probe_source" not in raw:
        if probed:
            raise reader.error(
                f"{where}.probe_source",
                f"is required when a route has a probe (route[{probed[0][0]}]): the address link probes come from, "
                "whose answers the switch punts to the controller",
            )
        return None
    source = _address(reader, raw, f"{where}.probe_source")
    for i, route in enumerate(routes):
        if route.prefix == ipaddress.IPv4Network(source):
            raise reader.error(f"{where}.probe_source", f"{source} is routed by route[{i}]; it must be punted")
    macs = {port.port: port.mac for port in ports}
    for i, route in probed:
        assert route.lte is not None and route.wifi is not None
        for link in (route.lte, route.wifi):
            if macs.get(link.port) is None:
                raise reader.error(
                    f"{where}.route[{i}].probe",
                    f"port {link.port} has no mac ([[switch.port]] mac): probes leave by packet-out, which skips "
                    "egress.port_mac",
                )
    return source


def _route(reader: TableReader, raw: dict[str, Any], where: str, roles: dict[int, str]) -> RouteConfig:
    reader.only(raw, f"{where}.", {"prefix", "port", "dst_mac", "lte", "wifi", "probe"})
    text = reader.string(raw, f"{where}.prefix", None)
    try:
        prefix = ipaddress.IPv4Network(text, strict=True)
    except ValueError as exc:
        raise reader.error(f"{where}.prefix", f"{text!r} is not an IPv4 prefix without host bits: {exc}") from exc
    lwip = "lte" in raw or "wifi" in raw
    if lwip:
        if "port" in raw or "dst_mac" in raw:
            raise reader.error(where, "has both a next hop (port, dst_mac) and LWIP links (lte, wifi): pick one")
        links = {}
        for link in ("lte", "wifi"):
            if link not in raw:
                raise reader.error(f"{where}.{link}", "is required with the other LWIP link")
            table = reader.table(raw, link)
            reader.only(table, f"{where}.{link}.", {"port", "dst_mac"})
            links[link] = _next_hop(reader, table, f"{where}.{link}")
            role = roles.get(links[link].port)
            if role is not None and role != link:
                raise reader.error(f"{where}.{link}.port", f"port {links[link].port} has role {role!r}, not {link!r}")
        probe = None
        if "probe" in raw:
            probe = _address(reader, raw, f"{where}.probe")
            if probe not in prefix:
                raise reader.error(f"{where}.probe", f"{probe} is not in the route's prefix {prefix}")
        return RouteConfig(prefix, lte=links["lte"], wifi=links["wifi"], probe=probe)
    if "probe" in raw:
        raise reader.error(f"{where}.probe", "only LWIP routes (lte, wifi) are probed")
    return RouteConfig(prefix, next_hop=_next_hop(reader, raw, where))


def _address(reader: TableReader, raw: dict[str, Any], key: str) -> ipaddress.IPv4Address:
    text = reader.string(raw, key, None)
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        raise reader.error(key, f"{text!r} is not an IPv4 address a.b.c.d") from None


def _next_hop(reader: TableReader, raw: dict[str, Any], where: str) -> NextHop:
    return NextHop(reader.integer(raw, f"{where}.port", 0, MAX_PORT, "port"), _mac(reader, raw, f"{where}.dst_mac"))


def _helper(reader: TableReader, raw: dict[str, Any], where: str) -> HelperConfig:
    reader.only(raw, f"{where}.", {"attach", "port", "health", "probe_interval_s"})
    attach = reader.string(raw, f"{where}.attach", None)
    interval = reader.number(raw, f"{where}.probe_interval_s", 0.5)
    if attach == "cpu":
        for key in ("port", "health"):
            if key in raw:
                raise reader.error(f"{where}.{key}", 'is only for attach = "port"')
        return HelperConfig("cpu", probe_interval_s=interval)
    if attach != "port":
        raise reader.error(f"{where}.attach", f"{attach!r} is not 'cpu' or 'port'")
    health = reader.string(raw, f"{where}.health", None)
    if host_of(health) is None:
        raise reader.error(f"{where}.health", f"{health!r} is not host:port")
    port = reader.integer(raw, f"{where}.port", 0, MAX_PORT, "port")
    return HelperConfig("port", port=port, health=health, probe_interval_s=interval)


def _mac(reader: TableReader, raw: dict[str, Any], key: str) -> int:
    text = reader.string(raw, key, None)
    if not _MAC.fullmatch(text):
        raise reader.error(key, f"{text!r} is not a MAC address aa:bb:cc:dd:ee:ff")
    return int(text.replace(":", ""), 16)
