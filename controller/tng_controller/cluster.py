"""The state of a replicated controller (`tngctl cluster`): the replicas registered in etcd (the leader first, by
their leases), etcd's revision, and what each replica's policy API says of itself (leader or not, the revision of
its mirror, its switches)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass

import aetcd
import grpc

from tng_controller.config import EtcdAuth, EtcdTls
from tng_controller.etcd_client import EtcdClient, EtcdError, connect
from tng_controller.leadership import replicas, replicas_prefix
from tng_controller.metrics import PREFIX
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    name: str
    api: str
    election_id: int
    lease: str  # hex, as etcdctl prints it
    lease_ttl_s: int  # left on the lease
    health: str  # "ok", or why the API did not answer
    leading: bool | None  # as the replica says (None: it did not answer)
    revision: int | None  # of its mirror of the store
    switches: str  # NAME=STATE, ...


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    etcd: list[str]  # the endpoints asked
    etcd_revision: int
    leader: str | None  # the name of the replica that holds the leadership (the oldest key)
    replicas: list[ReplicaStatus]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def cluster_status(
    endpoints: tuple[str, ...],
    prefix: str,
    timeout_s: float,
    tls: EtcdTls | None = None,
    auth: EtcdAuth | None = None,
) -> ClusterStatus:
    client = await connect(endpoints, tls, auth=auth)
    try:
        registered = await client.answer(client.get_prefix(replicas_prefix(prefix)))
        live = await replicas(client, prefix)
        ttls = [await _ttl(client, r.lease) for r in live]
    except (aetcd.ClientError, TimeoutError) as exc:
        raise EtcdError(f"cannot read the cluster from etcd: {type(exc).__name__} {exc}") from exc
    finally:
        await client.close()
    answers = await asyncio.gather(*(_ask(r.api, timeout_s) for r in live))
    return ClusterStatus(
        etcd=list(endpoints),
        etcd_revision=registered.header.revision,
        leader=live[0].name if live else None,
        replicas=[
            ReplicaStatus(r.name, r.api, r.election_id, f"{r.lease:x}", ttl, *answer)
            for r, ttl, answer in zip(live, ttls, answers, strict=True)
        ],
    )


async def _ttl(client: EtcdClient, lease: int) -> int:
    info = await client.answer(client.get_lease_info(lease, keys=False))
    return int(info.TTL)


async def _ask(api: str, timeout_s: float) -> tuple[str, bool | None, int | None, str]:
    """A replica's health, leadership, revision and switches, from its own policy API."""
    try:
        async with grpc.aio.insecure_channel(api) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            stats = await stub.GetStats(pb.GetStatsRequest(), timeout=timeout_s)
            switches = await stub.ListSwitches(pb.ListSwitchesRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}", None, None, ""
    samples = {s.name: s.value for s in stats.controller_metrics if not s.labels}
    leading = samples.get(PREFIX + "leader")
    revision = samples.get(PREFIX + "policy_revision")
    return (
        "ok",
        None if leading is None else leading == 1.0,
        None if revision is None else int(revision),
        ", ".join(f"{s.name}={s.state}" for s in switches.switches),
    )
