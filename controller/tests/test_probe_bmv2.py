"""The link prober end to end against BMv2: the controller's probes leave by packet-out on the LTE and the Wi-Fi port,
a fake UE on those ports answers LTE probes 30 ms later than Wi-Fi ones (over Wi-Fi, as the lab's UE does), the
switch punts the answers to the controller, and the controller writes ingress.steering.link_state with d = 30 ms and
derives the lowest-rtt spill depth and the VISIBLE hold budget from it. Skipped when the P4 toolchain is absent."""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path

import grpc
import pytest
from packet_ports import PacketPorts
from scapy.layers.inet import ICMP, IP
from scapy.layers.l2 import Ether
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.switch_config import DEFAULT_P4INFO
from tng_controller.testbed import ControllerProcess, SwitchReader, controller_config, wait_until_connected
from tng_p4 import toolchain
from tng_p4.bmv2 import Bmv2, nanomsg_config

TOOLCHAIN = toolchain.detect()
SKIP_REASON = TOOLCHAIN.skip_reason("bmv2")
pytestmark = [pytest.mark.needs_bmv2, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]

CORE_PORT, LTE_PORT, WIFI_PORT = 1, 2, 3
LTE_MAC, WIFI_MAC = "02:00:00:00:00:02", "02:00:00:00:00:03"
UE_LTE_MAC, UE_WIFI_MAC = "02:00:00:00:02:01", "02:00:00:00:03:01"
SWITCH_ADDRESS, UE_ADDRESS = "10.0.1.254", "10.0.2.7"
LTE_EXTRA_S = 0.030  # the UE answers LTE probes this much later than Wi-Fi ones: d = 30 ms
# Every answer leaves this long after its probe arrived, so that the fake UE's own work (Scapy, a few ms) delays the
# answers of both links alike.
ANSWER_AFTER_S = 0.010
TOLERANCE_US = 5_000
LTE_PACKET_US, WIFI_PACKET_US = 600, 240  # 1500 bytes at 20 and 50 Mbit/s
SWITCH = f"""
probe_source = "{SWITCH_ADDRESS}"
[[switch.port]]
port = {CORE_PORT}
mac = "02:00:00:00:00:01"
[[switch.port]]
port = {LTE_PORT}
role = "lte"
mac = "{LTE_MAC}"
capacity = "20mbit"
[[switch.port]]
port = {WIFI_PORT}
role = "wifi"
mac = "{WIFI_MAC}"
capacity = "50mbit"
[[switch.route]]
prefix = "10.0.1.0/24"
port = {CORE_PORT}
dst_mac = "02:00:00:00:01:01"
[[switch.route]]
prefix = "10.0.2.0/24"
lte = {{ port = {LTE_PORT}, dst_mac = "{UE_LTE_MAC}" }}
wifi = {{ port = {WIFI_PORT}, dst_mac = "{UE_WIFI_MAC}" }}
probe = "{UE_ADDRESS}"
"""
TOP_LEVEL = """
[monitor]
interval_s = 0.2
rewrite_interval_s = 0.2
probe_interval_s = 0.05
probe_window_s = 10.0
"""


@dataclass
class FakeUe:
    """A UE behind the switch's LTE and Wi-Fi ports: answers every echo request to its address over Wi-Fi,
    `ANSWER_AFTER_S` after it arrived, those that came over LTE `LTE_EXTRA_S` later. Runs on its own thread until
    stopped."""

    ports: PacketPorts
    answered: dict[int, int] = field(default_factory=lambda: {LTE_PORT: 0, WIFI_PORT: 0})
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fake-ue", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        due: list[tuple[float, int, bytes]] = []  # (when, tie-breaker, frame into the Wi-Fi port)
        while not self._stop.is_set():
            # Every frame waiting is stamped before any is parsed: parsing one must not delay the next one's stamp.
            arrived = []
            frame = self.ports.receive_frame()
            while frame is not None:
                arrived.append((time.monotonic(), *frame))
                frame = self.ports.receive_frame()
            for at, port, data in arrived:
                reply = self._reply(port, data)
                if reply is not None:
                    delay = ANSWER_AFTER_S + (LTE_EXTRA_S if port == LTE_PORT else 0.0)
                    heapq.heappush(due, (at + delay, sum(self.answered.values()), reply))
                    self.answered[port] += 1
            while due and due[0][0] <= time.monotonic():
                self.ports.send(WIFI_PORT, heapq.heappop(due)[2])

    @staticmethod
    def _reply(port: int, frame: bytes) -> bytes | None:
        packet = Ether(frame)
        expected_mac = {LTE_PORT: UE_LTE_MAC, WIFI_PORT: UE_WIFI_MAC}.get(port)
        if packet.dst != expected_mac or ICMP not in packet or packet[ICMP].type != 8 or packet[IP].dst != UE_ADDRESS:
            return None
        reply = (
            Ether(src=UE_WIFI_MAC, dst=WIFI_MAC)
            / IP(src=UE_ADDRESS, dst=packet[IP].src)
            / ICMP(type=0, id=packet[ICMP].id, seq=packet[ICMP].seq)
            / bytes(packet[ICMP].payload)
        )
        return bytes(reply)


