"""The controller's configuration file (TOML): the API listener, the policy store, the switches with their topology,
traffic classes and the settings of the control loops (link monitor, new-flow digests)."""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LISTEN = "127.0.0.1:50051"
ETCD_TLS_KEYS = ("etcd_ca", "etcd_cert", "etcd_key")  # [store] keys of TLS towards etcd
DEFAULT_P4INFO = REPO / "p4src/build/tng/p4info.txtpb"
DEFAULT_BMV2_JSON = REPO / "p4src/build/tng/bmv2.json"
DEFAULT_TNA_P4INFO = REPO / "p4src/build/tng_tna/p4info.txtpb"
DEFAULT_TNA_CONTEXT = REPO / "p4src/build/tng_tna/context.json"
_SWITCH_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_TRAFFIC_CLASS = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # as policy.TRAFFIC_CLASS_PATTERN
_HOST_PORT = re.compile(r"(?P<host>\[[^]]+\]|[^:]+):(?P<port>\d{1,5})")
_INDEX = re.compile(r"\[\d+\]")  # "switch[0].port" -> "switch.port"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a TOML key that needs no quotes
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_RATE = re.compile(r"(?P<number>\d+(\.\d+)?)\s*(?P<unit>bit|kbit|mbit|gbit)")
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
ROLES = ("core", "lte", "wifi", "helper")  # ingress.port_role values 0-3, in order
MAX_PORT = 511  # 9-bit ports


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class TlsConfig:
    cert: Path
    key: Path
    client_ca: Path | None  # clients must present a certificate signed by this CA


@dataclass(frozen=True, slots=True)
class ApiConfig:
    listen: str = DEFAULT_LISTEN
    tls: TlsConfig | None = None


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

    @property
    def has_topology(self) -> bool:
        """Whether the controller owns the topology tables of this switch (ports or routes are configured)."""
        return bool(self.ports or self.routes)


@dataclass(frozen=True, slots=True)
class TrafficClassRule:
    """Flows of a traffic class, as the new-flow digest shows them (unset fields match anything)."""

    name: str
    src_prefix: ipaddress.IPv4Network | None = None
    dst_prefix: ipaddress.IPv4Network | None = None
    protocol: int | None = None
    src_port: int | None = None
    dst_port: int | None = None
    ingress_port: int | None = None


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """The link monitor: how often it reads the port counters, its EWMA weight and its hysteresis."""

    interval_s: float = 1.0
    ewma_weight: float = 0.25  # of the newest sample
    share_band: float = 0.05  # rewrite qdepl rates only when the LTE share moved by more than this
    rewrite_interval_s: float = 5.0  # and at most this often (the link state too)
    probe_interval_s: float = 0.2  # the link prober: one probe per link of each probed route this often
    probe_window_s: float = 30.0  # minimum round trip over this long (queueing filtered out)
    probe_timeout_s: float = 2.0  # a probe unanswered this long is counted as lost
    delay_band_us: int = 1000  # link_state is rewritten only when the delay difference moved by more than this
    packet_time_band: float = 0.1  # or a link's time per packet by more than this fraction
    # The multiplicative decrease of the steered flows' senders (Linux's cubic: 0.7; Reno: 0.5): how far one loss
    # shrinks a window, which sets how much queue earliest-arrival steering must leave a flow (link_state.py).
    sender_backoff: float = 0.7


@dataclass(frozen=True, slots=True)
class DigestConfig:
    """New-flow digests: how many classified flows a switch keeps entries for, and how often the seen-flow bit arrays
    may be cleared (over Thrift) so that forgotten flows are digested again."""

    max_flows: int = 512
    reset_interval_s: float = 30.0


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """TLS towards etcd (https:// endpoints): the CA that signed the members' certificates (None: the system's
    roots) and this client's certificate and key (None: no client certificate)."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True, slots=True)
class EtcdConfig:
    """The replicated store: etcd's client URLs, the key prefix of this controller cluster, the leadership lease's
    time to live (a dead leader is replaced after about this long), this replica's name (default: its API
    address) and TLS (None: plain HTTP)."""

    endpoints: tuple[str, ...]
    prefix: str = "/tng"
    lease_ttl_s: int = 2
    name: str = ""
    tls: EtcdTls | None = None


@dataclass(frozen=True, slots=True)
class Config:
    api: ApiConfig = field(default_factory=ApiConfig)
    store: Path = Path("tng-controller.db")
    etcd: EtcdConfig | None = None  # None: one controller, policies in the SQLite file `store`
    switches: tuple[SwitchConfig, ...] = ()
    traffic_classes: tuple[TrafficClassRule, ...] = ()
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    digests: DigestConfig = field(default_factory=DigestConfig)
    metrics_listen: str | None = None  # host:port of the Prometheus endpoint; None: not served


def load(path: Path) -> Config:
    """Reads and checks a configuration file; relative paths in it are relative to its directory."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML: {exc}") from exc
    return parse(data, path.parent, str(path))


