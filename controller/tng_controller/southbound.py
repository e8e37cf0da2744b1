"""Southbound: the configured switches over P4Runtime (finsy), their tables kept equal to the configured topology,
the measured link state and the stored policies, and the control loops of each connected switch (new-flow digests,
link monitor, link prober, helper health)."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import finsy as fy
import grpc
from finsy.proto import p4r

from tng_controller import fleet_status
from tng_controller.change_work import ChangedEntries, ChangeWork, update_message
from tng_controller.compile import POLICY_TABLES, policy_entries
from tng_controller.config import DigestConfig, MonitorConfig, TrafficClassRule
from tng_controller.digests import NEW_FLOW_DIGEST, FlowTable, NewFlow, classify, flow_entries
from tng_controller.entries import EncodedEntries, Entries, Entry, Source, index
from tng_controller.fleet import Change, SwitchWriteError
from tng_controller.helper_health import HelperHealth, keep_helper_table
from tng_controller.link_state import LINK_STATE, RouteLinkStates
from tng_controller.metrics import Metrics
from tng_controller.monitor import LinkRates, QdeplShare
from tng_controller.pb import policy_pb2 as pb
from tng_controller.prober import LinkProber
from tng_controller.queue_rates import Bmv2Thrift, ThriftError, queue_commands, reset_seen_flows_commands
from tng_controller.reconcile import Op, Update, reconcile
from tng_controller.retransmit_helper import serve_p4runtime
from tng_controller.store import PolicyReader, StoredPolicy
from tng_controller.stream import SharedStream
from tng_controller.switch_config import SwitchConfig, SwitchTls
from tng_controller.switch_member import SwitchMember, describe, read_all
from tng_controller.targets import pipeline_blob, queue_report_session
from tng_controller.topology import helper_clone_session, topology_entries, topology_tables

LOGGER = logging.getLogger(__name__)
SYNC_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
# new_flow_digest_t: lists of up to 64 flows, sent after at most 5 ms; a list not acked is resent after 1 s.
DIGEST_CONFIG = {"max_list_size": 64, "max_timeout_ns": 5_000_000, "ack_timeout_ns": 1_000_000_000}


class SwitchFleet:
    """The switches of a configuration: finsy connects them (mastership, pipeline push, reconnect with backoff); each
    switch is synced to the stored policies when it becomes primary, and written on every change while it is."""

    def __init__(
        self,
        configs: Sequence[SwitchConfig],
        store: PolicyReader,
        changes: asyncio.Lock,
        *,
        election_id: int = fy.SwitchOptions.initial_election_id,
        traffic_classes: Sequence[TrafficClassRule] = (),
        monitor: MonitorConfig | None = None,
        digests: DigestConfig | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        monitor = monitor or MonitorConfig()
        digests = digests or DigestConfig()
        self._store = store
        self._changes = changes  # held by the policy API for each change, and here for each sync and loop write
        self._traffic_classes = tuple(traffic_classes)
        self._monitor = monitor
        self._digests = digests
        self._members: dict[str, SwitchMember] = {}
        self._work = ChangeWork()
        self._metrics = metrics or Metrics()
        self._metrics.gauges(functools.partial(fleet_status.gauges, self._members))
        for config in configs:
            options = fy.SwitchOptions(
                p4info=config.p4info,
                p4blob=pipeline_blob(config),
                device_id=config.device_id,
                initial_election_id=election_id,
                ready_handler=self._on_ready,
                channel_credentials=_credentials(config.tls),
            )
            switch = fy.Switch(config.name, config.address, options)
            nominal = {p.port: float(p.capacity_bps) for p in config.ports if p.capacity_bps is not None}
            links = LinkRates(monitor.ewma_weight, nominal)
            probed = any(route.probe is not None for route in config.routes)
            prober = LinkProber(config, monitor) if probed else None
            member = SwitchMember(
                config,
                switch,
                flows=FlowTable(digests.max_flows),
                links=links,
                share=QdeplShare(monitor.share_band, monitor.rewrite_interval_s),
                helper=HelperHealth(config.name, config.helper) if config.helper else None,
                thrift=Bmv2Thrift(config.name, config.thrift) if config.thrift else None,
                prober=prober,
                link_states=RouteLinkStates(config, monitor, links, prober),
                stream=SharedStream(switch),
                encoded=EncodedEntries(lambda: (m.encoded for m in self._members.values())),
            )
            member.share.update(*member.link_rates(), now=-math.inf)  # configured capacities, until measured
            switch.ee.on(fy.SwitchEvent.CHANNEL_DOWN, lambda _sw, m=member: self._forget(m))
            switch.ee.on(fy.SwitchEvent.BECOME_BACKUP, lambda _sw, m=member: self._forget(m))
            self._members[config.name] = member
            self._metrics.add_switch(config.name)

    def switches(self) -> list[fy.Switch]:
        """The finsy switches, for a finsy Controller to run."""
        return [m.switch for m in self._members.values()]

    def writable(self) -> list[str]:
        return [name for name, m in self._members.items() if m.state == "CONNECTED"]

    async def write(self, switch: str, change: Change) -> None:
        member = self._members[switch]
        async with member.lock:
            previous = member.installed
            if previous is None:
                raise SwitchWriteError(switch, "not in sync with the stored policies (it is being synced)")
            try:
                if member.flows:  # flow entries depend on every policy: the whole set is compared
                    desired = self._desired(member, change.policies)
                    await self._write(member, reconcile(desired.items(), previous.items()))
                    member.installed = desired
                else:
                    updates = self._policy_updates(member, change, previous)
                    await self._write(member, updates, self._work.messages(change, updates))
                    for update in updates:
                        if update.op is Op.DELETE:
                            del previous[update.key]
                        else:
                            previous[update.key] = update.value
            except (fy.P4ClientError, ValueError, KeyError) as exc:
                await self._undo(member, previous)
                code = grpc.StatusCode[exc.code.name] if isinstance(exc, fy.P4ClientError) else grpc.StatusCode.INTERNAL
                raise SwitchWriteError(switch, describe(exc), code) from exc

    def statuses(self) -> list[pb.SwitchStatus]:
        return fleet_status.statuses(self._members)

    async def stats(self, policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
        """See fleet_status.stats."""
        return await fleet_status.stats(self._members, policies)

    def set_election_id(self, election_id: int) -> None:
        """The P4Runtime election id of the next connections (while the switches are not running)."""
        for member in self._members.values():
            member.switch.options = member.switch.options(initial_election_id=election_id)

    async def resync(self, switch: str) -> None:
        """Reads what the switch holds and corrects it to the stored policies (after a write it refused)."""
        member = self._members[switch]
        self._forget(member)
        await self._sync(member)

    async def _on_ready(self, switch: fy.Switch) -> None:
        """finsy calls this when the pipeline is in place; as primary, sync until it works (or the channel drops),
        set the BMv2 queues, then run the switch's control loops (finsy cancels them when the channel drops)."""
        if not switch.is_primary:
            return
        member = self._members[switch.name]
        if _has_digest(switch):
            # Listening before the sync turns digests on: a list that arrives while nobody listens is lost.
            switch.create_task(self._consume_digests(member))
        await self._sync(member)
        switch.create_task(self._configure_queues(member))
        switch.create_task(self._monitor_links(member))
        if member.prober is not None:
            switch.create_task(member.prober.receive(member.stream))
            switch.create_task(member.prober.send(member.stream))
        if member.helper is not None:
            if member.helper.helper is not None:
                member.helper.serving = switch.create_task(serve_p4runtime(member.stream, member.helper.helper))
            switch.create_task(keep_helper_table(member.helper, lambda entry: self._write_helper(member, entry)))

    async def _sync(self, member: SwitchMember) -> None:
        """Makes the switch's owned tables those of the topology and the stored policies, points clone session 1 at
        the helper (and on Tofino mirror session 2 at the recirculation port) and turns new-flow digests on, retrying
        with backoff."""
        attempt = 0
        while True:
            try:
                async with self._changes, member.lock:
                    desired = self._desired(member, self._store.list())
                    actual = await self._read_installed(member)
                    corrections = reconcile(desired.items(), actual.items())
                    self._metrics.reconcile_runs.labels(member.config.name, "sync").inc()
                    self._metrics.reconcile_corrections.labels(member.config.name, "sync").inc(len(corrections))
                    await self._write(member, corrections)
                    if member.config.helper is not None:
                        await _insert_or_modify(member.switch, helper_clone_session(member.config.helper))
                    if member.config.tofino is not None:
                        await _insert_or_modify(member.switch, queue_report_session())
                    if _has_digest(member.switch):
                        await _insert_or_modify(member.switch, fy.P4DigestEntry(NEW_FLOW_DIGEST, **DIGEST_CONFIG))
                    member.installed = desired
                    member.last_error = ""
                LOGGER.info("%s: in sync (%d table entries)", member.config.name, len(desired))
                return
            except (fy.P4ClientError, ValueError, KeyError) as exc:
                member.last_error = describe(exc)
                delay = SYNC_BACKOFF_S[min(attempt, len(SYNC_BACKOFF_S) - 1)]
                attempt += 1
                LOGGER.warning("%s: sync failed (%s); retrying in %.1f s", member.config.name, member.last_error, delay)
                await asyncio.sleep(delay)

    async def _configure_queues(self, member: SwitchMember) -> None:
        """BMv2 egress queue rates and depths from the configured capacities and queue sizes (Thrift)."""
        commands = queue_commands(member.config.ports)
        if not commands:
            return
        if member.config.tofino is not None:
            LOGGER.warning(
                "%s: ports have capacities or queue depths: on Tofino the traffic manager shapes queues (bf_switchd's"
                " port and queue config, docs/tofino.md), not the controller",
                member.config.name,
            )
            return
        if member.thrift is None:
            LOGGER.warning(
                "%s: ports have capacities or queue depths but no thrift address is configured: queues left as they"
                " are",
                member.config.name,
            )
            return
        try:
            await member.thrift.run(commands)
            LOGGER.info("%s: %s", member.config.name, "; ".join(commands))
        except ThriftError as exc:
            member.last_error = str(exc)
            LOGGER.error("%s", exc)

    async def _refresh(self, member: SwitchMember, reason: str, why: str) -> None:
        """Writes what changed in the desired entries of a synced switch (new flows, new qdepl rates); `reason` is
        the metrics label, `why` the log's details."""
        async with self._changes, member.lock:
            previous = member.installed
            if previous is None:
                return  # it is being synced, which computes the desired entries anew
            desired = self._desired(member, self._store.list())
            updates = reconcile(desired.items(), previous.items())
            self._metrics.reconcile_runs.labels(member.config.name, reason).inc()
            self._metrics.reconcile_corrections.labels(member.config.name, reason).inc(len(updates))
            try:
                await self._write(member, updates)
                member.installed = desired
                if updates:
                    LOGGER.info("%s: %s: %d table updates", member.config.name, why, len(updates))
            except (fy.P4ClientError, ValueError, KeyError) as exc:
                LOGGER.warning("%s: %s: write failed (%s)", member.config.name, why, describe(exc))
                await self._undo(member, previous)

    async def _consume_digests(self, member: SwitchMember) -> None:
        """Acks every new_flow_digest_t list and gives its flows the policy of their class at once."""
        async for digests in member.switch.read_digests(NEW_FLOW_DIGEST):
            await member.stream.write([digests.ack()])
            self._metrics.digest_lists.labels(member.config.name).inc()
            changed = False
            for data in digests:
                self._metrics.digested_flows.labels(member.config.name).inc()
                flow = NewFlow.from_digest(data)  # type: ignore[arg-type]
                if flow.policy:
                    continue  # a policy the switch matches itself took the flow
                traffic_class = classify(flow, self._traffic_classes)
                if traffic_class is not None:
                    self._metrics.classified_flows.labels(member.config.name).inc()
                    changed |= member.flows.learn(flow.key, traffic_class)
                    LOGGER.debug("%s: new flow %s of class %s", member.config.name, flow.key, traffic_class)
            if changed:
                await self._refresh(member, "new_flows", "new flows")

    async def _monitor_links(self, member: SwitchMember) -> None:
        """Every interval: reads the LTE and Wi-Fi ports' transmit counters, updates their rate estimates and, when
        the LTE share moved past the band, the rates of the qdepl policies; rewrites the link state of routes whose
        measurements moved past their bands; clears the seen-flow bits when due."""
        lte, wifi = member.link_ports
        ports = lte + wifi
        loop = asyncio.get_running_loop()
        member.links.forget_readings()
        while True:
            await asyncio.sleep(self._monitor.interval_s)
            changes = []
            if ports:
                try:
                    counters = [fy.P4CounterEntry(fleet_status.PORT_TX, index=p) for p in ports]
                    cells = await read_all(member.switch, counters)
                except (fy.P4ClientError, ValueError, KeyError) as exc:
                    LOGGER.warning("%s: cannot read %s: %s", member.config.name, fleet_status.PORT_TX, describe(exc))
                    continue
                now = loop.time()
                self._metrics.link_samples.labels(member.config.name).inc(len(cells))
                for cell in cells:
                    member.links.observe(cell.index or 0, cell.byte_count, cell.packet_count, now)
                if member.share.update(*member.link_rates(), now=now):
                    changes.append(f"qdepl LTE share {member.share.share:.3f}")
            if member.link_states.update(loop.time()):
                changes.append(f"link state {member.link_states.describe()}")
            if changes:
                await self._refresh(member, "link_monitor", "; ".join(changes))
            await self._reset_seen_flows(member, loop.time())

    async def _reset_seen_flows(self, member: SwitchMember, now: float) -> None:
        """Clears the seen-flow bit arrays once flows were forgotten (so that they are digested again), at most once
        per reset interval. Flows still remembered are digested again too and only refreshed."""
        if (
            member.flows.forgotten == member.forgotten_at_reset
            or now - member.reset_at < self._digests.reset_interval_s
        ):
            return
        member.reset_at, member.forgotten_at_reset = now, member.flows.forgotten
        if member.thrift is None:
            LOGGER.warning(
                "%s: flows were forgotten but no thrift address is configured: they are not digested again",
                member.config.name,
            )
            return
        try:
            await member.thrift.run(reset_seen_flows_commands())
            LOGGER.info("%s: seen-flow bit arrays cleared", member.config.name)
        except ThriftError as exc:
            LOGGER.error("%s", exc)

    async def _write_helper(self, member: SwitchMember, entry: fy.P4TableEntry) -> None:
        async with member.lock:
            await member.switch.modify([entry])

    async def _undo(self, member: SwitchMember, previous: Entries) -> None:
        """Puts back the entries of `previous` after a failed write; if that fails too, the switch is synced anew."""
        try:
            actual = await self._read_installed(member)
            await self._write(member, reconcile(previous.items(), actual.items()))
        except (fy.P4ClientError, ValueError, KeyError) as exc:
            member.installed = None
            member.last_error = f"undo failed: {describe(exc)}"
            LOGGER.error("%s: %s; syncing it again", member.config.name, member.last_error)
            member.switch.create_task(self._sync(member))

    def _desired(self, member: SwitchMember, policies: Sequence[StoredPolicy]) -> Entries:
        """The entries the switch should have; only policies that changed since the last call are encoded again."""
        sources = [_policy_source(member, p) for p in sorted(policies, key=lambda p: p.policy_id) if p.policy_id]
        if member.config.has_topology:
            sources.append((("topology",), (), functools.partial(topology_entries, member.config)))
        if _owns_link_state(member):
            sources.append((("link_state",), member.link_states.written(), member.link_states.entries))
        desired = member.encoded.collect(member.switch.p4info, sources)
        # Flow entries depend on every flow and policy: made anew each time (there are none without traffic classes).
        desired.update(index(member.switch.p4info, flow_entries(member.flows.items(), policies)))
        return desired

    def _policy_updates(self, member: SwitchMember, change: Change, installed: Entries) -> list[Update[bytes, Entry]]:
        """The updates of the entries of the policies `change` touches, and of no other: their cost does not grow
        with the number of stored policies. Keys are disjoint between policies (a policy's id is in its keys but
        those of its classification entry, which the conflict check keeps apart), so comparing the changed
        policies' entries with what the switch holds under their keys is the whole difference."""
        schema = member.switch.p4info
        changed = [p for p in (*change.old, *change.new) if p.policy_id]
        # What the changed policies' entries depend on besides the change (`_policy_source`'s key, and the pipeline).
        group = (
            schema.p4cookie or id(schema),
            member.share.rates,
            *(member.link_states.tuning(p.policy) for p in changed),
        )
        new, keys = self._work.entries(change, group, lambda: self._changed_entries(member, change))
        return reconcile(new.items(), ((key, installed[key]) for key in keys if key in installed))

    def _changed_entries(self, member: SwitchMember, change: Change) -> ChangedEntries:
        schema = member.switch.p4info
        keys: set[bytes] = set()
        kept = {p.policy_id for p in change.new}
        for p in change.old:  # before the new ones take their slots, which hold the old ones
            if p.policy_id:
                keys.update(member.encoded.encode(schema, _policy_source(member, p), keep=False))
                if p.policy_id not in kept:
                    member.encoded.forget(("policy", p.policy_id))
        new: Entries = {}
        for p in change.new:
            if p.policy_id:
                new.update(member.encoded.encode(schema, _policy_source(member, p)))
        keys.update(new)
        return new, frozenset(keys)

    async def _read_installed(self, member: SwitchMember) -> Entries:
        tables = POLICY_TABLES + (topology_tables(member.config) if member.config.has_topology else ())
        if _owns_link_state(member):
            tables += (LINK_STATE,)
        entries = await read_all(member.switch, [fy.P4TableEntry(table) for table in tables])
        return index(member.switch.p4info, entries)

    async def _write(
        self, member: SwitchMember, updates: Sequence[Update[bytes, Entry]], messages: list[p4r.Update] | None = None
    ) -> None:
        """One WriteRequest with all of `updates` (none when there are none; `messages`: theirs, made already),
        counted and timed."""
        if not updates:
            return
        name = member.config.name
        self._metrics.switch_writes.labels(name).inc()
        self._metrics.switch_write_updates.labels(name).inc(len(updates))
        start = time.perf_counter()
        try:
            await member.switch.write(messages if messages is not None else [update_message(u) for u in updates])
        except Exception:
            self._metrics.switch_write_errors.labels(name).inc()
            raise
        finally:
            self._metrics.switch_write_seconds.labels(name).observe(time.perf_counter() - start)

    def _forget(self, member: SwitchMember) -> None:
        """What a switch holds is unknown once the channel drops or another controller is primary."""
        member.installed = None
        if member.helper is not None:
            member.helper.forget()


