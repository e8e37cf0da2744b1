"""Benchmark of the controller, as JSON on standard output (`make bench`): against 1 and 8 BMv2 switches with 1000
stored policies, SetPolicy -> entry-readable latency and sustained policy updates per second from concurrent clients,
how the changes were batched and the CPU of controller, switches and clients, beside what the same clients get from
a server that answers at once (the gRPC floor); then the fan-out of every change to 1000 WatchPolicies subscribers
(bench_watch.py); the controller's CPU and memory in both. Without BMv2 the switch runs are skipped with a one-line
reason and the fan-out still runs."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import ExitStack
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import finsy as fy
import grpc
from tng_p4 import toolchain
from tng_p4.bmv2 import Bmv2, nanomsg_config

from tng_controller.bench_takeover import run_member_cut_off, run_takeover
from tng_controller.bench_watch import run_fanout
from tng_controller.cluster_testbed import partition_skip_reason
from tng_controller.cluster_testbed import skip_reason as etcd_skip_reason
from tng_controller.compile import FLOW_POLICY, STEERING_MODES
from tng_controller.metrics import PREFIX
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.switch_config import DEFAULT_P4INFO
from tng_controller.testbed import (
    ControllerProcess,
    ProcessUsage,
    SwitchReader,
    fleet_config,
    summary_ms,
    wait_until_connected,
)

FIRST_PORT = 10000  # switch policy i matches UDP destination port FIRST_PORT + i
RPC_TIMEOUT_S = 10.0
INSTALL_TIMEOUT_S = 10.0
LATENCY_SAMPLES = 100  # policies updated one at a time while the switch is polled
FANOUT_STORED = 20  # policies the subscribers' snapshots hold
CUT_OFF_ROUNDS = 3  # fresh clusters whose first etcd member is cut off (about 15 s each)


def bench_policy(index: int, lte_weight: int) -> pb.Policy:
    """Switch policy `index`: one flow_policy entry and one steering entry, weighted lte_weight:1."""
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


def host_policy(index: int) -> pb.Policy:
    """Host policy `index`: only agents apply it (no switch half, no switch entry)."""
    return pb.Policy(
        name=f"host-{index}",
        match=pb.Match(priority=index % 100, dst_prefix="10.8.0.0/16"),
        host_policy=pb.HostPolicy(congestion_control="cubic"),
    )


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


def policy_ids(reader: SwitchReader, count: int) -> dict[int, int]:
    """The switch policy id of each bench policy, read from its flow_policy entry (dst_port FIRST_PORT + index)."""
    port_field = reader.schema.tables[FLOW_POLICY].match_fields["dst_port"].id
    ids = {}
    for entry in reader.entry_messages(FLOW_POLICY):
        for field in entry.match:
            if field.field_id == port_field:
                port = int.from_bytes(field.ternary.value, "big")
                ids[port - FIRST_PORT] = int.from_bytes(entry.action.action.params[0].value, "big")
    missing = sorted(set(range(count)) - set(ids))
    if missing:
        raise AssertionError(f"bench-{missing[0]} and {len(missing) - 1} more have no flow_policy entry")
    return ids


def measure_latency(
    stub: pb_grpc.PolicyServiceStub, reader: SwitchReader, ids: dict[int, int], samples: int
) -> dict[str, Any]:
    """Changes the steering weights of `samples` policies one at a time, polling `reader`'s switch (the last one
    written of the fleet) until it holds each; returns the latencies."""
    rpc, seen = [], []
    for index in range(samples):
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

        rpc_s, seen_s, _ = timed_set(stub, bench_policy(index, 2), updated)
        rpc.append(rpc_s)
        seen.append(seen_s)
    return {"rpc_ms": summary_ms(rpc), "installed_ms": summary_ms(seen)}


async def _drive(
    address: str, clients: int, window: int, seconds: float, requests: Callable[[int, int], pb.Policy]
) -> tuple[float, list[float], dict[str, int]]:
    """`clients` channels, each keeping `window` SetPolicy calls in flight for `seconds`; the policy of a client's
    n-th call is requests(client, n). Returns the elapsed seconds, every call's latency and the last acknowledged
    weight per policy name."""
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []
    acknowledged: dict[str, tuple[int, int]] = {}  # name -> (revision, lte_weight) acknowledged last

    async def lane(stub: pb_grpc.PolicyServiceStub, client: int, lane_number: int) -> None:
        n = lane_number
        while time.perf_counter() < stop_at:
            policy = requests(client, n)
            start = time.perf_counter()
            response = await stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=RPC_TIMEOUT_S)
            latencies.append(time.perf_counter() - start)
            seen = acknowledged.get(policy.name)
            if seen is None or seen[0] < response.policy.revision:
                acknowledged[policy.name] = (response.policy.revision, policy.switch_policy.lte_weight)
            n += window

    channels = [grpc.aio.insecure_channel(address) for _ in range(clients)]
    try:
        start = time.perf_counter()
        await asyncio.gather(
            *(
                lane(pb_grpc.PolicyServiceStub(channel), client, lane_number)
                for client, channel in enumerate(channels)
                for lane_number in range(window)
            )
        )
        elapsed = time.perf_counter() - start
    finally:
        for channel in channels:
            await channel.close()
    return elapsed, latencies, {name: weight for name, (_, weight) in acknowledged.items()}


async def _drive_streams(
    address: str, clients: int, window: int, seconds: float, requests: Callable[[int, int], pb.Policy]
) -> tuple[float, list[float], dict[str, int]]:
    """As `_drive`, with one ApplyPolicies stream per client keeping `window` changes in flight instead of `window`
    SetPolicy calls; a change's latency is from sending it to reading its answer."""
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []
    acknowledged: dict[str, tuple[int, int]] = {}

    async def client_stream(stub: pb_grpc.PolicyServiceStub, client: int) -> None:
        call = stub.ApplyPolicies(timeout=seconds + RPC_TIMEOUT_S)
        room = asyncio.Semaphore(window)
        sent: collections.deque[tuple[float, pb.Policy]] = collections.deque()

        async def send() -> None:
            n = 0
            while time.perf_counter() < stop_at:
                await room.acquire()
                policy = requests(client, n)
                sent.append((time.perf_counter(), policy))
                await call.write(pb.PolicyChange(set=policy))
                n += 1
            await call.done_writing()

        sender = asyncio.get_running_loop().create_task(send())
        try:
            while (result := await call.read()) is not grpc.aio.EOF:
                start, policy = sent.popleft()
                room.release()
                latencies.append(time.perf_counter() - start)
                if result.code != 0:
                    raise RuntimeError(f"{policy.name}: refused ({result.code}): {result.message}")
                seen = acknowledged.get(policy.name)
                if seen is None or seen[0] < result.policy.revision:
                    acknowledged[policy.name] = (result.policy.revision, policy.switch_policy.lte_weight)
            await sender
        finally:
            sender.cancel()

    channels = [grpc.aio.insecure_channel(address) for _ in range(clients)]
    try:
        start = time.perf_counter()
        await asyncio.gather(
            *(client_stream(pb_grpc.PolicyServiceStub(channel), client) for client, channel in enumerate(channels))
        )
        elapsed = time.perf_counter() - start
    finally:
        for channel in channels:
            await channel.close()
    return elapsed, latencies, {name: weight for name, (_, weight) in acknowledged.items()}


