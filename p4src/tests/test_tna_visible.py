"""VISIBLE on Tofino as compiled: its tables' constant entries (from the committed context.json) run packet by packet
against the branching they replaced (the TNA program's gateways before 2026-12-05, transcribed below), for random
packets, policies and register verdicts. Both must run the same register actions and reach the same decision.

The registers themselves are not simulated: each register action's verdict is drawn from what that action can return
(its predicate, one bit of four: 1 << (cmplo + 2 cmphi), or 0/1), and both sides are given the same draw.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tng_p4 import pipeline, tna, tofino_build

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "ingress.visible."
# The step tables in the order the program applies them.
STEPS = (
    "flow_state.owner_step",
    "flow_state.forwarded_end_step",
    "flow_state.forwarded_max_step",
    "flow_state.ack_window_step",
    "flow_state.receiver_ack_step",
    "flow_state.copy_state_step",
    "ack_state.burst_step",
    "ack_state.confirmed_end_step",
    "ack_state.reported_ack_step",
    "ack_state.sent_ack_step",
    "ack_state.hold_since_step",
    "ack_state.retransmits_step",
)
ROLE_CORE, ROLE_LTE, ROLE_WIFI = 0, 1, 2
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
NOP, TIMESTAMPS, TIMESTAMPS_LENGTH = 1, 8, 10
KIND_CONFIRMATION, KIND_DATA, KIND_ACK = 1, 2, 3
# Decision counter indexes (p4src/shared/pipeline_define.p4).
TRACKED, COPIED, UNTRACKED, NEW_ACK = 0, 1, 2, 3
HELD, BOOSTED, REQUESTED, REPORTED = 5, 6, 7, 8
DUP_FORWARDED, CONFIRMED, HIDDEN = 9, 10, 11
DATA_COPY, ACK_REPORT, RETRANSMIT = 1, 2, 3  # helper reasons
# What each register action can return: its predicate bits, a 0/1 flag, a value (boost: 0 or the ACK number).
VERDICTS: dict[str, tuple[int, ...]] = {
    "claim_or_touch": (1, 2, 4, 8),
    "touch": (1, 2),
    "check_owner": (1, 2),
    "check_window": (1, 2, 4, 8),
    "peek_window": (1, 2, 4, 8),
    "order_ack": (1, 2, 4),
    "compare_ack": (1, 2, 4),
    "count_dup": (1, 2, 4, 8),
    "catch_up_max": (0, 1),
    "check_copies": (0, 1),
    "claim_copies": (1,),
    "start_copies": (0, 1),
    "confirm": (0, 1),
    "report": (0, 1),
    "boost": (0, 5000),
    "advance_sent": (0, 1),
    "hold_dup": (0, 1),
    "end_hold_hide": (0, 1),
    "request": (0, 1),
}
# The step actions' results (the others run their register action for its effect alone).
RESULT_FIELDS = {
    "claim_or_touch": "owner",
    "touch": "owner",
    "check_owner": "owner",
    "catch_up_max": "outstanding",
    "check_window": "seen",
    "peek_window": "seen",
    "order_ack": "order",
    "compare_ack": "order",
    "check_copies": "copies",
    "claim_copies": "started",
    "start_copies": "started",
    "count_dup": "allows",
    "confirm": "moved",
    "report": "due",
    "boost": "target",
    "advance_sent": "owed",
    "hold_dup": "held",
    "end_hold_hide": "hide",
    "request": "requested",
}


@dataclass(frozen=True)
class Entry:
    priority: int
    match: tuple[tuple[str, int, int, int, int], ...]  # field, start bit, width, value, mask
    action: str
    args: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Table:
    entries: tuple[Entry, ...]
    default: str
    default_args: tuple[tuple[str, int], ...]

    def lookup(self, env: dict[str, int]) -> tuple[str, dict[str, int]]:
        """The action of the first entry that matches (lowest priority number), else the default action."""
        for entry in self.entries:
            if all(
                ((env[name] >> start) & ((1 << width) - 1) & mask) == value & mask
                for name, start, width, value, mask in entry.match
            ):
                return entry.action, dict(entry.args)
        return self.default, dict(self.default_args)


@cache
def tables() -> dict[str, Table]:
    context = json.loads((ROOT / pipeline.BUILD_DIR / tna.BUILD_NAME / tofino_build.CONTEXT).read_text())
    found = {}
    for table in context["tables"]:
        if not table["name"].startswith(PREFIX) or not table.get("static_entries"):
            continue
        names = {action["handle"]: action["name"].rsplit(".", 1)[-1] for action in table["actions"]}
        default = next((a for a in table["actions"] if a["handle"] == table.get("default_action_handle")), None)
        default_args = tuple((p["name"], int(p["default_value"], 16)) for p in (default or {}).get("p4_parameters", []))
        keys = {key["name"]: (key.get("start_bit", 0), key["bit_width"]) for key in table["match_key_fields"]}
        entries = tuple(
            Entry(
                entry["priority"],
                tuple(
                    (m["field_name"], *keys[m["field_name"]], int(m["value"], 16), int(m["mask"], 16))
                    for m in entry["match_key_fields_values"]
                ),
                names[entry["action_handle"]],
                tuple((p["parameter_name"], int(p["value"], 16)) for p in entry.get("action_parameters_values", [])),
            )
            for entry in sorted(table["static_entries"], key=lambda e: e["priority"])
        )
        found[table["name"].removeprefix(PREFIX)] = Table(
            entries, names.get(table.get("default_action_handle"), ""), default_args
        )
    return found


@dataclass
class Packet:
    helper_frame: bool
    lwip: bool
    injected: bool
    role: int
    flags: int
    payload: int
    enabled: bool
    helper_ok: bool
    helper_epoch: int
    boosts_max: int
    requests_max: int
    hold_budget: int
    sack_blocks: int
    signs: dict[str, int]  # sign bits of d01, d02, d12, below_ack, right_inside
    data_offset: int
    timestamps: str  # "none", "right", "wrong"


@dataclass
class Outcome:
    ran: list[str] = field(default_factory=list)  # register actions (registers are independent: compared sorted)
    drop: bool = False
    count: int | None = None
    helper: int | None = None
    boosted: bool = False
    sack_hidden: bool = False


def random_packet(rng: random.Random) -> Packet:
    return Packet(
        helper_frame=rng.random() < 0.15,
        lwip=rng.random() < 0.45,
        injected=rng.random() < 0.1,
        role=rng.choice((ROLE_CORE, ROLE_LTE, ROLE_WIFI)),
        flags=rng.choice((ACK, ACK, ACK, ACK | FIN, ACK | SYN, SYN, FIN, ACK | RST, ACK | SYN | FIN, 0)),
        payload=rng.choice((0, 0, 1448)),
        enabled=rng.random() < 0.9,
        helper_ok=rng.random() < 0.8,
        helper_epoch=rng.choice((0, 3, 3)),
        boosts_max=rng.choice((0, 3, 3)),
        requests_max=rng.choice((0, 2, 2)),
        hold_budget=rng.choice((0, 4000, 4000)),
        sack_blocks=rng.choice((0, 0, 1, 2, 3)),
        signs={name: rng.randint(0, 1) for name in ("d01", "d02", "d12", "below_ack", "right_inside")},
        data_offset=rng.choice((5, 8, 8, 11, 13)),
        timestamps=rng.choice(("none", "right", "right", "wrong")),
    )


def environment(packet: Packet) -> dict[str, int]:
    """The key fields of the compiled tables, as the packet and its policy set them (the rest start at 0)."""
    env: dict[str, int] = {
        "hdr.helper.$valid": int(packet.helper_frame),
        "md.lwip": int(packet.lwip),
        "md.injected": int(packet.injected),
        "md.role": packet.role,
        "hdr.wire.tcp.flags": packet.flags,
        "md.tcp_payload_bytes": packet.payload,
        "hdr.wire.tcp.data_offset": packet.data_offset,
        "hdr.tcp_timestamps.$valid": int(packet.timestamps != "none"),
        "hdr.tcp_timestamps.nop1": NOP,
        "hdr.tcp_timestamps.nop2": NOP if packet.timestamps == "right" else 0,
        "hdr.tcp_timestamps.kind": TIMESTAMPS,
        "hdr.tcp_timestamps.length": TIMESTAMPS_LENGTH,
        "flow.enabled": int(packet.enabled),
        "flow.helper_ok": int(packet.helper_ok),
        "flow.helper_epoch": packet.helper_epoch,
        "flow.boosts_max": packet.boosts_max,
        "flow.requests_max": packet.requests_max,
        "flow.hold_budget": packet.hold_budget,
    }
    for i in range(3):
        env[f"hdr.sack_blocks${i}.$valid"] = int(packet.sack_blocks > i)
    for name, sign in packet.signs.items():
        env[name] = sign << 31
    for name in ("kind", "helper_copies", "copying", "boost_options", "dsack", *set(RESULT_FIELDS.values())):
        env[f"flow.{name}"] = 0
    return env


def register_action(step_action: str) -> str:
    return {"claim_or_touch_owner": "claim_or_touch", "touch_owner": "touch", "keep_hold": ""}.get(
        step_action, step_action.removesuffix("_of")
    )


def compiled(packet: Packet, draw: dict[str, int]) -> Outcome:
    """The packet through the compiled tables; `draw` gives each register action's verdict."""
    t = tables()
    env = environment(packet)
    kind_action, args = t["packet_kind"].lookup(env)
    env["flow.kind"] = {"take_confirmation": KIND_CONFIRMATION, "take_data": KIND_DATA, "take_ack": KIND_ACK}.get(
        kind_action, 0
    )
    _, flags = t["packet_plan"].lookup(env)
    env["flow.helper_copies"], env["flow.copying"], env["flow.boost_options"] = (
        flags["copies_count"],
        flags["copy"],
        flags["options"],
    )
    _, args = t["segment_bounds"].lookup(env)
    env["flow.dsack"] = args.get("duplicate", 0)
    out = Outcome()
    for step in STEPS:
        action, _ = t[step].lookup(env)
        name = register_action(action)
        if not name or action == "NoAction":
            continue
        out.ran.append(name)
        if name in RESULT_FIELDS:
            env[f"flow.{RESULT_FIELDS[name]}"] = draw[name]
    decision, args = t["outcome"].lookup(env)
    if decision in ("count_confirmation", "drop_confirmation", "drop_held"):
        out.drop = True
    out.count = {
        "count_confirmation": CONFIRMED,
        "copy_segment": COPIED,
        "send_boosted": BOOSTED,
        "drop_held": HELD,
        "request_retransmit": REQUESTED,
        "report_ack": REPORTED,
        "count_decision": args.get("decision"),
    }.get(decision)
    out.helper = {"copy_segment": DATA_COPY, "request_retransmit": RETRANSMIT, "report_ack": ACK_REPORT}.get(decision)
    out.boosted = decision == "send_boosted"
    out.sack_hidden = env["flow.hide"] == 1
    return out


