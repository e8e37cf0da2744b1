"""The Wireshark dissector (tools/wireshark/tng.lua) is the fourth consumer of testdata/wire/: every vector goes into
one pcap as a UDP datagram to port 4477, tshark decodes it with the dissector, and each decoded field must equal the
vector's `fields` (valid vectors) or `tng.error` must name the vector's `error` (malformed vectors)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from tng_p4.vectors import HEADER_FIELDS, Vector, load_wire_vectors

REPO = Path(__file__).resolve().parents[2]
DISSECTOR = REPO / "tools" / "wireshark" / "tng.lua"
TNG_PORT = 4477
CLIENT_PORT = 50000
OTHER_PORT = 40000  # no dissector claims it: tng there is found by the heuristic alone
ROOT_WARNING = 'Running as user "root" and group "root". This could be dangerous.'
# Wireshark's UDP dissector hands an empty payload to no dissector ("Len=0"), so no tng rule can flag it.
NEVER_DISSECTED = {"malformed-empty"}
# Rules 0-5 of wire-format section 8: the heuristic claims no datagram that breaks one of them.
HEADER_RULES = {"too_large", "truncated_header", "bad_version", "unknown_type", "reserved_flags", "length_mismatch"}
LINKTYPE_RAW = 101  # each record is an IPv4 packet, no link-layer header
# Vector field -> dissector field; the header fields share their names under `tng.`.
FIELD_NAMES = {name: f"tng.{name}" for name in HEADER_FIELDS} | {
    "stage": "tng.initial.stage",
    "noise": "tng.initial.noise",
    "padding_len": "tng.initial.padding_len",
    "sealed": "tng.sealed",
    "section_version": "tng.section.section_version",
    "next_hop_port": "tng.section.next_hop_port",
    "next_hop_address": "tng.section.next_hop_address",
    "inner": "tng.section.inner",
    "frames": "tng.section_ack.frames",
}
TOKEN_FIELDS = {1: "tng.initial.token", 2: "tng.retry.token"}  # `token` by packet type: INITIAL, RETRY

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed (make deps installs it)")


def ipv4_udp(payload: bytes, sport: int, dport: int) -> bytes:
    """An IPv4/UDP packet carrying `payload` (checksums zero: tshark does not verify them by default)."""
    udp = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack(
        ">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    )
    return ip + udp


def write_pcap(path: Path, packets: list[bytes], snaplen: int = 65535) -> None:
    """A classic libpcap file holding `packets` as raw IPv4 records one second apart, each cut to `snaplen` bytes."""
    records = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, LINKTYPE_RAW)]
    for second, packet in enumerate(packets):
        kept = packet[:snaplen]
        records.append(struct.pack("<IIII", second, 0, len(kept), len(packet)) + kept)
    path.write_bytes(b"".join(records))


def decode(pcap: Path, fields: list[str]) -> list[dict[str, list[str]]]:
    """tshark's values of `fields` in each frame of `pcap`, decoded with the tng dissector, which must not fail."""
    argv = ["tshark", "-n", "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-T", "json"]
    argv += [arg for field in [*fields, "_ws.expert.message"] for arg in ("-e", field)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    complaints = [line for line in done.stderr.splitlines() if line.strip() and line != ROOT_WARNING]
    assert done.returncode == 0 and not complaints, done.stderr
    frames = [frame["_source"]["layers"] for frame in json.loads(done.stdout)]
    # A Lua runtime error does not stop tshark: it becomes an expert message in the frame.
    lua_errors = [
        message for frame in frames for message in frame.get("_ws.expert.message", []) if "Lua Error" in message
    ]
    assert not lua_errors, lua_errors
    return frames


def expected_values(vector: Vector) -> dict[str, int | str]:
    """The vector's fields under the dissector's names: integers, and byte strings as tshark prints them (plain hex)."""
    packet_type = int(vector.fields["packet_type"])
    expected: dict[str, int | str] = {}
    for name, value in vector.fields.items():
        field = TOKEN_FIELDS[packet_type] if name == "token" else FIELD_NAMES[name]
        if isinstance(value, bytes):
            if value:  # an empty token adds no item
                expected[field] = value.hex()
        else:
            expected[field] = int(value)
    return expected


def decoded_value(frame: dict[str, list[str]], field: str, like: int | str) -> int | str | None:
    """The one value of `field` in `frame` (integers parsed from tshark's decimal or 0x-hex), None if absent."""
    values = frame.get(field)
    if values is None:
        return None
    assert len(values) == 1, f"{field} occurs {len(values)} times"
    return int(values[0], 0) if isinstance(like, int) else values[0]


@pytest.fixture(scope="module")
def decoded(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Vector, dict[str, list[str]]]]:
    """Every vector sent to port 4477, with tshark's decoding of it."""
    return decode_vectors(tmp_path_factory.mktemp("wireshark") / "vectors.pcap", TNG_PORT)


