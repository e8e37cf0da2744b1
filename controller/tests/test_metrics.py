"""The controller's Prometheus endpoint: every documented metric and nothing else, counts that match what the switch
saw, and `tngctl stats` showing the same values (one registry)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_southbound import TableServer, free_port
from test_tngctl import POLICIES, tngctl
from tng_controller.cluster_testbed import Replicas, skip_reason
from tng_controller.config import parse
from tng_controller.metrics import Metrics
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.southbound import SwitchFleet
from tng_controller.store import PolicyStore

# Exported only by switches with a helper or LTE and Wi-Fi ports: test_helper_and_link_gauges_of_a_configured_fleet.
CONFIGURED = {"tng_controller_helper_up", "tng_controller_link_rate_estimate_bps", "tng_controller_qdepl_lte_share"}
# Exported only by replicas on etcd: test_a_replica_exports_the_documented_names.
REPLICA = {
    "tng_controller_elections_won_total",
    "tng_controller_takeovers_total",
    "tng_controller_leadership_lost_total",
    "tng_controller_leader_election_id",
    "tng_controller_lease_seconds_left",
    "tng_controller_etcd_failovers_total",
    "tng_controller_etcd_endpoint",
}

ETCD_MISSING = skip_reason()
DOCS = Path(__file__).resolve().parents[2] / "docs" / "controller.md"


def documented() -> dict[str, str]:
    """Metric name -> type, from the table of docs/controller.md's "Metrics" section."""
    section = DOCS.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `(tng_controller_\w+)` \| (\w+) \|", section, re.MULTILINE))


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def family(name: str, kind: str) -> str:
    """The documented name as the exposition's samples carry it."""
    return name.removesuffix("_total") if kind == "counter" else name


async def test_metrics_endpoint_exports_the_documented_names(tmp_path: Path, contract_pipeline) -> None:
    p4info, blob = contract_pipeline
    switch = TableServer(f"127.0.0.1:{free_port()}")
    policies = tmp_path / "policies.toml"
    policies.write_text(POLICIES)
    config = tmp_path / "controller.toml"
    config.write_text(
        f'[api]\nlisten = "127.0.0.1:0"\n[store]\npath = "policies.db"\n[metrics]\nlisten = "127.0.0.1:0"\n'
        f'[[switch]]\nname = "lwip"\naddress = "{switch._listen_addr}"\np4info = "{p4info}"\nbmv2_json = "{blob}"\n'
    )
    async with switch.run():
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tng_controller.tngctl", "--json", "serve", "--config", str(config),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            ready = json.loads(await asyncio.wait_for(server.stdout.readline(), 20))
            address, url = ready["api"], ready["metrics"]
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", url)
            for _ in range(200):
                _, out = await tngctl(address, "--json", "switches")
                if json.loads(out)[0]["state"] == "CONNECTED":
                    break
                await asyncio.sleep(0.1)
            assert (await tngctl(address, "policy", "set", str(policies)))[0] == 0
            assert (await tngctl(address, "policy", "rm", "video"))[0] == 0

            samples = await asyncio.to_thread(scrape, url)
            names = documented()
            exported = {name for name, _ in samples}
            for name, kind in names.items():
                if name in CONFIGURED | REPLICA:
                    continue
                assert any(e.startswith(family(name, kind)) for e in exported), f"{name} is documented, not exported"
            for name in exported:
                assert any(name.startswith(family(n, k)) for n, k in names.items()), f"{name} is not documented"
                assert not any(name.startswith(family(n, names[n])) for n in REPLICA), f"{name} is for replicas"

            lwip = (("switch", "lwip"),)
            writes = samples[("tng_controller_switch_writes_total", lwip)]
            assert writes == samples[("tng_controller_switch_write_seconds_count", lwip)]
            assert samples[("tng_controller_switch_write_updates_total", lwip)] == len(switch.updates)
            assert writes >= 2  # video's insert and its delete, each one WriteRequest
            assert samples[("tng_controller_reconcile_runs_total", (("reason", "sync"), *lwip))] == 1
            assert samples[("tng_controller_switch_primary", lwip)] == 1
            assert samples[("tng_controller_policies", ())] == 1
            assert samples[("tng_controller_policy_changes_total", (("outcome", "applied"),))] == 3

            _, out = await tngctl(address, "--json", "stats")
            shown = {
                (m["name"], tuple(sorted(m.get("labels", {}).items()))): m.get("value", 0.0)
                for m in json.loads(out)["controller_metrics"]
            }
            again = await asyncio.to_thread(scrape, url)
            assert shown == {key: value for key, value in again.items() if key in shown}
            assert {k for k in again if not k[0].endswith(("_bucket", "_created"))} == set(shown)

            with urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=5) as response:
                raise AssertionError(f"/other answered {response.status}")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
        finally:
            server.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(server.wait(), 10) == 0


def test_helper_and_link_gauges_of_a_configured_fleet(tmp_path: Path) -> None:
    """Gauges only a switch with a helper and LTE and Wi-Fi ports has, from its configuration alone."""
    switch = {
        "name": "lwip",
        "address": "127.0.0.1:9559",
        "port": [
            {"port": 2, "role": "lte", "capacity": "10mbit"},
            {"port": 3, "role": "wifi", "capacity": "30mbit"},
        ],
        "helper": {"attach": "port", "port": 4, "health": "127.0.0.1:9601"},
    }
    config = parse({"switch": [switch]}, Path("."))
    metrics = Metrics()
    SwitchFleet(config.switches, PolicyStore(tmp_path / "db"), asyncio.Lock(), metrics=metrics)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
    }
    assert samples[("tng_controller_helper_up", (("switch", "lwip"),))] == 0  # not probed yet
    assert samples[("tng_controller_link_rate_estimate_bps", (("port", "2"), ("switch", "lwip")))] == 10e6
    assert samples[("tng_controller_link_rate_estimate_bps", (("port", "3"), ("switch", "lwip")))] == 30e6
    assert samples[("tng_controller_qdepl_lte_share", (("switch", "lwip"),))] == 0.25
    assert samples[("tng_controller_switch_connected", (("switch", "lwip"),))] == 0


@pytest.mark.skipif(ETCD_MISSING is not None, reason=ETCD_MISSING or "")
def test_a_replica_exports_the_documented_names(tmp_path: Path) -> None:
    """Every documented name without a switch label is exported by a replica without switches, the replica's own
    among them, and nothing undocumented (test_replicas.py checks their values)."""
    replicas = Replicas(tmp_path, count=1)
    try:
        replicas.start()
        replicas.wait_for_leader()
        with grpc.insecure_channel(replicas.addresses()[0]) as channel:
            stats = pb_grpc.PolicyServiceStub(channel).GetStats(pb.GetStatsRequest(), timeout=10)
    finally:
        replicas.stop()
    exported = {sample.name for sample in stats.controller_metrics}
    names = documented()
    section = DOCS.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    per_switch = set(re.findall(r"^\| `(tng_controller_\w+)` \| \w+ \| [^|]*switch[^|]* \|", section, re.MULTILINE))
    for name in REPLICA:
        assert name in names, f"{name} is not documented"
    for name, kind in names.items():
        if name not in per_switch:
            assert any(e.startswith(family(name, kind)) for e in exported), f"{name} is documented, not exported"
    for name in exported:
        assert any(name.startswith(family(n, k)) for n, k in names.items()), f"{name} is not documented"
