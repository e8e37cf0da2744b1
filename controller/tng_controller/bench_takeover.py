"""The replicated controller's takeover time (`python -m tng_controller.bench --replicas 3`): replicas on one etcd
writing a BMv2 switch with stored policies (without BMv2: no switch, leadership alone); kill -9 of the leader, the
seconds until a follower leads with the switch in sync (lease expiry, arbitration won, tables reconciled), then the
killed replica is started again; the median over several kills."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
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
