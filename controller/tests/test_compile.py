"""Policy compilation into entries of the tng pipeline's policy tables, and a golden file of their encoding."""

from __future__ import annotations

import os
from pathlib import Path

import finsy as fy
import pytest
from tng_controller.compile import Link, Tuning, compile_policies, policy_entries
from tng_controller.pb import policy_pb2 as pb
from tng_controller.store import StoredPolicy
from tng_controller.switch_config import DEFAULT_BMV2_JSON, DEFAULT_P4INFO

GOLDEN = Path(__file__).parent / "golden" / "compile.txt"
WIFI, LTE = Tuning(Link.WIFI), Tuning(Link.LTE)
NEVER = 0xFFFFFFFF


def stored(policy_id: int, **fields) -> StoredPolicy:
    return StoredPolicy(pb.Policy(name=f"p{policy_id}", **fields), policy_id)


def in_network(steering: int, **switch) -> pb.SwitchPolicy:
    return pb.SwitchPolicy(aggregation=pb.AGGREGATION_IN_NETWORK, steering=steering, **switch)


def entries(policy: StoredPolicy, tuning: Tuning | None = None) -> list[tuple[str, dict, str, dict, int]]:
    return [
        (e.table_id, dict(e.match or {}), e.action.name, e.action.args, e.priority)
        for e in policy_entries(policy, tuning)
    ]


def test_a_policy_without_a_switch_half_has_no_entries() -> None:
    host_only = stored(1, match=pb.Match(dst_prefix="10.0.0.0/8"), host_policy=pb.HostPolicy(scheduler="weighted"))
    assert entries(host_only) == []


def test_flow_match_is_ternary_with_wildcards_left_out() -> None:
    policy = stored(
        7,
        match=pb.Match(
            priority=0,
            src_prefix="0.0.0.0/0",
            dst_prefix="10.1.0.0/16",
            ip_protocol=17,
            dst_port=pb.PortMatch(value=4400, mask=0xFFF0),
        ),
        switch_policy=in_network(pb.STEERING_MODE_LTE_ONLY),
    )
    assert entries(policy) == [
        (
            "ingress.classify.flow_policy",
            {"dst_addr": (0x0A010000, 0xFFFF0000), "protocol": (17, 0xFF), "dst_port": (4400, 0xFFF0)},
            "ingress.classify.set_policy",
            {"policy": 7},
            1,
        ),
        ("ingress.steering.modes", {"policy": 7}, "ingress.steering.steer_lte_only", {}, 0),
    ]


def test_connection_id_match() -> None:
    policy = stored(
        2,
        match=pb.Match(has_connection_id=True, connection_id=0xDEADBEEF00000001, priority=4),
        switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_AT_HOSTS, backpressure=pb.Backpressure(feedback=True)),
    )
    assert entries(policy) == [
        (
            "ingress.classify.connection_policy",
            {"connection_id": 0xDEADBEEF00000001},
            "ingress.classify.set_policy",
            {"policy": 2},
            0,
        ),
        (
            "egress.backpressure.thresholds",
            {"policy": 2},
            "egress.backpressure.set_thresholds",
            {"feedback_min_us": 0, "ecn_mark_us": NEVER},
            0,
        ),
    ]


@pytest.mark.parametrize(
    ("switch", "tuning", "action", "args"),
    [
        (in_network(pb.STEERING_MODE_UNSPECIFIED), WIFI, "steer_flow_hash", {}),
        (in_network(pb.STEERING_MODE_FLOW_HASH), WIFI, "steer_flow_hash", {}),
        (
            in_network(pb.STEERING_MODE_WEIGHTED, lte_weight=1, wifi_weight=3),
            WIFI,
            "steer_weighted",
            {"lte_weight": 1, "wifi_weight": 3},
        ),
        (in_network(pb.STEERING_MODE_WEIGHTED), WIFI, "steer_weighted", {"lte_weight": 1, "wifi_weight": 1}),
        (
            in_network(pb.STEERING_MODE_QDEPL, lte_weight=0, wifi_weight=5),
            WIFI,
            "steer_qdepl",
            {"lte_rate": 0, "wifi_rate": 5},
        ),
        (in_network(pb.STEERING_MODE_QDEPL_DATAPLANE), WIFI, "steer_qdepl_measured", {}),
        (
            in_network(pb.STEERING_MODE_LOWEST_RTT_FIRST, spill_threshold_packets=20),
            WIFI,
            "steer_lowest_rtt",
            {"preferred_link": 1, "spill_depth": 20},
        ),
        (
            in_network(pb.STEERING_MODE_LOWEST_RTT_FIRST),
            LTE,
            "steer_lowest_rtt",
            {"preferred_link": 0, "spill_depth": 0},
        ),
        (
            in_network(pb.STEERING_MODE_LOWEST_RTT_FIRST),
            Tuning(Link.LTE, spill_depth=51),
            "steer_lowest_rtt",
            {"preferred_link": 0, "spill_depth": 51},
        ),
        (
            in_network(pb.STEERING_MODE_LOWEST_RTT_FIRST, spill_threshold_packets=20),
            Tuning(Link.LTE, spill_depth=51),
            "steer_lowest_rtt",
            {"preferred_link": 0, "spill_depth": 20},
        ),
        (in_network(pb.STEERING_MODE_WIFI_ONLY), WIFI, "steer_wifi_only", {}),
        (in_network(pb.STEERING_MODE_EARLIEST_ARRIVAL), Tuning(spill_depth=51), "steer_earliest_arrival", {}),
    ],
)
def test_steering_modes(switch: pb.SwitchPolicy, tuning: Tuning, action: str, args: dict) -> None:
    """Each mode's action; LOWEST_RTT_FIRST takes the preferred link from the tuning, and the derived spill depth
    only when the policy leaves it 0."""
    steering = [e for e in entries(stored(3, switch_policy=switch), tuning) if e[0] == "ingress.steering.modes"]
    assert steering == [("ingress.steering.modes", {"policy": 3}, f"ingress.steering.{action}", args, 0)]


