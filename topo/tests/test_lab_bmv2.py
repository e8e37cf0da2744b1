"""BMv2 as the in-path switch: the [switch] table and steered workloads, the choice of switch, the topology BMv2
gets, the controller configuration and policies the lab generates (read back by the controller's own parsers)."""

import sys
from pathlib import Path

import pytest
from tng_controller import config as controller_config
from tng_controller.pb import policy_pb2 as pb
from tng_controller.policy import check
from tng_controller.tngctl import load_policies
from tng_lab import bmv2, controller, linkem, scenario, switch
from tng_lab.delay import Service
from tng_lab.linkem import Counters, LinkCounters
from tng_lab.linkspec import Direction
from tng_lab.plan import make_plan
from tng_lab.scenario import ScenarioError
from tng_lab.timeline import Sample, path_result

LWIP = """
name = "l"
[switch]
lte = "lte"
wifi = "wifi"
[[links]]
name = "lte"
down = { rate = "10mbit", delay = "25ms", queue = "100pkt" }
up = { rate = "5mbit", delay = "25ms" }
[[links]]
name = "wifi"
down = { rate = "30mbit", delay = "5ms", queue = "150kb" }
up = { rate = "30mbit", delay = "5ms" }
[[workloads]]
name = "tcp-lte"
transport = "tcp"
paths = ["lte"]
[[workloads]]
name = "steered"
transport = "tcp"
steering = "qdepl"
[[workloads]]
name = "steered-visible"
transport = "tcp"
steering = "qdepl"
visible = "full"
"""

P4INFO = Path("/repo/p4src/build/tng/p4info.txtpb")
BMV2_JSON = Path("/repo/p4src/build/tng/bmv2.json")


def load(tmp_path: Path, text: str) -> scenario.Scenario:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return scenario.load(path)


@pytest.fixture
def lwip(tmp_path: Path) -> scenario.Scenario:
    return load(tmp_path, LWIP)


def test_steered_workloads_use_both_lwip_links(lwip) -> None:
    assert lwip.switch == scenario.SwitchSpec("auto", "lte", "wifi")
    steered = {w.name: w for w in lwip.workloads}
    assert (steered["steered"].steering, steered["steered"].visible) == ("qdepl", None)
    assert steered["steered-visible"].visible == "full" and steered["steered-visible"].paths == ("lte", "wifi")
    assert steered["tcp-lte"].steering is None


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        ('lte = "lte"\n', 'lte = "cell"\n', "switch.lte", "no link named 'cell' (lte, wifi)"),
        ('lte = "lte"\n', "", "switch.lte", "needs both an lte and a wifi link"),
        ('wifi = "wifi"\n', 'wifi = "lte"\n', "switch.wifi", "is the same link as lte ('lte')"),
        ('[switch]\n', '[switch]\nuse = "tofino"\n', "switch.use", "'tofino' is not one of auto, bmv2, linux"),
        ('[switch]\n', '[switch]\nhelper = "nic"\n', "switch.helper", "'nic' is not one of port, cpu"),
        ('rate = "10mbit", delay', 'trace = "t", delay', "links[0].down.trace", "no trace file"),
        ('steering = "qdepl"\nvisible', 'steering = "fast"\nvisible', "workloads[2].steering", "'fast' is not one of"),
        ('steering = "qdepl"\nvisible = "full"\n', "visible = 'full'\npaths = ['lte']\n", "workloads[2].visible",
         "needs steering"),
        ('visible = "full"', 'visible = true', "workloads[2].visible", "expected a string, got true or false True"),
        ('visible = "full"', 'visible = "boost"', "workloads[2].visible", "'boost' is not one of hold, full"),
        ('name = "steered"\ntransport = "tcp"', 'name = "steered"\ntransport = "mptcp"', "workloads[1].steering",
         "needs transport = 'tcp', not 'mptcp'"),
        ('steering = "qdepl"\n[[', 'steering = "qdepl"\npaths = ["lte"]\n[[', "workloads[1].paths",
         "conflicts with steering"),
    ],
)  # fmt: skip
def test_switch_and_steering_errors_name_the_key(tmp_path: Path, old: str, new: str, key: str, problem: str) -> None:
    assert old in LWIP
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, LWIP.replace(old, new, 1))
    assert caught.value.key == key and problem in caught.value.problem, caught.value


