"""The switches a controller writes policies to: their interface, and writing a change to every one (at once) or to
none."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from tng_controller.pb import policy_pb2 as pb
from tng_controller.store import StoredPolicy

LOGGER = logging.getLogger(__name__)


class SwitchWriteError(Exception):
    """A switch refused or could not take a policy set; nothing of it stayed on that switch."""

    def __init__(self, switch: str, reason: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        super().__init__(f"switch {switch}: {reason}")
        self.switch = switch
        self.code = code


@dataclass(frozen=True, slots=True)
class Change:
    """A change of the stored policy set: `old` are the policies it replaces or deletes (as stored before), `new` the
    policies it creates or replaces (as they will be stored), `policies` the whole set after it, by name."""

    old: Sequence[StoredPolicy]
    new: Sequence[StoredPolicy]
    policies: Sequence[StoredPolicy]

    def undo(self, before: Sequence[StoredPolicy]) -> Change:
        """The change back to `before`, the whole set this change was made to."""
        return Change(self.new, self.old, before)


class Fleet(Protocol):
    """The switches of one controller."""

    def writable(self) -> list[str]:
        """The switches a policy change is written to now (the connected primaries), in writing order."""
        ...

    async def write(self, switch: str, change: Change) -> None:
        """Makes `change.policies` the switch's whole policy set, writing what `change` changes (in one P4Runtime
        WriteRequest where it can): all of it or, raising SwitchWriteError, none of it."""
        ...

    def statuses(self) -> list[pb.SwitchStatus]:
        """Every configured switch and its connection state."""
        ...

    async def stats(self, policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
        """Counters of `policies` and of the switches' ports, summed over the switches that answer."""
        ...


class RolloutError(Exception):
    """A policy set that did not reach every switch: the switches that took it were rolled back."""

    def __init__(self, cause: Exception, rolled_back: list[str], stuck: list[str]) -> None:
        message = str(cause)
        if rolled_back:
            message += f"; rolled back on {', '.join(rolled_back)}"
        if stuck:
            message += f"; rollback FAILED on {', '.join(stuck)} (they are reconciled when they reconnect)"
        super().__init__(message)
        self.code = cause.code if isinstance(cause, SwitchWriteError) else grpc.StatusCode.UNAVAILABLE
        self.rolled_back = rolled_back
        self.stuck = stuck


async def rollout(fleet: Fleet, change: Change, before: Sequence[StoredPolicy]) -> list[str]:
    """Writes `change` to every writable switch at once and returns their names; if one fails, writes the change back
    to `before` on those that took it and raises RolloutError."""
    switches = fleet.writable()
    results = await asyncio.gather(*(fleet.write(s, change) for s in switches), return_exceptions=True)
    failed = [(s, r) for s, r in zip(switches, results, strict=True) if isinstance(r, BaseException)]
    if not failed:
        return switches
    switch, exc = failed[0]
    if not isinstance(exc, Exception):
        raise exc  # cancelled: not a switch's failure
    taken = [s for s, r in zip(switches, results, strict=True) if not isinstance(r, BaseException)]
    LOGGER.warning("policy write failed on %s: %s; rolling back %s", switch, exc, taken or "nothing")
    back = change.undo(before)
    undone = await asyncio.gather(*(fleet.write(s, back) for s in taken), return_exceptions=True)
    rolled_back, stuck = [], []
    for taken_switch, result in zip(taken, undone, strict=True):
        if isinstance(result, BaseException):
            LOGGER.error("rollback failed on %s: %s", taken_switch, result)
            stuck.append(taken_switch)
        else:
            rolled_back.append(taken_switch)
    raise RolloutError(
        exc if isinstance(exc, SwitchWriteError) else SwitchWriteError(switch, str(exc)), rolled_back, stuck
    ) from exc


class NoSwitches:
    """The fleet of a controller that only serves policies to host agents."""

    def writable(self) -> list[str]:
        return []

    async def write(self, switch: str, change: Change) -> None:
        raise SwitchWriteError(switch, "no such switch")

    def statuses(self) -> list[pb.SwitchStatus]:
        return []

    async def stats(self, policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
        return pb.GetStatsResponse(policies=[pb.PolicyStats(name=p.name) for p in policies])
