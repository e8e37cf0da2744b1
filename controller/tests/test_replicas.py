"""Three controller replicas on a real etcd (started here on free ports), without switches: any replica takes
changes and every one serves and announces them; kill -9 of the leader hands leadership to a follower; a subscriber
that reconnects to another replica keeps getting changes. Skipped when the etcd binary is absent."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from host_keys import Host
from tng_controller.bench import bench_policy
from tng_controller.bench_takeover import run_member_cut_off
from tng_controller.cluster_testbed import EtcdProcess, EtcdServerTls, Replicas, partition_skip_reason, skip_reason
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc

SKIP_REASON = skip_reason()
PARTITION_SKIP_REASON = partition_skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
TAKEOVER_BOUND_S = 10.0  # generous: CI machines are loaded; the bench measures the real time


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    cluster = Replicas(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _stub(address: str) -> tuple[grpc.Channel, pb_grpc.PolicyServiceStub]:
    channel = grpc.insecure_channel(address)
    return channel, pb_grpc.PolicyServiceStub(channel)


def _set(address: str, policy: pb.Policy) -> pb.Policy:
    channel, stub = _stub(address)
    with channel:
        return stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=10).policy


def _names(address: str) -> dict[str, int]:
    channel, stub = _stub(address)
    with channel:
        return {p.name: p.revision for p in stub.ListPolicies(pb.ListPoliciesRequest(), timeout=10).policies}


def _hosts(address: str) -> list[str]:
    channel, stub = _stub(address)
    with channel:
        return [h.identity for h in stub.ListHosts(pb.ListHostsRequest(), timeout=10).hosts]


class _Watch:
    """WatchPolicies on one replica in a thread: the events it got (kind, name, revision)."""

    def __init__(self, address: str) -> None:
        self._channel, stub = _stub(address)
        self.events: list[tuple[int, str, int]] = []
        self.synced = threading.Event()
        self.changed = threading.Condition()
        self._call = stub.WatchPolicies(pb.WatchPoliciesRequest())
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self.synced.wait(10), "no KIND_SYNCED"

    def _read(self) -> None:
        try:
            for event in self._call:
                with self.changed:
                    self.events.append((event.kind, event.policy.name, event.policy.revision))
                    self.changed.notify_all()
                if event.kind == pb.PolicyEvent.KIND_SYNCED:
                    self.synced.set()
        except grpc.RpcError:
            pass

    def wait_for(self, kind: int, name: str, revision: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: (kind, name, revision) in self.events, 10), self.events

    def close(self) -> None:
        self._call.cancel()
        self._channel.close()


def test_a_change_on_any_replica_is_served_and_announced_by_every_replica(replicas: Replicas) -> None:
    watches = [_Watch(address) for address in replicas.addresses()]
    try:
        first = _set(replicas.addresses()[2], bench_policy(1, 3))
        second = _set(replicas.addresses()[1], bench_policy(2, 4))
        assert second.revision > first.revision
        for address in replicas.addresses():
            # A replica answers a change once its own copy has it: a read right after it sees it anywhere it was
            # made, and the others have it once they announce it.
            assert _names(address) == {"bench-1": first.revision, "bench-2": second.revision}
        for watch in watches:
            watch.wait_for(pb.PolicyEvent.KIND_SET, "bench-1", first.revision)
            watch.wait_for(pb.PolicyEvent.KIND_SET, "bench-2", second.revision)
    finally:
        for watch in watches:
            watch.close()


def test_changes_checked_on_two_replicas_are_serialised(replicas: Replicas) -> None:
    created = _set(replicas.addresses()[0], bench_policy(1, 3))
    stale = bench_policy(1, 5)
    stale.revision = created.revision
    assert _set(replicas.addresses()[1], stale).revision > created.revision
    with pytest.raises(grpc.RpcError) as refused:
        _set(replicas.addresses()[2], stale)  # checked against the revision the other replica replaced
    assert refused.value.code() == grpc.StatusCode.ABORTED
    # Creations on three replicas at once all land (each checked again when another replica's came first).
    threads = [
        threading.Thread(target=_set, args=(replicas.addresses()[i % 3], bench_policy(10 + i, 1))) for i in range(12)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(_names(replicas.addresses()[0])) == {"bench-1", *(f"bench-{10 + i}" for i in range(12))}


def test_killing_the_leader_hands_leadership_to_a_follower(replicas: Replicas) -> None:
    before = _set(replicas.addresses()[1], bench_policy(1, 3))
    old, new, takeover_s = replicas.kill_leader()
    assert old == 0 and new in (1, 2)
    assert takeover_s < TAKEOVER_BOUND_S
    after = _set(replicas.addresses()[new], bench_policy(2, 3))
    assert after.revision > before.revision
    for number in (1, 2):
        assert _names(replicas.addresses()[number]) == {"bench-1": before.revision, "bench-2": after.revision}
    # The old leader comes back as a follower: its new registration is younger than the leader's.
    replicas.start_replica(0)
    status = subprocess.run(
        [sys.executable, "-m", "tng_controller.tngctl", "--json", "cluster", "--etcd", replicas.etcd.url],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    cluster = json.loads(status.stdout)
    assert cluster["leader"] == f"r{new}"
    assert [r["name"] for r in cluster["replicas"]][-1] == "r0"
    ids = [r["election_id"] for r in cluster["replicas"]]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert all(r["health"] == "ok" for r in cluster["replicas"])
    assert [r["leading"] for r in cluster["replicas"]] == [True, False, False]


def test_a_subscriber_reconnecting_to_another_replica_keeps_getting_changes(replicas: Replicas) -> None:
    first = _set(replicas.addresses()[1], bench_policy(1, 3))
    watch = _Watch(replicas.addresses()[0])
    try:
        second = _set(replicas.addresses()[1], bench_policy(2, 3))
        watch.wait_for(pb.PolicyEvent.KIND_SET, "bench-2", second.revision)
    finally:
        watch.close()
    replicas.kill_leader()  # replica 0, the one it watched
    again = _Watch(replicas.addresses()[2])
    try:
        snapshot = {(name, revision) for kind, name, revision in again.events if kind == pb.PolicyEvent.KIND_SNAPSHOT}
        assert snapshot == {("bench-1", first.revision), ("bench-2", second.revision)}
        third = _set(replicas.addresses()[1], bench_policy(3, 3))
        again.wait_for(pb.PolicyEvent.KIND_SET, "bench-3", third.revision)
        channel, stub = _stub(replicas.addresses()[1])
        with channel:
            stub.DeletePolicy(pb.DeletePolicyRequest(name="bench-1"), timeout=10)
        with again.changed:
            assert again.changed.wait_for(
                lambda: any(k == pb.PolicyEvent.KIND_DELETED and n == "bench-1" for k, n, _ in again.events), 10
            )
    finally:
        again.close()


def test_a_host_registered_on_one_replica_is_resolved_and_watched_on_every_other(replicas: Replicas) -> None:
    host = Host()
    first, second, third = replicas.addresses()
    stubs = {address: _stub(address) for address in replicas.addresses()}
    try:
        stubs[first][1].RegisterHost(host.registration(1, ["10.0.0.1:4477"]), timeout=10)
        for address in (second, third):  # a lookup reads etcd: no wait for the replica's copy
            record = stubs[address][1].ResolveHost(pb.ResolveHostRequest(identity=host.identity), timeout=10)
            assert (list(record.addresses), record.sequence) == (["10.0.0.1:4477"], 1)
        watch = stubs[third][1].WatchHost(pb.ResolveHostRequest(identity=host.identity), timeout=20)
        assert next(watch).sequence == 1  # the current record first
        stubs[second][1].RegisterHost(host.registration(2, ["10.0.0.2:4477"]), timeout=10)
        moved = next(watch)  # made on another replica, learnt from etcd's watch
        assert (list(moved.addresses), moved.sequence) == (["10.0.0.2:4477"], 2)
        watch.cancel()
        with pytest.raises(grpc.RpcError) as refused:  # replayed to a replica that did not take the move itself
            stubs[first][1].RegisterHost(host.registration(2, ["10.6.6.6:4477"]), timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        forged = Host().registration(3, ["10.6.6.6:4477"])
        forged.public_key = host.public_key
        with pytest.raises(grpc.RpcError) as refused:
            stubs[third][1].RegisterHost(forged, timeout=10)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # listings come from each replica's copy, which follows etcd
            listed = [stubs[a][1].ListHosts(pb.ListHostsRequest(), timeout=10).hosts for a in replicas.addresses()]
            if all([(h.identity, h.sequence) for h in hosts] == [(host.identity, 2)] for hosts in listed):
                break
            time.sleep(0.05)
        assert all(list(hosts[0].addresses) == ["10.0.0.2:4477"] for hosts in listed), listed
    finally:
        for channel, _ in stubs.values():
            channel.close()


def test_a_registration_in_etcd_expires_for_every_replica_and_stays_unreplayable(tmp_path: Path) -> None:
    cluster = Replicas(tmp_path, more_config="[hosts]\nregistration_ttl_s = 1.5\n")
    host = Host()
    stubs: dict[str, tuple[grpc.Channel, pb_grpc.PolicyServiceStub]] = {}
    try:
        cluster.start()
        first, second, third = cluster.addresses()
        stubs.update((address, _stub(address)) for address in cluster.addresses())
        registered = stubs[first][1].RegisterHost(host.registration(1, ["10.0.0.1:4477"]), timeout=10).host
        assert registered.expires_unix_ms - registered.registered_unix_ms == 1500
        resolved = stubs[second][1].ResolveHost(pb.ResolveHostRequest(identity=host.identity), timeout=10)
        assert resolved.sequence == 1
        time.sleep(max(0.0, registered.expires_unix_ms / 1000 - time.time()) + 0.2)
        for address in cluster.addresses():
            with pytest.raises(grpc.RpcError) as expired:
                stubs[address][1].ResolveHost(pb.ResolveHostRequest(identity=host.identity), timeout=10)
            assert expired.value.code() == grpc.StatusCode.NOT_FOUND
            assert "expired" in (expired.value.details() or "")
            assert _hosts(address) == []
        with pytest.raises(grpc.RpcError) as replayed:
            stubs[third][1].RegisterHost(host.registration(1, ["10.0.0.1:4477"]), timeout=10)
        assert replayed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        stubs[third][1].RegisterHost(host.registration(2, ["10.0.0.2:4477"]), timeout=10)
        renewed = stubs[first][1].ResolveHost(pb.ResolveHostRequest(identity=host.identity), timeout=10)
        assert (list(renewed.addresses), renewed.sequence) == (["10.0.0.2:4477"], 2)
    finally:
        for channel, _ in stubs.values():
            channel.close()
        cluster.stop()


def test_without_etcd_replicas_serve_reads_refuse_changes_and_nobody_leads(replicas: Replicas) -> None:
    stored = _set(replicas.addresses()[1], bench_policy(1, 3))
    host = Host()
    channel, stub = _stub(replicas.addresses()[0])
    with channel:
        stub.RegisterHost(host.registration(1, ["10.0.0.1:4477"]), timeout=10)
    replicas.wait_for_leader()
    for address in replicas.addresses():  # every replica has seen the change and the host before etcd goes
        deadline = time.monotonic() + 10
        while (_names(address), _hosts(address)) != ({"bench-1": stored.revision}, [host.identity]):
            assert time.monotonic() < deadline, (_names(address), _hosts(address))
            time.sleep(0.05)
    replicas.etcd.stop()
    for address in replicas.addresses():
        assert _names(address) == {"bench-1": stored.revision}
    with pytest.raises(grpc.RpcError) as refused:
        _set(replicas.addresses()[1], bench_policy(2, 3))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "etcd" in (refused.value.details() or "")
    channel, stub = _stub(replicas.addresses()[2])
    with channel:  # a lookup answers from the replica's copy; a registration is refused, not lost
        record = stub.ResolveHost(pb.ResolveHostRequest(identity=host.identity), timeout=20)
        assert list(record.addresses) == ["10.0.0.1:4477"]
        with pytest.raises(grpc.RpcError) as refused:
            stub.RegisterHost(host.registration(2, ["10.0.0.2:4477"]), timeout=20)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    deadline = time.monotonic() + TAKEOVER_BOUND_S  # the leader stops once its lease cannot be renewed
    while time.monotonic() < deadline:
        try:
            replicas.wait_for_leader(timeout_s=0.1)
        except TimeoutError:
            break
        time.sleep(0.1)
    with pytest.raises(TimeoutError):  # and nobody leads after it
        replicas.wait_for_leader(timeout_s=TAKEOVER_BOUND_S / 2)


def _samples(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The replica's metrics as GetStats carries them (the registry its /metrics serves)."""
    channel, stub = _stub(address)
    with channel:
        stats = stub.GetStats(pb.GetStatsRequest(), timeout=10)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in stats.controller_metrics}