def parse(data: dict[str, Any], base: Path, source: str = "config") -> Config:
    reader = _Reader(source, base)
    reader.only(data, "", {"api", "store", "switch", "traffic_class", "monitor", "digests", "metrics"})
    api = reader.table(data, "api")
    reader.only(api, "api.", {"listen", "tls_cert", "tls_key", "tls_client_ca", "allow_insecure_remote"})
    listen = reader.string(api, "api.listen", DEFAULT_LISTEN)
    host = _host(listen)
    if host is None:
        raise reader.error("api.listen", f"{listen!r} is not host:port")
    tls = _tls(reader, api)
    loopback = host == "localhost" or _is_loopback(host)
    insecure = api.get("allow_insecure_remote", False)
    if not isinstance(insecure, bool):
        raise reader.error("api.allow_insecure_remote", f"{insecure!r} is not true or false")
    if not loopback and (tls is None or tls.client_ca is None) and not insecure:
        raise reader.error(
            "api.listen",
            f"{listen} is reachable from other hosts: set tls_cert, tls_key and tls_client_ca (clients then need "
            "certificates), or allow_insecure_remote = true",
        )
    store = reader.table(data, "store")
    reader.only(store, "store.", {"path", "etcd", "etcd_prefix", "lease_ttl_s", "replica_name", *ETCD_TLS_KEYS})
    switches = []
    names: set[str] = set()
    raw_switches = data.get("switch", [])
    if not isinstance(raw_switches, list):
        raise reader.error("switch", "must be an array of tables ([[switch]])")
    for index, raw in enumerate(raw_switches):
        switch = _switch(reader, raw, f"switch[{index}]")
        if switch.name in names:
            raise reader.error(f"switch[{index}].name", f"{switch.name!r} is used twice")
        names.add(switch.name)
        switches.append(switch)
    return Config(
        api=ApiConfig(listen=listen, tls=tls),
        store=reader.path(store, "store.path", Path("tng-controller.db")),
        etcd=_etcd(reader, store),
        switches=tuple(switches),
        traffic_classes=_traffic_classes(reader, data.get("traffic_class", [])),
        monitor=_monitor(reader, reader.table(data, "monitor")),
        digests=_digests(reader, reader.table(data, "digests")),
        metrics_listen=_metrics(reader, reader.table(data, "metrics")),
    )


def _etcd(reader: _Reader, store: dict[str, Any]) -> EtcdConfig | None:
    if "etcd" not in store:
        for key in ("etcd_prefix", "lease_ttl_s", "replica_name", *ETCD_TLS_KEYS):
            if key in store:
                raise reader.error(f"store.{key}", "only applies with store.etcd (the replicated store)")
        return None
    if "path" in store:
        raise reader.error("store.path", "the policies are in etcd (store.etcd) or in SQLite (store.path), not both")
    endpoints = store["etcd"]
    if not isinstance(endpoints, list) or not endpoints:
        raise reader.error("store.etcd", 'must be a non-empty array of client URLs, e.g. ["http://127.0.0.1:2379"]')
    for index, url in enumerate(endpoints):
        try:
            etcd_endpoint(url if isinstance(url, str) else repr(url))
        except ValueError as exc:
            raise reader.error(f"store.etcd[{index}]", str(exc)) from exc
    schemes = {urlsplit(url).scheme for url in endpoints}
    if len(schemes) > 1:
        raise reader.error("store.etcd", "mixes http:// and https:// endpoints (TLS is used with all or none)")
    tls = _etcd_tls(reader, store, schemes == {"https"})
    prefix = reader.string(store, "store.etcd_prefix", "/tng")
    if not prefix.startswith("/") or prefix == "/" or prefix.endswith("/"):
        raise reader.error("store.etcd_prefix", f"{prefix!r} is not a key prefix like /tng (a slash first, none last)")
    ttl = reader.integer(store, "store.lease_ttl_s", 2, 60, "number of seconds") if "lease_ttl_s" in store else 2
    name = reader.string(store, "store.replica_name", "")
    if "/" in name:
        raise reader.error("store.replica_name", f"{name!r} has a slash")
    return EtcdConfig(tuple(endpoints), prefix, ttl, name, tls)


