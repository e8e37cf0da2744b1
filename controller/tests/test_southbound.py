"""The southbound fleet against fake P4Runtime servers (finsy.test): connect, sync, write, undo, reconnect, stats.

The fake servers keep table entries in memory, so they check what the controller writes, never what a pipeline does
with it (that is BMv2's and the PTF tests' job). Their P4Info is conftest's contract_pipeline."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from ipaddress import IPv4Address
from pathlib import Path

import finsy as fy
import grpc
import pytest
from finsy.proto import p4r
from finsy.test.p4runtime_server import P4RuntimeServer
from tng_controller import fleet_status, southbound
from tng_controller.compile import compile_policies
from tng_controller.config import parse
from tng_controller.fleet import Change, RolloutError, rollout
from tng_controller.pb import policy_pb2 as pb
from tng_controller.probe import MIN_ANSWERS
from tng_controller.southbound import SwitchFleet
from tng_controller.store import PolicyStore, StoredPolicy
from tng_controller.switch_config import SwitchConfig


class TableServer(P4RuntimeServer):
    """finsy's fake P4Runtime server, keeping the table entries written to it and a few counter cells."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.entries: dict[bytes, p4r.TableEntry] = {}
        self.updates: list[p4r.Update] = []
        self.fail_writes = 0
        self.counters: dict[tuple[int, int], tuple[int, int]] = {}
        self.read_delay_s = 0.0

    async def Write(self, request: p4r.WriteRequest, context: grpc.aio.ServicerContext) -> p4r.WriteResponse:
        if self.fail_writes:
            self.fail_writes -= 1
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "table is full")
        for update in request.updates:
            entry = update.entity.table_entry
            key_bytes = self.key(entry)
            if update.type == p4r.Update.INSERT and key_bytes in self.entries:
                await context.abort(grpc.StatusCode.ALREADY_EXISTS, "entry exists")
            if update.type in (p4r.Update.MODIFY, p4r.Update.DELETE) and key_bytes not in self.entries:
                await context.abort(grpc.StatusCode.NOT_FOUND, "no such entry")
            self.updates.append(update)
            if update.type == p4r.Update.DELETE:
                del self.entries[key_bytes]
            else:
                self.entries[key_bytes] = entry
        return p4r.WriteResponse()

    def put(self, entry: p4r.TableEntry) -> None:
        self.entries[self.key(entry)] = entry

    @staticmethod
    def key(entry: p4r.TableEntry) -> bytes:
        key = p4r.TableEntry(table_id=entry.table_id, match=entry.match, priority=entry.priority)
        return key.SerializeToString(deterministic=True)

    async def Read(
        self, request: p4r.ReadRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[p4r.ReadResponse]:
        await asyncio.sleep(self.read_delay_s)
        tables = {e.table_entry.table_id for e in request.entities if e.HasField("table_entry")}
        counters = {e.counter_entry.counter_id for e in request.entities if e.HasField("counter_entry")}
        entities = [p4r.Entity(table_entry=e) for e in self.entries.values() if e.table_id in tables]
        for (counter_id, index), (packets, octets) in sorted(self.counters.items()):
            if counter_id in counters:
                data = p4r.CounterData(packet_count=packets, byte_count=octets)
                cell = p4r.CounterEntry(counter_id=counter_id, index=p4r.Index(index=index), data=data)
                entities.append(p4r.Entity(counter_entry=cell))
        yield p4r.ReadResponse(entities=entities)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def weighted(name: str, lte: int, prefix: str) -> pb.Policy:
    return pb.Policy(
        name=name,
        match=pb.Match(dst_prefix=prefix, ip_protocol=6),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_IN_NETWORK,
            steering=pb.STEERING_MODE_WEIGHTED,
            lte_weight=lte,
            wifi_weight=1,
            backpressure=pb.Backpressure(feedback=True),
        ),
    )


def put(store: PolicyStore, *policies: pb.Policy) -> Change:
    """Stores `policies` one by one: the change from before the first to after the last."""
    olds = {p.name: store.get(p.name) for p in reversed(policies)}
    news = [store.put(p) for p in policies]
    latest = {p.name: p for p in news}
    return Change([p for p in olds.values() if p], list(latest.values()), store.list())