def _set_retrying(address: str, policy: pb.Policy, timeout_s: float = TAKEOVER_BOUND_S) -> pb.Policy:
    """SetPolicy until it succeeds: a call that finds its etcd member gone fails (UNAVAILABLE), the next goes to
    another member."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _set(address, policy)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_replicas_go_on_with_the_other_etcd_members_when_one_dies(tmp_path: Path) -> None:
    _go_on_without_the_first_member(Replicas(tmp_path, etcd_members=3), lambda etcd: etcd.kill(0))


@pytest.mark.needs_root
@pytest.mark.skipif(PARTITION_SKIP_REASON is not None, reason=PARTITION_SKIP_REASON or "")
def test_replicas_go_on_with_the_other_etcd_members_when_one_is_cut_off_from_them(tmp_path: Path) -> None:
    """The member stays up and reachable but has no leader: its calls are refused, not lost in timeouts."""
    _go_on_without_the_first_member(Replicas(tmp_path, etcd_members=3, etcd_apart=True), EtcdProcess.partition)


def test_replicas_authenticate_to_etcd_and_again_on_the_member_they_move_to(tmp_path: Path) -> None:
    """etcd requires a user and password: replicas authenticate, and again on the member they move to."""
    _go_on_without_the_first_member(Replicas(tmp_path, etcd_members=3, etcd_auth=True), lambda etcd: etcd.kill(0))


@pytest.mark.needs_root
@pytest.mark.skipif(PARTITION_SKIP_REASON is not None, reason=PARTITION_SKIP_REASON or "")
def test_the_takeover_bench_times_a_change_through_each_replica_after_a_member_is_cut_off(tmp_path: Path) -> None:
    result = run_member_cut_off(tmp_path, replicas=2, rounds=1)
    (round_seconds,) = result["change_lands_s"]
    assert len(round_seconds) == 2
    assert 0 < result["every_replica_median_s"] == max(round_seconds) < TAKEOVER_BOUND_S * 3


def _go_on_without_the_first_member(replicas: Replicas, lose: Callable[[EtcdProcess], None]) -> None:
    """Every replica uses the first member it was given; after `lose` it, changes go on through the others and every
    replica ends on another member with the same policies, and one leads."""
    try:
        replicas.start()
        first = _set(replicas.addresses()[1], bench_policy(1, 3))
        leader = replicas.wait_for_leader()
        watch = _Watch(replicas.addresses()[2])
        try:
            lose(replicas.etcd)
            second = _set_retrying(replicas.addresses()[1], bench_policy(2, 3))
            third = _set_retrying(replicas.addresses()[leader], bench_policy(3, 3))
            watch.wait_for(pb.PolicyEvent.KIND_SET, "bench-3", third.revision)
        finally:
            watch.close()
        want = {"bench-1": first.revision, "bench-2": second.revision, "bench-3": third.revision}
        for address in replicas.addresses():
            deadline = time.monotonic() + TAKEOVER_BOUND_S
            while _names(address) != want and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _names(address) == want
        replicas.wait_for_leader(timeout_s=TAKEOVER_BOUND_S)
        for address in replicas.addresses():
            samples = _samples(address)
            assert samples[("tng_controller_etcd_failovers_total", ())] >= 1
            (endpoint,) = [dict(k[1])["endpoint"] for k, v in samples.items() if k[0].endswith("etcd_endpoint")]
            assert endpoint in replicas.etcd.urls[1:]
    finally:
        replicas.stop()


def test_replicas_reach_etcd_over_tls_with_client_certificates(tmp_path: Path, tls_files) -> None:
    tls = EtcdServerTls(
        ca=tls_files.ca,
        cert=tls_files.server_cert,
        key=tls_files.server_key,
        client_cert=tls_files.client_cert,
        client_key=tls_files.client_key,
    )
    replicas = Replicas(tmp_path, count=2, etcd_tls=tls)
    try:
        replicas.start()
        assert replicas.etcd.url.startswith("https://")
        stored = _set(replicas.addresses()[1], bench_policy(1, 3))
        assert _names(replicas.addresses()[1]) == {"bench-1": stored.revision}
        deadline = time.monotonic() + TAKEOVER_BOUND_S
        while _names(replicas.addresses()[0]) != {"bench-1": stored.revision} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _names(replicas.addresses()[0]) == {"bench-1": stored.revision}
        assert replicas.wait_for_leader() == 0

        def cluster(*tls_args: str) -> subprocess.CompletedProcess[str]:
            command = [sys.executable, "-m", "tng_controller.tngctl", "--json", "cluster", "--etcd", replicas.etcd.url]
            return subprocess.run([*command, *tls_args], capture_output=True, text=True, timeout=30, check=False)

        shown = cluster(
            "--etcd-ca", str(tls.ca), "--etcd-cert", str(tls.client_cert), "--etcd-key", str(tls.client_key)
        )
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["leader"] == "r0"
        # etcd requires a client certificate: without one it is refused, and the error names the endpoint.
        refused = cluster("--etcd-ca", str(tls.ca))
        assert refused.returncode != 0
        assert f"no etcd endpoint answers ({replicas.etcd.url}:" in refused.stderr
    finally:
        replicas.stop()


def test_a_replica_exports_its_leadership_metrics(replicas: Replicas) -> None:
    leader = replicas.wait_for_leader()
    samples = _samples(replicas.addresses()[leader])
    assert samples[("tng_controller_leader", ())] == 1
    assert samples[("tng_controller_elections_won_total", ())] == 1
    assert samples[("tng_controller_takeovers_total", ())] == 0
    assert samples[("tng_controller_leader_election_id", ())] > 0
    assert 0 < samples[("tng_controller_lease_seconds_left", ())] <= 2
    old, new, _ = replicas.kill_leader()
    samples = _samples(replicas.addresses()[new])
    assert samples[("tng_controller_elections_won_total", ())] == 1
    assert samples[("tng_controller_takeovers_total", ())] == 1
    assert samples[("tng_controller_leader", ())] == 1
    follower = next(n for n in range(replicas.count) if n not in (old, new))
    samples = _samples(replicas.addresses()[follower])
    assert samples[("tng_controller_elections_won_total", ())] == 0
    assert samples[("tng_controller_leader_election_id", ())] == 0
    assert samples[("tng_controller_lease_seconds_left", ())] > 0
