"""The controller benchmark's own arithmetic: how a run's changes were batched, from two readings of the controller's
counters."""

from __future__ import annotations

from tng_controller.bench import batching
from tng_controller.metrics import PREFIX


def counters(batches: float, changes: float, writes: float, updates: float) -> dict[str, float]:
    return {
        PREFIX + "policy_batches_total": batches,
        PREFIX + "policy_batch_size_sum": changes,
        PREFIX + "switch_writes_total": writes,
        PREFIX + "switch_write_updates_total": updates,
    }


def test_batching_is_the_difference_of_two_readings_per_batch_and_per_switch() -> None:
    before = counters(batches=10, changes=10, writes=20, updates=20)
    after = counters(batches=40, changes=130, writes=80, updates=260)  # 30 batches of 4 changes, to 2 switches
    assert batching(before, after, switches=2) == {
        "batches": 30,
        "changes_per_batch": 4.0,
        "write_requests_per_switch": 30.0,
        "updates_per_write_request": 4.0,
    }


def test_a_run_without_batches_has_no_sizes() -> None:
    assert batching({}, {}, switches=1) == {
        "batches": 0,
        "changes_per_batch": None,
        "write_requests_per_switch": 0.0,
        "updates_per_write_request": None,
    }
