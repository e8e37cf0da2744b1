"""The topology plan: names, addresses, routing per source address, offloads, static ARP, MPTCP endpoints."""

from pathlib import Path

import pytest
from tng_lab import scenario
from tng_lab.plan import OFFLOADS_OFF, make_plan

SCENARIO = """
name = "p"
[[links]]
name = "lte"
down = { rate = "10mbit" }
[[links]]
name = "wifi"
down = { rate = "30mbit" }
[[workloads]]
name = "w"
transport = "tcp"
paths = ["lte"]
"""


@pytest.fixture
def plan(tmp_path: Path):
    path = tmp_path / "p.toml"
    path.write_text(SCENARIO)
    return make_plan(scenario.load(path), "tlab42-", Path("/run/tng-lab/tlab42"))


def test_every_namespace_carries_the_run_prefix(plan) -> None:
    assert plan.namespaces() == [
        "tlab42-server",
        "tlab42-switch",
        "tlab42-link-lte",
        "tlab42-link-wifi",
        "tlab42-ue",
    ]


def test_interface_names_fit_the_kernel_limit_and_macs_are_unique(plan) -> None:
    veths = plan.veths()
    assert len(veths) == 1 + 2 * 2  # server-switch, and switch-link-UE per link
    for veth in veths:
        assert len(veth.a_if) <= 15 and len(veth.b_if) <= 15
    macs = [mac for veth in veths for mac in (veth.a_mac, veth.b_mac)]
    assert len(set(macs)) == len(macs)


def test_links_get_their_own_subnet_table_and_control_socket(plan) -> None:
    lte, wifi = plan.paths
    assert (lte.switch_address, lte.ue_address, lte.table) == ("10.1.0.1", "10.1.0.2", 100)
    assert (wifi.switch_address, wifi.ue_address, wifi.table) == ("10.1.1.1", "10.1.1.2", 101)
    assert wifi.control == Path("/run/tng-lab/tlab42/linkem-wifi.sock")


def test_commands_route_by_source_address_with_static_arp_and_offloads_off(plan) -> None:
    commands = [" ".join(command) for command in plan.commands()]
    assert "ip -n tlab42-ue rule add from 10.1.1.2 table 101" in commands
    assert "ip -n tlab42-ue route add default via 10.1.1.1 dev wifi table 101" in commands
    assert "ip -n tlab42-ue route add default via 10.1.0.1" in commands  # main table: the first link
    assert "ip -n tlab42-server route add 10.1.0.0/16 via 10.0.0.254" in commands
    assert "ip netns exec tlab42-switch sysctl -qw net.ipv4.ip_forward=1" in commands
    wifi = plan.path("wifi")
    arp = f"ip -n tlab42-ue neigh replace 10.1.1.1 lladdr {wifi.switch_mac} dev wifi nud permanent"
    assert arp in commands
    offloads = [c for c in commands if c.endswith(" ".join(OFFLOADS_OFF))]
    assert len(offloads) == 2 * len(plan.veths())  # both ends of every veth
    assert all("rp_filter=0" in c and "disable_ipv6=1" in c for c in commands if "sysctl -qw net.ipv6" in c)
    assert "ip -n tlab42-ue mptcp limits set subflow 2 add_addr_accepted 2" in commands


def test_tcp_connections_start_from_defaults_and_the_ue_sack_setting_is_a_command(plan) -> None:
    commands = [" ".join(command) for command in plan.commands()]
    for namespace in plan.namespaces():
        setup = f"ip netns exec {namespace} sysctl -qw "
        assert any(c.startswith(setup) and "net.ipv4.tcp_no_metrics_save=1" in c for c in commands), namespace
    assert " ".join(plan.ue_tcp_sack(False)) == "ip netns exec tlab42-ue sysctl -qw net.ipv4.tcp_sack=0"
    assert " ".join(plan.ue_tcp_sack(True)) == "ip netns exec tlab42-ue sysctl -qw net.ipv4.tcp_sack=1"


def test_veths_exist_before_they_are_configured(plan) -> None:
    commands = [" ".join(command) for command in plan.commands()]
    created = next(i for i, c in enumerate(commands) if c.startswith("ip link add wifi") or " name wifi " in c)
    configured = next(i for i, c in enumerate(commands) if "dev wifi" in c)
    assert created < configured


def test_mptcp_endpoints_cover_every_path_but_the_first(plan) -> None:
    assert [" ".join(c) for c in plan.mptcp_endpoints(("lte", "wifi"))] == [
        "ip -n tlab42-ue mptcp endpoint flush",
        "ip -n tlab42-ue mptcp endpoint add 10.1.1.2 dev wifi subflow",
    ]
    assert [" ".join(c) for c in plan.mptcp_endpoints(())] == ["ip -n tlab42-ue mptcp endpoint flush"]
