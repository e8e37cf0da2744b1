"""The etcd client against real etcd (Debian's etcd-server; skipped without it): user and password authentication,
a token that expires, `tngctl cluster` with credentials, and a call waiting on a member cut off from its quorum."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aetcd
import pytest
from tng_controller.cluster_testbed import ROOT, EtcdProcess, partition_skip_reason, skip_reason
from tng_controller.config import EtcdAuth, etcd_password
from tng_controller.etcd_client import LEADER_CHECK_S, EtcdClient, EtcdError, connect

SKIP_REASON = skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
TOKEN_TTL_S = 1


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """One member requiring authentication, whose tokens live TOKEN_TTL_S unused."""
    process = EtcdProcess(tmp_path, auth=True, token_ttl_s=TOKEN_TTL_S)
    try:
        process.start()
        yield process
    finally:
        process.stop()


def _root(etcd: EtcdProcess) -> EtcdAuth:
    return EtcdAuth(ROOT, etcd_password(etcd.password_file))


async def test_a_client_with_the_password_reads_and_writes_and_one_without_is_refused(etcd: EtcdProcess) -> None:
    client = await connect(etcd.urls, auth=_root(etcd))
    try:
        await client.put(b"/tng/k", b"v")
        assert (await client.get(b"/tng/k")).value == b"v"
    finally:
        await client.close()
    with pytest.raises(EtcdError, match=f"cannot authenticate as {ROOT}: etcdserver: authentication failed"):
        await connect(etcd.urls, auth=EtcdAuth(ROOT, "not the password"))
    anonymous = await connect(etcd.urls)
    try:
        with pytest.raises(aetcd.ClientError, match="user name is empty"):
            await anonymous.put(b"/tng/k", b"w")
    finally:
        await anonymous.close()


async def test_an_expired_token_costs_one_call_and_the_client_authenticates_again(etcd: EtcdProcess) -> None:
    client = await connect(etcd.urls, auth=_root(etcd))
    try:
        await client.put(b"/tng/k", b"1")
        time.sleep(TOKEN_TTL_S + 2)  # etcd drops unused simple tokens once a second
        failures = []
        for attempt in range(3):
            try:
                await client.put(b"/tng/k", f"{attempt + 2}".encode())
                break
            except aetcd.ClientError as exc:
                failures.append(str(exc))
        assert failures == ["etcdserver: invalid auth token"]
        assert (await client.get(b"/tng/k")).value == b"3"
    finally:
        await client.close()


@pytest.fixture
def cut_off(tmp_path: Path) -> Iterator[EtcdProcess]:
    """Three members, the first apart (it can be cut off from the others); needs root."""
    reason = partition_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    process = EtcdProcess(tmp_path, members=3, apart=True)
    try:
        process.start()
        yield process
    finally:
        process.stop()


async def test_a_call_waiting_on_a_member_that_loses_its_quorum_is_given_up_and_the_next_goes_on(
    cut_off: EtcdProcess,
) -> None:
    client = await connect(cut_off.urls)  # on the first member, the one apart
    try:
        await client.answer(client.put(b"/tng/k", b"before"))
        cut_off.partition()
        # The member still has its leader when the call comes, so it takes the call and waits for a quorum it no
        # longer reaches; etcd alone would hold it past the client's 5 s bound (TimeoutError).
        with pytest.raises(aetcd.ClientError, match="lost its leader while the call waited"):
            await client.answer(client.put(b"/tng/k", b"cut"))
        await _put_once_the_others_lead(client, b"after")
        assert client.endpoint != cut_off.urls[0]
        assert (await client.answer(client.get(b"/tng/k"))).value == b"after"
    finally:
        await client.close()


async def test_a_call_waiting_on_a_member_the_client_left_is_given_up_at_the_next_check(
    cut_off: EtcdProcess,
) -> None:
    client = await connect(cut_off.urls)
    try:
        cut_off.partition()
        waiting = asyncio.create_task(client.answer(client.put(b"/tng/k", b"cut")))
        await asyncio.sleep(0.1)
        client.fail_over("left a lease renewal unanswered")  # as the lease renewal does
        left = time.monotonic()
        with pytest.raises(aetcd.ClientError, match="was left for another member while the call waited"):
            await waiting
        # At the next check, before the member itself knows it has no leader (its election timeout, 1-2 s).
        assert time.monotonic() - left < 2 * LEADER_CHECK_S
        await _put_once_the_others_lead(client, b"after")
        assert (await client.answer(client.get(b"/tng/k"))).value == b"after"
    finally:
        await client.close()


async def _put_once_the_others_lead(client: EtcdClient, value: bytes) -> None:
    """Puts on the members left, retrying while they elect a leader (if the one cut off led, 1-2 s; a put they had
    forwarded to it is lost, and given up at once if they elect after its first check, else after 5 s)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            await client.answer(client.put(b"/tng/k", value))
            return
        except (aetcd.ClientError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def test_tngctl_cluster_reads_an_etcd_that_requires_authentication(etcd: EtcdProcess) -> None:
    def cluster(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tng_controller.tngctl", "cluster", "--etcd", etcd.url, *flags]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    authenticated = cluster("--etcd-user", ROOT, "--etcd-password-file", str(etcd.password_file))
    assert authenticated.returncode == 0, authenticated.stderr
    assert authenticated.stdout.startswith("etcd revision ")
    anonymous = cluster()
    assert anonymous.returncode == 1
    assert "user name is empty" in anonymous.stderr
