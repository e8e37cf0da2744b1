"""Reading the controller's TOML configuration: a reader of typed values that names the file and the dotted key in
every error, and the small value formats (host:port, rates) that more than one section uses."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HOST_PORT = re.compile(r"(?P<host>\[[^]]+\]|[^:]+):(?P<port>\d{1,5})")
_INDEX = re.compile(r"\[\d+\]")  # "switch[0].port" -> "switch.port"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a TOML key that needs no quotes
_RATE = re.compile(r"(?P<number>\d+(\.\d+)?)\s*(?P<unit>bit|kbit|mbit|gbit)")
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the key."""


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


def host_of(address: str) -> str | None:
    """The host of "host:port" (an IPv6 host without its brackets); None when it is not that or the port is past
    65535."""
    match = _HOST_PORT.fullmatch(address)
    if match is None or int(match["port"]) > 65535:
        return None
    return match["host"].strip("[]")


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (a name is not)."""
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
class TableReader:
    """Typed values of a parsed TOML document; `base` is the directory relative paths start from."""

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
