"""The controller's configuration file (TOML): the API listener, the policy store and the switches."""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_P4INFO = REPO / "p4src/build/tng/p4info.txtpb"
DEFAULT_BMV2_JSON = REPO / "p4src/build/tng/bmv2.json"
_SWITCH_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_HOST_PORT = re.compile(r"(?P<host>\[[^]]+\]|[^:]+):(?P<port>\d{1,5})")


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
class SwitchConfig:
    name: str
    address: str
    device_id: int
    p4info: Path = DEFAULT_P4INFO
    bmv2_json: Path = DEFAULT_BMV2_JSON
    lowest_rtt_link: str = "wifi"  # the link STEERING_MODE_LOWEST_RTT_FIRST prefers: "lte" or "wifi"


@dataclass(frozen=True, slots=True)
class Config:
    api: ApiConfig = field(default_factory=ApiConfig)
    store: Path = Path("tng-controller.db")
    switches: tuple[SwitchConfig, ...] = ()


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
    reader.only(data, "", {"api", "store", "switch"})
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
    reader.only(store, "store.", {"path"})
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
        switches=tuple(switches),
    )


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
    reader.only(raw, f"{where}.", {"name", "address", "device_id", "p4info", "bmv2_json", "lowest_rtt_link"})
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
    return SwitchConfig(
        name=name,
        address=address,
        device_id=device_id,
        p4info=reader.path(raw, f"{where}.p4info", DEFAULT_P4INFO),
        bmv2_json=reader.path(raw, f"{where}.bmv2_json", DEFAULT_BMV2_JSON),
        lowest_rtt_link=lowest_rtt_link,
    )


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


@dataclass(frozen=True, slots=True)
class _Reader:
    source: str
    base: Path

    def error(self, key: str, reason: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}: {reason}")

    def only(self, table: dict[str, Any], prefix: str, allowed: set[str]) -> None:
        for key in table:
            if key not in allowed:
                raise self.error(f"{prefix}{key}", f"unknown key (known: {', '.join(sorted(allowed))})")

    def table(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(key, "must be a table")
        return value

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