def decode_vectors(pcap: Path, port: int, snaplen: int = 65535) -> list[tuple[Vector, dict[str, list[str]]]]:
    vectors = load_wire_vectors()
    write_pcap(pcap, [ipv4_udp(vector.raw, CLIENT_PORT, port) for vector in vectors], snaplen)
    fields = sorted({*FIELD_NAMES.values(), *TOKEN_FIELDS.values(), "tng.error", "frame.protocols"})
    frames = decode(pcap, fields)
    assert len(frames) == len(vectors)
    return list(zip(vectors, frames, strict=True))


def test_every_valid_vector_decodes_to_its_fields(decoded: list[tuple[Vector, dict[str, list[str]]]]) -> None:
    checked = 0
    for vector, frame in decoded:
        if not vector.valid:
            continue
        for field, value in expected_values(vector).items():
            assert decoded_value(frame, field, value) == value, f"{vector.name}: {field}"
            checked += 1
        assert "tng.error" not in frame, f"{vector.name}: {frame['tng.error']}"
    assert checked > 0


def test_every_malformed_vector_names_its_rule(decoded: list[tuple[Vector, dict[str, list[str]]]]) -> None:
    malformed = [(vector, frame) for vector, frame in decoded if not vector.valid]
    assert len(malformed) > len(NEVER_DISSECTED)
    for vector, frame in malformed:
        if vector.name in NEVER_DISSECTED:
            assert frame["frame.protocols"] == ["raw:ip:udp"], vector.name
        else:
            assert frame.get("tng.error") == [vector.error], f"{vector.name}: {frame.get('frame.protocols')}"


def test_the_heuristic_finds_tng_on_other_ports_and_only_well_formed_headers(tmp_path: Path) -> None:
    for vector, frame in decode_vectors(tmp_path / "other-port.pcap", OTHER_PORT):
        claimed = frame["frame.protocols"] == ["raw:ip:udp:tng"]
        assert claimed == (vector.error not in HEADER_RULES and vector.name not in NEVER_DISSECTED), vector.name
        if vector.valid:
            assert decoded_value(frame, "tng.packet_number", 0) == vector.fields["packet_number"], vector.name


@pytest.mark.parametrize("snaplen", [40, 56, 96])
def test_a_snap_length_cuts_no_header_field_it_captured(tmp_path: Path, snaplen: int) -> None:
    """Lab pcaps are cut to a snap length: what was captured still decodes, the rest is noted, nothing fails."""
    tng_offset = 20 + 8  # IPv4 and UDP headers before the tng header
    for vector, frame in decode_vectors(tmp_path / "snapped.pcap", TNG_PORT, snaplen):
        if not vector.valid:
            continue
        header_captured = snaplen >= tng_offset + 24
        assert (decoded_value(frame, "tng.connection_id", 0) == vector.fields["connection_id"]) == header_captured
        if header_captured:
            assert decoded_value(frame, "tng.rate_hint", 0) == vector.fields["rate_hint"], vector.name
