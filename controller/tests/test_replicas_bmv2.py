"""Three controller replicas on a real etcd writing one BMv2 switch: after kill -9 of the leader a follower wins
arbitration and reconciles, and the switch holds exactly the stored policies (none lost, none stale, none
duplicated); a leader paused past its lease is fenced off by the new leader's higher election id and writes nothing
when it wakes up. Skipped without the etcd binary or the P4 toolchain."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from switch_tables import held
from tng_controller.bench import bench_policy
from tng_controller.cluster_testbed import Replicas, skip_reason
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.switch_config import DEFAULT_P4INFO
from tng_controller.testbed import SwitchReader
from tng_p4 import toolchain
from tng_p4.bmv2 import Bmv2, nanomsg_config

TOOLCHAIN = toolchain.detect()
SKIP_REASON = skip_reason() or TOOLCHAIN.skip_reason("bmv2")
pytestmark = [pytest.mark.needs_bmv2, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]
TAKEOVER_BOUND_S = 10.0  # generous: CI machines are loaded; `python -m tng_controller.bench --replicas 3` measures
SETTLE_S = 10.0  # for the leader's writes of changes it has seen to reach the switch


class TcpProxy:
    """Forwards loopback TCP connections to `target` until `cut`, which closes them all and refuses new ones."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._open = True
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open:
                client.close()
                continue
            server = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._open = False
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def heal(self) -> None:
        self._open = True

    def close(self) -> None:
        self.cut()
        self._listener.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Replicas, SwitchReader]]:
    assert TOOLCHAIN.simple_switch_grpc.path is not None
    directory = tmp_path / "s1"
    directory.mkdir()
    bmv2 = Bmv2(nanomsg_config(TOOLCHAIN.simple_switch_grpc.path, directory, device_id=1))
    replicas = Replicas(tmp_path, switches=[bmv2])
    reader = None
    try:
        bmv2.start()
        reader = SwitchReader(bmv2.config.grpc_address, DEFAULT_P4INFO, 1)
        replicas.start()
        yield replicas, reader
    finally:
        replicas.stop()
        if reader is not None:
            reader.close()
        bmv2.stop()


def _stub(address: str) -> pb_grpc.PolicyServiceStub:
    return pb_grpc.PolicyServiceStub(grpc.insecure_channel(address))


def _stored(address: str) -> dict[int, list[int]]:
    """Policy index -> [lte_weight] of every stored policy, as the switch should hold them."""
    policies = _stub(address).ListPolicies(pb.ListPoliciesRequest(), timeout=10).policies
    return {int(p.name.removeprefix("bench-")): [p.switch_policy.lte_weight] for p in policies}