def test_at_hosts_leaves_steering_to_the_table_default() -> None:
    policy = stored(4, switch_policy=pb.SwitchPolicy(aggregation=pb.AGGREGATION_AT_HOSTS))
    assert [e[0] for e in entries(policy)] == ["ingress.classify.flow_policy"]


def test_visible_defaults_and_gains_as_shifts() -> None:
    defaults = stored(5, switch_policy=in_network(pb.STEERING_MODE_WEIGHTED, visible=pb.Visible(enabled=True)))
    tuned = stored(
        6,
        switch_policy=in_network(
            pb.STEERING_MODE_WEIGHTED,
            visible=pb.Visible(
                enabled=True,
                hold_budget_us=30_000,
                boost_threshold_packets=50,
                max_retransmissions=2,
                ewma_alpha=256,
                ewma_beta=1,
                segment_size=1200,
                hold_slack=3,
                max_boosts=8,
                idle_timeout_us=5_000_000,
                report_bytes=14_480,
            ),
        ),
    )
    visible = {p.policy_id: [e[3] for e in entries(p) if e[0] == "ingress.visible.params"] for p in (defaults, tuned)}
    assert visible == {
        5: [
            {
                "segment_size": 1448,
                "hold_budget_us": 0,
                "hold_slack": 0,
                "boost_max_depth": 0,
                "boost_max": 0,
                "retransmit_max": 0,
                "alpha_shift": 2,
                "beta_shift": 3,
                "idle_timeout_us": 1_000_000,
                "report_bytes": 0,
                "queue_aware_hold": 1,
            }
        ],
        6: [
            {
                "segment_size": 1200,
                "hold_budget_us": 30_000,
                "hold_slack": 3,
                "boost_max_depth": 50,
                "boost_max": 8,
                "retransmit_max": 2,
                "alpha_shift": 0,
                "beta_shift": 8,
                "idle_timeout_us": 5_000_000,
                "report_bytes": 14_480,
                "queue_aware_hold": 1,
            }
        ],
    }
    derived = Tuning(hold_budget_us=24_800)
    assert [e[3]["hold_budget_us"] for e in entries(defaults, derived) if e[0] == "ingress.visible.params"] == [24_800]
    assert [e[3]["hold_budget_us"] for e in entries(tuned, derived) if e[0] == "ingress.visible.params"] == [30_000]
    disabled = stored(7, switch_policy=in_network(pb.STEERING_MODE_WEIGHTED, visible=pb.Visible(hold_budget_us=9)))
    assert "ingress.visible.params" not in [e[0] for e in entries(disabled)]


@pytest.mark.parametrize(
    ("steering", "queue_aware"),
    [
        (pb.STEERING_MODE_WEIGHTED, 1),
        (pb.STEERING_MODE_QDEPL, 1),
        (pb.STEERING_MODE_QDEPL_DATAPLANE, 1),
        (pb.STEERING_MODE_EARLIEST_ARRIVAL, 0),
        (pb.STEERING_MODE_LOWEST_RTT_FIRST, 0),
        (pb.STEERING_MODE_FLOW_HASH, 0),
        (pb.STEERING_MODE_LTE_ONLY, 0),
    ],
)
def test_the_hold_budget_adds_queueing_only_for_steering_that_splits_by_rate(steering: int, queue_aware: int) -> None:
    """Rate-splitting modes send a segment behind a queue whatever its delay; the delay-aware modes keep the
    reordering within the propagation difference the hold budget already covers."""
    policy = stored(11, switch_policy=in_network(steering, visible=pb.Visible(enabled=True)))
    params = [e[3] for e in entries(policy) if e[0] == "ingress.visible.params"]
    assert [p["queue_aware_hold"] for p in params] == [queue_aware]


