"""The policy API over a real grpc.aio server on 127.0.0.1: round trips, errors, rollback, watches, TLS."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from tng_controller.api import PolicyServicer, start_server
from tng_controller.config import ApiConfig, TlsConfig
from tng_controller.fleet import NoSwitches
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.store import PolicyStore

KIND = pb.PolicyEvent.Kind


def steered(name: str = "video", traffic_class: str = "video", lte: int = 1) -> pb.Policy:
    return pb.Policy(
        name=name,
        match=pb.Match(priority=5, traffic_class=traffic_class, dst_prefix=f"10.0.{len(name)}.0/24", ip_protocol=6),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_IN_NETWORK, steering=pb.STEERING_MODE_WEIGHTED, lte_weight=lte, wifi_weight=2
        ),
        host_policy=pb.HostPolicy(congestion_control="cubic"),
    )


async def status_of(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def test_set_get_list_delete_round_trip(api) -> None:
    response = await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered()))
    assert response.policy.revision == 1
    assert list(response.switches) == ["s1", "s2", "s3"]
    assert api.fleet.installed == {s: [("video", 1, 1)] for s in ("s1", "s2", "s3")}
    expected = steered()
    expected.revision = 1
    assert await api.stub.GetPolicy(pb.GetPolicyRequest(name="video")) == expected

    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("bulk", "bulk")))
    replaced = await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered(lte=7)))
    assert replaced.policy.revision == 3
    assert replaced.policy.switch_policy.lte_weight == 7
    listed = await api.stub.ListPolicies(pb.ListPoliciesRequest())
    assert [(p.name, p.revision) for p in listed.policies] == [("bulk", 2), ("video", 3)]
    assert api.fleet.installed["s3"] == [("bulk", 2, 2), ("video", 3, 1)]

    await api.stub.DeletePolicy(pb.DeletePolicyRequest(name="video"))
    assert api.fleet.installed == {s: [("bulk", 2, 2)] for s in ("s1", "s2", "s3")}
    missing = await status_of(api.stub.GetPolicy(pb.GetPolicyRequest(name="video")))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    assert missing.details() == "no policy named 'video'"


async def test_invalid_requests_name_the_field_and_write_nothing(api) -> None:
    bad = steered()
    bad.match.dst_prefix = "10.0.0.0/33"
    bad.host_policy.congestion_control = "foo"
    error = await status_of(api.stub.SetPolicy(pb.SetPolicyRequest(policy=bad)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        'policy.match.dst_prefix: "10.0.0.0/33" is not an IPv4 prefix a.b.c.d/len; '
        'policy.host_policy.congestion_control: "foo" is not one of newreno, cubic, vegas, copa, bbr, verus, sprout'
    )
    assert api.fleet.writes == []
    assert api.store.list() == []
    error = await status_of(api.stub.GetPolicy(pb.GetPolicyRequest(name="No Such")))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        'name: "No Such" does not match [a-z0-9][a-z0-9-]{0,62}',
    )
    error = await status_of(api.stub.DeletePolicy(pb.DeletePolicyRequest(name="absent")))
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_a_policy_switches_cannot_tell_from_another_is_refused(api) -> None:
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("video")))
    twin = steered("video")
    twin.name = "twin"
    error = await status_of(api.stub.SetPolicy(pb.SetPolicyRequest(policy=twin)))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details().startswith('policy.match: switches would match the same flows as policy "video"')
    assert api.fleet.writes == ["s1", "s2", "s3"]


async def test_revision_in_set_policy_is_compare_and_set(api) -> None:
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered()))
    stale = steered(lte=3)
    stale.revision = 9
    error = await status_of(api.stub.SetPolicy(pb.SetPolicyRequest(policy=stale)))
    assert error.code() == grpc.StatusCode.ABORTED
    assert "is at revision 1, not at revision 9" in error.details()
    stale.revision = 1
    assert (await api.stub.SetPolicy(pb.SetPolicyRequest(policy=stale))).policy.revision == 2


async def test_failure_on_the_second_switch_rolls_back_the_first(api) -> None:
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered()))
    api.fleet.writes.clear()
    api.fleet.fail["s2"] = [True]
    error = await status_of(api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("bulk", "bulk"))))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == (
        "not applied: switch s2: table ingress.classify.flow_policy is full; rolled back on s1, s3"
    )
    assert api.fleet.writes == ["s1", "s2", "s3", "s1", "s3"]  # all at once, then back where it was taken
    assert api.fleet.installed == {s: [("video", 1, 1)] for s in ("s1", "s2", "s3")}
    assert [p.name for p in api.store.list()] == ["video"]
    assert api.store.revision() == 1
    retried = await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("bulk", "bulk")))
    assert retried.policy.revision == 2


async def test_a_stream_of_changes_is_answered_in_order_each_as_its_own_call_would_be(api) -> None:
    stale = steered("video", lte=7)
    stale.revision = 99
    changes = [pb.PolicyChange(set=steered("video", lte=n)) for n in range(1, 21)]
    changes[5] = pb.PolicyChange(set=pb.Policy(name="Bad Name"))
    changes[10] = pb.PolicyChange(set=stale)
    changes[12] = pb.PolicyChange(set=steered("bulk", "bulk"))
    changes[15] = pb.PolicyChange(delete="bulk")
    changes[16] = pb.PolicyChange(delete="absent")
    changes[17] = pb.PolicyChange()
    changes[14] = pb.PolicyChange(set=steered("video", lte=14), delete="video")
    api.fleet.refuse = {"refused"}
    changes[18] = pb.PolicyChange(set=steered("refused", "refused"))

    async def requests():
        for change in changes:
            yield change

    results = [result async for result in api.stub.ApplyPolicies(requests())]

    assert len(results) == len(changes)
    refused = {5, 10, 14, 16, 17, 18}
    codes = {i: grpc.StatusCode.OK.value[0] for i in range(len(changes))} | {
        5: grpc.StatusCode.INVALID_ARGUMENT.value[0],
        10: grpc.StatusCode.ABORTED.value[0],
        14: grpc.StatusCode.INVALID_ARGUMENT.value[0],
        16: grpc.StatusCode.NOT_FOUND.value[0],
        17: grpc.StatusCode.INVALID_ARGUMENT.value[0],
        18: grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
    }
    assert {i: r.code for i, r in enumerate(results)} == codes
    assert results[5].message.startswith("set.name: ")
    assert "not at revision 99" in results[10].message
    assert results[14].message == results[17].message == "change: needs set or delete, not both"
    assert results[18].message.startswith("not applied: switch s1: ")
    applied = [r for i, r in enumerate(results) if i not in refused]
    revisions = [r.policy.revision for r in applied]
    assert revisions == list(range(1, len(applied) + 1))  # in the order sent, one revision each
    assert all(list(r.switches) == ["s1", "s2", "s3"] for r in applied)
    assert results[15].policy.name == "bulk"
    last = results[19].policy
    assert (last.name, last.switch_policy.lte_weight) == ("video", 20)
    assert [(p.name, p.revision) for p in api.store.list()] == [("video", last.revision)]
    assert api.fleet.installed == {s: [("video", last.revision, 1)] for s in ("s1", "s2", "s3")}
    # The stream goes on after it: a unary call sees the same store.
    assert (await api.stub.GetPolicy(pb.GetPolicyRequest(name="video"))).revision == last.revision


async def test_failed_delete_keeps_the_policy_everywhere(api) -> None:
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered()))
    api.fleet.fail["s3"] = [True]
    error = await status_of(api.stub.DeletePolicy(pb.DeletePolicyRequest(name="video")))
    assert error.details().endswith("rolled back on s1, s2")
    assert api.fleet.installed == {s: [("video", 1, 1)] for s in ("s1", "s2", "s3")}
    assert api.store.get("video") is not None


async def test_a_failed_rollback_is_reported(api) -> None:
    api.fleet.fail.update({"s1": [False, True], "s2": [True]})
    error = await status_of(api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered())))
    assert error.details() == (
        "not applied: switch s2: table ingress.classify.flow_policy is full; rolled back on s3; rollback FAILED on s1"
        " (they are reconciled when they reconnect)"
    )
    assert api.store.list() == []


async def test_watch_gets_a_snapshot_then_changes(api) -> None:
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("bulk", "bulk")))
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("anything", "")))
    everything = api.stub.WatchPolicies(pb.WatchPoliciesRequest())
    video_only = api.stub.WatchPolicies(pb.WatchPoliciesRequest(traffic_classes=["video"]))

    async def next_events(call, count: int) -> list[tuple[int, str, int]]:
        events = [await asyncio.wait_for(call.read(), 5) for _ in range(count)]
        return [(e.kind, e.policy.name, e.policy.revision) for e in events]

    assert await next_events(everything, 3) == [
        (KIND.KIND_SNAPSHOT, "anything", 2),
        (KIND.KIND_SNAPSHOT, "bulk", 1),
        (KIND.KIND_SYNCED, "", 0),
    ]
    assert await next_events(video_only, 2) == [(KIND.KIND_SNAPSHOT, "anything", 2), (KIND.KIND_SYNCED, "", 0)]

    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("video", "video")))
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("video", "bulk")))  # leaves the video class
    await api.stub.DeletePolicy(pb.DeletePolicyRequest(name="bulk"))
    assert await next_events(everything, 3) == [
        (KIND.KIND_SET, "video", 3),
        (KIND.KIND_SET, "video", 4),
        (KIND.KIND_DELETED, "bulk", 5),
    ]
    assert await next_events(video_only, 2) == [(KIND.KIND_SET, "video", 3), (KIND.KIND_DELETED, "video", 4)]
    everything.cancel()
    video_only.cancel()


async def test_watch_rejects_bad_traffic_classes(api) -> None:
    call = api.stub.WatchPolicies(pb.WatchPoliciesRequest(traffic_classes=["video", "Bad Class"]))
    error = await status_of(call.read())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == 'traffic_classes[1]: "Bad Class" does not match [a-z0-9][a-z0-9._-]{0,62}'


async def test_a_failed_change_is_not_announced(api) -> None:
    watch = api.stub.WatchPolicies(pb.WatchPoliciesRequest())
    assert (await watch.read()).kind == KIND.KIND_SYNCED
    api.fleet.fail["s1"] = [True]
    await status_of(api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered())))
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered("bulk", "bulk")))
    event = await asyncio.wait_for(watch.read(), 5)
    assert (event.kind, event.policy.name) == (KIND.KIND_SET, "bulk")
    watch.cancel()


async def test_stats_and_switches(api) -> None:
    await api.stub.SetPolicy(pb.SetPolicyRequest(policy=steered()))
    stats = await api.stub.GetStats(pb.GetStatsRequest())
    assert [(p.name, p.packets, p.bytes) for p in stats.policies] == [("video", 10, 15)]
    assert [(p.switch_name, p.port, p.role, p.steered_packets) for p in stats.ports] == [("s1", 1, "lte", 5)]
    switches = await api.stub.ListSwitches(pb.ListSwitchesRequest())
    assert [(s.name, s.state) for s in switches.switches] == [
        ("s1", "CONNECTED"),
        ("s2", "CONNECTED"),
        ("s3", "CONNECTED"),
    ]


async def test_without_switches_policies_are_only_stored_and_served(tmp_path) -> None:
    store = PolicyStore(tmp_path / "db")
    server, port = await start_server(PolicyServicer(store, NoSwitches()), ApiConfig(listen="127.0.0.1:0"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        response = await stub.SetPolicy(pb.SetPolicyRequest(policy=steered()))
        assert list(response.switches) == []
        assert [p.name for p in (await stub.GetStats(pb.GetStatsRequest())).policies] == ["video"]
        assert list((await stub.ListSwitches(pb.ListSwitchesRequest())).switches) == []
    await server.stop(None)


async def test_tls_requires_a_client_certificate_of_the_configured_ca(tmp_path, tls_files) -> None:
    tls = TlsConfig(cert=tls_files.server_cert, key=tls_files.server_key, client_ca=tls_files.ca)
    store = PolicyStore(tmp_path / "db")
    server, port = await start_server(PolicyServicer(store, NoSwitches()), ApiConfig("127.0.0.1:0", tls))
    address = f"localhost:{port}"

    def credentials(cert=None, key=None) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=tls_files.ca.read_bytes(),
            private_key=key.read_bytes() if key else None,
            certificate_chain=cert.read_bytes() if cert else None,
        )

    async with grpc.aio.secure_channel(address, credentials(tls_files.client_cert, tls_files.client_key)) as channel:
        listed = await pb_grpc.PolicyServiceStub(channel).ListPolicies(pb.ListPoliciesRequest())
        assert list(listed.policies) == []
    for cert, key in ((None, None), (tls_files.other_cert, tls_files.other_key)):
        async with grpc.aio.secure_channel(address, credentials(cert, key)) as channel:
            error = await status_of(
                pb_grpc.PolicyServiceStub(channel).ListPolicies(pb.ListPoliciesRequest(), timeout=5)
            )
            assert error.code() == grpc.StatusCode.UNAVAILABLE
    async with grpc.aio.insecure_channel(address) as channel:
        error = await status_of(pb_grpc.PolicyServiceStub(channel).ListPolicies(pb.ListPoliciesRequest(), timeout=5))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
    await server.stop(None)