def test_sack_is_on_unless_a_kernel_tcp_workload_turns_it_off(tmp_path: Path) -> None:
    without = load(
        tmp_path, LWIP.replace('steering = "qdepl"\nvisible = "full"\n', 'steering = "qdepl"\nsack = false\n')
    )
    assert [w.sack for w in without.workloads] == [True, True, False]
    tng = LWIP.replace('transport = "tcp"\npaths = ["lte"]', 'transport = "tng"\npaths = ["lte"]\nsack = false')
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, tng)
    assert caught.value.key == "workloads[0].sack" and "only applies to kernel TCP" in caught.value.problem


def test_steering_without_an_lwip_pair_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, LWIP.replace('[switch]\nlte = "lte"\nwifi = "wifi"\n', ""))
    assert caught.value.key == "workloads[1].steering" and "set [switch] lte and wifi" in caught.value.problem


def test_an_lwip_link_needs_a_constant_rate(tmp_path: Path) -> None:
    trace = LWIP.replace('rate = "10mbit", delay', 'trace = { model = "sprout", mean_mbps = 8 }, delay')
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, trace)
    assert caught.value.key == "switch.lte" and "constant down rate" in caught.value.problem


def test_linux_forwarding_by_environment_or_scenario_with_one_notice(lwip, tmp_path: Path) -> None:
    chosen = switch.choose(lwip, tmp_path, {"TNG_LAB_SWITCH": "linux"})
    assert (chosen.bmv2, chosen.notice) == (False, "Linux forwarding (BMv2 not used: $TNG_LAB_SWITCH=linux)")
    linux = load(tmp_path, LWIP.replace("[switch]\n", '[switch]\nuse = "linux"\n'))
    assert "[switch] use = 'linux'" in switch.choose(linux, tmp_path, {}).notice
    with pytest.raises(ScenarioError, match=r"\$TNG_LAB_SWITCH='bmv3': expected 'linux' or 'auto'"):
        switch.choose(lwip, tmp_path, {"TNG_LAB_SWITCH": "bmv3"})


def test_without_the_pipeline_auto_falls_back_and_bmv2_is_an_error(lwip, tmp_path: Path) -> None:
    # tmp_path has no p4src/build/tng: BMv2 cannot run, whatever else this machine has
    chosen = switch.choose(lwip, tmp_path, {})
    assert not chosen.bmv2 and chosen.notice.startswith("Linux forwarding (BMv2 not used: ")
    required = load(tmp_path, LWIP.replace("[switch]\n", '[switch]\nuse = "bmv2"\n'))
    with pytest.raises(ScenarioError) as caught:
        switch.choose(required, tmp_path, {})
    assert caught.value.key == "switch.use" and "BMv2 cannot run here" in caught.value.problem


