"""The northbound policy API: PolicyService over grpc.aio, backed by the store and written to the fleet."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import grpc
from prometheus_client.core import Metric

from tng_controller.changes import Applied, ChangeBatcher
from tng_controller.config import ApiConfig
from tng_controller.fleet import Fleet, RolloutError
from tng_controller.metrics import Metrics, gauge
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.policy import (
    FieldError,
    PolicyConflict,
    PolicyError,
    check,
    check_name,
    traffic_class_errors,
)
from tng_controller.registry import (
    ForgedRegistration,
    HostRegistry,
    MalformedRegistration,
    RegistryView,
    StaleRegistration,
    UnknownHost,
    check_identity,
)
from tng_controller.store import Full, NotFound, PolicyReader, PolicyStore, RevisionConflict, StoreUnavailable

LOGGER = logging.getLogger(__name__)
WATCH_QUEUE = 1024  # events a watcher may lag behind before it is cut off
STREAM_IN_FLIGHT = 256  # changes of one ApplyPolicies stream applied or waiting at once (a batch holds at most 256)

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")
_ERROR_CODES: dict[type[Exception], grpc.StatusCode] = {
    PolicyError: grpc.StatusCode.INVALID_ARGUMENT,
    PolicyConflict: grpc.StatusCode.FAILED_PRECONDITION,
    NotFound: grpc.StatusCode.NOT_FOUND,
    RevisionConflict: grpc.StatusCode.ABORTED,
    Full: grpc.StatusCode.RESOURCE_EXHAUSTED,
    StoreUnavailable: grpc.StatusCode.UNAVAILABLE,
    MalformedRegistration: grpc.StatusCode.INVALID_ARGUMENT,
    ForgedRegistration: grpc.StatusCode.PERMISSION_DENIED,
    StaleRegistration: grpc.StatusCode.FAILED_PRECONDITION,
    UnknownHost: grpc.StatusCode.NOT_FOUND,
}


@dataclass(slots=True, eq=False)
class _Watcher:
    traffic_classes: frozenset[str]
    queue: asyncio.Queue[pb.PolicyEvent] = field(default_factory=lambda: asyncio.Queue(WATCH_QUEUE))
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)

    def wants(self, policy: pb.Policy) -> bool:
        """Policies of one of the watched classes and policies for any class (their match has none)."""
        return not self.traffic_classes or policy.match.traffic_class in ("", *self.traffic_classes)


def _status(exc: Exception) -> tuple[grpc.StatusCode, str] | None:
    """The status code and message a call ends with for one of the controller's errors (None: not one of them)."""
    if isinstance(exc, RolloutError):
        return exc.code, f"not applied: {exc}"
    kind = next((kind for kind in type(exc).__mro__ if kind in _ERROR_CODES), None)  # the most specific
    return None if kind is None else (_ERROR_CODES[kind], str(exc))


def _with_status(
    handler: Callable[[Any, _Request, grpc.aio.ServicerContext], Awaitable[_Response]],
) -> Callable[[Any, _Request, grpc.aio.ServicerContext], Awaitable[_Response]]:
    """Ends a unary call whose handler raises one of the controller's errors with its status code and message."""

    @functools.wraps(handler)
    async def wrapped(self: Any, request: _Request, context: grpc.aio.ServicerContext) -> _Response:
        try:
            return await handler(self, request, context)
        except (RolloutError, *_ERROR_CODES) as exc:
            status = _status(exc)
            assert status is not None
            await context.abort(*status)
        raise AssertionError("context.abort returned")

    return wrapped


class Changes(Protocol):
    """What applies the API's policy changes: the change batcher of one controller, or a replica's etcd writer."""

    async def set(self, policy: pb.Policy) -> Applied: ...

    async def delete(self, name: str) -> Applied: ...

    async def close(self) -> None: ...


