"""The host registry: signed registrations (XEdDSA by the host's X25519 key), forged and replayed ones refused,
expiry (and no replay after it), persistence in SQLite, ResolveHost, WatchHost and ListHosts over a real grpc.aio
server, and `tngctl hosts`."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from host_keys import Host
from tng_controller import tngctl
from tng_controller.api import PolicyServicer, start_server
from tng_controller.config import ApiConfig
from tng_controller.fleet import NoSwitches
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.registry import (
    ForgedRegistration,
    HostRegistry,
    MalformedRegistration,
    StaleRegistration,
    UnknownHost,
    identity_of,
    signed_message,
    verify_xeddsa,
)
from tng_controller.store import PolicyStore

VECTOR = Path(__file__).resolve().parents[2] / "testdata" / "registry" / "register-host.json"


def test_the_agents_signature_vector_verifies_and_a_changed_byte_does_not() -> None:
    """The vector tng-agent's registration test writes: the Rust signer and this verifier agree."""
    vector = json.loads(VECTOR.read_text())
    public_key = bytes.fromhex(vector["public_key"])
    message = signed_message(public_key, vector["sequence"], vector["addresses"])
    assert message.decode() == vector["message"]
    signature = bytes.fromhex(vector["signature"])
    assert identity_of(public_key) == vector["identity"]
    assert verify_xeddsa(public_key, message, signature)
    bent = bytearray(signature)
    bent[5] ^= 1
    assert not verify_xeddsa(public_key, message, bytes(bent))
    assert not verify_xeddsa(public_key, message.replace(b"4477", b"4478"), signature)


async def test_registrations_are_stored_and_survive_a_restart(tmp_path: Path) -> None:
    host = Host()
    registry = HostRegistry(tmp_path / "db")
    stored = await registry.register(host.registration(1, ["10.0.0.1:4477", "[fd00::0:1]:4477"]))
    assert stored.identity == host.identity
    assert list(stored.addresses) == ["10.0.0.1:4477", "[fd00::1]:4477"]
    await registry.register(host.registration(5, ["10.0.9.1:4477"]))
    registry.close()
    reopened = HostRegistry(tmp_path / "db")
    record = await reopened.resolve(host.identity.upper())
    assert (list(record.addresses), record.sequence) == (["10.0.9.1:4477"], 5)
    assert [r.identity for r in reopened.list()] == [host.identity]


async def test_a_forged_registration_is_refused() -> None:
    victim, attacker = Host(), Host()
    registry = HostRegistry()
    await registry.register(victim.registration(1, ["10.0.0.1:4477"]))
    # The attacker signs with its own key but claims the victim's.
    forged = attacker.registration(2, ["10.6.6.6:4477"])
    forged.public_key = victim.public_key
    with pytest.raises(ForgedRegistration, match=victim.identity):
        await registry.register(forged)
    # A genuine registration whose addresses were changed on the way.
    tampered = victim.registration(2, ["10.0.0.2:4477"])
    tampered.addresses[0] = "10.6.6.6:4477"
    with pytest.raises(ForgedRegistration):
        await registry.register(tampered)
    assert list((await registry.resolve(victim.identity)).addresses) == ["10.0.0.1:4477"]


