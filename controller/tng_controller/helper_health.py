"""VISIBLE helper health on one switch: probe the helper, and turn its health into ingress.visible.helper
(helper_up with a new epoch after every outage, helper_down while it is unreachable)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import finsy as fy

from tng_controller.retransmit_helper import Health, HelperStatus, RetransmitHelper, probe_health
from tng_controller.switch_config import HelperConfig

LOGGER = logging.getLogger(__name__)


class HelperHealth:
    """The helper of one switch: for attach = "cpu" the controller's own RetransmitHelper (healthy only while its
    serving task runs), for attach = "port" an external process answering health probes."""

    def __init__(self, switch: str, config: HelperConfig) -> None:
        self.switch = switch
        self.config = config
        self.helper = RetransmitHelper() if config.attach == "cpu" else None
        self.serving: asyncio.Task[None] | None = None
        self.state = "unknown"  # what ListSwitches shows
        self._status = HelperStatus()
        self._written: fy.P4TableEntry | None = None

    async def probe(self) -> Health | None:
        if self.helper is not None:
            serving = self.serving is not None and not self.serving.done()
            return self.helper.health() if serving else None
        assert self.config.health is not None
        host, _, port = self.config.health.rpartition(":")
        return await probe_health(host.strip("[]"), int(port), timeout_s=max(0.1, self.config.probe_interval_s))

    def change(self, health: Health | None) -> fy.P4TableEntry | None:
        """The helper table entry to write for `health`, or None if the switch already has the right one."""
        entry = self._status.entry(health)
        if entry == self._written:
            return None
        return entry

    def written(self, entry: fy.P4TableEntry, health: Health | None) -> None:
        """Records that the switch took `entry`, and logs the transition."""
        self._written = entry
        action = entry.action
        if isinstance(action, fy.Action) and action.name.endswith("helper_up"):
            self.state = f"up (epoch {action.args['epoch']})"
            LOGGER.info("%s: VISIBLE helper %s: boosting on", self.switch, self.state)
        else:
            self.state = f"down: {self._why_down(health)}"
            LOGGER.warning("%s: VISIBLE helper %s; boosting and local retransmission off", self.switch, self.state)

    def forget(self) -> None:
        """The switch lost its state (channel down, restart): the next helper_up needs a new epoch."""
        self._written = None
        self._status.entry(None)
        self.state = "unknown"

    def _why_down(self, health: Health | None) -> str:
        if health is not None:
            return f"unhealthy ({health.reason})"
        if self.helper is not None:
            return "the helper task on the P4Runtime stream is not serving"
        return f"no answer to health probes on {self.config.health}"


async def keep_helper_table(health: HelperHealth, write: Callable[[fy.P4TableEntry], Awaitable[None]]) -> None:
    """Probes the helper every probe interval and writes ingress.visible.helper when it must change; until cancelled.
    A failed write is retried at the next probe."""
    while True:
        report = await health.probe()
        entry = health.change(report)
        if entry is not None:
            try:
                await write(entry)
                health.written(entry, report)
            except fy.P4ClientError as exc:
                LOGGER.warning("%s: cannot write the helper status: %s", health.switch, exc)
        await asyncio.sleep(health.config.probe_interval_s)