class PolicyServicer(pb_grpc.PolicyServiceServicer):
    """PolicyService: every change is written to all writable switches or to none, then stored, then announced (a
    replica instead stores it in etcd; the leader writes it to the switches and every replica announces it)."""

    def __init__(
        self,
        store: PolicyReader,
        fleet: Fleet,
        changes: asyncio.Lock | None = None,
        metrics: Metrics | None = None,
        *,
        applier: Changes | None = None,
        leading: Callable[[], bool] = lambda: True,
        registry: RegistryView | None = None,
    ) -> None:
        self._store = store
        self.registry = registry if registry is not None else HostRegistry()  # an empty one is falsy
        self._fleet = fleet
        self._watchers: set[_Watcher] = set()
        self._metrics = metrics or Metrics()
        self._metrics.gauges(self._gauges)
        self._leading = leading
        if applier is None:
            assert isinstance(store, PolicyStore), "one controller's changes need the SQLite store"
            # Changes are applied in batches, one batch at a time, so that switch writes and the store stay in step;
            # the fleet holds the lock too while it syncs a switch that (re)connected.
            applier = ChangeBatcher(store, fleet, changes or asyncio.Lock(), self.announce, self._metrics)
        self.changes: Changes = applier

    @_with_status
    async def SetPolicy(self, request: pb.SetPolicyRequest, context: grpc.aio.ServicerContext) -> pb.SetPolicyResponse:
        check(request.policy)
        applied = await self.changes.set(request.policy)
        return pb.SetPolicyResponse(policy=applied.new.policy, switches=applied.switches)

    @_with_status
    async def GetPolicy(self, request: pb.GetPolicyRequest, context: grpc.aio.ServicerContext) -> pb.Policy:
        check_name(request.name)
        stored = self._store.get(request.name)
        if stored is None:
            raise NotFound(f"no policy named {request.name!r}")
        return stored.policy

    @_with_status
    async def DeletePolicy(
        self, request: pb.DeletePolicyRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeletePolicyResponse:
        check_name(request.name)
        await self.changes.delete(request.name)
        return pb.DeletePolicyResponse()

    async def ApplyPolicies(
        self, changes: AsyncIterator[pb.PolicyChange], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PolicyChangeResult]:
        """Starts each change as it arrives (so that changes in flight together are batched) and answers them in the
        order they came; at most STREAM_IN_FLIGHT at once per stream (reading waits for answers beyond that)."""
        in_flight: asyncio.Queue[asyncio.Task[pb.PolicyChangeResult] | None] = asyncio.Queue(STREAM_IN_FLIGHT)

        async def read() -> None:
            async for change in changes:
                await in_flight.put(asyncio.get_running_loop().create_task(self._apply(change)))
            await in_flight.put(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while (task := await in_flight.get()) is not None:
                yield await task
            await reader
        finally:
            reader.cancel()  # the client went away: changes it sent that were not taken yet are left out
            while not in_flight.empty():
                left = in_flight.get_nowait()
                if left is not None:
                    left.cancel()

    async def _apply(self, change: pb.PolicyChange) -> pb.PolicyChangeResult:
        try:
            if change.HasField("set") == bool(change.delete):
                raise PolicyError([FieldError("change", "needs set or delete, not both")])
            if change.HasField("set"):
                check(change.set, "set")
                applied = await self.changes.set(change.set)
            else:
                check_name(change.delete, "delete")
                applied = await self.changes.delete(change.delete)
        except (RolloutError, *_ERROR_CODES) as exc:
            status = _status(exc)
            assert status is not None
            return pb.PolicyChangeResult(code=status[0].value[0], message=status[1])
        return pb.PolicyChangeResult(policy=applied.new.policy, switches=applied.switches)

    async def ListPolicies(
        self, request: pb.ListPoliciesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPoliciesResponse:
        return pb.ListPoliciesResponse(policies=[p.policy for p in self._store.list()])

    async def WatchPolicies(
        self, request: pb.WatchPoliciesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PolicyEvent]:
        errors = [
            error
            for i, traffic_class in enumerate(request.traffic_classes)
            for error in traffic_class_errors(traffic_class, f"traffic_classes[{i}]")
        ]
        if errors:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(PolicyError(errors)))
        with self._watch(frozenset(request.traffic_classes)) as watcher:
            for stored in self._store.list():  # no await between subscribing and reading: no change is missed
                if watcher.wants(stored.policy):
                    yield pb.PolicyEvent(kind=pb.PolicyEvent.KIND_SNAPSHOT, policy=stored.policy)
            yield pb.PolicyEvent(kind=pb.PolicyEvent.KIND_SYNCED)
            while not watcher.overflowed.is_set():
                yield await watcher.queue.get()
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this watch fell more than {WATCH_QUEUE} events behind: watch again for a new snapshot",
            )

    async def GetStats(self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext) -> pb.GetStatsResponse:
        stats = await self._fleet.stats(self._store.list())
        stats.controller_metrics.extend(self._metrics.samples())
        return stats

    async def ListSwitches(
        self, request: pb.ListSwitchesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSwitchesResponse:
        return pb.ListSwitchesResponse(switches=self._fleet.statuses())

    @_with_status
    async def RegisterHost(
        self, request: pb.RegisterHostRequest, context: grpc.aio.ServicerContext
    ) -> pb.RegisterHostResponse:
        return pb.RegisterHostResponse(host=await self.registry.register(request))

    @_with_status
    async def ResolveHost(self, request: pb.ResolveHostRequest, context: grpc.aio.ServicerContext) -> pb.HostRecord:
        return await self.registry.resolve(request.identity)

    async def ListHosts(self, request: pb.ListHostsRequest, context: grpc.aio.ServicerContext) -> pb.ListHostsResponse:
        return pb.ListHostsResponse(hosts=self.registry.list())

    async def WatchHost(
        self, request: pb.ResolveHostRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.HostRecord]:
        try:
            identity = check_identity(request.identity)
        except MalformedRegistration as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        with self.registry.watch(identity) as watcher:
            current = self.registry.get(identity)  # no await since subscribing: no registration is missed
            if current is not None:
                yield current
            while not watcher.overflowed.is_set():
                yield await watcher.queue.get()
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "this watch fell behind: watch again")

    def _gauges(self) -> list[Metric]:
        return [
            gauge("policies", "Stored policies", [], [([], float(len(self._store)))]),
            gauge("policy_revision", "The store's revision (of its latest change)", [], [([], self._store.revision())]),
            gauge("watchers", "WatchPolicies subscribers", [], [([], float(len(self._watchers)))]),
            gauge("hosts", "Hosts in the registry", [], [([], float(len(self.registry)))]),
            gauge(
                "leader",
                "1 while this controller is the one that writes the switches",
                [],
                [([], float(self._leading()))],
            ),
        ]

    @contextmanager
    def _watch(self, traffic_classes: frozenset[str]) -> Iterator[_Watcher]:
        watcher = _Watcher(traffic_classes)
        self._watchers.add(watcher)
        try:
            yield watcher
        finally:
            self._watchers.discard(watcher)

    def announce(self, applied: Applied) -> None:
        """Sends a committed change to the watchers that want it."""
        new, old = applied.new, applied.old
        # One message per kind, shared by every watcher that gets it.
        changed = pb.PolicyEvent(
            kind=pb.PolicyEvent.KIND_DELETED if applied.deleted else pb.PolicyEvent.KIND_SET, policy=new.policy
        )
        left: pb.PolicyEvent | None = None
        for watcher in self._watchers:
            if watcher.overflowed.is_set():
                continue
            if watcher.wants(new.policy):
                event = changed
            elif old is not None and watcher.wants(old.policy):
                left = left or pb.PolicyEvent(kind=pb.PolicyEvent.KIND_DELETED, policy=new.policy)
                event = left  # it left the watched classes
            else:
                continue
            try:
                watcher.queue.put_nowait(event)
            except asyncio.QueueFull:
                watcher.overflowed.set()


async def start_server(servicer: PolicyServicer, config: ApiConfig) -> tuple[grpc.aio.Server, int]:
    """Starts serving `servicer` as `config` says; returns the server and the port it bound (for port 0)."""
    server = grpc.aio.server()
    pb_grpc.add_PolicyServiceServicer_to_server(servicer, server)
    if config.tls is None:
        port = server.add_insecure_port(config.listen)
    else:
        credentials = grpc.ssl_server_credentials(
            [(config.tls.key.read_bytes(), config.tls.cert.read_bytes())],
            root_certificates=config.tls.client_ca.read_bytes() if config.tls.client_ca else None,
            require_client_auth=config.tls.client_ca is not None,
        )
        port = server.add_secure_port(config.listen, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {config.listen}")
    await server.start()
    LOGGER.info("policy API on %s (%s)", config.listen, "TLS" if config.tls else "plaintext")
    return server, port
