"""Programming a Tofino switch: its [switch.tofino] configuration, the device config bf_switchd is given, and the
queue-report entries of the Tofino program, encoded against its committed P4Info."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import finsy as fy
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tng_controller import daemon, targets
from tng_controller.config import ConfigError, parse
from tng_controller.switch_config import DEFAULT_BMV2_JSON, DEFAULT_TNA_CONTEXT, DEFAULT_TNA_P4INFO
from tng_controller.topology import TOPOLOGY_TABLES, topology_entries, topology_tables

MAC = "02:00:00:00:00:01"
LWIP_SWITCH = {
    "name": "lwip",
    "address": "127.0.0.1:9559",
    "port": [{"port": 1, "role": "lte"}, {"port": 2, "role": "wifi"}, {"port": 3, "role": "core"}],
    "route": [
        {"prefix": "10.0.1.0/24", "lte": {"port": 1, "dst_mac": MAC}, "wifi": {"port": 2, "dst_mac": MAC}},
        {"prefix": "10.0.2.0/24", "lte": {"port": 1, "dst_mac": MAC}, "wifi": {"port": 2, "dst_mac": MAC}},
        {"prefix": "0.0.0.0/0", "port": 3, "dst_mac": MAC},
    ],
}


def switch(**extra: object) -> dict[str, object]:
    return {**LWIP_SWITCH, **extra}


def p4_device_config() -> type:
    """p4.tmp.P4DeviceConfig (p4runtime's p4/tmp/p4config.proto), built here: no installed package ships it."""
    proto = descriptor_pb2.FileDescriptorProto(name="p4config.proto", package="p4.tmp", syntax="proto3")
    message = proto.message_type.add(name="P4DeviceConfig")
    message.field.add(name="reassign", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_BOOL, label=1)
    message.field.add(name="device_data", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("p4.tmp.P4DeviceConfig"))


def test_device_config_is_what_bf_switchd_reads() -> None:
    binary, context = bytes(range(256)) * 600, b'{"tables": []}'
    config = p4_device_config().FromString(targets.tofino_device_config("tng", binary, context))
    data = config.device_data
    parts = []
    while data:
        (length,) = struct.unpack("<i", data[:4])
        parts.append(data[4 : 4 + length])
        data = data[4 + length :]
    assert parts == [b"tng", binary, context]
    assert not config.reassign


def test_a_tofino_switch_gets_the_tna_p4info_and_needs_the_binary(tmp_path: Path) -> None:
    (tofino_switch,) = parse({"switch": [switch(tofino={"binary": "tna/tofino.bin"})]}, tmp_path).switches
    assert tofino_switch.p4info == DEFAULT_TNA_P4INFO
    assert tofino_switch.tofino is not None
    assert tofino_switch.tofino.binary == tmp_path / "tna/tofino.bin"
    assert tofino_switch.tofino.context == DEFAULT_TNA_CONTEXT
    (bmv2_switch,) = parse({"switch": [switch()]}, tmp_path).switches
    assert bmv2_switch.tofino is None and targets.pipeline_blob(bmv2_switch) == DEFAULT_BMV2_JSON
    with pytest.raises(ConfigError, match=r"switch\[0\]\.tofino\.binary: is required"):
        parse({"switch": [switch(tofino={})]}, tmp_path)
    with pytest.raises(ConfigError, match=r"switch\[0\]\.thrift: is for BMv2"):
        parse({"switch": [switch(tofino={"binary": "b"}, thrift="127.0.0.1:9090")]}, tmp_path)
    with pytest.raises(ConfigError, match=r"switch\[0\]\.tofino\.queue_report_interval_us: 0 is not a positive"):
        parse({"switch": [switch(tofino={"binary": "b", "queue_report_interval_us": 0})]}, tmp_path)


def test_the_pipeline_blob_names_a_missing_binary(tmp_path: Path) -> None:
    (config,) = parse({"switch": [switch(tofino={"binary": "missing.bin"})]}, tmp_path).switches
    with pytest.raises(ValueError, match=r"cannot read .*missing\.bin for the Tofino pipeline"):
        targets.pipeline_blob(config)
    (tmp_path / "missing.bin").write_bytes(b"\x01\x02")
    blob = targets.pipeline_blob(config)
    assert isinstance(blob, bytes)
    assert p4_device_config().FromString(blob).device_data.endswith(DEFAULT_TNA_CONTEXT.read_bytes())


def test_queue_reports_of_each_lwip_pair_encode_against_the_tofino_p4info(tmp_path: Path) -> None:
    (config,) = parse({"switch": [switch(tofino={"binary": "b", "queue_report_interval_us": 50})]}, tmp_path).switches
    schema = fy.P4Schema(DEFAULT_TNA_P4INFO)
    entries = list(targets.queue_report_entries(config))
    for entry in entries:
        entry.encode(schema)  # names, keys and parameters the Tofino program has
    reports = {
        e.match["egress_port"]: e.action.args["interval_us"] for e in entries if e.table_id == targets.QUEUE_REPORTS
    }
    links = {
        e.match["port"]: (e.action.name, e.action.args["lte_port"])
        for e in entries
        if e.table_id == targets.QUEUE_REPORT_LINKS
    }
    assert reports == {1: 195, 2: 195}  # 50 us in 256 ns units
    assert links == {1: ("ingress.steering.report_lte_of", 1), 2: ("ingress.steering.report_wifi_of", 1)}
    topology = list(topology_entries(config))
    assert all(entry in topology for entry in entries)
    assert topology_tables(config) == TOPOLOGY_TABLES + targets.TOFINO_TABLES
    targets.queue_report_session().encode(schema)


def test_bmv2_has_no_queue_reports(tmp_path: Path) -> None:
    (config,) = parse({"switch": [switch()]}, tmp_path).switches
    assert list(targets.queue_report_entries(config)) == []
    assert topology_tables(config) == TOPOLOGY_TABLES


def test_a_port_in_two_lwip_pairs_is_refused(tmp_path: Path) -> None:
    routes = [
        {"prefix": "10.0.1.0/24", "lte": {"port": 1, "dst_mac": MAC}, "wifi": {"port": 2, "dst_mac": MAC}},
        {"prefix": "10.0.2.0/24", "lte": {"port": 3, "dst_mac": MAC}, "wifi": {"port": 2, "dst_mac": MAC}},
    ]
    ports = [{"port": 1, "role": "lte"}, {"port": 2, "role": "wifi"}, {"port": 3, "role": "lte"}]
    (config,) = parse({"switch": [switch(tofino={"binary": "b"}, route=routes, port=ports)]}, tmp_path).switches
    with pytest.raises(ValueError, match=r"port 2 is in two LWIP pairs \(route 10\.0\.2\.0/24\)"):
        list(targets.queue_report_entries(config))


def test_the_daemon_names_a_missing_tofino_binary_before_it_starts(tmp_path: Path) -> None:
    config = parse({"switch": [switch(tofino={"binary": "nowhere/tofino.bin"})]}, tmp_path)
    with pytest.raises(ConfigError, match=r"switch\[0\]\.tofino\.binary: .*nowhere/tofino\.bin does not exist"):
        asyncio.run(daemon.run(config))
