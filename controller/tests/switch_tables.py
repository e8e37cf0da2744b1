"""What a BMv2 switch holds of the bench's policies, for the tests that compare it with the store."""

from __future__ import annotations

from tng_controller.bench import FIRST_PORT
from tng_controller.compile import FLOW_POLICY, STEERING_MODES
from tng_controller.testbed import SwitchReader


def held(reader: SwitchReader) -> dict[int, list[int]]:
    """Policy index (from the flow_policy entry's destination port) -> the lte_weight of every steering entry of
    that entry's policy id."""
    port_field = reader.schema.tables[FLOW_POLICY].match_fields["dst_port"].id
    weights: dict[int, list[int]] = {}
    for entry in reader.entry_messages(STEERING_MODES):
        policy_id = int.from_bytes(entry.match[0].exact.value, "big")
        weights.setdefault(policy_id, []).append(int.from_bytes(entry.action.action.params[0].value, "big"))
    by_index: dict[int, list[int]] = {}
    for entry in reader.entry_messages(FLOW_POLICY):
        port = next(int.from_bytes(f.ternary.value, "big") for f in entry.match if f.field_id == port_field)
        policy_id = int.from_bytes(entry.action.action.params[0].value, "big")
        by_index.setdefault(port - FIRST_PORT, []).extend(weights.pop(policy_id, []))
    assert not weights, f"steering entries of policy ids no flow_policy entry names: {sorted(weights)}"
    return by_index