Drive = Callable[
    [str, int, int, float, Callable[[int, int], pb.Policy]], Awaitable[tuple[float, list[float], dict[str, int]]]
]
DRIVES: dict[str, Drive] = {"SetPolicy": _drive, "ApplyPolicies": _drive_streams}  # by the RPC the clients use


def round_robin(switch_policies: int, clients: int) -> Callable[[int, int], pb.Policy]:
    """The requests of the throughput runs: client c changes its own share of the switch policies round robin, each
    call a new weight."""
    share = switch_policies // clients

    def request(client: int, n: int) -> pb.Policy:
        return bench_policy(client + clients * (n % share), 3 + n % 1000)

    return request


def controller_counters(address: str) -> dict[str, float]:
    """The controller's metric samples (GetStats), summed over their labels, by name."""
    with grpc.insecure_channel(address) as channel:
        stats = pb_grpc.PolicyServiceStub(channel).GetStats(pb.GetStatsRequest(), timeout=RPC_TIMEOUT_S)
    sums: dict[str, float] = {}
    for sample in stats.controller_metrics:
        sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def batching(before: dict[str, float], after: dict[str, float], switches: int) -> dict[str, Any]:
    """How the changes between two readings of the controller's counters were written: batches, changes per batch,
    WriteRequests per switch and updates per WriteRequest."""

    def delta(name: str) -> float:
        return after.get(PREFIX + name, 0.0) - before.get(PREFIX + name, 0.0)

    batches, writes = delta("policy_batches_total"), delta("switch_writes_total")
    return {
        "batches": int(batches),
        "changes_per_batch": round(delta("policy_batch_size_sum") / batches, 1) if batches else None,
        "write_requests_per_switch": round(writes / switches, 1),
        "updates_per_write_request": round(delta("switch_write_updates_total") / writes, 1) if writes else None,
    }


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def measure_throughput(
    address: str,
    switch_policies: int,
    seconds: float,
    clients: int,
    window: int,
    usage: ProcessUsage,
    switch_usage: Sequence[ProcessUsage],
    rpc: str = "SetPolicy",
) -> tuple[dict[str, Any], dict[str, int]]:
    """Clients change the weights of their own share of the switch policies round robin (each call a new weight) for
    `seconds` through `rpc` (a key of DRIVES); returns the updates the API acknowledged per second, their latencies,
    how they were batched, the CPU of the controller, of the switches and of the clients (this process), and the last
    weights acknowledged."""
    counters_before = controller_counters(address)
    cpu_before, switches_before, own_before = usage.cpu_s(), [u.cpu_s() for u in switch_usage], _own_cpu_s()
    elapsed, latencies, last = asyncio.run(
        DRIVES[rpc](address, clients, window, seconds, round_robin(switch_policies, clients))
    )
    cpu = usage.cpu_s() - cpu_before
    switch_cpu = [u.cpu_s() - before for u, before in zip(switch_usage, switches_before, strict=True)]
    own_cpu = _own_cpu_s() - own_before
    written = batching(counters_before, controller_counters(address), len(switch_usage))
    result = {
        "rpc": rpc,
        "clients": clients,
        "in_flight_per_client": window,
        "seconds": round(elapsed, 3),
        "updates": len(latencies),
        "updates_per_s": round(len(latencies) / elapsed, 1),
        "rpc_ms": summary_ms(latencies),
        "written": written,
        "controller_cpu_percent": round(100 * cpu / elapsed, 1),
        "controller_cpu_ms_per_update": round(1000 * cpu / len(latencies), 3) if latencies else None,
        "controller_rss_mb": usage.rss_mb(),
        "switches_cpu_percent": {
            "sum": round(100 * sum(switch_cpu) / elapsed, 1),
            "busiest": round(100 * max(switch_cpu) / elapsed, 1),
        },
        "clients_cpu_percent": round(100 * own_cpu / elapsed, 1),
    }
    return result, last


