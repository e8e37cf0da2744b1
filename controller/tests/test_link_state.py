"""The link state the controller writes for LWIP routes and derives policy parameters from: set_link_state, the spill
depth and hold budget of policies that leave them 0, the hysteresis, the prober's configuration and its errors."""

from __future__ import annotations

import copy
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest
from tng_controller.compile import Link, Tuning, policy_entries
from tng_controller.config import ConfigError, MonitorConfig, parse
from tng_controller.link_state import (
    LinkState,
    LinkStateBand,
    RouteLinkStates,
    packet_time_us,
    reorder_allowance_us,
    tuning,
)
from tng_controller.monitor import LinkRates
from tng_controller.pb import policy_pb2 as pb
from tng_controller.probe import MIN_ANSWERS
from tng_controller.prober import LinkProber
from tng_controller.store import StoredPolicy
from tng_controller.topology import topology_entries

LTE, WIFI = 2, 3
SWITCH = {
    "name": "lwip",
    "address": "127.0.0.1:9559",
    "probe_source": "10.0.0.254",
    "port": [
        {"port": 1, "role": "core", "mac": "02:00:00:00:00:01"},
        {"port": LTE, "role": "lte", "mac": "02:00:00:00:00:02", "capacity": "10mbit"},
        {"port": WIFI, "role": "wifi", "mac": "02:00:00:00:00:03"},
    ],
    "route": [
        {"prefix": "10.0.0.0/24", "port": 1, "dst_mac": "02:00:00:00:01:01"},
        {
            "prefix": "10.2.0.0/24",
            "lte": {"port": LTE, "dst_mac": "02:00:00:00:02:01"},
            "wifi": {"port": WIFI, "dst_mac": "02:00:00:00:03:01"},
            "probe": "10.2.0.2",
        },
    ],
}


def test_set_link_state_puts_the_difference_on_the_later_link() -> None:
    later_lte = LinkState(difference_us=20_000, lte_packet_us=1200, wifi_packet_us=400).action()
    assert (later_lte.name, later_lte.args) == (
        "ingress.steering.set_link_state",
        {"lte_delay_us": 20_000, "wifi_delay_us": 0, "lte_packet_us": 1200, "wifi_packet_us": 400},
    )
    later_wifi = LinkState(difference_us=-7_000, lte_packet_us=None, wifi_packet_us=400).action()
    assert later_wifi.args == {"lte_delay_us": 0, "wifi_delay_us": 7_000, "lte_packet_us": 0, "wifi_packet_us": 400}
    assert [packet_time_us(rate) for rate in (10e6, 30e6, None, 0.0, 1e12)] == [1200, 400, None, None, 1]


def test_spill_depth_and_hold_budget_follow_the_delay_difference() -> None:
    # lwip.toml: LTE 25 ms one way at 10 Mbit/s, Wi-Fi 5 ms at 30 Mbit/s: d = 20 ms; Wi-Fi sends 2500 packets/s.
    state = LinkState(difference_us=20_000, lte_packet_us=1200, wifi_packet_us=400)
    assert state.preferred_link(Link.LTE, tie_us=1000) == Link.WIFI
    assert state.spill_depth(Link.WIFI) == 51  # 20 ms x 2500 packets/s, plus the packet in service
    assert state.hold_budget_us() == 20_000 + 4 * 1200
    assert state.hold_slack() == 62  # ceil(24.8 ms / 0.4 ms): Wi-Fi's packets within the hold budget
    faster_lte = LinkState(difference_us=-3_000, lte_packet_us=100, wifi_packet_us=None)
    assert faster_lte.preferred_link(Link.WIFI, tie_us=1000) == Link.LTE
    assert faster_lte.spill_depth(Link.LTE) == 31
    assert faster_lte.spill_depth(Link.WIFI) is None  # Wi-Fi's rate is unknown
    assert faster_lte.hold_budget_us() == 3_000 + 4 * 100
    assert faster_lte.hold_slack() == 34  # only LTE's time per packet is known
    equal = LinkState(difference_us=400, lte_packet_us=1200, wifi_packet_us=400)
    assert equal.preferred_link(Link.LTE, tie_us=1000) == Link.LTE  # within the band: the configured link
    unmeasured = LinkState(lte_packet_us=1200, wifi_packet_us=400)
    assert unmeasured.preferred_link(Link.WIFI, 1000) == Link.WIFI
    assert (unmeasured.spill_depth(Link.WIFI), unmeasured.hold_budget_us(), unmeasured.hold_slack()) == (None,) * 3
    assert LinkState(difference_us=20_000).hold_slack() is None  # no time per packet known


