"""Policy churn: a throwaway policy is set, must reach the switch, is deleted, and must leave no entry behind once
the controller reconciled. The soak runs one after every fault that touches the controller or the switch (a kill,
the partition), when a deletion could fall between the controller's view and the switch's, and one at its end."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass

from tng_lab.netns import LabError
from tng_lab.soak.lab import SoakLab
from tng_lab.soak.switch_entries import EntryReader

APPEAR_TIMEOUT_S = 30.0
RECONCILE_TIMEOUT_S = 30.0
POLL_S = 2.0
CHURN_NETWORK = "10.9.{n}.0/24"  # never used by traffic: only the churn's entries match it


@dataclass(frozen=True, slots=True)
class Churn:
    t: float  # seconds since the soak started
    policy: str
    appeared_s: float | None  # seconds until its entries were on the switch
    gone_s: float | None  # seconds from its deletion until none was left
    problem: str | None  # what went wrong, None when both happened in time


def _policy_toml(name: str, network: str) -> str:
    return (
        "\n".join(
            [
                "[[policy]]",
                f'name = "{name}"',
                f'match = {{ priority = 5, dst_prefix = "{network}", ip_protocol = 6 }}',
                "[policy.switch_policy]",
                'aggregation = "AGGREGATION_IN_NETWORK"',
                'steering = "STEERING_MODE_WIFI_ONLY"',
            ]
        )
        + "\n"
    )


def _present(reader: EntryReader, network: str) -> int:
    """Switch entries in the policy tables whose match carries `network`'s address."""
    address = ipaddress.IPv4Network(network).network_address.packed.hex()
    return sum(1 for _, values in reader.read() if address in values)


def _wait(reader: EntryReader, network: str, want_present: bool, timeout_s: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            if (_present(reader, network) > 0) == want_present:
                return round(time.monotonic() - started, 1)
        except LabError:
            pass  # the switch may be reconnecting; keep asking until the timeout
        time.sleep(POLL_S)
    return None


def churn(soak: SoakLab, reader: EntryReader, number: int, t: float) -> Churn:
    name = f"soak-churn-{number}"
    network = CHURN_NETWORK.format(n=number % 250)
    file = soak.plan.run_dir / f"{name}.toml"
    file.write_text(_policy_toml(name, network))
    try:
        soak.tngctl("policy", "set", str(file))
    except LabError as err:
        return Churn(t, name, None, None, f"the controller refused the churn policy: {err}")
    appeared = _wait(reader, network, True, APPEAR_TIMEOUT_S)
    try:
        soak.tngctl("policy", "rm", name)
    except LabError as err:
        return Churn(t, name, appeared, None, f"the controller did not delete it: {err}")
    gone = _wait(reader, network, False, RECONCILE_TIMEOUT_S)
    problem = None
    if appeared is None:
        problem = f"its entries never reached the switch within {APPEAR_TIMEOUT_S:.0f} s"
    elif gone is None:
        problem = f"entries of the deleted policy still on the switch {RECONCILE_TIMEOUT_S:.0f} s after its deletion"
    return Churn(t, name, appeared, gone, problem)
