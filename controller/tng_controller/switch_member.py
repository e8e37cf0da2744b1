"""One switch of the fleet: its finsy connection and the state the controller keeps for it (what it holds, its
control loops' estimates), with the P4Runtime read and the error description the fleet's modules share."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

import finsy as fy

from tng_controller.digests import FlowTable
from tng_controller.entries import EncodedEntries, Entries
from tng_controller.helper_health import HelperHealth
from tng_controller.link_state import RouteLinkStates
from tng_controller.monitor import LinkRates, QdeplShare
from tng_controller.prober import LinkProber
from tng_controller.queue_rates import Bmv2Thrift
from tng_controller.stream import SharedStream
from tng_controller.switch_config import SwitchConfig


@dataclass(slots=True, eq=False)
class SwitchMember:
    """A configured switch, its connection and what the controller knows of it."""

    config: SwitchConfig
    switch: fy.Switch
    flows: FlowTable
    links: LinkRates
    share: QdeplShare
    helper: HelperHealth | None
    thrift: Bmv2Thrift | None
    prober: LinkProber | None
    link_states: RouteLinkStates
    stream: SharedStream
    encoded: EncodedEntries
    installed: Entries | None = None  # None: unknown, the switch must be synced before it is written
    last_error: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    reset_at: float = -math.inf  # when the seen-flow bit arrays were last cleared
    forgotten_at_reset: int = 0  # flows.forgotten then

    @property
    def link_ports(self) -> tuple[list[int], list[int]]:
        """The switch's LTE ports and Wi-Fi ports (by role, and the links of LWIP routes)."""
        lte = {p.port for p in self.config.ports if p.role == "lte"}
        wifi = {p.port for p in self.config.ports if p.role == "wifi"}
        for route in self.config.routes:
            if route.lte is not None and route.wifi is not None:
                lte.add(route.lte.port)
                wifi.add(route.wifi.port)
        return sorted(lte), sorted(wifi)

    def link_rates(self) -> tuple[float | None, float | None]:
        """The summed rate estimates of the LTE ports and of the Wi-Fi ports (None: a link without any estimate)."""
        sums: list[float | None] = []
        for ports in self.link_ports:
            estimates = [e for e in (self.links.estimate(port) for port in ports) if e is not None]
            sums.append(sum(estimates) if estimates else None)
        return sums[0], sums[1]

    @property
    def state(self) -> str:
        if not self.switch.is_up:
            return "CONNECTING"
        if not self.switch.is_primary:
            return "BACKUP"
        if self.installed is None:
            return "FAILED" if self.last_error else "CONNECTING"
        return "CONNECTED"


async def read_all(switch: fy.Switch, entities: Any) -> list[Any]:
    return [entity async for entity in switch.read(entities)]


def describe(exc: Exception) -> str:
    if isinstance(exc, fy.P4ClientError):
        details = "; ".join(f"update {i}: {e.message}" for i, e in sorted(exc.details.items()))
        return f"{exc.code.name}: {exc.message}" + (f" ({details})" if details else "")
    return f"{type(exc).__name__}: {exc}"