def test_the_band_rewrites_only_what_moved_and_at_most_once_per_interval() -> None:
    band = LinkStateBand(delay_band_us=1000, packet_time_band=0.1, interval_s=5.0)
    assert band.update(LinkState(None, 1200, 400), now=0.0)  # capacities: known for the first time
    assert band.update(LinkState(20_000, 1200, 400), now=1.0)  # d known for the first time: at once
    assert not band.update(LinkState(20_800, 1250, 420), now=10.0)  # within both bands
    assert not band.update(LinkState(22_000, 1200, 400), now=3.0)  # past the band, but within the interval
    assert band.update(LinkState(22_000, 1200, 400), now=6.0)
    assert band.written == LinkState(22_000, 1200, 400)
    assert band.update(LinkState(22_000, 1400, 400), now=12.0)  # LTE's time per packet moved by 17 %
    assert not band.update(LinkState(None, None, None), now=20.0)  # unknown again: the written values stay
    assert band.written == LinkState(22_000, 1400, 400)


def policy(steering: int, dst_prefix: str = "", **visible: int) -> pb.Policy:
    switch = pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK, steering=steering)
    if visible:
        switch.visible.CopyFrom(pb.Visible(enabled=True, **visible))
    return pb.Policy(name="p", match=pb.Match(dst_prefix=dst_prefix), switch_policy=switch)


def test_a_policy_gets_the_link_state_of_its_route() -> None:
    ue = (IPv4Network("10.2.0.0/24"), LinkState(20_000, 1200, 400))
    other = (IPv4Network("10.3.0.0/24"), LinkState(-5_000, 1200, 400))
    lowest = policy(pb.STEERING_MODE_LOWEST_RTT_FIRST)
    assert tuning(lowest, [ue], Link.LTE, 1000) == Tuning(Link.WIFI, 51, 24_800, 62)  # the only LWIP route
    assert tuning(lowest, [ue, other], Link.LTE, 1000) == Tuning(Link.LTE)  # which of the two: unknown
    in_other = policy(pb.STEERING_MODE_LOWEST_RTT_FIRST, "10.3.0.128/25")
    assert tuning(in_other, [ue, other], Link.WIFI, 1000) == Tuning(Link.LTE, 6, 9_800, 25)
    assert tuning(lowest, [], Link.LTE, 1000) == Tuning(Link.LTE)

    derived = Tuning(Link.WIFI, 51, 24_800, 62)
    entries = {e.table_id: e.action for e in policy_entries(StoredPolicy(lowest, 1), derived)}
    assert entries["ingress.steering.modes"].args == {"preferred_link": 1, "spill_depth": 51}
    visible = policy(pb.STEERING_MODE_EARLIEST_ARRIVAL, max_boosts=4)
    entries = {e.table_id: e.action for e in policy_entries(StoredPolicy(visible, 1), derived)}
    assert entries["ingress.steering.modes"].name == "ingress.steering.steer_earliest_arrival"
    assert entries["ingress.visible.params"].args["hold_budget_us"] == 24_800
    assert entries["ingress.visible.params"].args["hold_slack"] == 62


def switch_config(**changes: object):
    return parse({"switch": [{**copy.deepcopy(SWITCH), **changes}]}, Path(".")).switches[0]


