"""The fan-out part of the controller benchmark: many WatchPolicies subscribers (light gRPC clients, spread over a
few processes so that the bench's own reading does not queue behind one core) get every change; how long from the
SetPolicy call until each subscriber has the event, and what the controller spends on them (CPU, resident memory)."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc

from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.testbed import ControllerProcess, ProcessUsage, summary_ms

STREAMS_PER_CHANNEL = 100  # HTTP/2 streams a bench client multiplexes on one connection
READY_TIMEOUT_S = 120.0
KIND = pb.PolicyEvent


def fanout_policy(index: int, revision_hint: int = 0) -> pb.Policy:
    """A host policy the fan-out run changes (`revision_hint` only varies its contents)."""
    return pb.Policy(
        name=f"watched-{index}",
        match=pb.Match(priority=index % 100, dst_prefix="10.7.0.0/16"),
        host_policy=pb.HostPolicy(congestion_control="cubic", rate_cap_kbps=1000 + revision_hint),
    )


async def _subscribers(address: str, count: int, changes: int, ready: Connection) -> list[tuple[int, float]]:
    """`count` watches; tells `ready` once all have their snapshot, then returns (revision, arrival) of every change
    event each got, after each got `changes` of them."""
    arrivals: list[tuple[int, float]] = []
    synced = 0
    all_synced = asyncio.Event()

    async def watch(stub: pb_grpc.PolicyServiceStub) -> None:
        nonlocal synced
        seen = 0
        call = stub.WatchPolicies(pb.WatchPoliciesRequest())
        async for event in call:
            if event.kind == KIND.KIND_SYNCED:
                synced += 1
                if synced == count:
                    all_synced.set()
            elif event.kind in (KIND.KIND_SET, KIND.KIND_DELETED):
                arrivals.append((event.policy.revision, time.monotonic()))
                seen += 1
                if seen == changes:
                    call.cancel()
                    return

    channels = [grpc.aio.insecure_channel(address) for _ in range(-(-count // STREAMS_PER_CHANNEL))]
    try:
        tasks = [
            asyncio.ensure_future(watch(pb_grpc.PolicyServiceStub(channels[i // STREAMS_PER_CHANNEL])))
            for i in range(count)
        ]
        await asyncio.wait_for(all_synced.wait(), READY_TIMEOUT_S)
        ready.send("ready")
        await asyncio.gather(*tasks)
    finally:
        for channel in channels:
            await channel.close()
    return arrivals


def _worker(address: str, count: int, changes: int, pipe: Connection) -> None:
    try:
        pipe.send(asyncio.run(_subscribers(address, count, changes, pipe)))
    except BaseException as exc:
        pipe.send(f"error: {type(exc).__name__}: {exc}")
        raise


def measure_fanout(
    address: str, subscribers: int, changes: int, processes: int, interval_s: float, usage: ProcessUsage
) -> dict[str, Any]:
    """Starts `subscribers` watches in `processes` processes, makes `changes` policy changes one every `interval_s`,
    and returns the delivery latencies (from the SetPolicy call to each subscriber's event), whether every
    subscriber got every change, and the controller's CPU and memory meanwhile."""
    context = multiprocessing.get_context("spawn")
    pipes, workers = [], []
    shares = [subscribers // processes + (1 if i < subscribers % processes else 0) for i in range(processes)]
    rss_before = usage.rss_mb()
    start = time.monotonic()
    for share in shares:
        mine, theirs = context.Pipe()
        worker = context.Process(target=_worker, args=(address, share, changes, theirs), daemon=True)
        worker.start()
        pipes.append(mine)
        workers.append(worker)
    try:
        for pipe in pipes:
            if not pipe.poll(READY_TIMEOUT_S):
                raise TimeoutError(f"subscribers not synced within {READY_TIMEOUT_S:.0f} s")
            message = pipe.recv()
            if message != "ready":
                raise RuntimeError(f"a subscriber process failed: {message}")
        subscribed_s = time.monotonic() - start
        rss_subscribed = usage.rss_mb()
        sent: dict[int, float] = {}
        cpu_before, began = usage.cpu_s(), time.monotonic()
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for n in range(changes):
                at = time.monotonic()
                response = stub.SetPolicy(pb.SetPolicyRequest(policy=fanout_policy(n % 10, n)), timeout=10)
                sent[response.policy.revision] = at
                time.sleep(max(0.0, at + interval_s - time.monotonic()))
        arrivals: list[tuple[int, float]] = []
        for pipe in pipes:
            if not pipe.poll(READY_TIMEOUT_S):
                raise TimeoutError("subscribers did not get every change")
            result = pipe.recv()
            if isinstance(result, str):
                raise RuntimeError(f"a subscriber process failed: {result}")
            arrivals += result
        elapsed = time.monotonic() - began
        cpu = usage.cpu_s() - cpu_before
    finally:
        for worker in workers:
            worker.join(10)
            if worker.is_alive():
                worker.kill()
    latencies = [arrival - sent[revision] for revision, arrival in arrivals]
    per_change: dict[int, float] = {}
    for revision, arrival in arrivals:
        per_change[revision] = max(per_change.get(revision, 0.0), arrival - sent[revision])
    return {
        "subscribers": subscribers,
        "subscriber_processes": processes,
        "changes": changes,
        "interval_ms": round(interval_s * 1000, 1),
        "events_delivered": len(arrivals),
        "every_subscriber_got_every_change": len(arrivals) == subscribers * changes and set(per_change) == set(sent),
        "subscribe_s": round(subscribed_s, 3),
        "delivery_ms": summary_ms(latencies),
        "last_subscriber_ms": summary_ms(list(per_change.values())),
        "controller_cpu_percent": round(100 * cpu / elapsed, 1),
        "controller_rss_mb": {"before_subscribers": rss_before, "with_subscribers": rss_subscribed},
    }


def run_fanout(directory: Path, subscribers: int, changes: int, processes: int, stored: int) -> dict[str, Any]:
    """A controller without switches (fan-out alone) with `stored` policies, and `subscribers` watching it."""
    config = directory / "fanout.toml"
    config.write_text(f'[api]\nlisten = "127.0.0.1:0"\n[store]\npath = "{directory / "fanout.db"}"\n')
    controller = ControllerProcess(config, directory / "fanout.log")
    address = controller.start()
    try:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for index in range(stored):
                stub.SetPolicy(pb.SetPolicyRequest(policy=fanout_policy(index)), timeout=10)
        result = measure_fanout(address, subscribers, changes, processes, 0.1, ProcessUsage(controller.pid))
    finally:
        controller.stop()
    return {"stored_policies": stored, **result}
