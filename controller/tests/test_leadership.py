"""Lease renewal without etcd: a fake keep-alive stream that grants, fails or forgets the lease. A replica must stop
leading before etcd's copy of its lease runs out, whatever its renewal attempts are waiting for."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc
import pytest
from tng_controller.leadership import Leadership, LeaseLost

TTL_S = 1.5  # a third of it between renewals; small enough for a quick test, large against timer jitter


@dataclass
class _Reply:
    TTL: int


class _KeepAliveStream:
    """Answers each renewal after `delay_s`: with `ttl` (granted, or forgotten when <= 0), or an RpcError."""

    def __init__(self, delay_s: float, ttl: int | None) -> None:
        self.delay_s, self.ttl = delay_s, ttl
        self.renewals = 0

    async def write(self, request: object) -> None:
        await asyncio.sleep(self.delay_s)
        if self.ttl is None:
            raise grpc.RpcError("etcd unreachable")

    async def read(self) -> _Reply:
        assert self.ttl is not None
        self.renewals += 1
        return _Reply(self.ttl)

    def cancel(self) -> None:
        pass


class _Client:
    """Endpoints whose keep-alive streams are `streams`, in order; `fail_over` moves to the next."""

    def __init__(self, *streams: _KeepAliveStream) -> None:
        self.endpoints = [f"http://127.0.0.1:{2379 + i}" for i in range(len(streams))]
        self.metadata = None
        self.leasestub = self
        self._streams = streams
        self.failovers = 0

    async def connect(self) -> None:
        pass

    def fail_over(self, why: str) -> None:
        self.failovers += 1

    def LeaseKeepAlive(self, metadata: object) -> _KeepAliveStream:
        return self._streams[min(self.failovers, len(self._streams) - 1)]


def _leadership(stream: _KeepAliveStream, ttl_s: float = TTL_S) -> Leadership:
    return Leadership(_Client(stream), "/tng", "r0", "127.0.0.1:1", ttl_s)  # type: ignore[arg-type]


class _SilentStream(_KeepAliveStream):
    """A member cut off from its leader: it takes renewals and never answers."""

    async def read(self) -> _Reply:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_replica_cut_off_from_etcd_gives_up_its_lease_before_etcd_would() -> None:
    # Each failing attempt takes a while, so attempts drift off the deadline: one fails just before it.
    stream = _KeepAliveStream(delay_s=0.2, ttl=None)
    leadership = _leadership(stream)
    granted = time.monotonic()
    with pytest.raises(LeaseLost, match="not renewed in time"):
        await leadership._renew(0x1, granted)
    given_up = time.monotonic() - granted
    assert given_up < TTL_S  # etcd's copy runs out at TTL_S after it got the grant, later still
    assert given_up > TTL_S * 2 / 3  # after two failed attempts, not at the first


async def test_granted_renewals_keep_the_lease_past_its_ttl() -> None:
    stream = _KeepAliveStream(delay_s=0.01, ttl=1)
    leadership = _leadership(stream, ttl_s=1)
    granted = time.monotonic()
    renewing = asyncio.create_task(leadership._renew(0x1, granted))
    await asyncio.sleep(2.5)
    assert not renewing.done()
    assert stream.renewals >= 4  # one every third of the TTL: 7 on time, fewer when the loop's timers run late
    assert leadership.lease_deadline > granted + 2.5  # counted from the latest renewal
    renewing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await renewing


async def test_a_renewal_left_unanswered_is_made_again_on_the_next_member_before_the_lease_runs_out() -> None:
    silent, answering = _SilentStream(delay_s=0.0, ttl=1), _KeepAliveStream(delay_s=0.01, ttl=2)
    client = _Client(silent, answering)
    leadership = Leadership(client, "/tng", "r0", "127.0.0.1:1", TTL_S)  # type: ignore[arg-type]
    granted = time.monotonic()
    renewing = asyncio.create_task(leadership._renew(0x1, granted))
    await asyncio.sleep(TTL_S * 1.5)
    assert not renewing.done()  # without the move the lease is lost at 0.9 TTL_S
    assert client.failovers == 1
    assert answering.renewals >= 1
    assert leadership.lease_deadline > granted + TTL_S
    renewing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await renewing


async def test_a_lease_etcd_forgot_is_lost_at_the_next_renewal() -> None:
    stream = _KeepAliveStream(delay_s=0.01, ttl=-1)
    leadership = _leadership(stream)
    granted = time.monotonic()
    with pytest.raises(LeaseLost, match="no longer knows"):
        await leadership._renew(0x1, granted)
    assert time.monotonic() - granted < TTL_S / 3 + 0.3