def branching(packet: Packet, draw: dict[str, int]) -> Outcome:
    """The TNA program's VISIBLE before its step tables, as gateways and branches (f220a99, tna/visible.p4)."""
    out = Outcome()

    def run(name: str) -> int:
        out.ran.append(name)
        return draw.get(name, 0)

    owner_of = {1: "other", 2: "self", 8: "self", 4: "claimed"}
    seen_of = {1: "changed", 2: "same", 4: "first", 8: "first"}
    order_of = {1: "other", 2: "same", 4: "newer"}
    allows_of = {1: "none", 2: "hold", 4: "boost", 8: "both"}
    p = packet
    helper_copies = p.helper_ok and p.helper_epoch != 0
    if p.helper_frame:
        out.drop = True
        if owner_of[run("check_owner")] == "self":
            seen = seen_of[run("peek_window")]
            start = order_of[run("compare_ack")]
            copies = run("check_copies")
            confirming = helper_copies and seen != "first" and start != "newer" and copies == 1
            if confirming and run("confirm") == 1:
                out.count = CONFIRMED
    elif p.enabled and p.lwip and not p.injected:
        policy_copies = p.boosts_max != 0 or p.requests_max != 0
        copying = (p.payload != 0 or p.flags & (SYN | FIN) != 0) and policy_copies and helper_copies
        owner = owner_of[run("claim_or_touch")]
        if owner == "other":
            out.count = UNTRACKED
        else:
            if owner == "claimed":
                for name in ("claim_end", "claim_max", "forget_window", "init_ack"):
                    run(name)
            else:
                run("advance_end")
                run("advance_max")
            started = 0
            if owner == "claimed":
                run("restart_burst")  # v1model's forget_burst
                if copying:
                    started = run("claim_copies")
                else:
                    run("forget_copies")
            elif copying:
                started = run("start_copies")
            if started == 1:
                run("reset_confirmed")
            if owner == "claimed":
                for name in ("forget_reported", "clear_hold", "reset_requests"):
                    run(name)
            out.count, out.helper = (COPIED, DATA_COPY) if copying else (TRACKED, None)
    elif p.enabled and p.role in (ROLE_LTE, ROLE_WIFI) and not p.injected and p.flags & ACK:
        s = p.signs
        sack = p.sack_blocks >= 1
        dsack = (sack and s["below_ack"] == 1) or (p.sack_blocks >= 2 and s["d01"] == 0 and s["right_inside"] == 0)
        pure = p.payload == 0 and p.flags & (SYN | FIN | RST) == 0
        timestamps = p.timestamps == "right"
        boost_options = helper_copies and (p.data_offset == 5 or (timestamps and (p.data_offset == 8 or sack)))
        hide_options = p.hold_budget != 0 and sack and not dsack
        if owner_of[run("touch")] != "self":
            out.count = UNTRACKED
            return out
        run("catch_up_end_sack" if sack else "catch_up_end")
        outstanding = run("catch_up_max")
        seen = seen_of[run("check_window")]
        order = order_of[run("order_ack")]
        copies = run("check_copies")
        if seen != "first" and order == "same" and pure and outstanding == 1 and (seen == "same" or sack):
            allows = allows_of[run("count_dup")]
            target = held = requested = 0
            if boost_options and copies == 1 and allows in ("boost", "both"):
                run("cap_confirmed")
                target = run("boost")
            if target != 0:
                run("restart_hold")
            else:
                if not dsack and allows in ("hold", "both"):
                    held = run("hold_dup")
                if held == 0 and helper_copies and copies == 1:
                    requested = run("request")
            if target != 0:
                out.count, out.boosted = BOOSTED, True
            elif held == 1:
                out.count, out.drop = HELD, True
            elif requested == 1:
                out.count, out.helper = REQUESTED, RETRANSMIT
            else:
                out.count = DUP_FORWARDED
        elif seen == "first" or order == "newer":
            run("restart_burst")  # v1model's end_burst
            due = owed = hide = 0
            if helper_copies and copies == 1:
                due = run("report")
            if seen == "first":
                run("first_sent")
            else:
                owed = run("advance_sent")
            if seen != "first" and hide_options and not (owed == 1 and p.helper_ok):
                hide = run("end_hold_hide")
            else:
                run("clear_hold")
            run("owe_request" if owed == 1 and p.helper_ok else "reset_requests")
            out.sack_hidden = hide == 1
            if owed == 1 and p.helper_ok:
                out.count, out.helper = REQUESTED, RETRANSMIT
            elif due == 1:
                out.count, out.helper = REPORTED, ACK_REPORT
            elif hide == 1:
                out.count = HIDDEN
            else:
                out.count = NEW_ACK
    return out


def test_the_step_tables_decide_as_the_branches_did() -> None:
    rng = random.Random(20261205)
    decisions: dict[Any, int] = {}
    for _ in range(40000):
        packet = random_packet(rng)
        draw = {name: rng.choice(values) for name, values in VERDICTS.items()}
        want, got = branching(packet, draw), compiled(packet, draw)
        want.ran.sort()
        got.ran.sort()
        assert got == want, (packet, draw)
        decisions[(want.count, want.helper, want.drop)] = decisions.get((want.count, want.helper, want.drop), 0) + 1
    # The draw reaches every decision (a comparison that never saw one would prove nothing about it).
    counted = {count for count, _, _ in decisions}
    assert {TRACKED, COPIED, UNTRACKED, NEW_ACK, HELD, BOOSTED, REQUESTED, REPORTED} <= counted
    assert {DUP_FORWARDED, CONFIRMED, HIDDEN, None} <= counted