def test_route_link_states_from_capacities_estimates_and_the_prober() -> None:
    config = switch_config()
    assert config.probe_source == IPv4Address("10.0.0.254")
    assert config.routes[1].probe == IPv4Address("10.2.0.2")
    monitor = MonitorConfig(rewrite_interval_s=0.0)
    rates = LinkRates(0.5, {LTE: 10e6})
    prober = LinkProber(config, monitor, identifier=1)
    states = RouteLinkStates(config, monitor, rates, prober)
    assert [(e.match, e.action.args) for e in states.entries()] == [
        ({"lte_port": LTE}, {"lte_delay_us": 0, "wifi_delay_us": 0, "lte_packet_us": 1200, "wifi_packet_us": 0})
    ]
    (status,) = states.statuses(now=0.0)
    assert (status.prefix, status.probe_target, status.delay_measured) == ("10.2.0.0/24", "10.2.0.2", False)
    unmeasured = states.tuning(policy(pb.STEERING_MODE_LOWEST_RTT_FIRST))
    assert unmeasured.spill_depth != 76  # nothing measured yet; what a policy gets follows the written state below
    assert status.delay_state == "no lte probe sent yet"

    rates.observe(LTE, 0, 0, now=0.0)
    rates.observe(LTE, 5_000_000, 4000, now=1.0)  # 40 Mbit/s measured, but LTE has a configured capacity
    rates.observe(WIFI, 0, 0, now=0.0)
    rates.observe(WIFI, 3_750_000, 2500, now=1.0)  # 30 Mbit/s: Wi-Fi's only rate
    probe = prober.probe_of(config.routes[1])
    assert probe is not None
    for sent_on, rtt in ((LTE, 0.045), (WIFI, 0.015)):
        for _ in range(MIN_ANSWERS):
            probe.sent[sent_on] += 1
            probe.answered(sent_on, WIFI, rtt, now=1.0)
    assert states.update(now=1.0)
    assert [e.action.args for e in states.entries()] == [
        {"lte_delay_us": 30_000, "wifi_delay_us": 0, "lte_packet_us": 1200, "wifi_packet_us": 400}
    ]
    assert not states.update(now=2.0)
    (status,) = states.statuses(now=2.0)
    assert (status.delay_measured, status.delay_difference_us) == (True, 30_000)
    assert [(r.sent_on, r.answered_on, r.min_rtt_us, r.answers) for r in status.rtts] == [
        ("lte", "wifi", 45_000, MIN_ANSWERS),
        ("wifi", "wifi", 15_000, MIN_ANSWERS),
    ]
    assert (status.preferred_link, status.spill_depth_packets, status.hold_budget_us) == ("wifi", 76, 34_800)
    assert status.hold_slack_packets == 87
    assert (status.probes_sent, status.probes_unanswered) == (2 * MIN_ANSWERS, 0)
    assert states.describe() == (
        "10.2.0.0/24 d 30000 us, time per packet LTE 1200 us, Wi-Fi 400 us, reorder allowance unknown us"
    )
    assert states.tuning(policy(pb.STEERING_MODE_LOWEST_RTT_FIRST)) == Tuning(Link.WIFI, 76, 34_800, 87)

    unprobed = RouteLinkStates(config, monitor, rates, prober=None)
    (status,) = unprobed.statuses(now=2.0)
    assert status.delay_state == "not probed (no probe target configured for the route)"


def test_the_reorder_allowance_makes_up_what_the_earlier_queue_lacks_for_the_senders_back_off() -> None:
    # The sweep's 1:1 pair with a 60 ms RTT difference: Wi-Fi's queue holds 40 ms, d = 30 ms, so in order the flow
    # has 10 ms of queue beyond d; cubic (b = 0.7) needs 3/7 of its 40 ms round trip through LTE: 17.1 ms.
    assert reorder_allowance_us(30_000, 40_000, 40_000, 0.7) == 7_143
    assert reorder_allowance_us(-30_000, 40_000, 40_000, 0.7) == 7_143  # Wi-Fi the later link: the same
    # lwip.toml (d = 20 ms, Wi-Fi's 100 packets = 40 ms, 30 ms round trip through LTE): 20 ms is enough.
    assert reorder_allowance_us(20_000, 30_000, 40_000, 0.7) == 0
    # Reno halves its window: a whole round trip of queue, but never more allowance than d itself.
    assert reorder_allowance_us(30_000, 40_000, 40_000, 0.5) == 30_000
    assert [reorder_allowance_us(*unknown, 0.7) for unknown in ((None, 1, 1), (1, None, 1), (1, 1, None))] == [
        None,
        None,
        None,
    ]


def test_steering_takes_the_difference_less_the_allowance_and_the_rest_keeps_d() -> None:
    state = LinkState(difference_us=30_000, lte_packet_us=600, wifi_packet_us=600, reorder_allowance_us=7_000)
    assert state.action().args == {
        "lte_delay_us": 23_000,
        "wifi_delay_us": 0,
        "lte_packet_us": 600,
        "wifi_packet_us": 600,
    }
    later_wifi = LinkState(difference_us=-5_000, lte_packet_us=600, wifi_packet_us=600, reorder_allowance_us=9_000)
    assert later_wifi.action().args["wifi_delay_us"] == 0  # never past equal delays
    # The spill depth and VISIBLE's hold budget still follow the true d: packets do arrive that much apart.
    assert state.spill_depth(Link.WIFI) == 51
    assert state.hold_budget_us() == 30_000 + 4 * 600


