"""The controller end to end against BMv2: `tngctl serve` and `tngctl` as processes, the switch read back over
P4Runtime, packets injected and captured on its ports. Skipped when the P4 toolchain is absent."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import finsy as fy
import grpc
import pytest
from finsy.proto import p4r
from p4runtime_recorder import P4RuntimeRecorder
from packet_ports import PacketPorts
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from tng_controller.switch_config import DEFAULT_P4INFO
from tng_controller.testbed import (
    SWITCH_FOUND_WITHIN_S,
    ControllerProcess,
    SwitchReader,
    controller_config,
    tngctl,
    wait_until_connected,
)
from tng_p4 import toolchain
from tng_p4.bmv2 import Bmv2, nanomsg_config

TOOLCHAIN = toolchain.detect()
SKIP_REASON = TOOLCHAIN.skip_reason("bmv2")
pytestmark = [pytest.mark.needs_bmv2, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]

# The LWIP switch: the server network behind the core port, the UE network behind an LTE and a Wi-Fi link.
CORE_PORT, LTE_PORT, WIFI_PORT = 1, 2, 3
PORT_MACS = {CORE_PORT: "02:00:00:00:00:01", LTE_PORT: "02:00:00:00:00:02", WIFI_PORT: "02:00:00:00:00:03"}
SERVER_NET, SERVER_MAC = "10.0.1.0/24", "02:00:00:00:01:01"
UE_NET, UE_LTE_MAC, UE_WIFI_MAC = "10.0.2.0/24", "02:00:00:00:02:01", "02:00:00:00:03:01"
UE_NET_TERNARY = (int(IPv4Network(UE_NET).network_address), int(IPv4Network(UE_NET).netmask))
TOPOLOGY = f"""
[[switch.port]]
port = {CORE_PORT}
role = "core"
mac = "{PORT_MACS[CORE_PORT]}"
[[switch.port]]
port = {LTE_PORT}
role = "lte"
mac = "{PORT_MACS[LTE_PORT]}"
capacity = "20mbit"
queue = 100
[[switch.port]]
port = {WIFI_PORT}
role = "wifi"
mac = "{PORT_MACS[WIFI_PORT]}"
capacity = "50mbit"
queue = 100
[[switch.route]]
prefix = "{SERVER_NET}"
port = {CORE_PORT}
dst_mac = "{SERVER_MAC}"
[[switch.route]]
prefix = "{UE_NET}"
lte = {{ port = {LTE_PORT}, dst_mac = "{UE_LTE_MAC}" }}
wifi = {{ port = {WIFI_PORT}, dst_mac = "{UE_WIFI_MAC}" }}
"""

SERVER_IP, UE_IP = "10.0.1.10", "10.0.2.7"
FIRST_SOURCE_PORT = 20000
GAME_PORT = 5000
POLICIES = f"""
[[policy]]
name = "game"
match = {{ priority = 10, dst_prefix = "{UE_NET}", ip_protocol = 17, dst_port = {{ value = {GAME_PORT}, mask = 0xFFFF }} }}
switch_policy = {{ aggregation = "AGGREGATION_IN_NETWORK", steering = "STEERING_MODE_WIFI_ONLY", backpressure = {{ ecn_threshold_us = 5000 }} }}
host_policy = {{ congestion_control = "copa" }}

