"""The switches a controller writes policies to: their interface, and writing a policy set to every one or to none."""

from __future__ import annotations

import logging
from collections.abc import Sequence
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


class Fleet(Protocol):
    """The switches of one controller."""

    def writable(self) -> list[str]:
        """The switches a policy change is written to now (the connected primaries), in writing order."""
        ...

    async def write(self, switch: str, policies: Sequence[StoredPolicy]) -> None:
        """Makes `policies` the switch's whole policy set: all of it or, raising SwitchWriteError, none of it."""
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


async def rollout(fleet: Fleet, before: Sequence[StoredPolicy], after: Sequence[StoredPolicy]) -> list[str]:
    """Writes `after` to every writable switch and returns their names; if one fails, writes `before` back to those
    that took `after` and raises RolloutError."""
    done: list[str] = []
    for switch in fleet.writable():
        try:
            await fleet.write(switch, after)
        except Exception as exc:
            LOGGER.warning("policy write failed on %s: %s; rolling back %s", switch, exc, done or "nothing")
            rolled_back, stuck = [], []
            for taken in reversed(done):
                try:
                    await fleet.write(taken, before)
                    rolled_back.append(taken)
                except Exception as undo_exc:
                    LOGGER.error("rollback failed on %s: %s", taken, undo_exc)
                    stuck.append(taken)
            raise RolloutError(
                exc if isinstance(exc, SwitchWriteError) else SwitchWriteError(switch, str(exc)), rolled_back, stuck
            ) from exc
        done.append(switch)
    return done


class NoSwitches:
    """The fleet of a controller that only serves policies to host agents."""

    def writable(self) -> list[str]:
        return []

    async def write(self, switch: str, policies: Sequence[StoredPolicy]) -> None:
        raise SwitchWriteError(switch, "no such switch")

    def statuses(self) -> list[pb.SwitchStatus]:
        return []

    async def stats(self, policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
        return pb.GetStatsResponse(policies=[pb.PolicyStats(name=p.name) for p in policies])
