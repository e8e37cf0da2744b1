"""The public contract of the tng P4 programs: where their artifacts are, P4Info names, drop-reason indexes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from tng_p4.wire import WireError

PROGRAMS_FILE = Path("p4src/programs.txt")
BUILD_DIR = Path("p4src/build")

# P4Info names of tng_wire (p4src/README.md).
PORT_FORWARD = "ingress.port_forward"
PORT_FORWARD_KEY = "ingress_port"
FORWARD = "ingress.forward"
FORWARD_PORT = "port"
DROP = "ingress.drop"
WIRE_DROPS = "ingress.tng_wire_drops"
WIRE_PACKETS = "ingress.tng_wire_packets"


class DropReason(IntEnum):
    """Index of the tng_wire_drops counter (p4src/shared/define.p4, DROP_*)."""

    OTHER_PARSER_ERROR = 0
    TOO_LARGE = 1
    TRUNCATED_HEADER = 2
    BAD_VERSION = 3
    UNKNOWN_TYPE = 4
    RESERVED_FLAGS = 5
    LENGTH_MISMATCH = 6
    HANDSHAKE_LENGTH = 7
    BAD_STAGE = 8
    INITIAL_TOO_SMALL = 9
    SHORT_SEALED_PAYLOAD = 10
    PACKET_TOO_SHORT = 11
    IPV4_CHECKSUM = 12
    TTL_EXPIRED = 13
    NO_ROUTE = 14
    BAD_LENGTH = 15
    HELPER_FRAME = 16
    BAD_SECTION = 17


# P4Info names of tng (p4src/README.md, "tng: the main pipeline") that experiments read.
STEERED = "ingress.steering.steered"
PORT_TX = "egress.port_tx"
FORWARDED = "ingress.forwarded"
DROPS = "ingress.drops"
VISIBLE_DECISIONS = "ingress.visible.decisions"


class VisibleDecision(IntEnum):
    """Index of tng's ingress.visible.decisions counter."""

    DATA_TRACKED = 0
    DATA_COPIED = 1
    UNTRACKED = 2
    NEW_ACK = 3
    DUP_ACK = 4
    HELD = 5
    BOOSTED = 6
    RETRANSMIT_REQUESTED = 7
    ACK_REPORTED = 8
    DUP_ACK_FORWARDED = 9
    COPIES_CONFIRMED = 10
    SACK_HIDDEN = 11


def drop_reason(error: str) -> DropReason:
    """The counter index a switch uses for a receiver-rule error name (e.g. 'bad_version')."""
    return DropReason[WireError(error).name]


@dataclass(frozen=True, slots=True)
class Artifacts:
    """The committed compiler output of one program."""

    p4info: Path
    bmv2_json: Path

    def missing(self) -> list[Path]:
        return [path for path in (self.p4info, self.bmv2_json) if not path.is_file()]


def repo_root() -> Path:
    """The repository this module lives in (the directory holding p4src/programs.txt)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / PROGRAMS_FILE).is_file():
            return parent
    raise FileNotFoundError(f"no {PROGRAMS_FILE} above {Path(__file__).resolve()}")


def programs(root: Path) -> dict[str, Path]:
    """Program name (file stem = build directory name) -> source, from p4src/programs.txt."""
    lines = (line.strip() for line in (root / PROGRAMS_FILE).read_text().splitlines())
    sources = [root / line for line in lines if line and not line.startswith("#")]
    return {source.stem: source for source in sources}


def artifacts(program: str, build_dir: Path) -> Artifacts:
    """Where `program`'s P4Info and BMv2 JSON are under `build_dir`."""
    return Artifacts(p4info=build_dir / program / "p4info.txtpb", bmv2_json=build_dir / program / "bmv2.json")
