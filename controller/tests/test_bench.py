"""The controller benchmark's own arithmetic: how a run's changes were batched, from two readings of the controller's
counters; its stream clients against a server that answers at once."""

from __future__ import annotations

import grpc
from tng_controller.bench import _AnswerAtOnce, _drive_streams, batching, bench_policy
from tng_controller.metrics import PREFIX
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc


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


async def test_stream_clients_keep_their_window_and_take_each_answer_for_its_own_change() -> None:
    server = grpc.aio.server()
    pb_grpc.add_PolicyServiceServicer_to_server(_AnswerAtOnce(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        sent: list[pb.Policy] = []

        def requests(client: int, n: int) -> pb.Policy:
            policy = bench_policy(client + 2 * (n % 5), 3 + n)
            policy.revision = len(sent) + 1  # the answer-at-once server echoes it as the revision
            sent.append(policy)
            return policy

        _, latencies, last = await _drive_streams(f"127.0.0.1:{port}", 2, 3, 0.2, requests)
    finally:
        await server.stop(None)
    assert len(latencies) == len(sent) > 10  # every change sent was answered
    newest: dict[str, int] = {}
    for policy in sent:
        newest[policy.name] = policy.switch_policy.lte_weight
    assert last == newest
