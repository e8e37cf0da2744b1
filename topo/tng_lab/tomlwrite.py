"""TOML text from the plain data `tomllib` reads (tables, arrays, strings, numbers, booleans), so a generated
scenario can be written out and run again by hand. Top-level scalars and tables become `key = value` lines; a
top-level array of tables puts one inline table per line; everything nested is inline."""

from __future__ import annotations

import json
import math
import re
from typing import Any

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(data: dict[str, Any]) -> str:
    lines = []
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            lines.append(f"{_key(key)} = [")
            lines += [f"  {_value(item)}," for item in value]
            lines.append("]")
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's; TOML also wants DEL escaped, and no surrogate escapes."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"TOML has no place for {value!r} in a generated scenario")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise ValueError(f"cannot write {type(value).__name__} {value!r} as TOML")
