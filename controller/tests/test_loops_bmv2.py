"""The controller's switch-facing loops against BMv2: topology and BMv2 queues on every (re)connect, the VISIBLE
helper's status, new-flow digests giving a flow its class's policy, and the link monitor's rate estimates. Skipped
when the P4 toolchain is absent."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import finsy as fy
import grpc
import pytest
from packet_ports import PacketPorts
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.switch_config import DEFAULT_P4INFO
from tng_controller.testbed import (
    SWITCH_FOUND_WITHIN_S,
    ControllerProcess,
    SwitchReader,
    controller_config,
    wait_until_connected,
)
from tng_p4 import toolchain
from tng_p4.bmv2 import Bmv2, nanomsg_config

TOOLCHAIN = toolchain.detect()
SKIP_REASON = TOOLCHAIN.skip_reason("bmv2")
pytestmark = [pytest.mark.needs_bmv2, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]

CORE_PORT, LTE_PORT, WIFI_PORT = 1, 2, 3
UE_LTE_MAC, UE_WIFI_MAC = "02:00:00:00:02:01", "02:00:00:00:03:01"
GAME_PORT = 5000
SWITCH = f"""
[[switch.port]]
port = {CORE_PORT}
mac = "02:00:00:00:00:01"
[[switch.port]]
port = {LTE_PORT}
role = "lte"
capacity = "12mbit"
queue = 64
[[switch.port]]
port = {WIFI_PORT}
role = "wifi"
capacity = "36mbit"
[[switch.route]]
prefix = "10.0.1.0/24"
port = {CORE_PORT}
dst_mac = "02:00:00:00:01:01"
[[switch.route]]
prefix = "10.0.2.0/24"
lte = {{ port = {LTE_PORT}, dst_mac = "{UE_LTE_MAC}" }}
wifi = {{ port = {WIFI_PORT}, dst_mac = "{UE_WIFI_MAC}" }}
[switch.helper]
attach = "cpu"
probe_interval_s = 0.2
"""
TOP_LEVEL = f"""
[[traffic_class]]
name = "game"
protocol = 17
dst_port = {GAME_PORT}
[monitor]
interval_s = 0.2
rewrite_interval_s = 0.2
"""
# A restarted switch is usually found on gRPC's 1 s or 2.6 s reconnect attempt; a slow one (seen in CI: 5.04 s)
# later, within the documented SWITCH_FOUND_WITHIN_S, plus 4 s for pipeline push and sync.
RESTORE_LIMIT_S = SWITCH_FOUND_WITHIN_S + 4.0


@dataclass
class Lab:
    bmv2: Bmv2
    controller: ControllerProcess
    reader: SwitchReader
    stub: pb_grpc.PolicyServiceStub

    def switch_status(self) -> pb.SwitchStatus:
        return self.stub.ListSwitches(pb.ListSwitchesRequest(), timeout=5).switches[0]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    assert TOOLCHAIN.simple_switch_grpc.path is not None
    bmv2 = Bmv2(nanomsg_config(TOOLCHAIN.simple_switch_grpc.path, tmp_path))
    bmv2.start()
    config = tmp_path / "controller.toml"
    # The [[switch]] table ends where the top-level tables begin, so they come first.
    config.write_text(TOP_LEVEL + controller_config(bmv2, tmp_path / "policies.db", SWITCH))
    controller = ControllerProcess(config, tmp_path / "controller.log")
    reader = SwitchReader(bmv2.config.grpc_address, DEFAULT_P4INFO)
    try:
        controller.start()
        wait_until_connected(controller.address)
        with grpc.insecure_channel(controller.address) as channel:
            yield Lab(bmv2, controller, reader, pb_grpc.PolicyServiceStub(channel))
    finally:
        controller.stop()
        reader.close()
        bmv2.stop()


def until(condition: Callable[[], object], timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)
    return time.monotonic() - start


def topology_tables(reader: SwitchReader) -> dict[str, int]:
    tables = ("ingress.port_role", "ingress.forwarding.routes", "egress.port_mac", "egress.backpressure.port_capacity")
    return {table.rsplit(".", 1)[1]: len(reader.entry_messages(table)) for table in tables}


def test_topology_queues_and_helper_come_back_after_a_bmv2_restart(lab: Lab) -> None:
    expected = {"port_role": 2, "routes": 2, "port_mac": 1, "port_capacity": 2}
    assert topology_tables(lab.reader) == expected
    until(lambda: lab.switch_status().helper == "up (epoch 1)", 5, "helper up")
    queues = f"set_queue_rate 1000 {LTE_PORT}; set_queue_depth 64 {LTE_PORT}; set_queue_rate 3000 {WIFI_PORT}"
    until(lambda: queues in lab.controller.log_path.read_text(), 5, "BMv2 queue rates over Thrift")

    time.sleep(2.0)  # finsy waits 10 s before reconnecting to a switch whose session lasted less than 2 s
    lab.bmv2.kill()
    until(lambda: lab.switch_status().state != "CONNECTED", 5, "the controller notices")
    lab.bmv2.start()
    took = until(lambda: lab.switch_status().state == "CONNECTED", RESTORE_LIMIT_S, "reconnect and sync")
    assert topology_tables(lab.reader) == expected
    until(lambda: lab.switch_status().helper == "up (epoch 2)", 2, "helper up with a new epoch")
    assert took < RESTORE_LIMIT_S


def game_packet(source_port: int) -> bytes:
    frame = (
        Ether(dst="02:00:00:00:00:01") / IP(src="10.0.1.10", dst="10.0.2.7") / UDP(sport=source_port, dport=GAME_PORT)
    )
    return bytes(frame / (b"g" * 100))


def test_a_new_flow_of_a_class_gets_its_policy_from_the_digest(lab: Lab) -> None:
    policy = pb.Policy(
        name="game",
        match=pb.Match(traffic_class="game"),
        switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK, steering=pb.STEERING_MODE_WIFI_ONLY),
    )
    lab.stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=10)
    ports = PacketPorts(lab.bmv2.config.packet_socket, [CORE_PORT, LTE_PORT, WIFI_PORT])
    try:
        start = time.monotonic()
        ports.send(CORE_PORT, game_packet(40000))
        flow = fy.P4TableEntry(
            "ingress.classify.flow_policy",
            match=fy.Match(
                src_addr=("10.0.1.10", 0xFFFFFFFF),
                dst_addr=("10.0.2.7", 0xFFFFFFFF),
                protocol=(17, 0xFF),
                src_port=(40000, 0xFFFF),
                dst_port=(GAME_PORT, 0xFFFF),
            ),
            priority=1,
        )
        until(lambda: lab.reader.entry(flow) is not None, 2, "the flow's entry")
        installed_after = time.monotonic() - start
        assert lab.switch_status().classified_flows == 1
        ports.receive(quiet_s=0.2)
        for _ in range(20):
            ports.send(CORE_PORT, game_packet(40000))
        assert {port for port, _ in ports.receive()} == {WIFI_PORT}
    finally:
        ports.close()
    assert installed_after < 1.0


def test_the_link_monitor_estimates_the_links_and_writes_the_qdepl_share(lab: Lab) -> None:
    status = lab.switch_status()
    assert status.qdepl_lte_share == pytest.approx(0.25)  # 12 and 36 Mbit/s, until measured
    rates = {p.port: p.rate_estimate_bps for p in lab.stub.GetStats(pb.GetStatsRequest(), timeout=5).ports}
    assert (rates[LTE_PORT], rates[WIFI_PORT]) == (12e6, 36e6)