def tables(server: TableServer, schema: fy.P4Schema) -> list[str]:
    names = {t.id: t.alias for t in schema.tables}
    return sorted(names[e.table_id] for e in server.entries.values())


async def test_connect_sync_write_undo_and_stats(
    tmp_path: Path, contract_pipeline: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    p4info, blob = contract_pipeline
    store = PolicyStore(tmp_path / "db")
    store.put(weighted("video", 3, "10.0.1.0/24"))
    ports = [free_port(), free_port()]
    servers = [TableServer(f"127.0.0.1:{port}") for port in ports]
    configs = [
        SwitchConfig(name=f"s{i}", address=f"127.0.0.1:{port}", device_id=i, p4info=p4info, bmv2_json=blob)
        for i, port in enumerate(ports, 1)
    ]
    stale = servers[1]
    stale_entry = p4r.TableEntry(table_id=0x02000002, match=[p4r.FieldMatch(field_id=1, exact={"value": b"\x09"})])
    stale.put(stale_entry)  # left over from an earlier controller: the sync deletes it
    fleet = SwitchFleet(configs, store, asyncio.Lock())
    schema = fy.P4Schema(p4info, blob)

    async with servers[0].run(), servers[1].run(), fy.Controller(fleet.switches()):
        assert {s.state for s in fleet.statuses()} <= {"CONNECTING", "CONNECTED"}
        await until(lambda: fleet.writable() == ["s1", "s2"])
        status = fleet.statuses()[0]
        assert (status.name, status.address, status.device_id, status.state) == (
            "s1",
            configs[0].address,
            1,
            "CONNECTED",
        )
        assert status.pipeline_cookie == schema.p4cookie
        for server in servers:
            assert tables(server, schema) == ["flow_policy", "modes", "thresholds"]
        assert stale_entry not in stale.entries.values()

        change = put(store, weighted("bulk", 1, "10.0.2.0/24"), weighted("video", 5, "10.0.1.0/24"))
        before = len(servers[0].updates)
        await fleet.write("s1", change)
        kinds = [u.type for u in servers[0].updates[before:]]
        assert sorted(kinds) == [p4r.Update.INSERT] * 3 + [p4r.Update.MODIFY]  # bulk's three, video's new weights
        assert tables(servers[0], schema) == ["flow_policy"] * 2 + ["modes"] * 2 + ["thresholds"] * 2

        installed = dict(servers[1].entries)
        servers[1].fail_writes = 1
        with pytest.raises(Exception, match=r"switch s2: RESOURCE_EXHAUSTED: table is full"):
            await fleet.write("s2", change)
        assert servers[1].entries == installed  # nothing of it stayed
        assert fleet.writable() == ["s1", "s2"]
        await fleet.write("s2", change)
        assert servers[1].entries == servers[0].entries

        servers[1].counters[(0x03000000, 1)] = (10, 1000)
        servers[1].counters[(0x03000000, 2)] = (4, 400)
        servers[1].counters[(0x03000001, 2)] = (7, 700)
        stats = await fleet.stats(store.list())
        assert [(p.name, p.packets, p.bytes) for p in stats.policies] == [("bulk", 4, 400), ("video", 10, 1000)]
        assert [(p.switch_name, p.port, p.role, p.tx_packets) for p in stats.ports] == [("s2", 2, "core", 7)]

        # A switch that does not answer is left out after STATS_TIMEOUT_S; the others are read meanwhile.
        servers[0].counters[(0x03000000, 1)] = (1, 100)
        servers[1].read_delay_s = 60.0
        monkeypatch.setattr(fleet_status, "STATS_TIMEOUT_S", 0.5)
        started = asyncio.get_running_loop().time()
        stats = await asyncio.wait_for(fleet.stats(store.list()), 10)
        assert asyncio.get_running_loop().time() - started < 5
        assert [(p.name, p.packets) for p in stats.policies] == [("bulk", 0), ("video", 1)]
        servers[1].read_delay_s = 0.0

    store.close()


async def test_a_restarted_switch_is_synced_when_it_reconnects(
    tmp_path: Path, contract_pipeline: tuple[Path, Path]
) -> None:
    p4info, blob = contract_pipeline
    store = PolicyStore(tmp_path / "db")
    store.put(weighted("video", 3, "10.0.1.0/24"))
    address = f"127.0.0.1:{free_port()}"
    fleet = SwitchFleet(
        [SwitchConfig(name="s1", address=address, device_id=1, p4info=p4info, bmv2_json=blob)], store, asyncio.Lock()
    )
    schema = fy.P4Schema(p4info, blob)
    async with fy.Controller(fleet.switches()):
        first = TableServer(address)
        async with first.run():
            await until(lambda: fleet.writable() == ["s1"])
            assert tables(first, schema) == ["flow_policy", "modes", "thresholds"]
        await until(lambda: fleet.statuses()[0].state == "CONNECTING")
        assert fleet.writable() == []
        store.put(weighted("bulk", 1, "10.0.2.0/24"))  # changed while the switch was away
        restarted = TableServer(address)  # comes back empty, as a restarted BMv2 does
        async with restarted.run():
            await until(lambda: fleet.writable() == ["s1"], timeout=30)
            assert tables(restarted, schema) == ["flow_policy"] * 2 + ["modes"] * 2 + ["thresholds"] * 2
    store.close()


async def test_a_switch_that_is_down_is_not_writable(tmp_path: Path, contract_pipeline: tuple[Path, Path]) -> None:
    p4info, blob = contract_pipeline
    store = PolicyStore(tmp_path / "db")
    config = SwitchConfig(name="s1", address=f"127.0.0.1:{free_port()}", device_id=1, p4info=p4info, bmv2_json=blob)
    fleet = SwitchFleet([config], store, asyncio.Lock())
    async with fy.Controller(fleet.switches()):
        await asyncio.sleep(0.5)
        assert fleet.writable() == []
        assert [(s.name, s.state, s.pipeline_cookie) for s in fleet.statuses()] == [("s1", "CONNECTING", 0)]
        with pytest.raises(Exception, match="switch s1: not in sync"):
            await fleet.write("s1", Change([], [], []))
    store.close()


def written(server: TableServer, since: int, schema: fy.P4Schema) -> list[tuple[str, str, dict[int, int]]]:
    """(type, table, action parameters by id) of the updates the server took after its first `since`."""
    names = {t.id: t.alias for t in schema.tables}
    return [
        (
            p4r.Update.Type.Name(update.type),
            names[update.entity.table_entry.table_id],
            {p.param_id: int.from_bytes(p.value, "big") for p in update.entity.table_entry.action.action.params},
        )
        for update in server.updates[since:]
    ]


async def test_a_write_after_a_change_writes_exactly_what_changed(
    tmp_path: Path, contract_pipeline: tuple[Path, Path]
) -> None:
    p4info, blob = contract_pipeline
    store = PolicyStore(tmp_path / "db")
    for name, lte, prefix in (("video", 3, "10.0.1.0/24"), ("bulk", 1, "10.0.2.0/24"), ("web", 2, "10.0.3.0/24")):
        store.put(weighted(name, lte, prefix))
    address = f"127.0.0.1:{free_port()}"
    server = TableServer(address)
    config = SwitchConfig(name="s1", address=address, device_id=1, p4info=p4info, bmv2_json=blob)
    fleet = SwitchFleet([config], store, asyncio.Lock())
    schema = fy.P4Schema(p4info, blob)

    async with server.run(), fy.Controller(fleet.switches()):
        await until(lambda: fleet.writable() == ["s1"])

        before = len(server.updates)
        await fleet.write("s1", put(store, weighted("video", 7, "10.0.1.0/24")))
        assert written(server, before, schema) == [("MODIFY", "modes", {1: 7, 2: 1})]

        before = len(server.updates)
        bulk = store.get("bulk")
        assert bulk is not None
        store.delete("bulk")
        await fleet.write("s1", Change([bulk], [], store.list()))
        deletes = written(server, before, schema)
        assert sorted((kind, table) for kind, table, _ in deletes) == [
            ("DELETE", "flow_policy"),
            ("DELETE", "modes"),
            ("DELETE", "thresholds"),
        ]
        assert deletes[[table for _, table, _ in deletes].index("flow_policy")][2] == {1: bulk.policy_id}

        # A change a switch refused is not stored, so the next change reuses its revision with other contents.
        video = store.get("video")
        assert video is not None
        retried = pb.Policy()
        retried.CopyFrom(video.policy)
        retried.switch_policy.lte_weight = 9
        before = len(server.updates)
        refused = StoredPolicy(retried, video.policy_id)
        others = [p for p in store.list() if p.name != "video"]
        await fleet.write("s1", Change([video], [refused], [refused, *others]))
        await fleet.write("s1", Change([refused], [video], store.list()))
        assert written(server, before, schema) == [("MODIFY", "modes", {1: 9, 2: 1}), ("MODIFY", "modes", {1: 7, 2: 1})]

        def encoded(entries: list[p4r.TableEntry]) -> list[bytes]:
            return sorted(e.SerializeToString(deterministic=True) for e in entries)

        fresh = [entry.encode_entry(schema) for entry in compile_policies(store.list())]
        assert encoded(list(server.entries.values())) == encoded(fresh)
    store.close()


async def test_the_link_state_of_lwip_routes_is_owned_and_follows_the_prober(
    tmp_path: Path, contract_pipeline: tuple[Path, Path]
) -> None:
    """With an LWIP route the fleet owns ingress.steering.link_state: it writes the capacities' packet times at the
    sync (deleting stale entries), punts the probe source, and rewrites the entry once the prober measured d."""
    p4info, blob = contract_pipeline
    store = PolicyStore(tmp_path / "db")
    address = f"127.0.0.1:{free_port()}"
    raw = {
        "name": "s1",
        "address": address,
        "p4info": str(p4info),
        "bmv2_json": str(blob),
        "probe_source": "10.0.0.254",
        "port": [
            {"port": 2, "role": "lte", "mac": "02:00:00:00:00:02", "capacity": "10mbit"},
            {"port": 3, "role": "wifi", "mac": "02:00:00:00:00:03", "capacity": "30mbit"},
        ],
        "route": [
            {
                "prefix": "10.2.0.0/24",
                "lte": {"port": 2, "dst_mac": "02:00:00:00:02:01"},
                "wifi": {"port": 3, "dst_mac": "02:00:00:00:03:01"},
                "probe": "10.2.0.2",
            }
        ],
    }
    config = parse({"switch": [raw], "monitor": {"interval_s": 0.05, "probe_timeout_s": 0.2}}, tmp_path)
    fleet = SwitchFleet(config.switches, store, asyncio.Lock(), monitor=config.monitor)
    schema = fy.P4Schema(p4info, blob)
    server = TableServer(address)
    stale = fy.P4TableEntry(
        "ingress.steering.link_state",
        match=fy.Match(lte_port=9),
        action=fy.Action(
            "ingress.steering.set_link_state", lte_delay_us=1, wifi_delay_us=0, lte_packet_us=1, wifi_packet_us=1
        ),
    )
    server.put(stale.encode_entry(schema))

    def link_states() -> list[dict[str, int]]:
        entries = [fy.P4TableEntry.decode_entry(e, schema) for e in server.entries.values()]
        return [dict(e.match or {}) | e.action.args for e in entries if e.table_id == "link_state"]  # decoded: aliases

    async with server.run(), fy.Controller(fleet.switches()):
        await until(lambda: fleet.writable() == ["s1"])
        assert link_states() == [
            {"lte_port": 2, "lte_delay_us": 0, "wifi_delay_us": 0, "lte_packet_us": 1200, "wifi_packet_us": 400}
        ]
        routes = [fy.P4TableEntry.decode_entry(e, schema) for e in server.entries.values()]
        punted = [e.match for e in routes if e.action and e.action.name == "punt"]
        assert punted == [{"dst_addr": (int(IPv4Address("10.0.0.254")), 32)}]
        # The fake server drops packet-outs, so no probe is answered.
        await until(lambda: fleet.statuses()[0].link_states[0].probes_unanswered >= 2)
        status = fleet.statuses()[0].link_states[0]
        assert not status.delay_measured and status.delay_state.startswith("no answer to lte probes")

        member = fleet._members["s1"]
        assert member.prober is not None
        probe = member.prober.probe_of(config.switches[0].routes[0])
        assert probe is not None
        now = asyncio.get_running_loop().time()
        for _ in range(MIN_ANSWERS):
            probe.answered(2, 3, 0.040, now)
            probe.answered(3, 3, 0.015, now)
        await until(lambda: [s["lte_delay_us"] for s in link_states()] == [25_000])
        assert fleet.statuses()[0].link_states[0].spill_depth_packets == 64  # ceil(25 ms / 0.4 ms) + 1
    store.close()


async def test_a_change_encodes_only_the_policies_it_touches(
    tmp_path: Path, contract_pipeline: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    p4info, blob = contract_pipeline
    store = PolicyStore(tmp_path / "db")
    for i in range(200):
        store.put(weighted(f"p{i}", 1, f"10.{i // 250}.{i % 250}.0/24"))
    for i in range(800):  # host-only: stored, served to agents, nothing on the switches
        store.put(pb.Policy(name=f"host-{i}"))
    address = f"127.0.0.1:{free_port()}"
    server = TableServer(address)
    config = SwitchConfig(name="s1", address=address, device_id=1, p4info=p4info, bmv2_json=blob)
    fleet = SwitchFleet([config], store, asyncio.Lock())
    compiled: list[str] = []
    real = southbound.policy_entries

    def counting(stored: StoredPolicy, *args: object) -> object:
        compiled.append(stored.name)
        return real(stored, *args)

    monkeypatch.setattr(southbound, "policy_entries", counting)
    async with server.run(), fy.Controller(fleet.switches()):
        await until(lambda: fleet.writable() == ["s1"])
        assert len(compiled) == 200
        compiled.clear()
        before = len(server.updates)
        await fleet.write("s1", put(store, weighted("p7", 5, "10.0.7.0/24"), pb.Policy(name="host-3", revision=0)))
        assert compiled == ["p7"]
        assert [(kind, table) for kind, table, _ in written(server, before, fy.P4Schema(p4info, blob))] == [
            ("MODIFY", "modes")
        ]
    store.close()


async def test_a_change_one_switch_refuses_is_rolled_back_on_the_others(
    tmp_path: Path, contract_pipeline: tuple[Path, Path]
) -> None:
    p4info, blob = contract_pipeline
    store = PolicyStore(tmp_path / "db")
    store.put(weighted("video", 3, "10.0.1.0/24"))
    ports = [free_port(), free_port()]
    servers = [TableServer(f"127.0.0.1:{port}") for port in ports]
    configs = [
        SwitchConfig(name=f"s{i}", address=f"127.0.0.1:{port}", device_id=i, p4info=p4info, bmv2_json=blob)
        for i, port in enumerate(ports, 1)
    ]
    fleet = SwitchFleet(configs, store, asyncio.Lock())
    async with servers[0].run(), servers[1].run(), fy.Controller(fleet.switches()):
        await until(lambda: fleet.writable() == ["s1", "s2"])
        installed = [dict(server.entries) for server in servers]
        before = store.list()
        with store.transaction() as tx:  # never committed, as when a switch refuses the change
            old = tx.get("video")
            new = tx.put(weighted("video", 9, "10.0.1.0/24"))
            created = tx.put(weighted("bulk", 1, "10.0.2.0/24"))
            change = Change([old], [new, created], tx.list())
            servers[1].fail_writes = 1
            with pytest.raises(RolloutError, match=r"switch s2: RESOURCE_EXHAUSTED: .*; rolled back on s1$"):
                await rollout(fleet, change, before)
        assert [dict(server.entries) for server in servers] == installed
        assert fleet.writable() == ["s1", "s2"]
        store.put(weighted("bulk", 1, "10.0.2.0/24"))  # the next change finds both as they were
        latest = store.get("bulk")
        assert latest is not None
        await rollout(fleet, Change([], [latest], store.list()), before)
        assert servers[0].entries == servers[1].entries
        assert tables(servers[0], fy.P4Schema(p4info, blob)) == ["flow_policy"] * 2 + ["modes"] * 2 + ["thresholds"] * 2
    store.close()
