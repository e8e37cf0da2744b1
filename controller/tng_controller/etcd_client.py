"""aetcd's client over several etcd endpoints, with TLS.

The client talks to one endpoint at a time over one gRPC channel. Every call first looks at that channel: once gRPC
reports it failing (TRANSIENT_FAILURE: the member is down or unreachable, seen after a call failed on it), or once the
member refused a call because it has no leader (it is up but cut off from the quorum), the client opens a channel to
the next endpoint and later calls go there; the old channel's streams end (watches end, lease keep-alive streams fail)
and their owners open them again on the new one. So a replica goes on with the members that are left; the one call
that found the member gone or leaderless fails and is retried by its caller."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import aetcd
import grpc
from aetcd import rpc, rtypes, watcher

from tng_controller.config import EtcdTls, etcd_endpoint
from tng_controller.store import StoreUnavailable

LOGGER = logging.getLogger(__name__)
CALL_TIMEOUT_S = 5.0
# etcd's "require leader" metadata (clientv3.WithRequireLeader): a member without a leader refuses the call at once
# with NO_LEADER, and ends such a watch or keep-alive stream after a few election timeouts without one, instead of
# letting calls wait for a quorum it cannot reach. That refusal is what moves the client on.
REQUIRE_LEADER = (("hasleader", "true"),)
NO_LEADER = "etcdserver: no leader"


class EtcdError(StoreUnavailable):
    """etcd cannot be reached or refused a request; the message says which endpoint and why."""


def credentials(tls: EtcdTls) -> grpc.ChannelCredentials:
    """gRPC channel credentials of the TLS configuration; raises EtcdError naming a file that cannot be read."""

    def read(path: Path | None) -> bytes | None:
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as exc:
            raise EtcdError(f"cannot read {path}: {exc.strerror}") from exc

    return grpc.ssl_channel_credentials(
        root_certificates=read(tls.ca), private_key=read(tls.key), certificate_chain=read(tls.cert)
    )


class LeaderlessMember(
    grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor, grpc.aio.StreamStreamClientInterceptor
):
    """Sees the calls of one channel end; `refused` once the member refused one for want of a leader."""

    def __init__(self) -> None:
        self.refused = False
        self._reading: set[asyncio.Task[None]] = set()

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: object
    ) -> Any:
        call = await continuation(details, request)
        # A unary call is looked at before its caller sees how it ended, so a retry at once already moves on.
        await self._read(call)
        return call

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: object
    ) -> Any:
        call = await continuation(details, request)
        call.add_done_callback(self._ended)
        return call

    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request_iterator: object
    ) -> Any:
        call = await continuation(details, request_iterator)
        call.add_done_callback(self._ended)
        return call

    def _ended(self, call: grpc.aio.Call) -> None:
        # A stream's status is read by awaiting, which a done callback cannot do.
        task = asyncio.get_running_loop().create_task(self._read(call))
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    async def _read(self, call: grpc.aio.Call) -> None:
        if await call.code() == grpc.StatusCode.UNAVAILABLE and NO_LEADER in (await call.details() or ""):
            self.refused = True


class EtcdClient(aetcd.Client):
    """An aetcd client of the first of `endpoints` (client URLs) that moves to the next one when its channel fails or
    its member has no leader. `failed_over(endpoint)` is called after each move."""

    def __init__(
        self,
        endpoints: Sequence[str],
        tls: EtcdTls | None = None,
        failed_over: Callable[[str], None] = lambda endpoint: None,
    ) -> None:
        self.endpoints = tuple(endpoints)
        self._addresses = [etcd_endpoint(url) for url in self.endpoints]
        super().__init__(*self._addresses[0])
        self._credentials = None if tls is None else credentials(tls)
        self._current = 0
        self._failed_over = failed_over
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        """The client URL calls go to now."""
        return self.endpoints[self._current]

    async def connect(self) -> None:
        """Opens the channel, or replaces it with one to the next endpoint when it fails (every call comes here
        first)."""
        if not self._connected.is_set():
            self._open()
        elif len(self._addresses) > 1:
            if self._leaderless.refused:
                self.fail_over("has no leader")
            elif self.channel.get_state() == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                self.fail_over("is unreachable")

    def fail_over(self, why: str) -> None:
        """Moves to the next endpoint now; the old channel is closed in the background."""
        old_channel, old_watcher = self.channel, self._watcher
        failed = self.endpoint
        self._current = (self._current + 1) % len(self._addresses)
        self._open()
        LOGGER.warning("etcd: %s %s, using %s", failed, why, self.endpoint)
        task = asyncio.get_running_loop().create_task(self._close(old_channel, old_watcher))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        self._failed_over(self.endpoint)

    def _open(self) -> None:
        host, port = self._addresses[self._current]
        target = f"{host}:{port}"
        self._leaderless = LeaderlessMember()
        interceptors = [self._leaderless]
        if self._credentials is None:
            self.channel = grpc.aio.insecure_channel(target, interceptors=interceptors)
        else:
            self.channel = grpc.aio.secure_channel(target, self._credentials, interceptors=interceptors)
        self.metadata = REQUIRE_LEADER
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout, metadata=REQUIRE_LEADER)
        self._connected.set()

    @staticmethod
    async def _close(channel: grpc.aio.Channel, old_watcher: watcher.Watcher) -> None:
        """Ends the old channel's watches now (their owners watch again on the new one) and closes it once its calls
        ended by themselves (closing it cancels them, which their callers would take for their own cancellation)."""
        with suppress(Exception):  # the channel failed already: nothing of it is needed
            await old_watcher.shutdown()
        await asyncio.sleep(CALL_TIMEOUT_S)
        with suppress(Exception):
            await channel.close()

    async def watch(self, key: bytes, **kwargs: object) -> rtypes.Watch:
        """aetcd's watch, whose cancel does nothing once the client moved to another endpoint: watch ids are per
        stream, so the old id could name another watch on the new one (the old watch ended with its channel)."""
        await self.connect()
        made_on = self._watcher
        made = await super().watch(key, **kwargs)

        async def cancel() -> None:
            if self._watcher is made_on:
                await made.cancel()

        return rtypes.Watch(made._iterator, cancel, made.watch_id)

    async def close(self) -> None:
        for task in list(self._closing):
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        await super().close()


async def connect(
    endpoints: Sequence[str], tls: EtcdTls | None = None, failed_over: Callable[[str], None] = lambda endpoint: None
) -> EtcdClient:
    """A client of the first endpoint that answers; raises EtcdError naming each endpoint's error."""
    client = EtcdClient(endpoints, tls, failed_over)
    errors = []
    for _ in endpoints:
        try:
            await asyncio.wait_for(client.status(), CALL_TIMEOUT_S)
            return client
        except (aetcd.ClientError, TimeoutError, OSError) as exc:
            errors.append(f"{client.endpoint}: {type(exc).__name__} {exc}".strip())
            if len(errors) < len(endpoints):
                client.fail_over("does not answer")
    await client.close()
    raise EtcdError(f"no etcd endpoint answers ({'; '.join(errors)})")