async def test_a_replayed_or_older_registration_is_refused() -> None:
    host = Host()
    registry = HostRegistry()
    old = host.registration(3, ["10.0.0.1:4477"])
    await registry.register(old)
    await registry.register(host.registration(4, ["10.0.0.2:4477"]))
    for stale in (old, host.registration(4, ["10.0.0.3:4477"])):
        with pytest.raises(StaleRegistration, match="is not above the registered 4"):
            await registry.register(stale)
    assert list((await registry.resolve(host.identity)).addresses) == ["10.0.0.2:4477"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_registration_expires_unless_renewed_and_stays_unreplayable() -> None:
    host, clock = Host(), Clock()
    registry = HostRegistry(ttl_s=10, clock=clock)
    first = host.registration(1, ["10.0.0.1:4477"])
    record = await registry.register(first)
    assert record.expires_unix_ms - record.registered_unix_ms == 10_000
    clock.now += 9.9
    assert list((await registry.resolve(host.identity)).addresses) == ["10.0.0.1:4477"]
    clock.now += 0.2
    with pytest.raises(UnknownHost, match="registration expired at 2027-01-15 08:00:10 UTC"):
        await registry.resolve(host.identity)
    assert (registry.list(), len(registry), registry.get(host.identity)) == ([], 0, None)
    # The expired record still refuses its own replay: nobody can give the identity its old addresses back.
    with pytest.raises(StaleRegistration, match="is not above the registered 1"):
        await registry.register(first)
    await registry.register(host.registration(2, ["10.0.0.2:4477"]))
    assert list((await registry.resolve(host.identity)).addresses) == ["10.0.0.2:4477"]
    assert [r.identity for r in registry.list()] == [host.identity]


async def test_a_file_from_before_expiry_gets_each_registration_a_lifetime(tmp_path: Path) -> None:
    host, clock = Host(), Clock()
    db = sqlite3.connect(tmp_path / "db")
    old_schema = "CREATE TABLE hosts (identity TEXT PRIMARY KEY, sequence INTEGER NOT NULL, addresses TEXT NOT NULL, "
    db.execute(old_schema + "registered_unix_ms INTEGER NOT NULL)")
    db.execute("INSERT INTO hosts VALUES (?, 3, '10.0.0.1:4477', ?)", (host.identity, int(clock.now * 1000)))
    db.commit()
    db.close()
    registry = HostRegistry(tmp_path / "db", ttl_s=60, clock=clock)
    record = await registry.resolve(host.identity)
    assert (record.sequence, record.expires_unix_ms) == (3, int(clock.now * 1000) + 60_000)
    clock.now += 61
    assert registry.get(host.identity) is None
    await registry.register(host.registration(4, ["10.0.0.2:4477"]))
    assert HostRegistry(tmp_path / "db", ttl_s=60, clock=clock).get(host.identity) is not None


@pytest.mark.parametrize(
    ("addresses", "complaint"),
    [
        (["10.0.0.1"], "not ip:port"),
        (["10.0.0.300:4477"], "is not an IP address"),
        (["fd00::1:4477"], "written in brackets"),
        (["10.0.0.1:0"], "outside 1-65535"),
        (["0.0.0.0:4477"], "not a unicast address"),
        ([], "1-16 expected, got 0"),
    ],
)
async def test_malformed_addresses_are_refused_with_the_reason(addresses: list[str], complaint: str) -> None:
    with pytest.raises(MalformedRegistration, match=complaint):
        await HostRegistry().register(Host().registration(1, addresses))


async def test_malformed_keys_signatures_and_sequences_are_refused() -> None:
    good = Host().registration(1, ["10.0.0.1:4477"])
    for field, value, complaint in (
        ("public_key", b"\x01" * 31, "public_key: 32 bytes"),
        ("signature", b"\x01" * 63, "signature: 64 bytes"),
        ("sequence", 0, "sequence: must be in"),
    ):
        request = pb.RegisterHostRequest()
        request.CopyFrom(good)
        setattr(request, field, value)
        with pytest.raises(MalformedRegistration, match=complaint):
            await HostRegistry().register(request)


class RunningApi:
    def __init__(self, stub: pb_grpc.PolicyServiceStub, port: int) -> None:
        self.stub = stub
        self.port = port


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[RunningApi]:
    servicer = PolicyServicer(PolicyStore(tmp_path / "db"), NoSwitches(), registry=HostRegistry(tmp_path / "db"))
    server, port = await start_server(servicer, ApiConfig(listen="127.0.0.1:0"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield RunningApi(pb_grpc.PolicyServiceStub(channel), port)
    await server.stop(None)


async def test_register_resolve_and_the_status_of_each_refusal(api: RunningApi) -> None:
    host = Host()
    registered = await api.stub.RegisterHost(host.registration(1, ["10.0.0.1:4477"]))
    assert registered.host.identity == host.identity
    resolved = await api.stub.ResolveHost(pb.ResolveHostRequest(identity=host.identity))
    assert list(resolved.addresses) == ["10.0.0.1:4477"]

    forged = Host().registration(2, ["10.6.6.6:4477"])
    forged.public_key = host.public_key
    cases = [
        (api.stub.RegisterHost(forged), grpc.StatusCode.PERMISSION_DENIED, "does not verify"),
        (api.stub.RegisterHost(host.registration(1, ["10.0.0.1:4477"])), grpc.StatusCode.FAILED_PRECONDITION, "1"),
        (api.stub.RegisterHost(host.registration(2, ["nowhere"])), grpc.StatusCode.INVALID_ARGUMENT, "ip:port"),
        (api.stub.ResolveHost(pb.ResolveHostRequest(identity="ab" * 32)), grpc.StatusCode.NOT_FOUND, "no host"),
        (api.stub.ResolveHost(pb.ResolveHostRequest(identity="xyz")), grpc.StatusCode.INVALID_ARGUMENT, "64 hex"),
    ]
    for call, code, detail in cases:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
        assert raised.value.code() == code
        assert detail in raised.value.details()


async def test_a_registration_through_the_api_is_kept_in_the_controllers_file(api: RunningApi, tmp_path: Path) -> None:
    """The servicer keeps the registry it is given even while that is empty (an empty registry is falsy)."""
    host = Host()
    await api.stub.RegisterHost(host.registration(1, ["10.0.0.1:4477"]))
    reopened = HostRegistry(tmp_path / "db")
    assert list((await reopened.resolve(host.identity)).addresses) == ["10.0.0.1:4477"]


async def test_a_watcher_learns_of_each_move_at_once(api: RunningApi) -> None:
    host = Host()
    watch = api.stub.WatchHost(pb.ResolveHostRequest(identity=host.identity))
    events = watch.__aiter__()
    await asyncio.sleep(0.1)  # the watch is subscribed before the first registration
    await api.stub.RegisterHost(host.registration(1, ["10.0.0.1:4477"]))
    first = await asyncio.wait_for(events.__anext__(), 5)
    assert list(first.addresses) == ["10.0.0.1:4477"]
    await api.stub.RegisterHost(host.registration(2, ["10.0.0.2:4477"]))
    second = await asyncio.wait_for(events.__anext__(), 5)
    assert (list(second.addresses), second.sequence) == (["10.0.0.2:4477"], 2)
    watch.cancel()
    # A watch that starts later gets the current record first.
    late = api.stub.WatchHost(pb.ResolveHostRequest(identity=host.identity))
    current = await asyncio.wait_for(late.__aiter__().__anext__(), 5)
    assert current.sequence == 2
    late.cancel()


async def test_tngctl_hosts_lists_them(api: RunningApi) -> None:
    hosts = [Host(), Host()]
    for index, host in enumerate(hosts):
        await api.stub.RegisterHost(host.registration(7, [f"10.0.0.{index + 1}:4477"]))
    server = f"127.0.0.1:{api.port}"

    def run(*args: str) -> str:
        out = io.StringIO()
        assert tngctl.main(["--server", server, *args], out=out) == 0
        return out.getvalue()

    table = await asyncio.to_thread(run, "hosts")
    for index, host in enumerate(hosts):
        assert host.identity in table and f"10.0.0.{index + 1}:4477" in table
    listed = json.loads(await asyncio.to_thread(run, "--json", "hosts"))
    assert sorted(h["identity"] for h in listed) == sorted(h.identity for h in hosts)
    assert all(h["sequence"] == "7" for h in listed)