def _policy_source(member: SwitchMember, stored: StoredPolicy) -> Source:
    """A policy's entries on this switch depend on its stored bytes, its id, and the switch's tuning and rates."""
    tuning = member.link_states.tuning(stored.policy)
    rates = member.share.rates
    key = (stored.policy_id, stored.policy.SerializeToString(deterministic=True), tuning, rates)
    return ("policy", stored.policy_id), key, functools.partial(policy_entries, stored, tuning, rates)


def _owns_link_state(member: SwitchMember) -> bool:
    """Whether the controller writes ingress.steering.link_state of this switch: it has LWIP routes and a pipeline
    with the table (stand-ins in tests may lack it)."""
    return member.config.has_topology and any(table.name == LINK_STATE for table in member.switch.p4info.tables)


def _has_digest(switch: fy.Switch) -> bool:
    """Whether the switch's pipeline sends new-flow digests (the tng pipeline does; stand-ins in tests may not)."""
    return any(digest.name == NEW_FLOW_DIGEST for digest in switch.p4info.digests)


async def _insert_or_modify(switch: fy.Switch, entity: Any) -> None:
    """Writes an entity that may be there already (a switch the controller configured before): inserted when absent,
    modified when different, not written when the switch has it already (a restarted controller writes nothing)."""
    try:
        present = [found.encode(switch.p4info) async for found in switch.read(entity)]
    except fy.P4ClientError as exc:
        if exc.code != fy.GRPCStatusCode.NOT_FOUND:
            raise
        present = []
    if not present:
        await switch.insert([entity])
    elif entity.encode(switch.p4info) not in present:
        await switch.modify([entity])


def _credentials(tls: SwitchTls | None) -> fy.GRPCCredentialsTLS | None:
    if tls is None:
        return None
    return fy.GRPCCredentialsTLS(cacert=tls.ca, cert=tls.cert, private_key=tls.key)