[[policy]]
name = "bulk"
match = {{ priority = 5, dst_prefix = "{UE_NET}", ip_protocol = 6 }}
switch_policy = {{ aggregation = "AGGREGATION_IN_NETWORK", steering = "STEERING_MODE_WEIGHTED", lte_weight = 1, wifi_weight = 3 }}
host_policy = {{ congestion_control = "cubic" }}
"""  # noqa: E501 (one policy per table, as in the host agents' policy files)
FLOW_POLICY = "ingress.classify.flow_policy"
STEERING_MODES = "ingress.steering.modes"
THRESHOLDS = "egress.backpressure.thresholds"
POLICY_TABLES = (
    FLOW_POLICY,
    "ingress.classify.connection_policy",
    STEERING_MODES,
    "ingress.visible.params",
    THRESHOLDS,
)
POLICY_PACKETS = "ingress.classify.policy_packets"
NEVER_US = 0xFFFFFFFF
FLOWS = 16  # UDP flows of the game: under flow-hash steering they spread over both links
# Typically the restore takes 1.1-1.2 s, mostly gRPC's first 1 s reconnect delay. A switch slow to come back (a
# loaded machine) waits for a later attempt: CI runs at load took 5, 10.0, 14.0 and 17.0 s. The limit is the
# documented bound, the switch found within SWITCH_FOUND_WITHIN_S of listening, plus 4 s for pipeline push and sync.
RESTORE_LIMIT_S = SWITCH_FOUND_WITHIN_S + 4.0
# finsy waits 10 s before reconnecting to a switch whose connection ended within 2 s of its start (a crash loop).
IN_SERVICE_S = 2.5


@dataclass
class Lab:
    """One BMv2 switch and a controller serving it (through the recorder when there is one)."""

    bmv2: Bmv2
    controller: ControllerProcess
    reader: SwitchReader
    recorder: P4RuntimeRecorder | None
    policies: Path
    connected_at: float = 0.0  # time.monotonic() when the controller last reported the switch in sync

    @property
    def api(self) -> str:
        return self.controller.address

    def tngctl(self, *args: str) -> str:
        """Runs tngctl and returns its standard output; fails the test when it fails."""
        done = tngctl(self.api, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start_controller(self) -> None:
        """Starts the controller on the lab's store and waits until it has synced the switch."""
        self.controller.start()
        wait_until_connected(self.api)
        self.connected_at = time.monotonic()


