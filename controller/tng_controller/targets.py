"""What differs per P4 target when the controller programs a switch: the pipeline's device config, and the entries
only the Tofino program has.

BMv2 is given its JSON. A Tofino switch (bf_switchd's P4Runtime server) is given a `p4.tmp.P4DeviceConfig` whose
`device_data` holds the program's name, the compiler's binary and its context.json, each behind its length (a
little-endian 32-bit integer), as open-p4studio's `p4runtime_update_config.py` builds it. The Tofino program's ingress
cannot read egress's queue registers: egress mirrors a report of each LWIP port's queueing time to the recirculation
port (mirror session 2, truncated) and steering stores it per LWIP pair (docs/tofino.md), which the entries below set
up from the switch's routes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import finsy as fy

from tng_controller.switch_config import SwitchConfig, TofinoConfig

PROGRAM_NAME = "tng"
QUEUE_REPORTS = "egress.report_queue_delay.queue_reports"
QUEUE_REPORT_LINKS = "ingress.steering.queue_report_links"
TOFINO_TABLES = (QUEUE_REPORTS, QUEUE_REPORT_LINKS)
QUEUE_REPORT_SESSION = 2  # QUEUE_REPORT_SESSION of p4src/tna/header.p4
RECIRCULATION_PORT = 68  # Tofino 1, pipe 0
QUEUE_REPORT_BYTES = 64  # the report and the start of the packet behind it
TOFINO_TIME_UNIT_NS = 256  # the TNA program's times: bits 39:8 of global_tstamp
_DEVICE_DATA_FIELD = 3  # P4DeviceConfig.device_data (p4/tmp/p4config.proto)


def pipeline_blob(config: SwitchConfig) -> Path | bytes:
    """The p4_device_config of SetForwardingPipelineConfig: BMv2's JSON, or Tofino's device config (read now, so that
    a missing file is named when the controller starts)."""
    if config.tofino is None:
        return config.bmv2_json
    return tofino_device_config(PROGRAM_NAME, _read(config.tofino.binary), _read(config.tofino.context))


def tofino_device_config(name: str, binary: bytes, context: bytes) -> bytes:
    """A serialized P4DeviceConfig with only device_data set, as bf_switchd reads it."""
    device_data = b"".join(struct.pack("<i", len(part)) + part for part in (name.encode(), binary, context))
    return _varint(_DEVICE_DATA_FIELD << 3 | 2) + _varint(len(device_data)) + device_data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path} for the Tofino pipeline: {exc.strerror or exc}") from exc


def queue_report_interval(tofino: TofinoConfig) -> int:
    """`report_every`'s interval in the program's 256 ns units (at least 1)."""
    return max(1, round(tofino.queue_report_interval_us * 1000 / TOFINO_TIME_UNIT_NS))


def queue_report_entries(config: SwitchConfig) -> Iterator[fy.P4TableEntry]:
    """For every LWIP pair of the switch's routes: both ports report their queueing time, and a report from either is
    stored under the pair's LTE port. Nothing for BMv2 (its ingress reads egress's registers)."""
    if config.tofino is None:
        return
    interval = queue_report_interval(config.tofino)
    links: dict[int, tuple[str, int]] = {}  # reporting port -> (action, the pair's LTE port)
    for route in config.routes:
        if route.lte is None or route.wifi is None:
            continue
        for port, action in (
            (route.lte.port, "ingress.steering.report_lte_of"),
            (route.wifi.port, "ingress.steering.report_wifi_of"),
        ):
            known = links.setdefault(port, (action, route.lte.port))
            if known != (action, route.lte.port):
                raise ValueError(
                    f"switch {config.name}: port {port} is in two LWIP pairs (route {route.prefix}); a Tofino switch "
                    "stores one queueing time per port"
                )
    for port in sorted(links):
        yield fy.P4TableEntry(
            QUEUE_REPORTS,
            match=fy.Match(egress_port=port),
            action=fy.Action("egress.report_queue_delay.report_every", interval_us=interval),
        )
    for port, (action, lte_port) in sorted(links.items()):
        yield fy.P4TableEntry(
            QUEUE_REPORT_LINKS, match=fy.Match(port=port), action=fy.Action(action, lte_port=lte_port)
        )


def queue_report_session() -> fy.P4CloneSessionEntry:
    """Mirror session 2: queue reports to the recirculation port, truncated to the report and a little more."""
    return fy.P4CloneSessionEntry(
        QUEUE_REPORT_SESSION, packet_length_bytes=QUEUE_REPORT_BYTES, replicas=[(RECIRCULATION_PORT, 1)]
    )
