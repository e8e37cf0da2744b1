"""tng main pipeline vocabulary for PTF tests: an LWIP test topology, table writes by meaning, packets, Thrift.

The topology, on the switch ports PTF is attached to (swports, ascending):

    swports[0] uplink   toward the server (SERVER_IP/32)
    swports[1] LTE      toward the UE (UE_IP/32 is an LWIP next hop: LTE here, Wi-Fi below)
    swports[2] Wi-Fi
    swports[3] helper   the retransmission helper's port
    swports[4] core     another router (CORE_NET/24)
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from enum import IntEnum

import finsy as fy
import ptf.testutils as testutils
from base_test import P4RuntimeTest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.utils import checksum
from tng_p4.p4rt import CounterValue

# P4Info names of the tng program (p4src/README.md, "tng: the main pipeline").
PORT_ROLE = "ingress.port_role"
SET_PORT_ROLE = "ingress.set_port_role"
DROPS = "ingress.drops"
FORWARDED = "ingress.forwarded"
ROUTES = "ingress.forwarding.routes"
ROUTE = "ingress.forwarding.route"
ROUTE_LWIP = "ingress.forwarding.route_lwip"
PUNT = "ingress.forwarding.punt"
ROUTE_DROP = "ingress.forwarding.drop"
CONNECTION_POLICY = "ingress.classify.connection_policy"
FLOW_POLICY = "ingress.classify.flow_policy"
SET_POLICY = "ingress.classify.set_policy"
POLICY_PACKETS = "ingress.classify.policy_packets"
NEW_FLOW_DIGEST = "new_flow_digest_t"
STEERING_MODES = "ingress.steering.modes"
STEER_FLOW_HASH = "ingress.steering.steer_flow_hash"
STEER_WEIGHTED = "ingress.steering.steer_weighted"
STEER_QDEPL = "ingress.steering.steer_qdepl"
STEER_QDEPL_MEASURED = "ingress.steering.steer_qdepl_measured"
STEER_LOWEST_RTT = "ingress.steering.steer_lowest_rtt"
STEER_EARLIEST_ARRIVAL = "ingress.steering.steer_earliest_arrival"
LINK_STATE = "ingress.steering.link_state"
SET_LINK_STATE = "ingress.steering.set_link_state"
STEER_LTE_ONLY = "ingress.steering.steer_lte_only"
STEER_WIFI_ONLY = "ingress.steering.steer_wifi_only"
STEERED = "ingress.steering.steered"
VISIBLE_PARAMS = "ingress.visible.params"
VISIBLE_ON = "ingress.visible.visible_on"
HELPER_STATUS = "ingress.visible.helper"
HELPER_UP = "ingress.visible.helper_up"
HELPER_DOWN = "ingress.visible.helper_down"
VISIBLE_DECISIONS = "ingress.visible.decisions"
PORT_MAC = "egress.port_mac"
SET_SOURCE_MAC = "egress.set_source_mac"
PORT_TX = "egress.port_tx"
THRESHOLDS = "egress.backpressure.thresholds"
SET_THRESHOLDS = "egress.backpressure.set_thresholds"
PORT_CAPACITY = "egress.backpressure.port_capacity"
SET_CAPACITY = "egress.backpressure.set_capacity"
FEEDBACK_WRITTEN = "egress.backpressure.feedback_written"
ECN_MARKED = "egress.backpressure.ecn_marked"
PORT_QUEUE_DEPTH = "port_queue_depth"
PORT_SERVICE_TIME = "port_service_time"
PORT_STEERED_SINCE_DEQUEUE = "port_steered_since_dequeue"
VISIBLE_REGISTERS = (
    "flow_key",
    "flow_policy",
    "flow_links",
    "last_seen",
    "forwarded_end",
    "forwarded_max",
    "ack_seen",
    "receiver_ack",
    "sent_ack",
    "receiver_window",
    "dup_acks",
    "hold_time",
    "hold_since",
    "retransmits",
    "burst_ewma",
    "copy_epoch",
    "copy_start",
    "reported_ack",
    "confirmed_end",
    "requested_at",
)
# Every register of the program: reset before each test (P4Runtime cannot write registers on BMv2).
REGISTERS = (
    PORT_QUEUE_DEPTH,
    PORT_SERVICE_TIME,
    PORT_STEERED_SINCE_DEQUEUE,
    "port_last_dequeue",
    "ingress.classify.seen_flows_a",
    "ingress.classify.seen_flows_b",
    *(f"ingress.visible.{name}" for name in VISIBLE_REGISTERS),
)

CPU_PORT = 255
HELPER_CLONE_SESSION = 1
DEFAULT_POLICY = 0


class Role(IntEnum):
    """ingress.port_role."""

    CORE = 0
    LTE = 1
    WIFI = 2
    HELPER = 3


class Link(IntEnum):
    """The preferred_link parameter of steer_lowest_rtt."""

    LTE = 0
    WIFI = 1


# Documentation addresses (RFC 5737, RFC 7042).
SWITCH_MAC = "00:00:5e:00:53:ff"
SERVER_MAC = "00:00:5e:00:53:10"
UE_LTE_MAC = "00:00:5e:00:53:11"
UE_WIFI_MAC = "00:00:5e:00:53:12"
CORE_MAC = "00:00:5e:00:53:13"
SERVER_IP = "198.51.100.1"
UE_IP = "192.0.2.1"
CORE_NET = "203.0.113.0"
CORE_IP = "203.0.113.7"
SERVER_PORT = 80
UE_PORT = 40000
MSS = 1000
RECEIVE_TIMEOUT_S = 2.0
COUNTER_TIMEOUT_S = 2.0


def binomial_interval(n: int, p: float, confidence: float = 0.99) -> tuple[int, int]:
    """The central `confidence` interval [lo, hi] of a Binomial(n, p) count."""
    tail = (1 - confidence) / 2
    cumulative = 0.0
    lo = hi = None
    for k in range(n + 1):
        cumulative += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if lo is None and cumulative > tail:
            lo = k
        if hi is None and cumulative >= 1 - tail:
            hi = k
            break
    assert lo is not None and hi is not None
    return lo, hi


def l4_checksum_valid(pkt: Packet) -> bool:
    """The TCP or UDP checksum of an IPv4 packet verifies (a UDP checksum of 0 means none)."""
    ip = pkt[IP]
    segment = bytes(ip.payload)[: ip.len - ip.ihl * 4]
    if ip.proto == 17 and segment[6:8] == b"\x00\x00":
        return True
    pseudo = bytes(IP(src=ip.src, dst=ip.dst))[12:20] + bytes([0, ip.proto]) + len(segment).to_bytes(2, "big")
    return checksum(pseudo + segment) == 0


class LwipTest(P4RuntimeTest):
    """Installs the LWIP topology; tests add policies, steering, VISIBLE and backpressure entries by meaning."""

    def setUp(self) -> None:
        super().setUp()
        self.ports = self.swports()
        self.uplink, self.lte, self.wifi, self.helper_port, self.core = self.ports[:5]
        self.reset_registers()
        for port, role in ((self.lte, Role.LTE), (self.wifi, Role.WIFI), (self.helper_port, Role.HELPER)):
            self.insert(PORT_ROLE, fy.Action(SET_PORT_ROLE, role=role), ingress_port=port)
        for port in self.ports:
            self.insert(PORT_MAC, fy.Action(SET_SOURCE_MAC, mac=SWITCH_MAC), egress_port=port)
        self.add_route(f"{SERVER_IP}/32", self.uplink, SERVER_MAC)
        self.add_route(f"{CORE_NET}/24", self.core, CORE_MAC)
        self.insert(
            ROUTES,
            fy.Action(
                ROUTE_LWIP, lte_port=self.lte, lte_dst_mac=UE_LTE_MAC, wifi_port=self.wifi, wifi_dst_mac=UE_WIFI_MAC
            ),
            dst_addr=f"{UE_IP}/32",
        )

    # Table writes (deleted again after the test by SyncSwitch).

    def insert(self, table: str, action: fy.Action, *, priority: int = 0, **match: object) -> None:
        self.switch.insert(
            fy.P4TableEntry(table, match=fy.Match(**match) if match else None, action=action, priority=priority)
        )

    def set_default(self, table: str, action: fy.Action, restore: fy.Action) -> None:
        """Change a table's default action for this test only."""
        self.switch.modify(fy.P4TableEntry(table, action=action, is_default_action=True))
        self.addCleanup(self.switch.modify, fy.P4TableEntry(table, action=restore, is_default_action=True))

    def add_route(self, prefix: str, port: int, dst_mac: str) -> None:
        self.insert(ROUTES, fy.Action(ROUTE, port=port, dst_mac=dst_mac), dst_addr=prefix)

    def classify(self, policy: int, *, priority: int = 10, **fields: object) -> None:
        """flow_policy entry on src_addr, dst_addr, protocol, src_port, dst_port (ternary: a value, "addr/len" or a
        (value, mask) pair; absent fields match anything); the highest priority wins."""
        self.insert(FLOW_POLICY, fy.Action(SET_POLICY, policy=policy), priority=priority, **fields)

    def steer(self, policy: int, action: str, **params: int) -> None:
        self.insert(STEERING_MODES, fy.Action(action, **params), policy=policy)

    def link_state(self, *, lte_delay_us: int, wifi_delay_us: int, lte_packet_us: int, wifi_packet_us: int) -> None:
        """What the controller measured of this LWIP pair's links (earliest-arrival steering)."""
        action = fy.Action(
            SET_LINK_STATE,
            lte_delay_us=lte_delay_us,
            wifi_delay_us=wifi_delay_us,
            lte_packet_us=lte_packet_us,
            wifi_packet_us=wifi_packet_us,
        )
        self.insert(LINK_STATE, action, lte_port=self.lte)

    def visible(
        self,
        policy: int,
        *,
        hold_budget_us: int = 0,
        hold_slack: int = 0,
        boost_max_depth: int = 0,
        boost_max: int = 0,
        retransmit_max: int = 0,
        alpha_shift: int = 2,
        beta_shift: int = 3,
        report_bytes: int = 0,
        segment_size: int = MSS,
        queue_aware_hold: int = 0,
    ) -> None:
        """VISIBLE on for `policy`; every phase is off unless its parameters open it."""
        self.insert(
            VISIBLE_PARAMS,
            fy.Action(
                VISIBLE_ON,
                segment_size=segment_size,
                hold_budget_us=hold_budget_us,
                hold_slack=hold_slack,
                boost_max_depth=boost_max_depth,
                boost_max=boost_max,
                retransmit_max=retransmit_max,
                alpha_shift=alpha_shift,
                beta_shift=beta_shift,
                idle_timeout_us=10_000_000,
                report_bytes=report_bytes,
                queue_aware_hold=queue_aware_hold,
            ),
            policy=policy,
        )

    def helper_up(self, epoch: int, port: int) -> None:
        """The helper is up behind `port` (a switch port or CPU_PORT) with copies of epoch `epoch`."""
        self.switch.insert(fy.P4CloneSessionEntry(HELPER_CLONE_SESSION, replicas=[port]))
        self.set_default(HELPER_STATUS, fy.Action(HELPER_UP, epoch=epoch), fy.Action(HELPER_DOWN))

    def backpressure(self, policy: int, *, feedback_min_us: int, ecn_mark_us: int) -> None:
        self.insert(
            THRESHOLDS,
            fy.Action(SET_THRESHOLDS, feedback_min_us=feedback_min_us, ecn_mark_us=ecn_mark_us),
            policy=policy,
        )

    def capacity(self, port: int, rate_kbps: int) -> None:
        self.insert(PORT_CAPACITY, fy.Action(SET_CAPACITY, rate_kbps=rate_kbps), egress_port=port)

    # Thrift (simple_switch_CLI): registers and queue rates, which P4Runtime cannot reach on BMv2.

    def cli(self, *commands: str) -> str:
        tool = os.environ.get("SIMPLE_SWITCH_CLI") or shutil.which("simple_switch_CLI")
        if tool is None:
            self.fail("simple_switch_CLI not found")
        result = subprocess.run(
            [sys.executable, tool, "--thrift-port", self.test_param("thrift_port")],
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        output = result.stdout + result.stderr
        if result.returncode != 0 or "Error" in output or "Invalid" in output:
            self.fail(f"simple_switch_CLI {commands}: {output}")
        return output

    def reset_registers(self) -> None:
        self.cli(*(f"register_reset {name}" for name in REGISTERS))

    def write_queue_depth(self, port: int, packets: int) -> None:
        """What egress last saw in `port`'s queue (the register steering and VISIBLE read)."""
        self.cli(f"register_write {PORT_QUEUE_DEPTH} {port} {packets}")

    def write_service_time(self, port: int, us: int) -> None:
        """What egress measured as `port`'s time per packet (the register qdepl-measured reads)."""
        self.cli(f"register_write {PORT_SERVICE_TIME} {port} {us}")

    def read_register(self, name: str, index: int) -> int:
        output = self.cli(f"register_read {name} {index}")
        match = re.search(rf"{re.escape(name)}\[{index}\]=\s*(\d+)", output)
        if match is None:
            self.fail(f"register_read {name} {index}: {output}")
        return int(match.group(1))

    def set_queue_rate(self, port: int, pps: int) -> None:
        """Drain `port` at `pps` packets per second for this test."""
        self.cli(f"set_queue_rate {pps} {port}")
        self.addCleanup(self.cli, f"set_queue_rate 0 {port}")

    # Counters.

    def wait_for_count(self, name: str, index: int, packets: int) -> dict[int, CounterValue]:
        """Poll the counter until cell `index` reaches `packets` packets (or the timeout); every cell."""
        deadline = time.monotonic() + COUNTER_TIMEOUT_S
        cells = self.counters(name)
        while cells[index].packets < packets and time.monotonic() < deadline:
            time.sleep(0.05)
            cells = self.counters(name)
        return cells

    def assertCounted(
        self, name: str, before: dict[int, CounterValue], expected: dict[int, int], message: str = ""
    ) -> None:
        """Counter `name` grew by exactly `expected` packets per index since `before`, and nowhere else."""
        last = max(expected, key=lambda index: expected[index]) if expected else 0
        after = self.wait_for_count(name, last, before[last].packets + expected.get(last, 0))
        grown = {index: after[index].packets - before[index].packets for index in after}
        self.assertEqual(
            {index: count for index, count in grown.items() if count}, {i: n for i, n in expected.items() if n}, message
        )

    # Packets.

    def downlink(self, seq: int, *, ue_port: int = UE_PORT, options: Iterable[object] = ()) -> Packet:
        """A TCP segment [seq, seq + MSS) from the server to the UE, as it arrives on the uplink port."""
        return Ether(
            bytes(
                Ether(src=SERVER_MAC, dst=SWITCH_MAC)
                / IP(src=SERVER_IP, dst=UE_IP, ttl=64)
                / TCP(sport=SERVER_PORT, dport=ue_port, seq=seq, ack=1, flags="A", window=512, options=list(options))
                / Raw(load=bytes(range(256)) * (MSS // 256) + bytes(MSS % 256))
            )
        )

    def uplink_ack(
        self,
        ack: int,
        *,
        window: int = 4096,
        flags: str = "A",
        options: Iterable[object] = (),
        payload: bytes = b"",
        ue_port: int = UE_PORT,
    ) -> Packet:
        """An ACK from the UE to the server, as it arrives on the LTE port: pure unless given flags or a payload."""
        return Ether(
            bytes(
                Ether(src=UE_LTE_MAC, dst=SWITCH_MAC)
                / IP(src=UE_IP, dst=SERVER_IP, ttl=64)
                / TCP(
                    sport=ue_port, dport=SERVER_PORT, seq=1, ack=ack, flags=flags, window=window, options=list(options)
                )
                / Raw(load=payload)
            )
        )

    @staticmethod
    def routed(pkt: Packet, dst_mac: str) -> Packet:
        """`pkt` as the switch forwards it to a next hop with MAC `dst_mac`: MACs rewritten, TTL - 1."""
        out = pkt.copy()
        out[Ether].src = SWITCH_MAC
        out[Ether].dst = dst_mac
        out[IP].ttl -= 1
        del out[IP].chksum
        return Ether(bytes(out))

    def to_ue(self, pkt: Packet, port: int) -> Packet:
        """`pkt` (server to UE) as it leaves on the LTE or Wi-Fi port."""
        return self.routed(pkt, UE_LTE_MAC if port == self.lte else UE_WIFI_MAC)

    def to_server(self, pkt: Packet, *, ack: int | None = None) -> Packet:
        """`pkt` (UE to server) as it leaves on the uplink, with its ACK number raised to `ack` if given."""
        out = self.routed(pkt, SERVER_MAC)
        if ack is not None:
            out[TCP].ack = ack
            del out[TCP].chksum
            out = Ether(bytes(out))
        return out

    def udp_to_ue(self, sport: int) -> Packet:
        """A UDP datagram from the server to the UE, as it arrives on the uplink port."""
        return Ether(
            bytes(
                Ether(src=SERVER_MAC, dst=SWITCH_MAC)
                / IP(src=SERVER_IP, dst=UE_IP, ttl=64)
                / UDP(sport=sport, dport=UE_PORT)
                / Raw(load=b"x" * 32)
            )
        )

    def send(self, port: int, pkt: Packet) -> None:
        testutils.send_packet(self, port, pkt)

    def receive(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> tuple[int, Packet]:
        """The next packet the switch sends on any port PTF watches: (port, packet)."""
        result = testutils.dp_poll(self, device_number=0, timeout=timeout_s)
        if not isinstance(result, self.dataplane.PollSuccess):
            self.fail("no packet from the switch")
        return result.port, Ether(result.packet)

    def assertReceived(self, expected: Packet, port: int) -> Packet:
        """The next packet leaves on `port` and equals `expected` byte for byte; its L4 checksum verifies."""
        got_port, got = self.receive()
        self.assertEqual(got_port, port, f"packet left on port {got_port}, expected {port}: {got!r}")
        self.assertEqual(bytes(got), bytes(expected), f"got {got!r}\nexpected {expected!r}")
        if IP in got and (TCP in got or UDP in got):
            self.assertTrue(l4_checksum_valid(got), f"bad L4 checksum: {got!r}")
        return got

    def assertNothingElse(self) -> None:
        testutils.verify_no_other_packets(self, timeout=0.3)

    # Scenarios.

    def runDropTest(self, pkt: Packet, reason: int, *, port: int | None = None) -> None:
        """`pkt`, sent on the core port (or `port`), is dropped and counted in ingress.drops under `reason` only."""
        before = self.counters(DROPS)
        self.send(self.core if port is None else port, pkt)
        self.assertCounted(DROPS, before, {reason: 1}, "ingress.drops")
        self.assertNothingElse()
