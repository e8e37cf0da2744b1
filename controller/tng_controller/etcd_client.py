"""aetcd's client over several etcd endpoints, with TLS.

The client talks to one endpoint at a time over one gRPC channel. Every call first looks at that channel: once gRPC
reports it failing (TRANSIENT_FAILURE: the member is down or unreachable, seen after a call failed on it), or once the
member refused a call because it has no leader (it is up but cut off from the quorum), the client opens a channel to
the next endpoint and later calls go there; the old channel's streams end (watches end, lease keep-alive streams fail)
and their owners open them again on the new one. So a replica goes on with the members that are left; the one call
that found the member gone or leaderless fails and is retried by its caller. A call made through `answer` that waits
on a member which loses its leader meanwhile (etcd would hold it until its own request timeout) is given up as soon
as the member says so, or as soon as the client moved on from that member for another reason.

With a user and password, every new channel first asks its member for a token; a channel whose token the member
rejected (etcd's simple tokens expire when unused, and a restarted member forgets them) is replaced by a new one to
the same member, which asks again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import aetcd
import grpc
from aetcd import rpc, rtypes, watcher

from tng_controller.config import EtcdAuth, EtcdTls, etcd_endpoint
from tng_controller.store import StoreUnavailable

LOGGER = logging.getLogger(__name__)
CALL_TIMEOUT_S = 5.0
# A call unanswered this long is looked at, again each time as long (EtcdClient.answer): has the client left its
# member, has the member a leader, the same one? A member cut off notices after its election timeout (1-2 s by
# default, randomised); etcd answers a healthy call in milliseconds, so only a call already in trouble costs looks.
LEADER_CHECK_S = 0.5
# etcd's "require leader" metadata (clientv3.WithRequireLeader): a member without a leader refuses the call at once
# with NO_LEADER, and ends such a watch or keep-alive stream after a few election timeouts without one, instead of
# letting calls wait for a quorum it cannot reach. That refusal is what moves the client on.
REQUIRE_LEADER = (("hasleader", "true"),)
NO_LEADER = "etcdserver: no leader"
T = TypeVar("T")


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


def _refused_for_no_leader(code: grpc.StatusCode, details: str | None) -> bool:
    return code == grpc.StatusCode.UNAVAILABLE and NO_LEADER in (details or "")


class MemberRefusals(
    grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor, grpc.aio.StreamStreamClientInterceptor
):
    """Sees the calls of one channel end: `no_leader` once the member refused one for want of a leader,
    `token_rejected` once it refused this client's token (expired, or the member restarted)."""

    def __init__(self) -> None:
        self.no_leader = False
        self.token_rejected = False
        self._reading: set[asyncio.Task[None]] = set()

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: object
    ) -> Any:
        call = await continuation(details, request)
        # A unary call is looked at before its caller sees how it ended, so a retry at once already moves on.
        await self._read(call)
        return call

    async def _read_when_ended(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: object
    ) -> Any:
        call = await continuation(details, request)
        call.add_done_callback(self._ended)
        return call

    # A stream's caller reads it as it goes, so it is looked at once it ended (gRPC passes the request, or the
    # iterator of requests, as the third argument).
    intercept_unary_stream = intercept_stream_stream = _read_when_ended

    def _ended(self, call: grpc.aio.Call) -> None:
        # A stream's status is read by awaiting, which a done callback cannot do.
        task = asyncio.get_running_loop().create_task(self._read(call))
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    async def _read(self, call: grpc.aio.Call) -> None:
        code = await call.code()
        if _refused_for_no_leader(code, await call.details()):
            self.no_leader = True
        elif code == grpc.StatusCode.UNAUTHENTICATED:
            self.token_rejected = True


