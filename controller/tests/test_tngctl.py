"""tngctl: output for people and --json, exit statuses, policy files, and `serve` as a process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_southbound import TableServer, free_port  # the fake switch
from tng_controller import tngctl as tngctl_module
from tng_controller.api import PolicyServicer, start_server
from tng_controller.config import ApiConfig, TlsConfig
from tng_controller.fleet import NoSwitches
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.store import PolicyStore
from tng_controller.tngctl import load_policies, main, policy_toml

POLICIES = """
[[policy]]
name = "video"
match = { priority = 5, traffic_class = "video", dst_prefix = "10.0.2.0/24", ip_protocol = 6, dst_port = { value = 443, mask = 0xFFFF } }
switch_policy = { aggregation = "AGGREGATION_IN_NETWORK", steering = "STEERING_MODE_WEIGHTED", lte_weight = 1, wifi_weight = 3 }
host_policy = { congestion_control = "copa", copa_delta = 0.1, congestion_control_per_path = { "1" = "vegas" } }

[[policy]]
name = "one-connection"
match = { priority = 9, connection_id = 77 }
host_policy = { congestion_control = "cubic", scheduler = "ack-clocked", tail_loss = "alternate-path" }
"""  # noqa: E501 (one policy per table, as in the host agents' policy files)


async def tngctl(address: str, *args: str) -> tuple[int, str]:
    """Runs tngctl in a thread (its gRPC calls block) and returns its exit status and standard output."""
    out = io.StringIO()
    status = await asyncio.to_thread(main, ["--server", address, *args], out)
    return status, out.getvalue()


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policies.toml"
    path.write_text(POLICIES)
    return path


async def test_policy_set_ls_get_rm(api, policy_file: Path, tmp_path: Path) -> None:
    status, out = await tngctl(api.address, "policy", "set", str(policy_file))
    assert status == 0
    assert out.splitlines() == [
        "video: revision 1, written to s1, s2, s3",
        "one-connection: revision 2, written to s1, s2, s3",
    ]
    status, out = await tngctl(api.address, "policy", "ls")
    assert out.splitlines() == [
        "NAME            REV  PRIO  MATCH                                        SWITCHES                 HOSTS",
        "one-connection  2    9     conn=0x4d                                    -                        "
        "cubic ack-clocked alternate-path",
        "video           1    5     class=video dst=10.0.2.0/24 tcp dstport=443  in-network weighted 1:3  "
        "copa path1=vegas",
    ]
    status, out = await tngctl(api.address, "policy", "get", "one-connection")
    assert out == (
        '[[policy]]\nname = "one-connection"\nrevision = 2\n\n[policy.match]\npriority = 9\nconnection_id = 77\n'
        'has_connection_id = true\n\n[policy.host_policy]\ncongestion_control = "cubic"\nscheduler = "ack-clocked"\n'
        'tail_loss = "alternate-path"\n'
    )
    status, out = await tngctl(api.address, "policy", "rm", "one-connection")
    assert (status, out) == (0, "one-connection: deleted\n")
    assert [p.name for p in api.store.list()] == ["video"]


async def test_get_prints_toml_that_set_reads_back(api, policy_file: Path, tmp_path: Path) -> None:
    await tngctl(api.address, "policy", "set", str(policy_file))
    _, text = await tngctl(api.address, "policy", "get", "video")
    saved = tmp_path / "video.toml"
    saved.write_text(text)
    (policy,) = load_policies(str(saved))
    assert policy == api.store.get("video").policy
    status, out = await tngctl(api.address, "policy", "set", str(saved))  # revision 1 in the file: compare-and-set
    assert (status, out) == (0, "video: revision 3, written to s1, s2, s3\n")
    status, _ = await tngctl(api.address, "policy", "set", str(saved))  # the file is now stale
    assert status == 1


async def test_json_output(api, policy_file: Path) -> None:
    await tngctl(api.address, "policy", "set", str(policy_file))
    _, out = await tngctl(api.address, "--json", "policy", "ls")
    policies = json.loads(out)
    assert [p["name"] for p in policies] == ["one-connection", "video"]
    assert policies[1]["switch_policy"]["steering"] == "STEERING_MODE_WEIGHTED"
    _, out = await tngctl(api.address, "--json", "stats")
    assert json.loads(out)["policies"] == [
        {"name": "one-connection"},
        {"name": "video", "packets": "10", "bytes": "15"},
    ]
    _, out = await tngctl(api.address, "--json", "switches")
    assert [s["name"] for s in json.loads(out)] == ["s1", "s2", "s3"]
    _, out = await tngctl(api.address, "--json", "policy", "rm", "video")
    assert json.loads(out) == [{"deleted": "video", "revision": "3"}]


async def test_stats_and_switches_tables(api, policy_file: Path) -> None:
    for policy in load_policies(str(policy_file)):  # one after the other: two batches, whatever the timing
        await api.stub.SetPolicy(pb.SetPolicyRequest(policy=policy))
    _, out = await tngctl(api.address, "stats")
    assert out.splitlines() == [
        "POLICY          PACKETS  BYTES",
        "one-connection  0        0",
        "video           10       15",
        "",
        "SWITCH  PORT  ROLE  TX PACKETS  TX BYTES  STEERED  RATE MBIT/S",
        "s1      1     lte   7           0         5        0.00",
        "",
        "METRIC                                  LABELS           VALUE",
        "tng_controller_hosts                    -                0",
        "tng_controller_leader                   -                1",
        "tng_controller_policies                 -                2",
        "tng_controller_policy_batch_size_count  -                2",
        "tng_controller_policy_batch_size_sum    -                2",
        "tng_controller_policy_batches_total     -                2",
        "tng_controller_policy_changes_total     outcome=applied  2",
        "tng_controller_policy_changes_total     outcome=refused  0",
        "tng_controller_policy_revision          -                2",
        "tng_controller_watchers                 -                0",
    ]
    _, out = await tngctl(api.address, "switches")
    lines = out.splitlines()
    assert lines[:2] == [
        "NAME  ADDRESS         DEVICE  STATE      PIPELINE  HELPER  FLOWS  LTE SHARE  LAST ERROR",
        "s1    127.0.0.1:9559  1       CONNECTED  0x0       -       0      -",
    ]
    assert [line.split("  ")[0] for line in lines[4:7]] == ["", "SWITCH", "s1"]
    headers, route = (lines[5].split(), lines[6].split("  "))
    assert headers[:4] == ["SWITCH", "ROUTE", "PROBE", "MIN"]
    assert [cell.strip() for cell in route if cell.strip()] == [
        "s1",
        "10.2.0.0/24",
        "10.2.0.2",
        "lte>wifi 45.2 ms, wifi>wifi 15.1 ms",
        "30.1 ms",
        "lte +30.0 ms 1200 us/pkt, wifi +0.0 ms 400 us/pkt",
        "wifi",
        "76",
        "34.8 ms",
        "87",
        "300 sent, 2 unanswered: both links' probes answered on wifi",
    ]


async def test_errors_are_one_line_with_exit_status(api, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "host_policy": {"congestion_control": "foo"}}))
    assert (await tngctl(api.address, "policy", "set", str(bad)))[0] == 1
    assert capsys.readouterr().err == (
        'tngctl: x: INVALID_ARGUMENT: set.host_policy.congestion_control: "foo" is not one of newreno, cubic, vegas, '
        "copa, bbr, verus, sprout\n"
    )
    assert (await tngctl(api.address, "policy", "get", "absent"))[0] == 1
    assert capsys.readouterr().err == "tngctl: NOT_FOUND: no policy named 'absent'\n"

    typo = tmp_path / "typo.toml"
    typo.write_text('[[policy]]\nname = "x"\nswitch_policy = { agregation = "AGGREGATION_IN_NETWORK" }\n')
    assert (await tngctl(api.address, "policy", "set", str(typo)))[0] == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tngctl: {typo}: policy[0]: ") and "agregation" in err and err.count("\n") == 1
    assert (await tngctl(api.address, "policy", "set", str(tmp_path / "missing.toml")))[0] == 2
    assert capsys.readouterr().err == f"tngctl: {tmp_path / 'missing.toml'}: No such file or directory\n"
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert (await tngctl(api.address, "policy", "set", str(empty)))[0] == 2
    assert "no policy in it" in capsys.readouterr().err

    assert (await tngctl("127.0.0.1:1", "--timeout", "3", "policy", "ls"))[0] == 1
    assert capsys.readouterr().err.startswith("tngctl: cannot reach the controller at 127.0.0.1:1: ")
    with pytest.raises(SystemExit) as usage:
        main(["policy", "frobnicate"])
    assert usage.value.code == 2


class StreamOnlyStub(pb_grpc.PolicyServiceStub):
    """The policy API's client without its one-change calls: tngctl must write through ApplyPolicies."""

    def __init__(self, channel) -> None:
        super().__init__(channel)
        del self.SetPolicy, self.DeletePolicy


