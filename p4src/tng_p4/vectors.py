"""Load the shared wire-format test vectors (testdata/wire/*.json) into dataclasses."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_TESTDATA = "TNG_TESTDATA"  # overrides the testdata directory (the one holding wire/)
HEADER_FIELDS = (
    "version",
    "packet_type",
    "flags",
    "channel_id",
    "connection_id",
    "packet_number",
    "payload_length",
    "queue_level",
    "rate_hint",
)
# Byte strings, lowercase hex in the JSON.
BYTES_FIELDS = frozenset({"token", "noise", "sealed", "next_hop_address", "inner", "frames"})


@dataclass(frozen=True, slots=True)
class Vector:
    """One vector: the datagram bytes and either every field (valid) or the receiver error (malformed)."""

    name: str
    description: str
    raw: bytes
    valid: bool
    fields: Mapping[str, int | bytes]
    error: str | None

    @property
    def header(self) -> dict[str, int]:
        """The flow-header fields of a valid vector."""
        return {name: int(self.fields[name]) for name in HEADER_FIELDS}

    @property
    def payload(self) -> dict[str, int | bytes]:
        """The type-specific fields of a valid vector (stage/token/noise/padding_len, token, sealed, the SECTION
        prefix and inner packet, or a SECTION_ACK's frames)."""
        return {name: value for name, value in self.fields.items() if name not in HEADER_FIELDS}


def testdata_dir() -> Path:
    """$TNG_TESTDATA, else the `testdata` directory of the repository this module lives in."""
    override = os.environ.get(ENV_TESTDATA)
    if override:
        return Path(override)
    for parent in Path(__file__).resolve().parents:
        if (parent / "testdata" / "wire").is_dir():
            return parent / "testdata"
    raise FileNotFoundError(f"no testdata/wire above {Path(__file__).resolve()}; set {ENV_TESTDATA}")


def load_vector(path: Path) -> Vector:
    """Parse one vector file."""
    data = json.loads(path.read_text())
    fields = {name: bytes.fromhex(value) if name in BYTES_FIELDS else value for name, value in data["fields"].items()}
    return Vector(
        name=data["name"],
        description=data["description"],
        raw=bytes.fromhex(data["hex"]),
        valid=data["valid"],
        fields=fields,
        error=data["error"],
    )


def load_wire_vectors(directory: Path | None = None) -> list[Vector]:
    """Every wire vector, sorted by name; `directory` defaults to testdata_dir()/wire."""
    wire = directory if directory is not None else testdata_dir() / "wire"
    paths = sorted(wire.glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"no wire vectors (*.json) in {wire}")
    return sorted((load_vector(path) for path in paths), key=lambda vector: vector.name)