class EtcdClient(aetcd.Client):
    """An aetcd client of the first of `endpoints` (client URLs) that moves to the next one when its channel fails or
    its member has no leader, authenticated as `auth` if given. `failed_over(endpoint)` is called after each move."""

    def __init__(
        self,
        endpoints: Sequence[str],
        tls: EtcdTls | None = None,
        failed_over: Callable[[str], None] = lambda endpoint: None,
        *,
        auth: EtcdAuth | None = None,
    ) -> None:
        self.endpoints = tuple(endpoints)
        self._addresses = [etcd_endpoint(url) for url in self.endpoints]
        super().__init__(*self._addresses[0])
        self._credentials = None if tls is None else credentials(tls)
        self._auth = auth
        self._authenticating = asyncio.Lock()
        self._token_channel: grpc.aio.Channel | None = None  # the channel whose member issued the token in use
        self._current = 0
        self._failed_over = failed_over
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        """The client URL calls go to now."""
        return self.endpoints[self._current]

    async def connect(self) -> None:
        """Opens the channel, or replaces it with one to the next endpoint when it fails, or with a new one to the
        same endpoint when its token was rejected; authenticates a new channel (every call comes here first)."""
        if not self._connected.is_set():
            self._open()
        elif self._refusals.token_rejected:
            LOGGER.info("etcd: %s rejected the token, authenticating again", self.endpoint)
            self._reopen(self._current)
        elif len(self._addresses) > 1:
            if self._refusals.no_leader:
                self.fail_over("has no leader")
            elif self.channel.get_state() == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                self.fail_over("is unreachable")
        if self._auth is not None and self._token_channel is not self.channel:
            await self._authenticate(self._auth)

    async def answer(self, call: Awaitable[T]) -> T:
        """The call's answer within CALL_TIMEOUT_S (else TimeoutError). While it waits, each LEADER_CHECK_S: if the
        client moved to another member meanwhile (another call found this one gone, leaderless or not renewing a
        lease), the call is given up with aetcd.ClientError; else its member is asked for its leader. The call is
        given up the same way once the member has none, or once a new leader was elected since the first check
        (a proposal the member had forwarded to the old leader is lost, and etcd would hold the call until its own
        request timeout). A member that answers slowly under the same leader is waited for."""
        pending = asyncio.ensure_future(call)
        try:
            await self.connect()
            channel, maintenance, endpoint = self.channel, self.maintenancestub, self.endpoint
            first_term = 0
            async with asyncio.timeout(CALL_TIMEOUT_S):
                while not (await asyncio.wait({pending}, timeout=LEADER_CHECK_S))[0]:
                    if self.channel is not channel:
                        raise aetcd.ClientError(f"{endpoint} was left for another member while the call waited")
                    try:
                        status = await maintenance.Status(
                            rpc.StatusRequest(), timeout=LEADER_CHECK_S, metadata=self.metadata
                        )
                    except grpc.aio.AioRpcError as exc:
                        # On the call's channel, so its interceptor saw a refusal too and the next call moves on.
                        if _refused_for_no_leader(exc.code(), exc.details()):
                            raise aetcd.ClientError(f"{endpoint} lost its leader while the call waited") from exc
                        continue
                    first_term = first_term or status.raftTerm
                    if status.raftTerm > first_term:
                        raise aetcd.ClientError(f"{endpoint} elected a new leader while the call waited")
                return pending.result()
        finally:
            pending.cancel()

    async def call(self, call: Awaitable[T], what: str) -> T:
        """`answer`, with its failures (the call given up, timed out, or its channel broken) as EtcdError naming
        `what` the call was for."""
        try:
            return await self.answer(call)
        except (aetcd.ClientError, TimeoutError, OSError) as exc:
            raise EtcdError(f"cannot {what}: {type(exc).__name__} {exc}") from exc

    def fail_over(self, why: str) -> None:
        """Moves to the next endpoint now."""
        failed = self.endpoint
        self._reopen((self._current + 1) % len(self._addresses))
        LOGGER.warning("etcd: %s %s, using %s", failed, why, self.endpoint)
        self._failed_over(self.endpoint)

    def _reopen(self, index: int) -> None:
        """A new channel to endpoint `index`; the old one is closed in the background."""
        old_channel, old_watcher = self.channel, self._watcher
        self._current = index
        self._open()
        task = asyncio.get_running_loop().create_task(self._close(old_channel, old_watcher))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _authenticate(self, auth: EtcdAuth) -> None:
        """Gets a token from the channel's member for every later call and watch on the channel (once, whoever
        asks first); raises aetcd.ClientError naming the user and the member's answer."""
        async with self._authenticating:
            channel = self.channel
            if self._token_channel is channel:
                return
            request = rpc.AuthenticateRequest(name=auth.user, password=auth.password)
            try:
                answer = await rpc.AuthStub(channel).Authenticate(
                    request, timeout=CALL_TIMEOUT_S, metadata=REQUIRE_LEADER
                )
            except grpc.aio.AioRpcError as exc:
                raise aetcd.ClientError(
                    f"{self.endpoint}: cannot authenticate as {auth.user}: {exc.details()}"
                ) from exc
            if channel is not self.channel:
                return  # moved on meanwhile: the new channel asks for its own token
            self.metadata = (*REQUIRE_LEADER, ("token", answer.token))
            self._watcher = watcher.Watcher(rpc.WatchStub(channel), timeout=self._timeout, metadata=self.metadata)
            self._token_channel = channel

    def _open(self) -> None:
        host, port = self._addresses[self._current]
        target = f"{host}:{port}"
        self._refusals = MemberRefusals()
        interceptors = [self._refusals]
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
    endpoints: Sequence[str],
    tls: EtcdTls | None = None,
    failed_over: Callable[[str], None] = lambda endpoint: None,
    *,
    auth: EtcdAuth | None = None,
) -> EtcdClient:
    """A client of the first endpoint that answers (and accepts `auth`); raises EtcdError naming each endpoint's
    error."""
    client = EtcdClient(endpoints, tls, failed_over, auth=auth)
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