class _AnswerAtOnce(pb_grpc.PolicyServiceServicer):
    async def SetPolicy(self, request: pb.SetPolicyRequest, context: grpc.aio.ServicerContext) -> pb.SetPolicyResponse:
        return pb.SetPolicyResponse(policy=request.policy)

    async def ApplyPolicies(
        self, changes: AsyncIterator[pb.PolicyChange], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PolicyChangeResult]:
        async for change in changes:
            yield pb.PolicyChangeResult(policy=change.set)


def _serve_answer_at_once(port: Connection) -> None:
    async def serve() -> None:
        server = grpc.aio.server()
        pb_grpc.add_PolicyServiceServicer_to_server(_AnswerAtOnce(), server)
        port.send(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


def measure_api_floor(
    switch_policies: int, seconds: float, clients: int, window: int, rpc: str = "SetPolicy"
) -> dict[str, Any]:
    """The same clients against a PolicyService that answers SetPolicy (or each change of ApplyPolicies) at once
    (grpc.aio, its own process): what gRPC alone allows on this machine, and its CPU per change."""
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    server = context.Process(target=_serve_answer_at_once, args=(theirs,), daemon=True)
    server.start()
    try:
        if not mine.poll(30):
            raise TimeoutError("the answer-at-once server did not start")
        usage = ProcessUsage(server.pid)
        cpu_before = usage.cpu_s()
        address = f"127.0.0.1:{mine.recv()}"
        elapsed, latencies, _ = asyncio.run(
            DRIVES[rpc](address, clients, window, seconds, round_robin(switch_policies, clients))
        )
        cpu = usage.cpu_s() - cpu_before
    finally:
        server.kill()
        server.join()
    return {
        "rpc": rpc,
        "updates_per_s": round(len(latencies) / elapsed, 1),
        "rpc_ms": summary_ms(latencies),
        "server_cpu_percent": round(100 * cpu / elapsed, 1),
        "server_cpu_ms_per_call": round(1000 * cpu / len(latencies), 3) if latencies else None,
    }


def install(address: str, switch_policies: int, host_policies: int) -> dict[str, Any]:
    """Stores the switch policies and the host policies, 4 clients with 16 calls in flight each."""
    policies = [bench_policy(i, 1) for i in range(switch_policies)] + [host_policy(i) for i in range(host_policies)]

    async def run() -> float:
        start = time.perf_counter()
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for first in range(0, len(policies), 64):
                await asyncio.gather(
                    *(
                        stub.SetPolicy(pb.SetPolicyRequest(policy=p), timeout=RPC_TIMEOUT_S)
                        for p in policies[first : first + 64]
                    )
                )
        return time.perf_counter() - start

    elapsed = asyncio.run(run())
    return {"policies": len(policies), "seconds": round(elapsed, 3), "per_s": round(len(policies) / elapsed, 1)}


def check_installed(readers: Sequence[SwitchReader], ids: dict[int, int], weights: dict[str, int]) -> None:
    """Every switch holds the weights the API acknowledged last, policy by policy."""
    for reader in readers:
        held = {}
        for entry in reader.entry_messages(STEERING_MODES):
            params = {param.param_id: int.from_bytes(param.value, "big") for param in entry.action.action.params}
            held[int.from_bytes(entry.match[0].exact.value, "big")] = params.get(1)
        for name, weight in weights.items():
            policy_id = ids[int(name.removeprefix("bench-"))]
            if held.get(policy_id) != weight:
                raise AssertionError(f"{name}: a switch has lte_weight {held.get(policy_id)}, the API took {weight}")


def run_fleet(
    binary: Path, directory: Path, switches: int, switch_policies: int, host_policies: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One controller with `switches` BMv2 switches: install, latency, sustained throughput."""
    with ExitStack() as stack:
        bmv2s = []
        for number in range(1, switches + 1):
            switch_dir = directory / f"s{number}"
            switch_dir.mkdir()
            bmv2 = Bmv2(nanomsg_config(binary, switch_dir, device_id=number))
            bmv2.start()
            stack.callback(bmv2.stop)
            bmv2s.append(bmv2)
        config = directory / "controller.toml"
        config.write_text(fleet_config(bmv2s, directory / "policies.db"))
        controller = ControllerProcess(config, directory / "controller.log")
        address = controller.start()
        stack.callback(controller.stop)
        usage = ProcessUsage(controller.pid)
        switch_usage = [ProcessUsage(b.pid) for b in bmv2s if b.pid is not None]
        readers = [SwitchReader(b.config.grpc_address, DEFAULT_P4INFO, b.config.device_id) for b in bmv2s]
        for reader in readers:
            stack.callback(reader.close)
        connected_s = wait_until_connected(address)
        installed = install(address, switch_policies, host_policies)
        ids = policy_ids(readers[-1], switch_policies)
        with grpc.insecure_channel(address) as channel:
            latency = measure_latency(pb_grpc.PolicyServiceStub(channel), readers[-1], ids, LATENCY_SAMPLES)
        sequential, last = measure_throughput(address, switch_policies, args.seconds, 1, 1, usage, switch_usage)
        check_installed(readers, ids, last)
        concurrent, last = measure_throughput(
            address, switch_policies, args.seconds, args.clients, args.window, usage, switch_usage
        )
        check_installed(readers, ids, last)
        streamed, last = measure_throughput(
            address, switch_policies, args.seconds, args.clients, args.window, usage, switch_usage, "ApplyPolicies"
        )
        check_installed(readers, ids, last)
        return {
            "switches": switches,
            "connect_and_sync_s": round(connected_s, 3),
            "install": installed,
            "update_one_at_a_time": latency,
            "sustained": {"sequential": sequential, "concurrent": concurrent, "streamed": streamed},
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_controller.bench", description=__doc__)
    parser.add_argument("--policies", type=int, default=1000, help="policies stored (default 1000)")
    parser.add_argument(
        "--switch-policies", type=int, default=250, help="of them with a switch half (1-255, default 250)"
    )
    parser.add_argument("--switches", default="1,8", help="fleet sizes to run, comma-separated (default 1,8)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each throughput run (default 10)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent API clients (default 4)")
    parser.add_argument(
        "--window",
        type=int,
        default=4,
        help="SetPolicy calls (or ApplyPolicies changes) each client keeps in flight (default 4)",
    )
    parser.add_argument(
        "--subscribers", type=int, default=1000, help="WatchPolicies subscribers (default 1000; 0: none)"
    )
    parser.add_argument("--changes", type=int, default=50, help="changes the subscribers get (default 50)")
    parser.add_argument(
        "--subscriber-processes", type=int, default=2, help="processes the subscribers are spread over (default 2)"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="instead: the takeover time of this many controller replicas on etcd after kill -9 of the leader",
    )
    parser.add_argument("--kills", type=int, default=5, help="leader kills with --replicas (default 5)")
    args = parser.parse_args(argv)
    if args.replicas:
        return _takeover(args, parser)
    if not 1 <= args.switch_policies <= min(255, args.policies):
        parser.error("--switch-policies must be 1-255 and at most --policies (switch policy ids are 8 bits)")
    if not 1 <= args.clients <= args.switch_policies:
        parser.error("--clients must be from 1 to --switch-policies (each client updates policies of its own)")
    sizes = [int(size) for size in args.switches.split(",") if size]
    load_before = os.getloadavg()
    result: dict[str, Any] = {"benchmark": "controller"}
    found = toolchain.detect()
    reason = found.skip_reason("bmv2")
    with tempfile.TemporaryDirectory(prefix="tng-ctl-bench-") as directory:
        if reason is not None or found.simple_switch_grpc.path is None:
            result["switches_skipped"] = reason
            print(f"controller bench: switch runs {reason}", file=sys.stderr)
        elif sizes:
            result["setup"] = (
                f"simple_switch_grpc (BMv2) on 127.0.0.1; {args.policies} policies stored, {args.switch_policies} of "
                "them with a switch half (a flow_policy and a steering.modes entry each); updates change a switch "
                "policy's weights (one entry modify per switch)"
            )
            result["api_floor"] = measure_api_floor(args.switch_policies, args.seconds, args.clients, args.window)
            result["api_floor_streamed"] = measure_api_floor(
                args.switch_policies, args.seconds, args.clients, args.window, "ApplyPolicies"
            )
            result["runs"] = []
            for size in sizes:
                run_dir = Path(directory) / f"fleet-{size}"
                run_dir.mkdir()
                policies = (args.switch_policies, args.policies - args.switch_policies)
                result["runs"].append(run_fleet(found.simple_switch_grpc.path, run_dir, size, *policies, args))
        if args.subscribers:
            result["fanout"] = run_fanout(
                Path(directory), args.subscribers, args.changes, args.subscriber_processes, FANOUT_STORED
            )
    return _print_result(result, load_before)


def _print_result(result: dict[str, Any], load_before: tuple[float, float, float]) -> int:
    """Adds the load averages before and after and the core count, prints the JSON."""
    result["load_average"] = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in os.getloadavg()],
    }
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))
    return 0


def _takeover(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.replicas < 2 or args.kills < 1:
        parser.error("--replicas must be at least 2 and --kills at least 1")
    load_before = os.getloadavg()
    result: dict[str, Any] = {"benchmark": "controller-takeover"}
    reason = etcd_skip_reason()
    found = toolchain.detect()
    bmv2_reason = found.skip_reason("bmv2")
    if reason is not None:
        result["skipped"] = reason
        print(f"controller bench: takeover {reason}", file=sys.stderr)
    else:
        if bmv2_reason is not None:
            result["switch_skipped"] = bmv2_reason
        binary = found.simple_switch_grpc.path if bmv2_reason is None else None
        policies = [bench_policy(i, 1) for i in range(args.switch_policies)]
        with tempfile.TemporaryDirectory(prefix="tng-ctl-takeover-") as directory:
            result["takeover"] = run_takeover(Path(directory), args.replicas, args.kills, policies, binary)
            cut_off_reason = partition_skip_reason()
            if cut_off_reason is not None:
                result["member_cut_off_skipped"] = cut_off_reason
            else:
                result["member_cut_off"] = run_member_cut_off(Path(directory), args.replicas, CUT_OFF_ROUNDS)
    return _print_result(result, load_before)


if __name__ == "__main__":
    sys.exit(main())
