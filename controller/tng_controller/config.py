"""The controller's configuration file (TOML): the API listener, the policy store, the switches with their topology,
traffic classes, the settings of the control loops (link monitor, new-flow digests) and how long host registrations
last."""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tng_controller.config_reader import ConfigError, TableReader, host_of, is_loopback
from tng_controller.registry import DEFAULT_TTL_S
from tng_controller.switch_config import MAX_PORT, SwitchConfig, parse_switch

DEFAULT_LISTEN = "127.0.0.1:50051"
ETCD_TLS_KEYS = ("etcd_ca", "etcd_cert", "etcd_key")  # [store] keys of TLS towards etcd
ETCD_AUTH_KEYS = ("etcd_user", "etcd_password_file")  # [store] keys of etcd's user and password authentication
_TRAFFIC_CLASS = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # as policy.TRAFFIC_CLASS_PATTERN


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
class EtcdAuth:
    """etcd's user and password authentication: the user and its password (read from a file of its own, so that the
    configuration holds no secret)."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class EtcdConfig:
    """The replicated store: etcd's client URLs, the key prefix of this controller cluster, the leadership lease's
    time to live (a dead leader is replaced after about this long), this replica's name (default: its API
    address), TLS (None: plain HTTP) and user authentication (None: none)."""

    endpoints: tuple[str, ...]
    prefix: str = "/tng"
    lease_ttl_s: int = 2
    name: str = ""
    tls: EtcdTls | None = None
    auth: EtcdAuth | None = None


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
    registration_ttl_s: float = DEFAULT_TTL_S  # how long a host registration lasts unless renewed


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
    reader = TableReader(source, base)
    reader.only(data, "", {"api", "store", "switch", "traffic_class", "monitor", "digests", "metrics", "hosts"})
    api = reader.table(data, "api")
    reader.only(api, "api.", {"listen", "tls_cert", "tls_key", "tls_client_ca", "allow_insecure_remote"})
    listen = reader.string(api, "api.listen", DEFAULT_LISTEN)
    host = host_of(listen)
    if host is None:
        raise reader.error("api.listen", f"{listen!r} is not host:port")
    tls = _tls(reader, api)
    loopback = host == "localhost" or is_loopback(host)
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
    reader.only(
        store,
        "store.",
        {"path", "etcd", "etcd_prefix", "lease_ttl_s", "replica_name", *ETCD_TLS_KEYS, *ETCD_AUTH_KEYS},
    )
    switches = []
    names: set[str] = set()
    raw_switches = data.get("switch", [])
    if not isinstance(raw_switches, list):
        raise reader.error("switch", "must be an array of tables ([[switch]])")
    for index, raw in enumerate(raw_switches):
        switch = parse_switch(reader, raw, f"switch[{index}]")
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
        registration_ttl_s=_registration_ttl(reader, reader.table(data, "hosts")),
    )


def _registration_ttl(reader: TableReader, hosts: dict[str, Any]) -> float:
    reader.only(hosts, "hosts.", {"registration_ttl_s"})
    return reader.number(hosts, "hosts.registration_ttl_s", DEFAULT_TTL_S)


def _etcd(reader: TableReader, store: dict[str, Any]) -> EtcdConfig | None:
    if "etcd" not in store:
        for key in ("etcd_prefix", "lease_ttl_s", "replica_name", *ETCD_TLS_KEYS, *ETCD_AUTH_KEYS):
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
    return EtcdConfig(tuple(endpoints), prefix, ttl, name, tls, _etcd_auth(reader, store))


def _etcd_tls(reader: TableReader, store: dict[str, Any], https: bool) -> EtcdTls | None:
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


def _etcd_auth(reader: TableReader, store: dict[str, Any]) -> EtcdAuth | None:
    user = reader.string(store, "store.etcd_user", "")
    password_file = reader.optional_path(store, "store.etcd_password_file")
    if not user and password_file is None:
        return None
    if not user or password_file is None:
        raise reader.error("store.etcd_user" if not user else "store.etcd_password_file", "is required with the other")
    try:
        return EtcdAuth(user, etcd_password(password_file))
    except ValueError as exc:
        raise reader.error("store.etcd_password_file", str(exc)) from exc


def etcd_password(path: Path) -> str:
    """The password in the file at `path` (its first line); raises ValueError naming what is wrong."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    if not lines or not lines[0]:
        raise ValueError(f"{path} holds no password on its first line")
    return lines[0]


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


def _metrics(reader: TableReader, raw: dict[str, Any]) -> str | None:
    reader.only(raw, "metrics.", {"listen", "allow_remote"})
    if "listen" not in raw:
        return None
    listen = reader.string(raw, "metrics.listen", None)
    host = host_of(listen)
    if host is None:
        raise reader.error("metrics.listen", f"{listen!r} is not host:port")
    remote = raw.get("allow_remote", False)
    if not isinstance(remote, bool):
        raise reader.error("metrics.allow_remote", f"{remote!r} is not true or false")
    if not (host == "localhost" or is_loopback(host)) and not remote:
        raise reader.error(
            "metrics.listen", f"{listen} is reachable from other hosts over plain HTTP: set allow_remote = true"
        )
    return listen


def _tls(reader: TableReader, api: dict[str, Any]) -> TlsConfig | None:
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


def _traffic_classes(reader: TableReader, raw: Any) -> tuple[TrafficClassRule, ...]:
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


def _monitor(reader: TableReader, raw: dict[str, Any]) -> MonitorConfig:
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


def _digests(reader: TableReader, raw: dict[str, Any]) -> DigestConfig:
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
