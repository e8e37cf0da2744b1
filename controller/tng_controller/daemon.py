"""The controller process: store, switches and policy API from one configuration, until SIGINT or SIGTERM; one
controller with SQLite, or a replica of several with etcd."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack, suppress
from typing import Any

import finsy as fy

from tng_controller.api import PolicyServicer, start_server
from tng_controller.config import Config, ConfigError, EtcdConfig
from tng_controller.etcd_client import EtcdError, connect
from tng_controller.etcd_registry import EtcdHostRegistry
from tng_controller.etcd_store import EtcdPolicyStore, Observed
from tng_controller.fleet import Fleet, NoSwitches
from tng_controller.leadership import Leadership
from tng_controller.metrics import Metrics, gauge
from tng_controller.metrics import serve as serve_metrics
from tng_controller.registry import HostRegistry
from tng_controller.replica import LeaderFleet, ReplicaChanges, SwitchLeader, announcer
from tng_controller.southbound import SwitchFleet
from tng_controller.store import PolicyReader, PolicyStore, StoredPolicy

LOGGER = logging.getLogger(__name__)
GRACE_S = 2.0


async def run(config: Config, on_ready: Callable[[int, int | None], None] = lambda api, metrics: None) -> None:
    """Serves until SIGINT or SIGTERM; `on_ready` gets the API's port and the metrics endpoint's (None: not served)
    once they listen."""
    for index, switch in enumerate(config.switches):
        pipeline = {"p4info": switch.p4info}
        if switch.tofino is None:
            pipeline["bmv2_json"] = switch.bmv2_json
        else:
            pipeline |= {"tofino.binary": switch.tofino.binary, "tofino.context": switch.tofino.context}
        for key, path in pipeline.items():
            if not path.is_file():
                raise ConfigError(f"switch[{index}].{key}: {path} does not exist (compile the pipeline: make p4)")
    metrics = Metrics()
    async with AsyncExitStack() as stack:
        if config.etcd is None:
            servicer = await _single(config, metrics, stack)
            server, port = await start_server(servicer, config.api)
        else:
            servicer, campaign = await _replica(config, config.etcd, metrics, stack)
            server, port = await start_server(servicer, config.api)
            campaign(f"{config.api.listen.rsplit(':', 1)[0]}:{port}")
        metrics_port = None
        if config.metrics_listen is not None:
            host, wanted = config.metrics_listen.rsplit(":", 1)
            endpoint = await serve_metrics(metrics, host.strip("[]"), int(wanted))
            stack.push_async_callback(endpoint.wait_closed)
            stack.callback(endpoint.close)
            metrics_port = endpoint.sockets[0].getsockname()[1]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        on_ready(port, metrics_port)
        await stop.wait()
        LOGGER.info("stopping")
        await server.stop(GRACE_S)
        await servicer.changes.close()


def _fleet(config: Config, store: PolicyReader, changes: asyncio.Lock, metrics: Metrics) -> SwitchFleet:
    return SwitchFleet(
        config.switches,
        store,
        changes,
        traffic_classes=config.traffic_classes,
        monitor=config.monitor,
        digests=config.digests,
        metrics=metrics,
    )


async def _single(config: Config, metrics: Metrics, stack: AsyncExitStack) -> PolicyServicer:
    """One controller: policies in SQLite, the switches always connected."""
    store = PolicyStore(config.store)
    stack.callback(store.close)
    changes = asyncio.Lock()
    fleet: Fleet = _fleet(config, store, changes, metrics) if config.switches else NoSwitches()
    if isinstance(fleet, SwitchFleet):
        await stack.enter_async_context(fy.Controller(fleet.switches()))
    registry = HostRegistry(config.store, config.registration_ttl_s)  # a table of its own in the policies' file
    stack.callback(registry.close)
    return PolicyServicer(store, fleet, changes, metrics, registry=registry)


async def _replica(
    config: Config, etcd: EtcdConfig, metrics: Metrics, stack: AsyncExitStack
) -> tuple[PolicyServicer, Callable[[str], None]]:
    """A replica: policies in etcd, followed from the start; the switches connected while it leads. Returns the
    servicer and what starts the campaign for leadership once the API listens (with its address)."""
    counters = metrics.replica()
    try:
        client = await connect(etcd.endpoints, etcd.tls, lambda endpoint: counters.etcd_failovers.inc(), auth=etcd.auth)
    except EtcdError as exc:
        raise ConfigError(f"store.etcd: {exc}") from exc
    metrics.gauges(
        lambda: [
            gauge(
                "etcd_endpoint",
                "1 for the etcd endpoint this replica uses now",
                ["endpoint"],
                [([client.endpoint], 1.0)],
            )
        ]
    )
    store = EtcdPolicyStore(client, etcd.prefix)
    stack.push_async_callback(store.close)
    await store.load()
    registry = EtcdHostRegistry(client, etcd.prefix, config.registration_ttl_s)
    await registry.load()
    _background(stack, registry.follow(), "etcd-registry")
    lock = asyncio.Lock()
    fleet = LeaderFleet(_fleet(config, store, lock, metrics) if config.switches else None)
    leader = SwitchLeader(fleet, lock, store)
    servicer = PolicyServicer(
        store, fleet, metrics=metrics, applier=ReplicaChanges(store), leading=lambda: fleet.leading, registry=registry
    )
    announce = announcer(servicer.announce)

    async def changed(before: list[StoredPolicy], observed: list[Observed]) -> None:
        for change in observed:
            announce(change)
        await leader.changed(before, observed)

    _background(stack, store.follow(changed, lock), "etcd-follow")
    stack.push_async_callback(leader.deposed)

    def campaign(api: str) -> None:
        leadership = Leadership(client, etcd.prefix, etcd.name or api, api, etcd.lease_ttl_s, counters)
        metrics.gauges(leadership.gauges)
        _background(stack, leadership.run(leader.elected, leader.deposed), "leadership")

    return servicer, campaign


def _background(stack: AsyncExitStack, work: Coroutine[Any, Any, None], name: str) -> None:
    task = asyncio.get_running_loop().create_task(work, name=name)

    async def stop() -> None:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(stop)
