"""The switch-facing control loops without a switch: topology entries, BMv2 queue commands, rate estimates and their
hysteresis (fake clock and counters), new-flow classification and its entries, helper health transitions."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

import finsy as fy
import pytest
from tng_controller.compile import FLOW_POLICY, STEERING_MODES, compile_policies
from tng_controller.config import ConfigError, TrafficClassRule, parse
from tng_controller.digests import FlowKey, FlowTable, NewFlow, classify, flow_entries
from tng_controller.helper_health import HelperHealth, keep_helper_table
from tng_controller.monitor import LinkRates, QdeplShare, qdepl_rates
from tng_controller.pb import policy_pb2 as pb
from tng_controller.queue_rates import Bmv2Thrift, ThriftError, queue_commands
from tng_controller.retransmit_helper import Health
from tng_controller.store import StoredPolicy
from tng_controller.stream import SharedStream
from tng_controller.switch_config import HelperConfig, PortConfig
from tng_controller.topology import helper_clone_session, topology_entries

SWITCH = {
    "name": "lwip",
    "address": "127.0.0.1:9559",
    "thrift": "127.0.0.1:9090",
    "port": [
        {"port": 1, "role": "core", "mac": "02:00:00:00:00:01", "capacity": "20mbit", "queue": 100},
        {"port": 2, "role": "lte", "capacity": "1.5mbit"},
        {"port": 3, "role": "wifi"},
    ],
    "route": [
        {"prefix": "10.0.1.0/24", "port": 1, "dst_mac": "02:00:00:00:01:01"},
        {
            "prefix": "10.0.2.0/24",
            "lte": {"port": 2, "dst_mac": "02:00:00:00:02:01"},
            "wifi": {"port": 3, "dst_mac": "02:00:00:00:03:01"},
        },
    ],
    "helper": {"attach": "port", "port": 4, "health": "127.0.0.1:9601"},
}


def show(action: object) -> str:
    assert isinstance(action, fy.P4TableAction)
    return f"{action.name} {action.args}"


def switch_with(**changes: object) -> dict[str, object]:
    return {"switch": [{**SWITCH, **changes}]}


def test_the_topology_becomes_port_route_and_capacity_entries() -> None:
    config = parse(switch_with(), Path("."))
    switch = config.switches[0]
    assert switch.has_topology and switch.thrift == "127.0.0.1:9090"
    entries = {(e.table_id, str(dict(e.match or {})), show(e.action)) for e in topology_entries(switch)}
    assert entries == {
        ("ingress.port_role", "{'ingress_port': 2}", "ingress.set_port_role {'role': 1}"),
        ("ingress.port_role", "{'ingress_port': 3}", "ingress.set_port_role {'role': 2}"),
        ("egress.port_mac", "{'egress_port': 1}", "egress.set_source_mac {'mac': 2199023255553}"),
        (
            "egress.backpressure.port_capacity",
            "{'egress_port': 1}",
            "egress.backpressure.set_capacity {'rate_kbps': 20000}",
        ),
        (
            "egress.backpressure.port_capacity",
            "{'egress_port': 2}",
            "egress.backpressure.set_capacity {'rate_kbps': 1500}",
        ),
        (
            "ingress.forwarding.routes",
            "{'dst_addr': (167772416, 24)}",
            "ingress.forwarding.route {'port': 1, 'dst_mac': 2199023255809}",
        ),
        (
            "ingress.forwarding.routes",
            "{'dst_addr': (167772672, 24)}",
            "ingress.forwarding.route_lwip {'lte_port': 2, 'lte_dst_mac': 2199023256065, 'wifi_port': 3, "
            "'wifi_dst_mac': 2199023256321}",
        ),
    }
    assert helper_clone_session(switch.helper).replicas == [(4, 1)]
    assert helper_clone_session(HelperConfig("cpu")).replicas == [(255, 1)]
    assert queue_commands(switch.ports) == ["set_queue_rate 1667 1", "set_queue_depth 100 1", "set_queue_rate 125 2"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": [{"port": 512}]}, "config: switch[0].port[0].port: 512 is not a port from 0 to 511"),
        ({"port": [{"port": 1, "role": "5g"}]}, "config: switch[0].port[0].role: '5g' is not one of core, lte, wifi"),
        ({"port": [{"port": 1, "capacity": "fast"}]}, "config: switch[0].port[0].capacity: 'fast' is not a rate"),
        ({"port": [{"port": 1, "mac": "02:00"}]}, "config: switch[0].port[0].mac: '02:00' is not a MAC address"),
        ({"port": [{"port": 1}, {"port": 1}]}, "config: switch[0].port[1].port: port 1 is configured twice"),
        ({"route": [{"prefix": "10.0.1.1/24", "port": 1, "dst_mac": "02:00:00:00:00:01"}]}, "config: switch[0]"),
        (
            {"route": [{"prefix": "10.0.2.0/24", "lte": {"port": 2, "dst_mac": "02:00:00:00:02:01"}}]},
            "config: switch[0].route[0].wifi: is required with the other LWIP link",
        ),
        (
            {"route": [{"prefix": "10.0.2.0/24", "lte": {"port": 3, "dst_mac": "02:00:00:00:02:01"}, "wifi": {}}]},
            "config: switch[0].route[0].lte.port: port 3 has role 'wifi', not 'lte'",
        ),
        ({"helper": {"attach": "port", "port": 4}}, "config: switch[0].helper.health: is required"),
        ({"helper": {"attach": "cpu", "port": 4}}, 'config: switch[0].helper.port: is only for attach = "port"'),
        ({"thrift": "9090"}, "config: switch[0].thrift: '9090' is not host:port"),
    ],
)
def test_topology_errors_name_the_key(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(switch_with(**changes), Path("."))
    assert str(raised.value).startswith(message)


def test_traffic_classes_monitor_and_digest_settings() -> None:
    config = parse(
        {
            "traffic_class": [{"name": "video", "protocol": 6, "dst_port": 443, "dst_prefix": "10.0.2.0/24"}],
            "monitor": {"interval_s": 0.5, "share_band": 0.1},
            "digests": {"max_flows": 100},
        },
        Path("."),
    )
    assert config.traffic_classes == (
        TrafficClassRule("video", dst_prefix=ipaddress.IPv4Network("10.0.2.0/24"), protocol=6, dst_port=443),
    )
    assert (config.monitor.interval_s, config.monitor.share_band, config.digests.max_flows) == (0.5, 0.1, 100)
    with pytest.raises(ConfigError, match=r"^config: traffic_class\[0\].name: 'Video' does not match"):
        parse({"traffic_class": [{"name": "Video"}]}, Path("."))
    with pytest.raises(ConfigError, match=r"^config: monitor.ewma_weight: 2.0 is not in \(0, 1\]"):
        parse({"monitor": {"ewma_weight": 2.0}}, Path("."))


def test_link_rates_follow_the_transmit_counters_with_an_ewma() -> None:
    rates = LinkRates(weight=0.5, nominal_bps={2: 10e6})
    assert rates.estimate(2) == 10e6 and rates.estimate(3) is None
    rates.observe(2, byte_count=0, packet_count=0, now=0.0)
    rates.observe(2, byte_count=2_500_000, packet_count=2000, now=1.0)  # 20 Mbit/s
    assert rates.estimate(2) == pytest.approx(15e6)
    rates.observe(2, byte_count=2_500_000, packet_count=2000, now=2.0)  # idle: says nothing about the link
    assert rates.estimate(2) == pytest.approx(15e6)
    rates.observe(2, byte_count=100, packet_count=1, now=3.0)  # counters reset: a new baseline
    assert rates.estimate(2) == pytest.approx(15e6)
    rates.observe(3, 0, 0, 0.0)
    rates.observe(3, 1_000_000, 800, 0.5)  # no nominal rate: the first sample is the estimate
    assert rates.estimate(3) == pytest.approx(16e6)


def test_the_qdepl_share_is_rewritten_only_past_the_band_and_the_interval() -> None:
    share = QdeplShare(band=0.05, interval_s=5.0)
    assert not share.update(None, 10e6, now=0.0)
    assert share.update(10e6, 30e6, now=0.0) and share.share == pytest.approx(0.25)
    assert share.rates == (21845, 65535)
    assert not share.update(11e6, 30e6, now=10.0)  # 0.268: inside the band
    assert not share.update(20e6, 20e6, now=1.0)  # 0.5, but within the interval of the last write
    assert share.update(20e6, 20e6, now=6.0) and share.rates == (65535, 65535)
    assert qdepl_rates(0, 5e6) == (0, 65535)


def policy(name: str, policy_id: int, match: pb.Match, steering: int = pb.STEERING_MODE_LTE_ONLY) -> StoredPolicy:
    switch = pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK, steering=steering)
    return StoredPolicy(pb.Policy(name=name, match=match, switch_policy=switch), policy_id)


def test_class_policies_get_entries_per_digested_flow_and_qdepl_follows_the_measured_rates() -> None:
    video = policy("video", 7, pb.Match(traffic_class="video"), pb.STEERING_MODE_QDEPL)
    tcp = policy("tcp-to-ue", 3, pb.Match(dst_prefix="10.0.9.0/24", ip_protocol=6))
    entries = compile_policies([video, tcp], qdepl_rates=(100, 300))
    assert [(e.table_id, e.match and e.match.get("policy")) for e in entries] == [
        (FLOW_POLICY, None),
        (STEERING_MODES, 3),
        (STEERING_MODES, 7),  # video has no classification entry of its own
    ]
    assert show(entries[2].action) == "ingress.steering.steer_qdepl {'lte_rate': 100, 'wifi_rate': 300}"

    rules = [TrafficClassRule("video", protocol=6, dst_port=443), TrafficClassRule("other")]
    flow = NewFlow.from_digest(
        {"src_addr": 0x0A000101, "dst_addr": 0x0A000207, "protocol": 6, "src_port": 5555, "dst_port": 443}
        | {"ingress_port": 1, "policy": 0, "connection_id": 0}
    )
    assert str(flow.key) == "10.0.1.1:5555 -> 10.0.2.7:443 proto 6"
    assert classify(flow, rules) == "video"
    assert classify(NewFlow(FlowKey(1, 2, 17, 3, 4), 1, 0, 0), rules) == "other"
    assert classify(NewFlow(FlowKey(1, 2, 17, 3, 4), 1, 0, 0), rules[:1]) is None

    table = FlowTable(max_flows=2)
    assert table.learn(flow.key, "video") and not table.learn(flow.key, "video")
    (entry,) = flow_entries(table.items(), [video, tcp])
    assert (entry.table_id, entry.priority, show(entry.action)) == (
        FLOW_POLICY,
        1,
        "ingress.classify.set_policy {'policy': 7}",
    )
    assert entry.match is not None and entry.match["dst_port"] == (443, 0xFFFF)
    assert list(flow_entries(table.items(), [tcp])) == []  # no policy for the class (yet): the default applies
    covering = policy("to-ue", 4, pb.Match(dst_prefix="10.0.2.0/24"))
    assert list(flow_entries(table.items(), [video, covering])) == []  # the switch matches it itself now

    other = FlowKey(1, 2, 17, 3, 4)
    table.learn(other, "other")
    table.learn(FlowKey(5, 6, 17, 7, 8), "other")
    assert len(table) == 2 and table.forgotten == 1
    assert [key for key, _ in table.items()] == [other, FlowKey(5, 6, 17, 7, 8)]


def health(generation: int, healthy: bool = True) -> Health:
    return Health(healthy=healthy, generation=generation, stored_bytes=0, stored_segments=0, reason="ok")


async def test_helper_health_turns_boosting_off_while_unreachable_and_on_with_a_new_epoch() -> None:
    monitor = HelperHealth("lwip", HelperConfig("port", port=4, health="127.0.0.1:1", probe_interval_s=0.01))
    reports: list[Health | None] = [health(1), health(1), None, None, health(1), health(2, healthy=False), health(2)]
    written: list[str] = []
    states: list[str] = []

    async def probe() -> Health | None:
        if not reports:
            raise asyncio.CancelledError
        return reports.pop(0)

    async def write(entry: fy.P4TableEntry) -> None:
        written.append(show(entry.action))

    monitor.probe = probe  # type: ignore[method-assign]
    original = monitor.written

    def record(entry: fy.P4TableEntry, report: Health | None) -> None:
        original(entry, report)
        states.append(monitor.state)

    monitor.written = record  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await keep_helper_table(monitor, write)
    assert written == [
        "ingress.visible.helper_up {'epoch': 1}",
        "ingress.visible.helper_down {}",
        "ingress.visible.helper_up {'epoch': 2}",
        "ingress.visible.helper_down {}",
        "ingress.visible.helper_up {'epoch': 3}",
    ]
    assert states[1] == "down: no answer to health probes on 127.0.0.1:1"
    assert states[3] == "down: unhealthy (ok)"
    monitor.forget()
    assert monitor.state == "unknown" and monitor.change(health(2)) is not None  # a restarted switch is told again


async def test_an_unreachable_external_helper_and_a_missing_cli_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monitor = HelperHealth("lwip", HelperConfig("port", port=4, health="127.0.0.1:1", probe_interval_s=0.2))
    assert await monitor.probe() is None
    cpu = HelperHealth("lwip", HelperConfig("cpu"))
    assert await cpu.probe() is None  # not serving yet
    monkeypatch.setenv("SIMPLE_SWITCH_CLI", "no-such-cli")
    with pytest.raises(ThriftError, match=r"^switch lwip: thrift 127.0.0.1:9090: no-such-cli not found on PATH"):
        await Bmv2Thrift("lwip", "127.0.0.1:9090").run(["set_queue_rate 1 1"])
    assert PortConfig(1).role == "core"


class OneWriteAtATime:
    """A switch stream as gRPC's: a write while another is in progress fails (INTERNAL, and finsy drops the channel)."""

    def __init__(self) -> None:
        self.writing = False
        self.written: list[object] = []

    async def write(self, entities: list[object]) -> None:
        assert not self.writing, "two writes at once on one stream"
        self.writing = True
        await asyncio.sleep(0.001)
        self.written += entities
        self.writing = False


async def test_writers_of_one_switch_stream_take_turns() -> None:
    switch = OneWriteAtATime()
    stream = SharedStream(switch)  # type: ignore[arg-type]
    packets = [fy.P4PacketOut(bytes([i]), egress_port=2, _pad=0) for i in range(20)]
    await asyncio.gather(*(stream.write([packet]) for packet in packets))
    assert sorted(p.payload for p in switch.written) == [bytes([i]) for i in range(20)]  # type: ignore[attr-defined]
    with pytest.raises(AssertionError, match="two writes at once"):
        await asyncio.gather(*(switch.write([packet]) for packet in packets))  # what the lock prevents