def _etcd_tls(reader: _Reader, store: dict[str, Any], https: bool) -> EtcdTls | None:
    ca, cert, key = (reader.optional_path(store, f"store.{name}") for name in ETCD_TLS_KEYS)
    if not https:
        for name, path in zip(ETCD_TLS_KEYS, (ca, cert, key), strict=True):
            if path is not None:
                raise reader.error(f"store.{name}", "only applies to https:// endpoints in store.etcd")
        return None
    if (cert is None) != (key is None):
        raise reader.error("store.etcd_cert" if cert is None else "store.etcd_key", "is required with the other")
    for name, path in zip(ETCD_TLS_KEYS, (ca, cert, key), strict=True):
        if path is not None and not path.is_file():
            raise reader.error(f"store.{name}", f"{path} does not exist")
    return EtcdTls(ca, cert, key)


def etcd_endpoint(url: str) -> tuple[str, int]:
    """host and port of an etcd client URL (http://host:port, https:// for TLS); raises ValueError naming what is
    wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"{url!r} is not an etcd client URL like http://127.0.0.1:2379 or https://etcd-1:2379")
    try:
        port = parts.port or 2379
    except ValueError as exc:
        raise ValueError(f"{url!r}: {exc}") from exc
    return parts.hostname, port


def _metrics(reader: _Reader, raw: dict[str, Any]) -> str | None:
    reader.only(raw, "metrics.", {"listen", "allow_remote"})
    if "listen" not in raw:
        return None
    listen = reader.string(raw, "metrics.listen", None)
    host = _host(listen)
    if host is None:
        raise reader.error("metrics.listen", f"{listen!r} is not host:port")
    remote = raw.get("allow_remote", False)
    if not isinstance(remote, bool):
        raise reader.error("metrics.allow_remote", f"{remote!r} is not true or false")
    if not (host == "localhost" or _is_loopback(host)) and not remote:
        raise reader.error(
            "metrics.listen", f"{listen} is reachable from other hosts over plain HTTP: set allow_remote = true"
        )
    return listen


def _tls(reader: _Reader, api: dict[str, Any]) -> TlsConfig | None:
    cert = reader.optional_path(api, "api.tls_cert")
    key = reader.optional_path(api, "api.tls_key")
    client_ca = reader.optional_path(api, "api.tls_client_ca")
    if cert is None and key is None:
        if client_ca is not None:
            raise reader.error("api.tls_client_ca", "needs tls_cert and tls_key")
        return None
    if cert is None or key is None:
        raise reader.error("api.tls_cert" if cert is None else "api.tls_key", "is required with the other TLS keys")
    return TlsConfig(cert=cert, key=key, client_ca=client_ca)


def _switch(reader: _Reader, raw: Any, where: str) -> SwitchConfig:
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
        },
    )
    name = reader.string(raw, f"{where}.name", None)
    if not _SWITCH_NAME.fullmatch(name):
        raise reader.error(f"{where}.name", f"{name!r} does not match {_SWITCH_NAME.pattern}")
    address = reader.string(raw, f"{where}.address", None)
    if _host(address) is None:
        raise reader.error(f"{where}.address", f"{address!r} is not host:port")
    device_id = raw.get("device_id", 1)
    if not isinstance(device_id, int) or isinstance(device_id, bool) or not 0 <= device_id < 1 << 64:
        raise reader.error(f"{where}.device_id", f"{device_id!r} is not an integer from 0 to 2^64-1")
    lowest_rtt_link = reader.string(raw, f"{where}.lowest_rtt_link", "wifi")
    if lowest_rtt_link not in ("lte", "wifi"):
        raise reader.error(f"{where}.lowest_rtt_link", f"{lowest_rtt_link!r} is not 'lte' or 'wifi'")
    thrift = raw.get("thrift")
    if thrift is not None and (not isinstance(thrift, str) or _host(thrift) is None):
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
    )


def _tofino(reader: _Reader, raw: dict[str, Any], where: str) -> TofinoConfig:
    reader.only(raw, f"{where}.", {"binary", "context", "queue_report_interval_us"})
    binary = reader.optional_path(raw, f"{where}.binary")
    if binary is None:
        raise reader.error(f"{where}.binary", "is required: the tofino.bin of a compile of p4src/tna/tng.p4")
    return TofinoConfig(
        binary=binary,
        context=reader.path(raw, f"{where}.context", DEFAULT_TNA_CONTEXT),
        queue_report_interval_us=reader.number(raw, f"{where}.queue_report_interval_us", 100.0),
    )


def _port(reader: _Reader, raw: dict[str, Any], where: str) -> PortConfig:
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
    reader: _Reader, raw: dict[str, Any], where: str, ports: tuple[PortConfig, ...], routes: tuple[RouteConfig, ...]
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


def _route(reader: _Reader, raw: dict[str, Any], where: str, roles: dict[int, str]) -> RouteConfig:
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


def _address(reader: _Reader, raw: dict[str, Any], key: str) -> ipaddress.IPv4Address:
    text = reader.string(raw, key, None)
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        raise reader.error(key, f"{text!r} is not an IPv4 address a.b.c.d") from None


def _next_hop(reader: _Reader, raw: dict[str, Any], where: str) -> NextHop:
    return NextHop(reader.integer(raw, f"{where}.port", 0, MAX_PORT, "port"), _mac(reader, raw, f"{where}.dst_mac"))


def _helper(reader: _Reader, raw: dict[str, Any], where: str) -> HelperConfig:
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
    if _host(health) is None:
        raise reader.error(f"{where}.health", f"{health!r} is not host:port")
    port = reader.integer(raw, f"{where}.port", 0, MAX_PORT, "port")
    return HelperConfig("port", port=port, health=health, probe_interval_s=interval)


def _traffic_classes(reader: _Reader, raw: Any) -> tuple[TrafficClassRule, ...]:
    if not isinstance(raw, list):
        raise reader.error("traffic_class", "must be an array of tables ([[traffic_class]])")
    rules = []
    for i, item in enumerate(raw):
        where = f"traffic_class[{i}]"
        if not isinstance(item, dict):
            raise reader.error(where, "must be a table")
        reader.only(
            item, f"{where}.", {"name", "src_prefix", "dst_prefix", "protocol", "src_port", "dst_port", "ingress_port"}
        )
        name = reader.string(item, f"{where}.name", None)
        if not _TRAFFIC_CLASS.fullmatch(name):
            raise reader.error(f"{where}.name", f"{name!r} does not match {_TRAFFIC_CLASS.pattern}")
        prefixes = {}
        for key in ("src_prefix", "dst_prefix"):
            if key in item:
                text = reader.string(item, f"{where}.{key}", None)
                try:
                    prefixes[key] = ipaddress.IPv4Network(text, strict=True)
                except ValueError as exc:
                    raise reader.error(f"{where}.{key}", f"{text!r} is not an IPv4 prefix: {exc}") from exc
        limits = {"protocol": 255, "src_port": 0xFFFF, "dst_port": 0xFFFF, "ingress_port": MAX_PORT}
        numbers = {
            key: reader.integer(item, f"{where}.{key}", 0, top, key) for key, top in limits.items() if key in item
        }
        rules.append(TrafficClassRule(name=name, **prefixes, **numbers))
    return tuple(rules)


def _monitor(reader: _Reader, raw: dict[str, Any]) -> MonitorConfig:
    reader.only(
        raw,
        "monitor.",
        {
            "interval_s",
            "ewma_weight",
            "share_band",
            "rewrite_interval_s",
            "probe_interval_s",
            "probe_window_s",
            "probe_timeout_s",
            "delay_band_us",
            "packet_time_band",
            "sender_backoff",
        },
    )
    defaults = MonitorConfig()
    weight = reader.number(raw, "monitor.ewma_weight", defaults.ewma_weight)
    if not 0 < weight <= 1:
        raise reader.error("monitor.ewma_weight", f"{weight} is not in (0, 1]")
    probe_interval = reader.number(raw, "monitor.probe_interval_s", defaults.probe_interval_s)
    probe_window = reader.number(raw, "monitor.probe_window_s", defaults.probe_window_s)
    if probe_window < probe_interval:
        raise reader.error(
            "monitor.probe_window_s", f"{probe_window} is shorter than probe_interval_s ({probe_interval})"
        )
    backoff = reader.number(raw, "monitor.sender_backoff", defaults.sender_backoff)
    if not 0 < backoff < 1:
        raise reader.error("monitor.sender_backoff", f"{backoff} is not in (0, 1)")
    delay_band = defaults.delay_band_us
    if "delay_band_us" in raw:
        delay_band = reader.integer(raw, "monitor.delay_band_us", 0, 10**7, "number of microseconds")
    return MonitorConfig(
        interval_s=reader.number(raw, "monitor.interval_s", defaults.interval_s),
        ewma_weight=weight,
        share_band=reader.fraction(raw, "monitor.share_band", defaults.share_band),
        rewrite_interval_s=reader.number(raw, "monitor.rewrite_interval_s", defaults.rewrite_interval_s),
        probe_interval_s=probe_interval,
        probe_window_s=probe_window,
        probe_timeout_s=reader.number(raw, "monitor.probe_timeout_s", defaults.probe_timeout_s),
        delay_band_us=delay_band,
        packet_time_band=reader.fraction(raw, "monitor.packet_time_band", defaults.packet_time_band),
        sender_backoff=backoff,
    )


def _digests(reader: _Reader, raw: dict[str, Any]) -> DigestConfig:
    reader.only(raw, "digests.", {"max_flows", "reset_interval_s"})
    defaults = DigestConfig()
    max_flows = defaults.max_flows
    if "max_flows" in raw:
        max_flows = reader.integer(
            raw, "digests.max_flows", 1, 1024, "flows (the size of ingress.classify.flow_policy)"
        )
    return DigestConfig(
        max_flows=max_flows, reset_interval_s=reader.number(raw, "digests.reset_interval_s", defaults.reset_interval_s)
    )


def _mac(reader: _Reader, raw: dict[str, Any], key: str) -> int:
    text = reader.string(raw, key, None)
    if not _MAC.fullmatch(text):
        raise reader.error(key, f"{text!r} is not a MAC address aa:bb:cc:dd:ee:ff")
    return int(text.replace(":", ""), 16)


def parse_rate(value: object) -> int | None:
    """Bits per second of "20mbit" (units bit, kbit, mbit, gbit, as tc writes them) or of a positive integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    if not isinstance(value, str):
        return None
    match = _RATE.fullmatch(value.strip().lower())
    if match is None:
        return None
    bps = int(float(match["number"]) * _RATE_UNITS[match["unit"]])
    return bps if bps > 0 else None