def test_bmv2_owns_the_switch_interfaces_and_the_ue_answers_on_one_address(lwip) -> None:
    plan = make_plan(lwip, "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=True)
    commands = [" ".join(command) for command in plan.commands()]
    assert "ip netns exec tlab42-switch sysctl -qw net.ipv4.ip_forward=0" in commands
    assert not [c for c in commands if c.startswith("ip -n tlab42-switch addr add")]
    server_arp = f"ip -n tlab42-server neigh replace 10.0.0.254 lladdr {plan.switch_server_mac} dev eth0 nud permanent"
    assert server_arp in commands
    assert "ip -n tlab42-ue addr add 10.2.0.2/32 dev lo" in commands
    assert "ip -n tlab42-ue rule add from 10.2.0.2 table 101" in commands  # answers over Wi-Fi
    assert "ip -n tlab42-server route add 10.2.0.0/24 via 10.0.0.254" in commands
    # A full-VISIBLE workload gets the retransmission helper on a port of its own: a veth inside the switch namespace.
    assert plan.switch_ports() == [(1, "srv"), (2, "l-lte"), (3, "l-wifi"), (4, "helper")]
    helper_veth = [c for c in commands if c.startswith("ip link add helper netns tlab42-switch")]
    assert len(helper_veth) == 1 and "peer name helper-end netns tlab42-switch" in helper_veth[0]
    # A copy is an MTU-sized frame plus the helper's headers: at the default 1500 the veth would drop every one.
    assert "ip -n tlab42-switch link set helper mtu 9000" in commands
    assert "ip -n tlab42-switch link set helper-end mtu 9000" in commands
    argv = bmv2.config(Path("/usr/bin/simple_switch_grpc"), plan, Path("/tmp/bmv2.log")).command()
    assert argv[:4] == ["ip", "netns", "exec", "tlab42-switch"]
    ports = " -i 1@srv -i 2@l-lte -i 3@l-wifi -i 4@helper --no-p4 -- --grpc-server-addr 127.0.0.1:9559 --cpu-port 255"
    assert ports in " ".join(argv)
    helper = controller.helper_command(plan)
    assert helper[:4] == ["ip", "netns", "exec", "tlab42-switch"]
    module = [sys.executable, "-m", "tng_controller.retransmit_helper"]
    assert helper[4:] == [*module, "--interface", "helper-end", "--health", "127.0.0.1:9601"]


def test_the_helper_on_the_controllers_stream_needs_no_port(tmp_path: Path) -> None:
    on_stream = load(tmp_path, LWIP.replace("[switch]\n", '[switch]\nhelper = "cpu"\n'))
    plan = make_plan(on_stream, "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=True)
    assert plan.helper_port is None and plan.switch_ports() == [(1, "srv"), (2, "l-lte"), (3, "l-wifi")]
    file = tmp_path / "controller.toml"
    file.write_text(controller.config_toml(on_stream, plan, P4INFO, BMV2_JSON, tmp_path / "c.db"))
    (lwip_switch,) = controller_config.load(file).switches
    assert lwip_switch.helper is not None and lwip_switch.helper.attach == "cpu"
    assert {p.role for p in lwip_switch.ports} == {"core", "lte", "wifi"}


def test_linux_forwarding_starts_no_helper_process(lwip) -> None:
    plan = make_plan(lwip, "tlab42-", Path("/run/tng-lab/tlab42"))
    assert plan.helper_port is None and not [v for v in plan.veths() if v.a_if == "helper"]


def test_linux_forwarding_keeps_the_switch_addresses(lwip) -> None:
    plan = make_plan(lwip, "tlab42-", Path("/run/tng-lab/tlab42"))
    commands = [" ".join(command) for command in plan.commands()]
    assert "ip netns exec tlab42-switch sysctl -qw net.ipv4.ip_forward=1" in commands
    assert "ip -n tlab42-switch addr add 10.1.1.1/24 dev l-wifi" in commands


def test_the_controller_reads_the_generated_configuration(lwip, tmp_path: Path) -> None:
    plan = make_plan(lwip, "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=True)
    file = tmp_path / "controller.toml"
    file.write_text(controller.config_toml(lwip, plan, P4INFO, BMV2_JSON, tmp_path / "c.db"))
    loaded = controller_config.load(file)
    assert loaded.api.listen == "127.0.0.1:0"
    (lwip_switch,) = loaded.switches
    assert (lwip_switch.address, lwip_switch.thrift, lwip_switch.p4info) == ("127.0.0.1:9559", "127.0.0.1:9090", P4INFO)
    ports = {(p.port, p.role, p.capacity_bps, p.queue_packets) for p in lwip_switch.ports}
    assert ports == {
        (1, "core", None, None),
        (2, "lte", 10_000_000, 100),
        (3, "wifi", 30_000_000, 100),
        (4, "helper", None, None),
    }
    lte, wifi = plan.path("lte"), plan.path("wifi")
    assert {p.port: p.mac for p in lwip_switch.ports}[2] == int(lte.switch_mac.replace(":", ""), 16)
    routes = {str(r.prefix): r for r in lwip_switch.routes}
    assert set(routes) == {"10.0.0.0/24", "10.1.0.0/24", "10.1.1.0/24", "10.2.0.0/24"}
    steered = routes["10.2.0.0/24"]
    assert steered.lte is not None and steered.wifi is not None and steered.next_hop is None
    assert (steered.lte.port, steered.wifi.port) == (2, 3)
    assert steered.wifi.dst_mac == int(wifi.ue_mac.replace(":", ""), 16)
    # The link prober: from the server's gateway (punted to the controller) to the UE's LWIP address.
    assert (str(lwip_switch.probe_source), str(steered.probe)) == ("10.0.0.254", "10.2.0.2")
    helper = lwip_switch.helper
    assert helper is not None and (helper.attach, helper.port, helper.health) == ("port", 4, "127.0.0.1:9601")


def test_no_helper_without_a_full_visible_workload(tmp_path: Path) -> None:
    plain = load(tmp_path, LWIP.replace('visible = "full"\n', 'visible = "hold"\n'))
    plan = make_plan(plain, "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=True)
    assert "[switch.helper]" not in controller.config_toml(plain, plan, P4INFO, BMV2_JSON, tmp_path / "c.db")


def test_steered_policies_read_back_by_tngctl(lwip, tmp_path: Path) -> None:
    plan = make_plan(lwip, "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=True)
    plain, visible = (tmp_path / "plain.toml", tmp_path / "visible.toml")
    plain.write_text(controller.policy_toml(lwip, plan, lwip.workloads[1]))
    visible.write_text(controller.policy_toml(lwip, plan, lwip.workloads[2]))
    (policy,) = load_policies(str(plain))
    assert policy.name == controller.STEERED_POLICY
    assert (policy.match.dst_prefix, policy.match.ip_protocol) == ("10.2.0.0/24", 6)
    assert policy.switch_policy.aggregation == pb.AGGREGATION_IN_NETWORK
    assert policy.switch_policy.steering == pb.STEERING_MODE_QDEPL
    assert (policy.switch_policy.lte_weight, policy.switch_policy.wifi_weight) == (100, 300)  # 10 : 30 Mbit/s
    assert not policy.switch_policy.visible.enabled
    (with_visible,) = load_policies(str(visible))
    assert with_visible.switch_policy.visible.enabled
    assert with_visible.switch_policy.visible.hold_budget_us == 0  # the controller derives it from measurements
    assert (
        with_visible.switch_policy.visible.max_boosts > 0 and with_visible.switch_policy.visible.max_retransmissions > 0
    )


def test_hold_only_policy_neither_boosts_nor_retransmits(tmp_path: Path) -> None:
    """visible = "hold": the switch holds dup-ACKs and, with nothing to boost or retransmit, copies nothing."""
    hold = load(tmp_path, LWIP.replace('visible = "full"', 'visible = "hold"'))
    plan = make_plan(hold, "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=True)
    file = tmp_path / "hold.toml"
    file.write_text(controller.policy_toml(hold, plan, hold.workloads[2]))
    (policy,) = load_policies(str(file))
    visible = policy.switch_policy.visible
    assert visible.enabled and (visible.max_boosts, visible.max_retransmissions) == (0, 0)
    assert (visible.hold_slack, visible.hold_budget_us) == (0, 0)  # the controller derives both


@pytest.mark.parametrize("steering", ["lowest-rtt", "earliest-arrival", "qdepl-dataplane", "flow-hash"])
def test_modes_without_weights_get_none_and_the_controller_accepts_them(steering: str, tmp_path: Path) -> None:
    """Only weighted and qdepl take LTE/Wi-Fi weights; lowest-rtt's spill depth is left to the controller."""
    text = LWIP.replace('steering = "qdepl"\nvisible = "full"', f'steering = "{steering}"\nvisible = "full"')
    steered = load(tmp_path, text)
    plan = make_plan(steered, "tlab42-", Path("/run/tng-lab/tlab42"), bmv2=True)
    file = tmp_path / "policy.toml"
    file.write_text(controller.policy_toml(steered, plan, steered.workloads[2]))
    (policy,) = load_policies(str(file))
    assert policy.switch_policy.steering == pb.SteeringMode.Value(controller.STEERING_ENUMS[steering])
    assert (policy.switch_policy.lte_weight, policy.switch_policy.wifi_weight) == (0, 0)
    assert policy.switch_policy.spill_threshold_packets == 0
    check(policy)  # what the controller's SetPolicy validates


def test_capacities_and_queue_depths() -> None:
    assert [controller.capacity(r) for r in (10e6, 1.5e6, 123.0, 2e9)] == ["10mbit", "1500kbit", "123bit", "2gbit"]
    assert bmv2.queue_rate_pps(10e6) == 833 and bmv2.queue_rate_pps(30e6) == 2500


def test_linkem_runs_faster_than_the_switch_it_follows(lwip) -> None:
    lte = lwip.link("lte").down
    faster = bmv2.linkem_direction(lte)
    assert faster.rate_bps == pytest.approx(10e6 * bmv2.LINKEM_HEADROOM) and bmv2.LINKEM_HEADROOM > 1
    assert (faster.delay_s, faster.extra) == (lte.delay_s, lte.extra), "only the rate changes"
    assert faster.spec().startswith(f"rate={round(10e6 * bmv2.LINKEM_HEADROOM)}bit,delay=25000us")
    unlimited = Direction(delay_s=0.005)
    assert bmv2.linkem_direction(unlimited) is unlimited


def test_the_switch_runs_as_a_real_time_process_like_linkem(lwip, tmp_path: Path) -> None:
    plan = make_plan(lwip, "tlabtest", tmp_path, bmv2=True)
    argv = bmv2.config(Path("/usr/local/bin/simple_switch_grpc"), plan, tmp_path / "log").command()
    chrt = argv.index("chrt")
    assert argv[chrt : chrt + 4] == ["chrt", "--fifo", linkem.REALTIME_PRIORITY, "/usr/local/bin/simple_switch_grpc"]


def test_the_switch_runs_on_jemalloc_where_installed_else_on_glibc_with_two_arenas(
    lwip, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(lwip, "tlabtest", tmp_path, bmv2=True)
    binary = Path("/usr/local/bin/simple_switch_grpc")
    monkeypatch.setattr(
        bmv2.ctypes.util, "find_library", lambda name: "libjemalloc.so.2" if name == "jemalloc" else None
    )
    config = bmv2.config(binary, plan, tmp_path / "log")
    assert (config.allocator, config.malloc_arenas) == ("libjemalloc.so.2", None)
    monkeypatch.setattr(bmv2.ctypes.util, "find_library", lambda name: None)
    config = bmv2.config(binary, plan, tmp_path / "log")
    assert (config.allocator, config.malloc_arenas) == (None, bmv2.MALLOC_ARENAS)


def _counters(queue_packets: int = 0) -> Counters:
    zero = {name: 0 for name in Counters.__dataclass_fields__}
    return Counters(**{**zero, "queue_packets": queue_packets, "queue_bytes": queue_packets * 1500})


def test_a_packet_waits_out_the_switch_queue_before_linkem(lwip) -> None:
    idle = LinkCounters(_counters(), _counters())
    samples = [Sample(0.0, 0, {"lte": idle}, {"lte": 83}), Sample(0.2, 200, {"lte": idle}, {"lte": 0})]
    service = Service(25.0, 10e6, None)
    with_switch = path_result(samples, "lte", service, 0.0, 200.0, switch_pps=833)
    without = path_result(samples, "lte", service, 0.0, 200.0)
    assert with_switch.series.delay_ms[0] - without.series.delay_ms[0] == pytest.approx(83 / 833 * 1e3)


def test_a_hidden_toolchain_means_linux_forwarding_with_the_reason(
    lwip, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TNG_HIDE_P4_TOOLCHAIN", "1")
    chosen = switch.choose(lwip, Path(__file__).resolve().parents[2], {})  # the repository: its pipeline is built
    assert (chosen.bmv2, chosen.notice) == (
        False,
        "Linux forwarding (BMv2 not used: the P4 toolchain is hidden by TNG_HIDE_P4_TOOLCHAIN=1)",
    )
