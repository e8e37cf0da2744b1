"""Benchmark of the controller against BMv2: policy-set -> entry-installed latency and sustained policy updates per
second, as JSON on standard output (`make bench`). Skips with a one-line reason when BMv2 is absent."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import finsy as fy
import grpc
from tng_p4 import toolchain
from tng_p4.bmv2 import Bmv2, nanomsg_config

from tng_controller.compile import FLOW_POLICY, STEERING_MODES
from tng_controller.config import DEFAULT_P4INFO
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.testbed import (
    ControllerProcess,
    SwitchReader,
    controller_config,
    wait_until_connected,
)

FIRST_PORT = 10000  # policy i matches UDP destination port FIRST_PORT + i
RPC_TIMEOUT_S = 10.0
INSTALL_TIMEOUT_S = 10.0


def bench_policy(index: int, lte_weight: int) -> pb.Policy:
    """Policy `index`: one flow_policy entry and one steering entry, weighted lte_weight:1."""
    return pb.Policy(
        name=f"bench-{index}",
        match=pb.Match(
            priority=1,
            dst_prefix="10.9.0.0/16",
            ip_protocol=17,
            dst_port=pb.PortMatch(value=FIRST_PORT + index, mask=0xFFFF),
        ),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_IN_NETWORK,
            steering=pb.STEERING_MODE_WEIGHTED,
            lte_weight=lte_weight,
            wifi_weight=1,
        ),
    )


def summary_ms(samples_s: list[float]) -> dict[str, float]:
    """p50, p99 and max of `samples_s`, in milliseconds."""
    ms = sorted(sample * 1000 for sample in samples_s)
    p99 = statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) > 1 else ms[0]
    return {"p50": round(statistics.median(ms), 3), "p99": round(p99, 3), "max": round(ms[-1], 3), "n": len(ms)}


def timed_set(
    stub: pb_grpc.PolicyServiceStub, policy: pb.Policy, installed: Callable[[], bool]
) -> tuple[float, float, pb.SetPolicyResponse]:
    """Calls SetPolicy and polls the switch meanwhile; returns the seconds until the RPC returned and until
    `installed()` held (the first read that saw the entry), and the response."""
    done = threading.Event()
    returned_at = 0.0

    def on_done(_: grpc.Future) -> None:
        nonlocal returned_at
        returned_at = time.perf_counter()
        done.set()

    start = time.perf_counter()
    call = stub.SetPolicy.future(pb.SetPolicyRequest(policy=policy), timeout=RPC_TIMEOUT_S)
    call.add_done_callback(on_done)
    while not installed():
        if call.done() and call.exception() is not None:
            raise call.exception()  # the API refused: the entry will never come
        if time.perf_counter() - start > INSTALL_TIMEOUT_S:
            raise TimeoutError(f"{policy.name}: not installed within {INSTALL_TIMEOUT_S:.0f} s")
    installed_at = time.perf_counter()
    response = call.result()
    done.wait()
    return returned_at - start, installed_at - start, response


def measure_latency(
    stub: pb_grpc.PolicyServiceStub, reader: SwitchReader, count: int
) -> tuple[dict[str, Any], dict[int, int]]:
    """Creates `count` policies, then changes the steering weights of each; returns the latencies of both phases and
    the policy id of each index."""
    install_rpc, install_seen, ids = [], [], {}
    for index in range(count):
        key = fy.P4TableEntry(
            FLOW_POLICY,
            match=fy.Match(
                dst_addr=(0x0A090000, 0xFFFF0000), protocol=(17, 0xFF), dst_port=(FIRST_PORT + index, 0xFFFF)
            ),
            priority=2,
        )
        rpc, seen, _ = timed_set(stub, bench_policy(index, 1), lambda key=key: reader.entry(key) is not None)
        install_rpc.append(rpc)
        install_seen.append(seen)
        entry = reader.entry(key)
        assert entry is not None
        ids[index] = int.from_bytes(entry.action.action.params[0].value, "big")

    update_rpc, update_seen = [], []
    for index in range(count):
        wanted = reader.encode(
            fy.P4TableEntry(
                STEERING_MODES,
                match=fy.Match(policy=ids[index]),
                action=fy.Action("ingress.steering.steer_weighted", lte_weight=2, wifi_weight=1),
            )
        )[0].action
        key = fy.P4TableEntry(STEERING_MODES, match=fy.Match(policy=ids[index]))

        def updated(key: fy.P4TableEntry = key, wanted: Any = wanted) -> bool:
            entry = reader.entry(key)
            return entry is not None and entry.action == wanted

        rpc, seen, _ = timed_set(stub, bench_policy(index, 2), updated)
        update_rpc.append(rpc)
        update_seen.append(seen)
    latency = {
        "install": {"rpc_ms": summary_ms(install_rpc), "installed_ms": summary_ms(install_seen)},
        "update": {"rpc_ms": summary_ms(update_rpc), "installed_ms": summary_ms(update_seen)},
    }
    return latency, ids


def measure_throughput(address: str, count: int, seconds: float, clients: int) -> dict[str, Any]:
    """`clients` threads, each with its own channel and its own share of the `count` policies, change their weights
    round robin for `seconds`; returns the updates the API acknowledged per second."""
    stop_at = time.perf_counter() + seconds
    done = [0] * clients
    last: dict[int, int] = {}
    lock = threading.Lock()

    def client(number: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            step, share = 0, count // clients
            while time.perf_counter() < stop_at:
                index = number + clients * (step % share)
                weight = 3 + (step % 1000)
                stub.SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, weight)), timeout=RPC_TIMEOUT_S)
                with lock:
                    last[index] = weight
                done[number] += 1
                step += 1

    start = time.perf_counter()
    with futures.ThreadPoolExecutor(clients) as pool:
        for result in [pool.submit(client, number) for number in range(clients)]:
            result.result()
    elapsed = time.perf_counter() - start
    return {
        "clients": clients,
        "seconds": round(elapsed, 3),
        "updates": sum(done),
        "updates_per_s": round(sum(done) / elapsed, 1),
        "last_weights": last,
    }


def check_installed(reader: SwitchReader, ids: dict[int, int], weights: dict[int, int]) -> None:
    """The switch holds the weights the API acknowledged last, policy by policy."""
    for index, weight in weights.items():
        entry = reader.entry(fy.P4TableEntry(STEERING_MODES, match=fy.Match(policy=ids[index])))
        assert entry is not None
        params = {param.param_id: int.from_bytes(param.value, "big") for param in entry.action.action.params}
        if params.get(1) != weight:
            raise AssertionError(f"bench-{index}: the switch has lte_weight {params.get(1)}, the API took {weight}")


def run(binary: Path, directory: Path, count: int, seconds: float, clients: int) -> dict[str, Any]:
    load_before = os.getloadavg()
    bmv2 = Bmv2(nanomsg_config(binary, directory))
    bmv2.start()
    config = directory / "controller.toml"
    config.write_text(controller_config(bmv2, directory / "policies.db"))
    controller = ControllerProcess(config, directory / "controller.log")
    reader = SwitchReader(bmv2.config.grpc_address, DEFAULT_P4INFO)
    try:
        address = controller.start()
        connected_s = wait_until_connected(address)
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            latency, ids = measure_latency(stub, reader, count)
            sequential = measure_throughput(address, count, seconds, 1)
            check_installed(reader, ids, sequential.pop("last_weights"))
            concurrent = measure_throughput(address, count, seconds, clients)
            check_installed(reader, ids, concurrent.pop("last_weights"))
    finally:
        reader.close()
        controller.stop()
        bmv2.stop()
    return {
        "benchmark": "controller",
        "switch": f"simple_switch_grpc (BMv2) on 127.0.0.1, one switch, {count} policies of 2 entries each",
        "connect_and_sync_s": round(connected_s, 3),
        **latency,
        "sustained": {"sequential": sequential, "concurrent": concurrent},
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_controller.bench", description=__doc__)
    parser.add_argument("--policies", type=int, default=100, help="policies created and updated (1-255, default 100)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each throughput run (default 10)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent API clients of the second run (default 4)")
    args = parser.parse_args(argv)
    if not 1 <= args.policies <= 255:
        parser.error("--policies must be 1-255 (a switch holds at most 255 policies)")
    if not 1 <= args.clients <= args.policies:
        parser.error("--clients must be from 1 to --policies (each client updates policies of its own)")
    found = toolchain.detect()
    reason = found.skip_reason("bmv2")
    if reason is not None or found.simple_switch_grpc.path is None:
        print(json.dumps({"benchmark": "controller", "skipped": reason}))
        print(f"controller bench {reason}", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="tng-controller-bench-") as directory:
        result = run(found.simple_switch_grpc.path, Path(directory), args.policies, args.seconds, args.clients)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