def _settled(reader: SwitchReader, address: str) -> dict[int, list[int]]:
    """What the switch holds once it holds the stored policies (or after SETTLE_S, what it holds then)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        holds, want = held(reader), _stored(address)
        if holds == want or time.monotonic() > deadline:
            return holds
        time.sleep(0.05)


def test_a_follower_takes_over_after_kill_9_and_the_switch_holds_exactly_the_stored_policies(cluster) -> None:
    replicas, reader = cluster
    addresses = replicas.addresses()
    for index in range(20):
        _stub(addresses[index % 3]).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, 1)), timeout=10)
    assert replicas.wait_for_leader() == 0
    assert _settled(reader, addresses[1]) == {index: [1] for index in range(20)}

    old, new, takeover_s = replicas.kill_leader()
    print(f"takeover after kill -9 of the leader: {takeover_s:.2f} s")
    assert takeover_s < TAKEOVER_BOUND_S
    follower = addresses[3 - old - new]
    # Changes while and after the new leader takes over: replaced, deleted and new policies.
    for index in range(5):
        _stub(follower).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, 7)), timeout=10)
    for index in range(5, 8):
        _stub(follower).DeletePolicy(pb.DeletePolicyRequest(name=f"bench-{index}"), timeout=10)
    for index in (20, 21):
        _stub(addresses[new]).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, 9)), timeout=10)
    expected = {**{i: [7] for i in range(5)}, **{i: [1] for i in range(8, 20)}, 20: [9], 21: [9]}
    assert _stored(addresses[new]) == expected
    # One flow_policy and one steering entry per stored policy, in its last version; none of a deleted policy.
    assert _settled(reader, addresses[new]) == expected


def test_a_leader_paused_past_its_lease_is_fenced_off_and_writes_nothing(cluster) -> None:
    replicas, reader = cluster
    addresses = replicas.addresses()
    for index in range(6):
        _stub(addresses[1]).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, 1)), timeout=10)
    assert replicas.wait_for_leader() == 0
    os.kill(replicas.processes[0].pid, signal.SIGSTOP)  # as cut off from etcd: it cannot renew its lease
    try:
        new = replicas.wait_for_leader([1, 2])
        for index in range(3):
            _stub(addresses[new]).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, 4)), timeout=10)
        _stub(addresses[new]).DeletePolicy(pb.DeletePolicyRequest(name="bench-5"), timeout=10)
        expected = {0: [4], 1: [4], 2: [4], 3: [1], 4: [1]}
        assert _settled(reader, addresses[new]) == expected
    finally:
        os.kill(replicas.processes[0].pid, signal.SIGCONT)
    # Awake, the old leader sees its lease gone and its arbitration lost: it steps down and drops the switch.
    deadline = time.monotonic() + TAKEOVER_BOUND_S
    leading: list[float] | str = []
    while leading != [0.0] and time.monotonic() < deadline:
        try:
            stats = _stub(addresses[0]).GetStats(pb.GetStatsRequest(), timeout=2)
        except grpc.RpcError as exc:  # busy catching up after the pause
            leading = f"{exc.code().name}: {exc.details()}"
        else:
            leading = [s.value for s in stats.controller_metrics if s.name.endswith("controller_leader")]
        time.sleep(0.1)
    assert leading == [0.0]
    assert replicas.wait_for_leader() == new
    _stub(addresses[new]).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(6, 2)), timeout=10)
    assert _settled(reader, addresses[new]) == {**expected, 6: [2]}


def test_a_leader_partitioned_from_etcd_stops_writing_and_a_follower_takes_over(tmp_path: Path) -> None:
    assert TOOLCHAIN.simple_switch_grpc.path is not None
    (tmp_path / "s1").mkdir()
    bmv2 = Bmv2(nanomsg_config(TOOLCHAIN.simple_switch_grpc.path, tmp_path / "s1", device_id=1))
    replicas = Replicas(tmp_path, switches=[bmv2])
    proxy = reader = None
    try:
        bmv2.start()
        reader = SwitchReader(bmv2.config.grpc_address, DEFAULT_P4INFO, 1)
        proxy = TcpProxy(replicas.etcd.start())
        replicas.start_replica(0, proxy.url)  # the leader reaches etcd only through the proxy
        replicas.start_replica(1)
        replicas.start_replica(2)
        addresses = replicas.addresses()
        for index in range(6):
            _stub(addresses[1]).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, 1)), timeout=10)
        assert replicas.wait_for_leader() == 0
        assert _settled(reader, addresses[1]) == {index: [1] for index in range(6)}

        proxy.cut()
        cut = time.monotonic()
        new = replicas.wait_for_leader([1, 2], timeout_s=TAKEOVER_BOUND_S)
        print(f"takeover after the leader lost etcd: {time.monotonic() - cut:.2f} s")
        # Still up, the old leader has stopped leading: it writes nothing, and it still serves reads from its copy.
        stats = _stub(addresses[0]).GetStats(pb.GetStatsRequest(), timeout=10)
        assert [s.value for s in stats.controller_metrics if s.name.endswith("controller_leader")] == [0.0]
        assert _stored(addresses[0]) == {index: [1] for index in range(6)}
        for index in range(3):
            _stub(addresses[new]).SetPolicy(pb.SetPolicyRequest(policy=bench_policy(index, 5)), timeout=10)
        expected = {**{i: [5] for i in range(3)}, **{i: [1] for i in range(3, 6)}}
        assert _settled(reader, addresses[new]) == expected

        proxy.heal()  # the old leader catches up and stays a follower
        deadline = time.monotonic() + TAKEOVER_BOUND_S
        while _stored(addresses[0]) != expected and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _stored(addresses[0]) == expected
        assert replicas.wait_for_leader() == new
    finally:
        replicas.stop()
        if proxy is not None:
            proxy.close()
        if reader is not None:
            reader.close()
        bmv2.stop()