@pytest.fixture
def start_lab(tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    """Starts BMv2 and a controller with the LWIP topology (and `extra_config`, top-level TOML tables);
    `recorded=True` puts a P4RuntimeRecorder between them."""
    started: list[Lab] = []

    def start(recorded: bool = False, extra_config: str = "") -> Lab:
        assert TOOLCHAIN.simple_switch_grpc.path is not None
        directory = tmp_path / f"lab{len(started)}"  # sockets, logs, the store and the files tngctl reads
        directory.mkdir()
        bmv2 = Bmv2(nanomsg_config(TOOLCHAIN.simple_switch_grpc.path, directory))
        bmv2.start()
        recorder = P4RuntimeRecorder(bmv2.config.grpc_address) if recorded else None
        config = directory / "controller.toml"
        address = recorder.address if recorder else None
        config.write_text(controller_config(bmv2, directory / "policies.db", TOPOLOGY, address) + extra_config)
        lab = Lab(
            bmv2=bmv2,
            controller=ControllerProcess(config, directory / "controller.log"),
            reader=SwitchReader(bmv2.config.grpc_address, DEFAULT_P4INFO),
            recorder=recorder,
            policies=directory / "policies.toml",
        )
        started.append(lab)
        lab.policies.write_text(POLICIES)
        lab.start_controller()
        return lab

    yield start
    for lab in started:
        lab.controller.stop()
        if lab.recorder:
            lab.recorder.close()
        lab.reader.close()
        lab.bmv2.stop()


def send_flows(ports: PacketPorts, dst_port: int, flows: int = FLOWS) -> None:
    """One packet of each of `flows` UDP flows from the server to `dst_port` of a UE, into the core port."""
    for flow in range(flows):
        frame = (
            Ether(dst=PORT_MACS[CORE_PORT], src=SERVER_MAC)
            / IP(src=SERVER_IP, dst=UE_IP, ttl=64)
            / UDP(sport=FIRST_SOURCE_PORT + flow, dport=dst_port)
            / (b"tng!" * 16)
        )
        ports.send(CORE_PORT, bytes(frame))


def routed_to_ue(ports: PacketPorts, flows: int = FLOWS) -> Counter[int]:
    """Captures the packets of `send_flows` and returns how many left on each port, after checking each was routed
    to the UE: destination MAC of the link's next hop, source MAC of the port, TTL decremented."""
    received = ports.receive()
    next_hops = {LTE_PORT: UE_LTE_MAC, WIFI_PORT: UE_WIFI_MAC}
    for port, frame in received:
        packet = Ether(frame)
        assert port in next_hops, f"a packet left on port {port}"
        assert (packet.dst, packet.src, packet[IP].ttl) == (next_hops[port], PORT_MACS[port], 63)
    assert len(received) == flows, f"{len(received)} of {flows} packets came out"
    return Counter(port for port, _ in received)


def burst(bmv2: Bmv2, dst_port: int = GAME_PORT) -> Counter[int]:
    """Sends one packet of each flow to `dst_port` and returns how many left on each port (see routed_to_ue)."""
    with PacketPorts(bmv2.config.packet_socket, [CORE_PORT, LTE_PORT, WIFI_PORT]) as ports:
        send_flows(ports, dst_port)
        return routed_to_ue(ports)


def policy_ids(reader: SwitchReader) -> dict[int, int]:
    """dst_port value -> policy id of the switch's flow_policy entries (the game and bulk policies differ there)."""
    ids = {}
    for entry in reader.entries(FLOW_POLICY):
        assert entry.match is not None and isinstance(entry.action, fy.P4TableAction)
        dst_port = entry.match.get("dst_port")
        ids[dst_port[0] if isinstance(dst_port, tuple) else 0] = int(entry.action.args["policy"])
    return ids


def test_policy_set_installs_entries_that_steer_packets(start_lab) -> None:
    lab = start_lab()
    before = burst(lab.bmv2)
    assert set(before) == {LTE_PORT, WIFI_PORT}, f"flow hashing uses both links: {before}"

    out = lab.tngctl("policy", "set", str(lab.policies))
    assert out.splitlines() == ["game: revision 1, written to lwip", "bulk: revision 2, written to lwip"]
    ids = policy_ids(lab.reader)
    game, bulk = ids[GAME_PORT], ids[0]
    assert lab.reader.entry_messages(*POLICY_TABLES) == lab.reader.encode(
        fy.P4TableEntry(
            FLOW_POLICY,
            match=fy.Match(dst_addr=UE_NET_TERNARY, protocol=(17, 0xFF), dst_port=(GAME_PORT, 0xFFFF)),
            action=fy.Action("ingress.classify.set_policy", policy=game),
            priority=11,
        ),
        fy.P4TableEntry(
            FLOW_POLICY,
            match=fy.Match(dst_addr=UE_NET_TERNARY, protocol=(6, 0xFF)),
            action=fy.Action("ingress.classify.set_policy", policy=bulk),
            priority=6,
        ),
        fy.P4TableEntry(
            STEERING_MODES, match=fy.Match(policy=game), action=fy.Action("ingress.steering.steer_wifi_only")
        ),
        fy.P4TableEntry(
            STEERING_MODES,
            match=fy.Match(policy=bulk),
            action=fy.Action("ingress.steering.steer_weighted", lte_weight=1, wifi_weight=3),
        ),
        fy.P4TableEntry(
            THRESHOLDS,
            match=fy.Match(policy=game),
            action=fy.Action("egress.backpressure.set_thresholds", feedback_min_us=NEVER_US, ecn_mark_us=5000),
        ),
    )
    counted = lab.reader.counter(POLICY_PACKETS)[game][0]
    assert burst(lab.bmv2) == {WIFI_PORT: FLOWS}
    assert lab.reader.counter(POLICY_PACKETS)[game][0] == counted + FLOWS

    lab.policies.write_text(POLICIES.replace("STEERING_MODE_WIFI_ONLY", "STEERING_MODE_LTE_ONLY"))
    lab.tngctl("policy", "set", str(lab.policies))
    assert burst(lab.bmv2) == {LTE_PORT: FLOWS}

    assert lab.tngctl("policy", "rm", "game") == "game: deleted\n"
    assert policy_ids(lab.reader) == {0: bulk}
    assert burst(lab.bmv2) == before


def test_controller_restart_keeps_policies_and_writes_nothing(start_lab) -> None:
    lab = start_lab(recorded=True)
    lab.tngctl("policy", "set", str(lab.policies))
    policies = lab.tngctl("--json", "policy", "ls")
    entries, cookie = lab.reader.entry_messages(), lab.reader.pipeline_cookie()
    # The topology (roles, MACs, capacities, routes), the LWIP route's link state, the policies.
    assert len(entries) == 9 + 1 + 5 and cookie

    lab.controller.kill()
    lab.recorder.clear()
    lab.start_controller()
    time.sleep(1.0)  # room for any late write to show up

    assert lab.tngctl("--json", "policy", "ls") == policies
    assert (lab.reader.entry_messages(), lab.reader.pipeline_cookie()) == (entries, cookie)
    assert (lab.recorder.pipeline_pushes, dict(lab.recorder.updates)) == (0, {})

    lab.tngctl("policy", "rm", "bulk")  # the restarted controller knows what is installed: it deletes, nothing else
    assert dict(lab.recorder.updates) == {("table_entry", "DELETE"): 2}
    assert json.loads(lab.tngctl("--json", "policy", "ls"))[0]["name"] == "game"


def test_switch_restart_gets_pipeline_and_entries_back(start_lab) -> None:
    lab = start_lab()
    lab.tngctl("policy", "set", str(lab.policies))
    entries, cookie = lab.reader.entry_messages(), lab.reader.pipeline_cookie()
    time.sleep(max(0.0, lab.connected_at + IN_SERVICE_S - time.monotonic()))

    lab.bmv2.kill()
    lab.bmv2.start()  # same gRPC, Thrift and packet ports, no pipeline, no entries
    restarted = time.monotonic()
    reader = SwitchReader(
        lab.bmv2.config.grpc_address, DEFAULT_P4INFO
    )  # a new channel: the old one backs off from the dead switch
    try:
        while (reader.pipeline_cookie(), _entries_or_none(reader)) != (cookie, entries):
            took = time.monotonic() - restarted
            assert took < RESTORE_LIMIT_S, f"the switch was not restored within {RESTORE_LIMIT_S:.0f} s"
            time.sleep(0.02)
    finally:
        reader.close()
    assert burst(lab.bmv2) == {WIFI_PORT: FLOWS}


def _entries_or_none(reader: SwitchReader) -> list[p4r.TableEntry] | None:
    try:
        return reader.entry_messages()
    except grpc.RpcError:  # no pipeline yet: FAILED_PRECONDITION
        return None


VIDEO_PORT = 6000
TRAFFIC_CLASSES = f"""
[[traffic_class]]
name = "video"
protocol = 17
dst_port = {VIDEO_PORT}
"""
VIDEO_POLICY = """
[[policy]]
name = "video"
match = { traffic_class = "video" }
switch_policy = { aggregation = "AGGREGATION_IN_NETWORK", steering = "STEERING_MODE_WIFI_ONLY" }
"""
CLASSIFY_LIMIT_S = 1.0  # one tick of the controller's control loops (monitor interval_s)


def test_new_flow_digest_gives_the_flow_its_class_policy(start_lab) -> None:
    lab = start_lab(extra_config=TRAFFIC_CLASSES)
    lab.policies.write_text(VIDEO_POLICY)
    lab.tngctl("policy", "set", str(lab.policies))
    assert lab.reader.entries(FLOW_POLICY) == []  # switches do not see classes: nothing to match on yet
    (steering,) = lab.reader.entries(STEERING_MODES)
    video = int(steering.match["policy"])

    classified = lab.reader.encode(
        *(
            fy.P4TableEntry(
                FLOW_POLICY,
                match=fy.Match(
                    src_addr=(int(IPv4Address(SERVER_IP)), 0xFFFFFFFF),
                    dst_addr=(int(IPv4Address(UE_IP)), 0xFFFFFFFF),
                    protocol=(17, 0xFF),
                    src_port=(FIRST_SOURCE_PORT + flow, 0xFFFF),
                    dst_port=(VIDEO_PORT, 0xFFFF),
                ),
                action=fy.Action("ingress.classify.set_policy", policy=video),
                priority=1,
            )
            for flow in range(FLOWS)
        )
    )
    with PacketPorts(lab.bmv2.config.packet_socket, [CORE_PORT, LTE_PORT, WIFI_PORT]) as ports:
        send_flows(ports, VIDEO_PORT)  # each flow's first packet: the default policy (flow hash), and a digest
        sent = time.monotonic()
        while lab.reader.entry_messages(FLOW_POLICY) != classified:
            assert time.monotonic() - sent < CLASSIFY_LIMIT_S, "the new flows did not get the video policy in time"
            time.sleep(0.02)
        first = routed_to_ue(ports)
    assert set(first) == {LTE_PORT, WIFI_PORT}, f"the first packets were flow-hashed over both links: {first}"

    counted = lab.reader.counter(POLICY_PACKETS).get(video, (0, 0))[0]
    assert burst(lab.bmv2, VIDEO_PORT) == {WIFI_PORT: FLOWS}
    assert lab.reader.counter(POLICY_PACKETS)[video][0] == counted + FLOWS

    burst(lab.bmv2, VIDEO_PORT + 1)  # flows of no class: digested too, and left to the default policy
    time.sleep(CLASSIFY_LIMIT_S)
    assert lab.reader.entry_messages(FLOW_POLICY) == classified
