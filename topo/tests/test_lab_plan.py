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
    assert [" ".join(c) for c in plan.ue_tcp_sack(False)] == ["ip netns exec tlab42-ue sysctl -qw net.ipv4.tcp_sack=0"]
    assert [" ".join(c) for c in plan.ue_tcp_sack(True)] == ["ip netns exec tlab42-ue sysctl -qw net.ipv4.tcp_sack=1"]


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


def test_one_ue_is_the_far_end_of_the_links_with_their_addresses(plan) -> None:
    (ue,) = plan.ues
    assert (ue.number, ue.namespace, ue.lwip_address) == (1, "tlab42-ue", None)
    assert [(s.link, s.address, s.interface) for s in ue.sources] == [
        ("lte", "10.1.0.2", "lte"),
        ("wifi", "10.1.1.2", "wifi"),
    ]
    assert plan.ue_namespaces() == ["tlab42-ue"] and plan.ue_links == ()


LWIP_TWO_UES = SCENARIO.replace('name = "p"\n', 'name = "p"\nues = 2\n[switch]\nlte = "lte"\nwifi = "wifi"\n')


@pytest.fixture(params=[False, True], ids=["linux", "bmv2"])
def two_ues(tmp_path: Path, request):
    path = tmp_path / "p.toml"
    path.write_text(LWIP_TWO_UES)
    return make_plan(scenario.load(path), "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=request.param)


def test_two_ues_hang_off_a_gateway_that_keeps_the_links_and_the_lwip_address(two_ues) -> None:
    assert two_ues.namespaces() == [
        "tlab42-server",
        "tlab42-switch",
        "tlab42-link-lte",
        "tlab42-link-wifi",
        "tlab42-gw",
        "tlab42-ue1",
        "tlab42-ue2",
    ]
    assert two_ues.ue_ns == "tlab42-gw" and two_ues.ue_namespaces() == ["tlab42-ue1", "tlab42-ue2"]
    commands = [" ".join(command) for command in two_ues.commands()]
    for kept in (
        "ip -n tlab42-gw addr add 10.1.0.2/24 dev lte",
        "ip -n tlab42-gw addr add 10.1.1.2/24 dev wifi",
        "ip -n tlab42-gw rule add from 10.1.1.2 table 101",
        "ip -n tlab42-gw addr add 10.2.0.2/32 dev lo",  # the controller's probes still find the LWIP address
        "ip -n tlab42-gw rule add from 10.2.0.2 table 101",
        "ip netns exec tlab42-gw sysctl -qw net.ipv4.ip_forward=1",
    ):
        assert kept in commands
    veths = [v for v in two_ues.veths() if v.a_ns == "tlab42-gw"]
    assert [(v.a_if, v.b_ns, v.b_if) for v in veths] == [("ue-1", "tlab42-ue1", "gw"), ("ue-2", "tlab42-ue2", "gw")]
    offloads = [c for c in commands if c.endswith(" ".join(OFFLOADS_OFF))]
    assert len(offloads) == 2 * len(two_ues.veths()) == 2 * (1 + 2 * 2 + 2)
    macs = [mac for veth in two_ues.veths() for mac in (veth.a_mac, veth.b_mac)]
    assert len(set(macs)) == len(macs)
    for ns in two_ues.namespaces():
        assert any(c.startswith(f"ip netns exec {ns} sysctl -qw net.ipv6.conf.all.disable_ipv6=1") for c in commands)


def test_each_ue_owns_an_address_per_link_and_one_behind_the_lwip_switch(two_ues) -> None:
    ue1, ue2 = two_ues.ues
    assert [s.address for s in ue1.sources] == ["10.1.0.11", "10.1.1.11"] and ue1.lwip_address == "10.2.0.11"
    assert [s.address for s in ue2.sources] == ["10.1.0.12", "10.1.1.12"] and ue2.lwip_address == "10.2.0.12"
    gateway_link = two_ues.ue_links[1]
    commands = [" ".join(command) for command in two_ues.commands()]
    for expected in (
        "ip -n tlab42-ue2 addr add 10.3.2.2/24 dev gw",
        "ip -n tlab42-gw addr add 10.3.2.1/24 dev ue-2",
        f"ip -n tlab42-gw neigh replace 10.3.2.2 lladdr {gateway_link.ue_mac} dev ue-2 nud permanent",
        f"ip -n tlab42-ue2 neigh replace 10.3.2.1 lladdr {gateway_link.gateway_mac} dev gw nud permanent",
        # the downlink to each of its addresses is forwarded to the UE; its uplink takes the address's link
        "ip -n tlab42-ue2 addr add 10.1.0.12/32 dev gw",
        "ip -n tlab42-gw route add 10.1.0.12/32 via 10.3.2.2 dev ue-2",
        "ip -n tlab42-gw rule add from 10.1.0.12 table 100",
        "ip -n tlab42-gw rule add from 10.1.1.12 table 101",
        "ip -n tlab42-ue2 addr add 10.2.0.12/32 dev gw",
        "ip -n tlab42-gw route add 10.2.0.12/32 via 10.3.2.2 dev ue-2",
        "ip -n tlab42-gw rule add from 10.2.0.12 table 101",  # answers over Wi-Fi
        "ip -n tlab42-ue2 route add default via 10.3.2.1 dev gw src 10.1.0.12",
        "ip -n tlab42-ue2 mptcp limits set subflow 2 add_addr_accepted 2",
    ):
        assert expected in commands
    assert not [c for c in commands if c.startswith("ip -n tlab42-gw mptcp")]  # the gateway only forwards
    assert [" ".join(c) for c in two_ues.mptcp_endpoints(("wifi", "lte"))] == [
        "ip -n tlab42-ue1 mptcp endpoint flush",
        "ip -n tlab42-ue1 mptcp endpoint add 10.1.0.11 dev gw subflow",
        "ip -n tlab42-ue2 mptcp endpoint flush",
        "ip -n tlab42-ue2 mptcp endpoint add 10.1.0.12 dev gw subflow",
    ]
    assert [" ".join(c) for c in two_ues.ue_tcp_sack(False)] == [
        "ip netns exec tlab42-ue1 sysctl -qw net.ipv4.tcp_sack=0",
        "ip netns exec tlab42-ue2 sysctl -qw net.ipv4.tcp_sack=0",
    ]


def test_linux_forwarding_resolves_the_ues_link_addresses_to_the_gateway(two_ues) -> None:
    commands = [" ".join(command) for command in two_ues.commands()]
    lte = two_ues.path("lte")
    arp = f"ip -n tlab42-switch neigh replace 10.1.0.11 lladdr {lte.ue_mac} dev l-lte nud permanent"
    assert (arp in commands) == (not two_ues.bmv2)  # BMv2's routes for 10.1.i.0/24 already name that MAC