async def test_writes_go_over_one_stream_and_each_refusal_names_its_policy_and_reason(
    api, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(tngctl_module.pb_grpc, "PolicyServiceStub", StreamOnlyStub)
    api.fleet.refuse.add("refused-by-switch")
    mixed = tmp_path / "mixed.toml"
    mixed.write_text(
        '[[policy]]\nname = "first"\n\n'
        '[[policy]]\nname = "bad-cc"\nhost_policy = { congestion_control = "foo" }\n\n'
        '[[policy]]\nname = "refused-by-switch"\nswitch_policy = { aggregation = "AGGREGATION_IN_NETWORK" }\n\n'
        '[[policy]]\nname = "last"\n'
    )
    status, out = await tngctl(api.address, "policy", "set", str(mixed))
    assert status == 1
    assert out.splitlines() == [
        "first: revision 1, written to s1, s2, s3",
        "last: revision 2, written to s1, s2, s3",
    ]
    refusals = capsys.readouterr().err.splitlines()
    assert len(refusals) == 2, refusals
    assert refusals[0].startswith("tngctl: bad-cc: INVALID_ARGUMENT: set.host_policy.congestion_control: ")
    assert refusals[1].startswith("tngctl: refused-by-switch: "), refusals
    assert sorted(p.name for p in api.store.list()) == ["first", "last"]

    status, out = await tngctl(api.address, "--json", "policy", "rm", "first", "absent", "last")
    assert status == 1
    assert json.loads(out) == [
        {"deleted": "first", "revision": "3"},
        {"name": "absent", "refused": "NOT_FOUND", "message": "no policy named 'absent'"},
        {"deleted": "last", "revision": "4"},
    ]
    assert api.store.list() == []


async def test_a_file_of_many_policies_is_applied_in_order(api, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tngctl_module.pb_grpc, "PolicyServiceStub", StreamOnlyStub)
    many = tmp_path / "many.json"
    many.write_text(json.dumps([{"name": f"p{i}", "match": {"priority": i % 7}} for i in range(300)]))
    status, out = await tngctl(api.address, "--json", "policy", "set", str(many))
    assert status == 0
    results = json.loads(out)
    assert [r["policy"]["name"] for r in results] == [f"p{i}" for i in range(300)]
    assert [int(r["policy"]["revision"]) for r in results] == list(range(1, 301))
    assert len(api.store.list()) == 300


async def test_set_from_standard_input_as_json(api, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps([{"name": "a"}, {"name": "b"}])))
    status, out = await tngctl(api.address, "--json", "policy", "set", "-")
    assert status == 0
    assert [r["policy"]["name"] for r in json.loads(out)] == ["a", "b"]


