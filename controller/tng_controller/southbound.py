"""Southbound: the configured switches over P4Runtime (finsy), their policy tables kept equal to the stored policies."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import finsy as fy
import grpc
from finsy.proto import p4r

from tng_controller.compile import POLICY_COUNTER, POLICY_TABLES, Link, compile_policies
from tng_controller.config import SwitchConfig
from tng_controller.fleet import SwitchWriteError
from tng_controller.pb import policy_pb2 as pb
from tng_controller.reconcile import Op, Update, reconcile
from tng_controller.store import PolicyStore, StoredPolicy

LOGGER = logging.getLogger(__name__)
PORT_ROLE = "ingress.port_role"
PORT_TX = "egress.port_tx"
STEERED = "ingress.steering.steered"
ROLES = {0: "core", 1: "lte", 2: "wifi", 3: "helper"}
SYNC_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A table entry as reconciliation compares it: by its encoded action; `entry` is what is written."""

    action: bytes
    entry: fy.P4TableEntry = field(compare=False)


@dataclass(slots=True, eq=False)
class _Member:
    config: SwitchConfig
    switch: fy.Switch
    installed: dict[bytes, _Entry] | None = None  # None: unknown, the switch must be synced before it is written
    last_error: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def state(self) -> str:
        if not self.switch.is_up:
            return "CONNECTING"
        if not self.switch.is_primary:
            return "BACKUP"
        if self.installed is None:
            return "FAILED" if self.last_error else "CONNECTING"
        return "CONNECTED"