def test_backpressure_thresholds() -> None:
    ecn_only = stored(8, switch_policy=in_network(1, backpressure=pb.Backpressure(ecn_threshold_us=500)))
    both = stored(9, switch_policy=in_network(1, backpressure=pb.Backpressure(feedback=True, ecn_threshold_us=800)))
    off = stored(10, switch_policy=in_network(1, backpressure=pb.Backpressure()))
    thresholds = {
        p.policy_id: [e[3] for e in entries(p) if e[0] == "egress.backpressure.thresholds"]
        for p in (ecn_only, both, off)
    }
    assert thresholds == {
        8: [{"feedback_min_us": NEVER, "ecn_mark_us": 500}],
        9: [{"feedback_min_us": 0, "ecn_mark_us": 800}],
        10: [],
    }


def golden_policies() -> list[StoredPolicy]:
    return [
        stored(
            3,
            match=pb.Match(
                priority=10, dst_prefix="10.0.2.0/24", ip_protocol=6, dst_port=pb.PortMatch(value=443, mask=0xFFFF)
            ),
            switch_policy=in_network(
                pb.STEERING_MODE_WEIGHTED,
                lte_weight=1,
                wifi_weight=3,
                visible=pb.Visible(enabled=True, hold_budget_us=20_000, max_boosts=4, max_retransmissions=2),
                backpressure=pb.Backpressure(ecn_threshold_us=5_000),
            ),
        ),
        stored(
            1,
            match=pb.Match(has_connection_id=True, connection_id=0x0123456789ABCDEF),
            switch_policy=pb.SwitchPolicy(
                aggregation=pb.AGGREGATION_AT_HOSTS, backpressure=pb.Backpressure(feedback=True)
            ),
        ),
        stored(
            2, match=pb.Match(src_prefix="192.168.0.0/16"), switch_policy=in_network(pb.STEERING_MODE_QDEPL_DATAPLANE)
        ),
        stored(4, switch_policy=in_network(pb.STEERING_MODE_LOWEST_RTT_FIRST, spill_threshold_packets=30)),
        stored(
            5,
            match=pb.Match(dst_prefix="10.0.3.0/24", ip_protocol=6),
            switch_policy=in_network(pb.STEERING_MODE_EARLIEST_ARRIVAL),
        ),
    ]


@pytest.fixture
def schema(contract_pipeline: tuple[Path, Path]) -> fy.P4Schema:
    """The committed P4Info of the tng pipeline once p4c built it, the documented contract until then."""
    if DEFAULT_P4INFO.is_file():
        return fy.P4Schema(DEFAULT_P4INFO, DEFAULT_BMV2_JSON)
    return fy.P4Schema(*contract_pipeline)


def test_golden_encoding(schema: fy.P4Schema) -> None:
    """Every entry encodes against the P4Info; the decoded entries, printed, equal the golden file (set
    TNG_UPDATE_GOLDEN=1 to rewrite it)."""
    lines = []
    for entry in compile_policies(golden_policies()):
        decoded = fy.P4TableEntry.decode_entry(entry.encode_entry(schema), schema)
        match, action = decoded.match_str(schema), decoded.action_str(schema)
        lines.append(f"{schema.tables[decoded.table_id].name} priority={decoded.priority} {match} -> {action}")
    text = "\n".join(lines) + "\n"
    if os.environ.get("TNG_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_contract_p4info_agrees_with_the_compiled_one(contract_pipeline: tuple[Path, Path]) -> None:
    """The tests' stand-in P4Info names every table, field, action and parameter as the real one does."""
    if not DEFAULT_P4INFO.is_file():
        pytest.skip(f"{DEFAULT_P4INFO} does not exist yet (p4c has not compiled p4src/v1model/tng.p4)")
    real = fy.P4Schema(DEFAULT_P4INFO)
    contract = fy.P4Schema(contract_pipeline[0])
    for table in contract.tables:
        assert [(f.name, f.bitwidth, f.match_type) for f in real.tables[table.name].match_fields] == [
            (f.name, f.bitwidth, f.match_type) for f in table.match_fields
        ]
        assert {a.name for a in real.tables[table.name].actions} >= {a.name for a in table.actions}
    for action in contract.actions:
        assert [(p.name, p.bitwidth) for p in real.actions[action.name].params] == [
            (p.name, p.bitwidth) for p in action.params
        ]
    for counter in contract.counters:
        assert real.counters[counter.name].size == counter.size
    for metadata in contract.controller_packet_metadata:
        assert [(m.name, m.bitwidth) for m in real.controller_packet_metadata[metadata.name].metadata] == [
            (m.name, m.bitwidth) for m in metadata.metadata
        ]
