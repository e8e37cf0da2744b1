"""aetcd's client over several etcd endpoints, with TLS.

The client talks to one endpoint at a time over one gRPC channel. Every call first looks at that channel: once gRPC
reports it failing (TRANSIENT_FAILURE: the member is down or unreachable, seen after a call failed on it), the client
opens a channel to the next endpoint and later calls go there; the old channel's streams end (watches end, lease
keep-alive streams fail) and their owners open them again on the new one. So a replica goes on with the members that
are left; the one call that found the member gone fails and is retried by its caller."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path

import aetcd
import grpc
from aetcd import rpc, rtypes, watcher

from tng_controller.config import EtcdTls, etcd_endpoint
from tng_controller.store import StoreUnavailable

LOGGER = logging.getLogger(__name__)
CALL_TIMEOUT_S = 5.0


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


class EtcdClient(aetcd.Client):
    """An aetcd client of the first of `endpoints` (client URLs) that moves to the next one when its channel fails.
    `failed_over(endpoint)` is called after each move."""

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
        elif len(self._addresses) > 1 and self.channel.get_state() == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            self.fail_over()

    def fail_over(self) -> None:
        """Moves to the next endpoint now; the old channel is closed in the background."""
        old_channel, old_watcher = self.channel, self._watcher
        failed = self.endpoint
        self._current = (self._current + 1) % len(self._addresses)
        self._open()
        LOGGER.warning("etcd: %s failed, using %s", failed, self.endpoint)
        task = asyncio.get_running_loop().create_task(self._close(old_channel, old_watcher))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        self._failed_over(self.endpoint)

    def _open(self) -> None:
        host, port = self._addresses[self._current]
        target = f"{host}:{port}"
        if self._credentials is None:
            self.channel = grpc.aio.insecure_channel(target)
        else:
            self.channel = grpc.aio.secure_channel(target, self._credentials)
        self.metadata = None
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout, metadata=None)
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
                client.fail_over()
    await client.close()
    raise EtcdError(f"no etcd endpoint answers ({'; '.join(errors)})")