class SwitchFleet:
    """The switches of a configuration: finsy connects them (mastership, pipeline push, reconnect with backoff); each
    switch is synced to the stored policies when it becomes primary, and written on every change while it is."""

    def __init__(self, configs: Sequence[SwitchConfig], store: PolicyStore, changes: asyncio.Lock) -> None:
        self._store = store
        self._changes = changes  # held by the policy API for each change, and here for each sync
        self._members: dict[str, _Member] = {}
        for config in configs:
            options = fy.SwitchOptions(
                p4info=config.p4info,
                p4blob=config.bmv2_json,
                device_id=config.device_id,
                ready_handler=self._on_ready,
            )
            switch = fy.Switch(config.name, config.address, options)
            member = _Member(config, switch)
            switch.ee.on(fy.SwitchEvent.CHANNEL_DOWN, lambda _sw, m=member: self._forget(m))
            switch.ee.on(fy.SwitchEvent.BECOME_BACKUP, lambda _sw, m=member: self._forget(m))
            self._members[config.name] = member

    def switches(self) -> list[fy.Switch]:
        """The finsy switches, for a finsy Controller to run."""
        return [m.switch for m in self._members.values()]

    def writable(self) -> list[str]:
        return [name for name, m in self._members.items() if m.state == "CONNECTED"]

    async def write(self, switch: str, policies: Sequence[StoredPolicy]) -> None:
        member = self._members[switch]
        async with member.lock:
            previous = member.installed
            if previous is None:
                raise SwitchWriteError(switch, "not in sync with the stored policies (it is being synced)")
            try:
                desired = self._desired(member, policies)
                await self._write(member, reconcile(desired.items(), previous.items()))
                member.installed = desired
            except (fy.P4ClientError, ValueError, KeyError) as exc:
                await self._undo(member, previous)
                code = grpc.StatusCode[exc.code.name] if isinstance(exc, fy.P4ClientError) else grpc.StatusCode.INTERNAL
                raise SwitchWriteError(switch, _describe(exc), code) from exc

    def statuses(self) -> list[pb.SwitchStatus]:
        return [
            pb.SwitchStatus(
                name=name,
                address=m.config.address,
                device_id=m.config.device_id,
                state=m.state,
                pipeline_cookie=m.switch.p4info.p4cookie if m.switch.is_up else 0,
                last_error=m.last_error,
            )
            for name, m in self._members.items()
        ]

    async def stats(self, policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
        counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        ports: list[pb.PortStats] = []
        for name, member in self._members.items():
            if not member.switch.is_up:
                continue
            try:
                for cell in await _read_all(member.switch, fy.P4CounterEntry(POLICY_COUNTER)):
                    counts[cell.index or 0][0] += cell.packet_count
                    counts[cell.index or 0][1] += cell.byte_count
                ports += await _port_stats(name, member.switch)
            except (fy.P4ClientError, ValueError, KeyError) as exc:
                LOGGER.warning("cannot read counters of %s: %s", name, _describe(exc))
        return pb.GetStatsResponse(
            policies=[
                pb.PolicyStats(name=p.name, packets=counts[p.policy_id][0], bytes=counts[p.policy_id][1])
                for p in policies
            ],
            ports=ports,
        )

    async def _on_ready(self, switch: fy.Switch) -> None:
        """finsy calls this when the pipeline is in place; as primary, sync until it works (or the channel drops)."""
        if switch.is_primary:
            await self._sync(self._members[switch.name])

    async def _sync(self, member: _Member) -> None:
        """Makes the switch's policy tables those of the stored policies, retrying with backoff."""
        attempt = 0
        while True:
            try:
                async with self._changes, member.lock:
                    desired = self._desired(member, self._store.list())
                    actual = await self._read_installed(member)
                    await self._write(member, reconcile(desired.items(), actual.items()))
                    member.installed = desired
                    member.last_error = ""
                LOGGER.info("%s: in sync (%d policy table entries)", member.config.name, len(desired))
                return
            except (fy.P4ClientError, ValueError, KeyError) as exc:
                member.last_error = _describe(exc)
                delay = SYNC_BACKOFF_S[min(attempt, len(SYNC_BACKOFF_S) - 1)]
                attempt += 1
                LOGGER.warning("%s: sync failed (%s); retrying in %.1f s", member.config.name, member.last_error, delay)
                await asyncio.sleep(delay)

    async def _undo(self, member: _Member, previous: dict[bytes, _Entry]) -> None:
        """Puts back the entries of `previous` after a failed write; if that fails too, the switch is synced anew."""
        try:
            actual = await self._read_installed(member)
            await self._write(member, reconcile(previous.items(), actual.items()))
        except (fy.P4ClientError, ValueError, KeyError) as exc:
            member.installed = None
            member.last_error = f"undo failed: {_describe(exc)}"
            LOGGER.error("%s: %s; syncing it again", member.config.name, member.last_error)
            member.switch.create_task(self._sync(member))

    def _desired(self, member: _Member, policies: Sequence[StoredPolicy]) -> dict[bytes, _Entry]:
        link = Link.LTE if member.config.lowest_rtt_link == "lte" else Link.WIFI
        return _index(member.switch.p4info, compile_policies(policies, link))

    async def _read_installed(self, member: _Member) -> dict[bytes, _Entry]:
        entries = await _read_all(member.switch, [fy.P4TableEntry(table) for table in POLICY_TABLES])
        return _index(member.switch.p4info, entries)

    async def _write(self, member: _Member, updates: Sequence[Update[bytes, _Entry]]) -> None:
        if updates:
            await member.switch.write([_update(u) for u in updates])

    def _forget(self, member: _Member) -> None:
        """What a switch holds is unknown once the channel drops or another controller is primary."""
        member.installed = None


def _update(update: Update[bytes, _Entry]) -> fy.P4TableEntry:
    entry = dataclasses.replace(update.value.entry)  # finsy's +, ~ and - mark the entry itself: use a copy
    if update.op is Op.INSERT:
        return +entry
    return ~entry if update.op is Op.MODIFY else -entry


def _index(schema: fy.P4Schema, entries: Iterable[fy.P4TableEntry]) -> dict[bytes, _Entry]:
    indexed: dict[bytes, _Entry] = {}
    for entry in entries:
        message = entry.encode_entry(schema)
        key = p4r.TableEntry(
            table_id=message.table_id,
            match=sorted(message.match, key=lambda m: m.field_id),
            priority=message.priority,
        )
        indexed[key.SerializeToString(deterministic=True)] = _Entry(
            message.action.SerializeToString(deterministic=True), entry
        )
    return indexed


async def _read_all(switch: fy.Switch, entities: Any) -> list[Any]:
    return [entity async for entity in switch.read(entities)]


async def _port_stats(name: str, switch: fy.Switch) -> list[pb.PortStats]:
    roles = {
        int(entry.match["ingress_port"]): ROLES.get(int(entry.action.args["role"]), "unknown")
        for entry in await _read_all(switch, fy.P4TableEntry(PORT_ROLE))
        if entry.match is not None and isinstance(entry.action, fy.P4TableAction)
    }
    tx = {cell.index: cell for cell in await _read_all(switch, fy.P4CounterEntry(PORT_TX))}
    steered = {cell.index: cell.packet_count for cell in await _read_all(switch, fy.P4CounterEntry(STEERED))}
    used = sorted({*roles, *(i for i, c in tx.items() if c.packet_count), *(i for i, n in steered.items() if n)})
    return [
        pb.PortStats(
            switch_name=name,
            port=port,
            role=roles.get(port, "core"),
            tx_packets=tx[port].packet_count if port in tx else 0,
            tx_bytes=tx[port].byte_count if port in tx else 0,
            steered_packets=steered.get(port, 0),
        )
        for port in used
    ]


def _describe(exc: Exception) -> str:
    if isinstance(exc, fy.P4ClientError):
        details = "; ".join(f"update {i}: {e.message}" for i, e in sorted(exc.details.items()))
        return f"{exc.code.name}: {exc.message}" + (f" ({details})" if details else "")
    return f"{type(exc).__name__}: {exc}"