def _host(address: str) -> str | None:
    match = _HOST_PORT.fullmatch(address)
    if match is None or int(match["port"]) > 65535:
        return None
    return match["host"].strip("[]")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _toml_key(key: str) -> str:
    """`key` as TOML writes it: quoted unless bare, so that an empty key or one with dots or spaces stays readable
    in a dotted path (`api."": unknown key`, `api."a.b": unknown key`)."""
    if _BARE_KEY.fullmatch(key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True, slots=True)
class _Reader:
    source: str
    base: Path

    def error(self, key: str, reason: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}: {reason}")

    def only(self, table: dict[str, Any], prefix: str, allowed: set[str]) -> None:
        for key in table:
            if key not in allowed:
                raise self.error(f"{prefix}{_toml_key(key)}", f"unknown key (known: {', '.join(sorted(allowed))})")

    def table(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key.rsplit(".", 1)[-1], {})
        if not isinstance(value, dict):
            raise self.error(key, "must be a table")
        return value

    def tables(self, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
        """An array of tables ([[key]]); absent means empty."""
        value = data.get(key.rsplit(".", 1)[-1], [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self.error(key, f"must be an array of tables ([[{_INDEX.sub('', key)}]])")
        return value

    def integer(self, table: dict[str, Any], key: str, low: int, high: int, what: str) -> int:
        value = table.get(key.rsplit(".", 1)[-1])
        if value is None:
            raise self.error(key, "is required")
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise self.error(key, f"{value!r} is not a {what} from {low} to {high}")
        return value

    def number(self, table: dict[str, Any], key: str, default: float) -> float:
        """A positive number of seconds or a weight."""
        value = table.get(key.rsplit(".", 1)[-1], default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.error(key, f"{value!r} is not a positive number")
        return float(value)

    def fraction(self, table: dict[str, Any], key: str, default: float) -> float:
        """A band: a number in [0, 1)."""
        value = table.get(key.rsplit(".", 1)[-1], default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
            raise self.error(key, f"{value!r} is not a number in [0, 1)")
        return float(value)

    def string(self, table: dict[str, Any], key: str, default: str | None) -> str:
        value = table.get(key.rsplit(".", 1)[-1], default)
        if value is None:
            raise self.error(key, "is required")
        if not isinstance(value, str):
            raise self.error(key, f"{value!r} is not a string")
        return value

    def path(self, table: dict[str, Any], key: str, default: Path) -> Path:
        found = self.optional_path(table, key)
        return default if found is None else found

    def optional_path(self, table: dict[str, Any], key: str) -> Path | None:
        name = key.rsplit(".", 1)[-1]
        if name not in table:
            return None
        return self.base / self.string(table, key, None)