def test_route_link_states_derive_the_allowance_from_the_earlier_links_configured_queue() -> None:
    # 1:1, 20 Mbit/s each (600 us per packet); Wi-Fi's BMv2 queue 66 packets (39.6 ms); LTE 30 ms later.
    ports = copy.deepcopy(SWITCH["port"])
    ports[1]["capacity"] = ports[2]["capacity"] = "20mbit"  # type: ignore[index]
    ports[2]["queue"] = 66  # type: ignore[index]
    config = switch_config(port=ports)
    monitor = MonitorConfig(rewrite_interval_s=0.0)
    prober = LinkProber(config, monitor, identifier=1)
    states = RouteLinkStates(config, monitor, LinkRates(0.5, {}), prober)
    probe = prober.probe_of(config.routes[1])
    assert probe is not None
    for sent_on, rtt in ((LTE, 0.040), (WIFI, 0.010)):  # both answered over Wi-Fi's uplink
        for _ in range(MIN_ANSWERS):
            probe.sent[sent_on] += 1
            probe.answered(sent_on, WIFI, rtt, now=1.0)
    assert states.update(now=1.0)
    needed = 3 / 7 * 40_000 - (66 * 600 - 30_000)
    (entry,) = states.entries()
    assert entry.action.args["lte_delay_us"] == 30_000 - round(needed)
    (status,) = states.statuses(now=1.0)
    assert (status.delay_difference_us, status.reorder_allowance_us) == (30_000, round(needed))
    # A queue the controller did not configure is unknown: no allowance, steering keeps the measured d.
    unknown_queue = RouteLinkStates(switch_config(), monitor, LinkRates(0.5, {WIFI: 20e6}), prober)
    unknown_queue.update(now=1.0)
    (entry,) = unknown_queue.entries()
    assert entry.action.args["lte_delay_us"] == 30_000


def test_the_probe_source_is_punted() -> None:
    routes = [e for e in topology_entries(switch_config()) if e.table_id == "ingress.forwarding.routes"]
    assert [(e.match, e.action.name) for e in routes][-1] == (
        {"dst_addr": (int(IPv4Address("10.0.0.254")), 32)},
        "ingress.forwarding.punt",
    )


def lwip_route(**changes: object) -> dict[str, object]:
    return {**copy.deepcopy(SWITCH["route"][1]), **changes}  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"probe_source": None},
            "switch[0].probe_source: is required when a route has a probe (route[1])",
        ),
        ({"probe_source": "10.0.0"}, "switch[0].probe_source: '10.0.0' is not an IPv4 address"),
        (
            {"route": [*SWITCH["route"], {"prefix": "10.0.0.254/32", "port": 1, "dst_mac": "02:00:00:00:01:01"}]},
            "switch[0].probe_source: 10.0.0.254 is routed by route[2]; it must be punted",
        ),
        (
            {"route": [SWITCH["route"][0], lwip_route(probe="10.9.0.2")]},
            "switch[0].route[1].probe: 10.9.0.2 is not in the route's prefix 10.2.0.0/24",
        ),
        (
            {"route": [{**SWITCH["route"][0], "probe": "10.0.0.1"}]},
            "switch[0].route[0].probe: only LWIP routes (lte, wifi) are probed",
        ),
        (
            {
                "port": [
                    {"port": 1},
                    {"port": LTE, "role": "lte"},
                    {"port": WIFI, "role": "wifi", "mac": "02:00:00:00:00:03"},
                ]
            },
            "switch[0].route[1].probe: port 2 has no mac ([[switch.port]] mac)",
        ),
    ],
)
def test_prober_configuration_errors_name_the_key(changes: dict[str, object], message: str) -> None:
    raw = {**copy.deepcopy(SWITCH), **changes}
    raw = {key: value for key, value in raw.items() if value is not None}
    with pytest.raises(ConfigError) as raised:
        parse({"switch": [raw]}, Path("."))
    assert str(raised.value).startswith(f"config: {message}")


@pytest.mark.parametrize(
    ("monitor", "message"),
    [
        ({"probe_window_s": 0.1}, "monitor.probe_window_s: 0.1 is shorter than probe_interval_s (0.2)"),
        ({"probe_timeout_s": 0}, "monitor.probe_timeout_s: 0 is not a positive number"),
        ({"delay_band_us": -1}, "monitor.delay_band_us: -1 is not a number of microseconds from 0 to 10000000"),
        ({"packet_time_band": 1.5}, "monitor.packet_time_band: 1.5 is not a number in [0, 1)"),
        ({"probe_every": 1}, "monitor.probe_every: unknown key"),
    ],
)
def test_monitor_errors_name_the_key(monitor: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse({"monitor": monitor}, Path("."))
    assert str(raised.value).startswith(f"config: {message}")


def test_monitor_probe_settings() -> None:
    monitor = parse(
        {"monitor": {"probe_interval_s": 0.5, "probe_window_s": 60, "delay_band_us": 500, "packet_time_band": 0.2}},
        Path("."),
    ).monitor
    assert (monitor.probe_interval_s, monitor.probe_window_s, monitor.probe_timeout_s) == (0.5, 60.0, 2.0)
    assert (monitor.delay_band_us, monitor.packet_time_band) == (500, 0.2)