@dataclass
class Lab:
    bmv2: Bmv2
    controller: ControllerProcess
    reader: SwitchReader
    stub: pb_grpc.PolicyServiceStub
    ue: FakeUe

    def link_state(self) -> pb.RouteLinkState:
        (switch,) = self.stub.ListSwitches(pb.ListSwitchesRequest(), timeout=5).switches
        (route,) = switch.link_states
        return route

    def written(self) -> dict[str, int] | None:
        """The args of the route's link_state entry on the switch, None before it has one."""
        entries = self.reader.entries("ingress.steering.link_state")
        if not entries:
            return None
        (entry,) = entries
        assert entry.match is not None and int(entry.match["lte_port"]) == LTE_PORT
        return {name: int(value) for name, value in entry.action.args.items()}  # type: ignore[union-attr]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    assert TOOLCHAIN.simple_switch_grpc.path is not None
    bmv2 = Bmv2(nanomsg_config(TOOLCHAIN.simple_switch_grpc.path, tmp_path))
    bmv2.start()
    config = tmp_path / "controller.toml"
    config.write_text(TOP_LEVEL + controller_config(bmv2, tmp_path / "policies.db", SWITCH))
    controller = ControllerProcess(config, tmp_path / "controller.log")
    reader = SwitchReader(bmv2.config.grpc_address, DEFAULT_P4INFO)
    ports = PacketPorts(bmv2.config.packet_socket, [CORE_PORT, LTE_PORT, WIFI_PORT], recv_timeout_ms=1)
    ue = FakeUe(ports)
    try:
        ue.start()
        controller.start()
        wait_until_connected(controller.address)
        with grpc.insecure_channel(controller.address) as channel:
            yield Lab(bmv2, controller, reader, pb_grpc.PolicyServiceStub(channel), ue)
    finally:
        ue.stop()
        ports.close()
        controller.stop()
        reader.close()
        bmv2.stop()


def until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def test_probes_measure_a_30_ms_difference_and_the_controller_derives_from_it(lab: Lab) -> None:
    routes = lab.reader.entries("ingress.forwarding.routes")  # decoded: action names are aliases
    own = (int(IPv4Address(SWITCH_ADDRESS)), 32)
    assert [e.action.name for e in routes if e.match and e.match["dst_addr"] == own] == ["punt"]  # type: ignore[union-attr]
    # From the capacities, before anything is measured.
    until(lambda: lab.written() is not None, 5, "a link_state entry from the configured capacities")
    written = lab.written()
    assert written is not None
    assert (written["lte_packet_us"], written["wifi_packet_us"]) == (LTE_PACKET_US, WIFI_PACKET_US)

    until(lambda: (lab.written() or {}).get("lte_delay_us", 0) > 0, 10, "the measured delay difference written")
    time.sleep(1.0)  # more probes: the minimum settles
    route = lab.link_state()
    assert route.delay_measured, route.delay_state
    assert route.delay_state == "both links' probes answered on wifi"
    assert route.delay_difference_us == pytest.approx(LTE_EXTRA_S * 1e6, abs=TOLERANCE_US)
    assert {(r.sent_on, r.answered_on) for r in route.rtts} == {("lte", "wifi"), ("wifi", "wifi")}
    written = lab.written()
    assert written is not None
    assert written["lte_delay_us"] == pytest.approx(LTE_EXTRA_S * 1e6, abs=TOLERANCE_US)
    assert written["wifi_delay_us"] == 0
    assert (route.lte_delay_us, route.wifi_delay_us) == (written["lte_delay_us"], 0)
    assert route.probes_sent >= 20 and lab.ue.answered[LTE_PORT] >= 10 and lab.ue.answered[WIFI_PORT] >= 10

    d = route.lte_delay_us
    assert route.preferred_link == "wifi"
    assert route.spill_depth_packets == math.ceil(d / WIFI_PACKET_US) + 1
    assert route.hold_budget_us == d + 4 * LTE_PACKET_US

    policy = pb.Policy(
        name="steered",
        match=pb.Match(dst_prefix="10.0.2.0/24", ip_protocol=6),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_IN_NETWORK,
            steering=pb.STEERING_MODE_LOWEST_RTT_FIRST,
            visible=pb.Visible(enabled=True),
        ),
    )
    lab.stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=10)
    route = lab.link_state()  # the values written with the policy (the band keeps them from moving by noise)
    (steering,) = lab.reader.entries("ingress.steering.modes")
    assert steering.action.args == {  # type: ignore[union-attr]
        "preferred_link": 1,
        "spill_depth": route.spill_depth_packets,
    }
    assert route.spill_depth_packets == pytest.approx(30_000 / WIFI_PACKET_US + 2, abs=TOLERANCE_US / WIFI_PACKET_US)
    (visible,) = lab.reader.entries("ingress.visible.params")
    assert visible.action.args["hold_budget_us"] == route.hold_budget_us  # type: ignore[union-attr]

    policy.switch_policy.steering = pb.STEERING_MODE_EARLIEST_ARRIVAL
    lab.stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=10)
    (steering,) = lab.reader.entries("ingress.steering.modes")
    assert steering.action.name == "steer_earliest_arrival"  # type: ignore[union-attr]