async def test_tls_flags(tmp_path: Path, tls_files) -> None:
    tls = TlsConfig(cert=tls_files.server_cert, key=tls_files.server_key, client_ca=tls_files.ca)
    server, port = await start_server(
        PolicyServicer(PolicyStore(tmp_path / "db"), NoSwitches()), ApiConfig("127.0.0.1:0", tls)
    )
    address = f"localhost:{port}"
    client = ["--ca", str(tls_files.ca), "--cert", str(tls_files.client_cert), "--key", str(tls_files.client_key)]
    assert await tngctl(address, *client, "policy", "ls") == (0, "NAME  REV  PRIO  MATCH  SWITCHES  HOSTS\n")
    assert (await tngctl(address, "--ca", str(tls_files.ca), "--timeout", "3", "policy", "ls"))[0] == 1
    assert (await tngctl(address, "--cert", str(tls_files.client_cert), "policy", "ls"))[0] == 2
    await server.stop(None)


def test_policy_toml_round_trips_every_field() -> None:
    policy = pb.Policy(
        name="full",
        revision=12,
        match=pb.Match(
            priority=1,
            traffic_class="x",
            src_prefix="10.0.0.0/8",
            ip_protocol=17,
            src_port=pb.PortMatch(value=1000, mask=0xFFF0),
        ),
        switch_policy=pb.SwitchPolicy(
            aggregation=pb.AGGREGATION_AT_HOSTS,
            backpressure=pb.Backpressure(feedback=True, ecn_threshold_us=800),
        ),
        host_policy=pb.HostPolicy(
            congestion_control="copa",
            congestion_control_per_path={0: "bbr", 3: "vegas"},
            rate_cap_kbps=1 << 40,
            queue_threshold_us=2000,
            copa_delta=0.25,
        ),
    )
    source = Path(os.environ.get("TMPDIR", "/tmp")) / f"tngctl-{os.getpid()}.toml"
    source.write_text(policy_toml(policy))
    try:
        assert load_policies(str(source)) == [policy]
    finally:
        source.unlink()


