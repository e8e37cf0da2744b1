"""The replicated controller's takeover time (`python -m tng_controller.bench --replicas 3`): replicas on one etcd
writing a BMv2 switch with stored policies (without BMv2: no switch, leadership alone); kill -9 of the leader, the
seconds until a follower leads with the switch in sync (lease expiry, arbitration won, tables reconciled), then the
killed replica is started again; the median over several kills. Then the etcd member every replica uses is cut off
from the other two (up, reachable, without a leader): the seconds until a change through each replica lands again."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from tng_p4.bmv2 import Bmv2, nanomsg_config

from tng_controller.cluster_testbed import Replicas
from tng_controller.compile import FLOW_POLICY
from tng_controller.config import EtcdConfig
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.switch_config import DEFAULT_P4INFO
from tng_controller.testbed import SwitchReader


def run_takeover(
    directory: Path, replicas: int, kills: int, policies: Sequence[pb.Policy], bmv2_binary: Path | None
) -> dict[str, Any]:
    """`policies` are stored before the first kill."""
    switches = []
    if bmv2_binary is not None:
        (directory / "s1").mkdir()
        switches.append(Bmv2(nanomsg_config(bmv2_binary, directory / "s1", device_id=1)))
    cluster = Replicas(directory, replicas, switches)
    reader = None
    try:
        for bmv2 in switches:
            bmv2.start()
            reader = SwitchReader(bmv2.config.grpc_address, DEFAULT_P4INFO, 1)
        cluster.start()
        with grpc.insecure_channel(cluster.addresses()[-1]) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for policy in policies:
                stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=10)
        times, entries = [], []
        for _ in range(kills):
            old, _, seconds = cluster.kill_leader()
            times.append(seconds)
            if reader is not None:
                entries.append(len(reader.entry_messages(FLOW_POLICY)))
            cluster.start_replica(old)
        return {
            "replicas": replicas,
            "switches": len(switches),
            "policies_stored": len(policies),
            "lease_ttl_s": EtcdConfig(()).lease_ttl_s,
            "kills": kills,
            "takeover_s": [round(t, 3) for t in times],
            "takeover_median_s": round(statistics.median(times), 3),
            "flow_policy_entries_after_each_takeover": entries,
        }
    finally:
        cluster.stop()
        if reader is not None:
            reader.close()
        for bmv2 in switches:
            bmv2.stop()


def run_member_cut_off(directory: Path, replicas: int, rounds: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """Each round on a fresh cluster (3 etcd members, the first apart): its first member is cut off from the others,
    and every replica at once is sent a change, again every 0.2 s while it is refused, until it lands."""
    seconds: list[list[float]] = []
    for number in range(rounds):
        cluster = Replicas(directory / f"cut-{number}", replicas, etcd_members=3, etcd_apart=True)
        try:
            cluster.start()
            cluster.wait_for_leader()
            cut = time.monotonic()
            cluster.etcd.partition()
            with ThreadPoolExecutor(replicas) as pool:
                changes = [(address, _cut_off_policy(i)) for i, address in enumerate(cluster.addresses())]
                landed = list(pool.map(lambda change: _set_until_landed(*change, timeout_s), changes))
            seconds.append([round(t - cut, 3) for t in landed])
        finally:
            cluster.stop()
    slowest = [max(round_seconds) for round_seconds in seconds]
    return {
        "replicas": replicas,
        "etcd_members": 3,
        "rounds": rounds,
        "change_lands_s": seconds,
        "every_replica_median_s": round(statistics.median(slowest), 3),
    }


def _set_until_landed(address: str, policy: pb.Policy, timeout_s: float) -> float:
    """When a SetPolicy through `address` first succeeded, retrying those refused as UNAVAILABLE."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        while True:
            try:
                stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=timeout_s)
                return time.monotonic()
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _cut_off_policy(index: int) -> pb.Policy:
    """A host-only policy of its own per replica (a priority of its own), so that the replicas' changes do not
    conflict."""
    return pb.Policy(
        name=f"cut-off-{index}",
        match=pb.Match(priority=50 + index, dst_prefix="10.8.0.0/16"),
        host_policy=pb.HostPolicy(congestion_control="cubic"),
    )
