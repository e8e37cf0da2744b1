"""The controller process: store, switches and policy API from one configuration, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from contextlib import AsyncExitStack

import finsy as fy

from tng_controller.api import PolicyServicer, start_server
from tng_controller.config import Config, ConfigError
from tng_controller.fleet import Fleet, NoSwitches
from tng_controller.metrics import Metrics
from tng_controller.metrics import serve as serve_metrics
from tng_controller.southbound import SwitchFleet
from tng_controller.store import PolicyStore

LOGGER = logging.getLogger(__name__)
GRACE_S = 2.0


async def run(config: Config, on_ready: Callable[[int, int | None], None] = lambda api, metrics: None) -> None:
    """Serves until SIGINT or SIGTERM; `on_ready` gets the API's port and the metrics endpoint's (None: not served)
    once they listen."""
    for index, switch in enumerate(config.switches):
        for key in ("p4info", "bmv2_json"):
            path = getattr(switch, key)
            if not path.is_file():
                raise ConfigError(f"switch[{index}].{key}: {path} does not exist (compile the pipeline: make p4)")
    store = PolicyStore(config.store)
    changes = asyncio.Lock()
    metrics = Metrics()
    fleet: Fleet = (
        SwitchFleet(
            config.switches,
            store,
            changes,
            traffic_classes=config.traffic_classes,
            monitor=config.monitor,
            digests=config.digests,
            metrics=metrics,
        )
        if config.switches
        else NoSwitches()
    )
    async with AsyncExitStack() as stack:
        stack.callback(store.close)
        if isinstance(fleet, SwitchFleet):
            await stack.enter_async_context(fy.Controller(fleet.switches()))
        servicer = PolicyServicer(store, fleet, changes, metrics)
        server, port = await start_server(servicer, config.api)
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