def test_serve_runs_until_sigterm(tmp_path: Path, policy_file: Path) -> None:
    config = tmp_path / "controller.toml"
    config.write_text('[api]\nlisten = "127.0.0.1:0"\n[store]\npath = "policies.db"\n')
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "tng_controller.tngctl"]
    server = subprocess.Popen(
        [*command, "serve", "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        ready = server.stdout.readline()
        assert ready.startswith("tngctl: serving the policy API on 127.0.0.1:"), ready + server.stderr.read()
        address = ready.split(" on ")[1].split(",")[0]
        client = subprocess.run(
            [*command, "--server", address, "policy", "set", str(policy_file)], capture_output=True, text=True
        )
        assert client.returncode == 0, client.stderr
        assert client.stdout.splitlines()[0] == "video: revision 1, written to no switch"
        watch = subprocess.Popen(
            [*command, "--server", address, "policy", "watch", "--class", "video"], stdout=subprocess.PIPE, text=True
        )
        try:
            seen = [watch.stdout.readline() for _ in range(3)]
            subprocess.run([*command, "--server", address, "policy", "rm", "video"], check=True, capture_output=True)
            seen.append(watch.stdout.readline())
        finally:
            watch.terminate()
            watch.wait(10)
        assert seen == [  # one-connection matches any traffic class: it is a video policy too
            "snapshot one-connection revision 2\n",
            "snapshot video revision 1\n",
            "synced\n",
            "deleted video revision 3\n",
        ]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(10) == 0
    assert (tmp_path / "policies.db").is_file()
    reopened = PolicyStore(tmp_path / "policies.db")
    assert [p.name for p in reopened.list()] == ["one-connection"]


def test_serve_with_a_bad_config_says_why(tmp_path: Path) -> None:
    config = tmp_path / "controller.toml"
    config.write_text('[api]\nlisten = "0.0.0.0:50051"\n')
    result = subprocess.run(
        [sys.executable, "-m", "tng_controller.tngctl", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"tngctl: {config}: api.listen: 0.0.0.0:50051 is reachable from other hosts: set tls_cert, tls_key and "
        "tls_client_ca (clients then need certificates), or allow_insecure_remote = true\n"
    )


def test_without_etcd_a_replica_and_tngctl_cluster_say_which_endpoint_failed(tmp_path: Path) -> None:
    unused = f"http://127.0.0.1:{free_port()}"
    config = tmp_path / "controller.toml"
    config.write_text(f'[api]\nlisten = "127.0.0.1:0"\n[store]\netcd = ["{unused}"]\n')
    serve = subprocess.run(
        [sys.executable, "-m", "tng_controller.tngctl", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert serve.returncode == 2
    assert serve.stderr.startswith(f"tngctl: store.etcd: no etcd endpoint answers ({unused}: ")
    cluster = subprocess.run(
        [sys.executable, "-m", "tng_controller.tngctl", "cluster", "--etcd", unused],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cluster.returncode == 1
    assert cluster.stderr.startswith(f"tngctl: no etcd endpoint answers ({unused}: ")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--etcd-user", "tng"], "tngctl: --etcd-user and --etcd-password-file go together\n"),
        (
            ["--etcd-user", "tng", "--etcd-password-file", "/nonexistent/pw"],
            "tngctl: --etcd-password-file: cannot read /nonexistent/pw: No such file or directory\n",
        ),
    ],
)
def test_tngctl_cluster_refuses_incomplete_etcd_credentials(flags: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tng_controller.tngctl", "cluster", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (2, message)


async def test_serve_programs_a_switch(tmp_path: Path, policy_file: Path, contract_pipeline) -> None:
    """`tngctl serve` with a [[switch]] (finsy's fake P4Runtime server) writes policies to it."""
    p4info, blob = contract_pipeline
    switch = TableServer(f"127.0.0.1:{free_port()}")
    config = tmp_path / "controller.toml"
    config.write_text(
        f'[api]\nlisten = "127.0.0.1:0"\n[store]\npath = "policies.db"\n'
        f'[[switch]]\nname = "lwip"\naddress = "{switch._listen_addr}"\np4info = "{p4info}"\nbmv2_json = "{blob}"\n'
    )
    async with switch.run():
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tng_controller.tngctl", "serve", "--config", str(config),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            ready = (await asyncio.wait_for(server.stdout.readline(), 20)).decode()
            address = ready.split(" on ")[1].split(",")[0]
            for _ in range(200):
                _, out = await tngctl(address, "--json", "switches")
                if json.loads(out)[0]["state"] == "CONNECTED":
                    break
                await asyncio.sleep(0.1)
            status, out = await tngctl(address, "policy", "set", str(policy_file))
            assert (status, out.splitlines()[0]) == (0, "video: revision 1, written to lwip")
            assert len(switch.entries) == 2  # video's flow_policy and modes entries; one-connection has no switch half
            status, _ = await tngctl(address, "policy", "rm", "video")
            assert (status, switch.entries) == (0, {})
        finally:
            server.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(server.wait(), 10) == 0
