"""The controller's configuration file, and the committed generated code of the policy API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tng_controller import protogen
from tng_controller.config import ConfigError, EtcdAuth, EtcdConfig, EtcdTls, load, parse
from tng_controller.switch_config import DEFAULT_P4INFO, SwitchTls


def test_full_config(tmp_path: Path) -> None:
    path = tmp_path / "controller.toml"
    path.write_text(
        """
[api]
listen = "0.0.0.0:50051"
tls_cert = "tls/server.pem"
tls_key = "tls/server.key"
tls_client_ca = "tls/ca.pem"

[store]
path = "state/policies.db"

[[switch]]
name = "lwip"
address = "127.0.0.1:9559"
device_id = 1

[[switch]]
name = "core"
address = "[::1]:9560"
device_id = 2
lowest_rtt_link = "lte"
p4info = "build/p4info.txtpb"
"""
    )
    config = load(path)
    assert config.api.listen == "0.0.0.0:50051"
    assert config.api.tls is not None
    assert (config.api.tls.cert, config.api.tls.client_ca) == (tmp_path / "tls/server.pem", tmp_path / "tls/ca.pem")
    assert config.store == tmp_path / "state/policies.db"
    assert [(s.name, s.address, s.device_id) for s in config.switches] == [
        ("lwip", "127.0.0.1:9559", 1),
        ("core", "[::1]:9560", 2),
    ]
    assert config.switches[0].p4info == DEFAULT_P4INFO
    assert config.switches[1].p4info == tmp_path / "build/p4info.txtpb"
    assert [s.lowest_rtt_link for s in config.switches] == ["wifi", "lte"]


def test_defaults_serve_on_loopback_without_switches() -> None:
    config = parse({}, Path("/etc/tng"))
    assert config.api.listen == "127.0.0.1:50051"
    assert config.api.tls is None
    assert config.switches == ()
    assert parse({"api": {"listen": "0.0.0.0:1", "allow_insecure_remote": True}}, Path(".")).api.listen == "0.0.0.0:1"
    assert config.metrics_listen is None
    assert parse({"metrics": {"listen": "[::]:9464", "allow_remote": True}}, Path(".")).metrics_listen == "[::]:9464"
    assert config.registration_ttl_s == 600
    assert parse({"hosts": {"registration_ttl_s": 30}}, Path(".")).registration_ttl_s == 30


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"apii": {}},
            "config: apii: unknown key (known: api, digests, hosts, metrics, monitor, store, switch, traffic_class)",
        ),
        ({"api": {"listen": "localhost"}}, "config: api.listen: 'localhost' is not host:port"),
        ({"metrics": {"listen": "9464"}}, "config: metrics.listen: '9464' is not host:port"),
        (
            {"metrics": {"listen": "0.0.0.0:9464"}},
            "config: metrics.listen: 0.0.0.0:9464 is reachable from other hosts over plain HTTP: set "
            "allow_remote = true",
        ),
        ({"metrics": {"port": 1}}, "config: metrics.port: unknown key (known: allow_remote, listen)"),
        ({"hosts": {"registration_ttl_s": 0}}, "config: hosts.registration_ttl_s: 0 is not a positive number"),
        ({"hosts": {"ttl": 5}}, "config: hosts.ttl: unknown key (known: registration_ttl_s)"),
        # Keys that are not bare TOML keys are quoted, so the path stays readable (found by test_fuzz_inputs).
        ({"metrics": {"": 1}}, 'config: metrics."": unknown key (known: allow_remote, listen)'),
        ({"metrics": {"a.b c": 1}}, 'config: metrics."a.b c": unknown key (known: allow_remote, listen)'),
        ({"metrics": {'say "hi"': 1}}, 'config: metrics."say \\"hi\\"": unknown key (known: allow_remote, listen)'),
        ({"api": {"listen": "127.0.0.1:70000"}}, "config: api.listen: '127.0.0.1:70000' is not host:port"),
        ({"api": {"listen": "10.0.0.1:50051"}}, "config: api.listen: 10.0.0.1:50051 is reachable from other hosts"),
        ({"api": {"tls_cert": "a.pem"}}, "config: api.tls_key: is required with the other TLS keys"),
        ({"api": {"tls_client_ca": "ca.pem"}}, "config: api.tls_client_ca: needs tls_cert and tls_key"),
        ({"api": {"listen": 5}}, "config: api.listen: 5 is not a string"),
        (
            {"store": {"file": "x"}},
            "config: store.file: unknown key (known: etcd, etcd_ca, etcd_cert, etcd_key, etcd_password_file,"
            " etcd_prefix, etcd_user, lease_ttl_s, path, replica_name)",
        ),
        ({"store": {"etcd": []}}, "config: store.etcd: must be a non-empty array of client URLs"),
        ({"store": {"etcd": ["127.0.0.1:2379"]}}, "config: store.etcd[0]: '127.0.0.1:2379' is not an etcd client URL"),
        ({"store": {"etcd": ["grpc://e:2379"]}}, "config: store.etcd[0]: 'grpc://e:2379' is not an etcd client URL"),
        (
            {"store": {"etcd": ["https://e:2379", "http://f:2379"]}},
            "config: store.etcd: mixes http:// and https:// endpoints (TLS is used with all or none)",
        ),
        (
            {"store": {"etcd": ["http://e:2379"], "etcd_ca": "ca.pem"}},
            "config: store.etcd_ca: only applies to https:// endpoints in store.etcd",
        ),
        ({"store": {"etcd_cert": "c.pem"}}, "config: store.etcd_cert: only applies with store.etcd"),
        ({"store": {"etcd_user": "tng"}}, "config: store.etcd_user: only applies with store.etcd"),
        (
            {"store": {"etcd": ["http://e:2379"], "etcd_user": "tng"}},
            "config: store.etcd_password_file: is required with the other",
        ),
        (
            {"store": {"etcd": ["http://e:2379"], "etcd_password_file": "pw"}},
            "config: store.etcd_user: is required with the other",
        ),
        (
            {"store": {"etcd": ["http://e:2379"], "etcd_user": "tng", "etcd_password_file": "missing-pw"}},
            "config: store.etcd_password_file: cannot read missing-pw: No such file or directory",
        ),
        (
            {"store": {"etcd": ["https://e:2379"], "etcd_cert": "c.pem"}},
            "config: store.etcd_key: is required with the other",
        ),
        (
            {"store": {"etcd": ["https://e:2379"], "etcd_ca": "missing-ca.pem"}},
            "config: store.etcd_ca: missing-ca.pem does not exist",
        ),
        (
            {"store": {"etcd": ["http://e:2379"], "path": "p.db"}},
            "config: store.path: the policies are in etcd (store.etcd) or in SQLite (store.path), not both",
        ),
        ({"store": {"lease_ttl_s": 5}}, "config: store.lease_ttl_s: only applies with store.etcd"),
        ({"store": {"etcd": ["http://e:2379"], "lease_ttl_s": 1}}, "config: store.lease_ttl_s: 1 is not a number"),
        (
            {"store": {"etcd": ["http://e"], "etcd_prefix": "tng"}},
            "config: store.etcd_prefix: 'tng' is not a key prefix",
        ),
        ({"switch": {"name": "a"}}, "config: switch: must be an array of tables ([[switch]])"),
        ({"switch": [{"address": "h:1"}]}, "config: switch[0].name: is required"),
        ({"switch": [{"name": "LWIP", "address": "h:1"}]}, "config: switch[0].name: 'LWIP' does not match"),
        ({"switch": [{"name": "a", "address": "h"}]}, "config: switch[0].address: 'h' is not host:port"),
        ({"switch": [{"name": "a", "address": "h:1", "device_id": -1}]}, "config: switch[0].device_id: -1 is not"),
        (
            {"switch": [{"name": "a", "address": "h:1", "port": 1}]},
            "config: switch[0].port: must be an array of tables ([[switch.port]])",
        ),
        (
            {"switch": [{"name": "a", "address": "h:1", "lowest_rtt_link": "5g"}]},
            "config: switch[0].lowest_rtt_link: '5g' is not 'lte' or 'wifi'",
        ),
        ({"api": {"allow_insecure_remote": "yes"}}, "config: api.allow_insecure_remote: 'yes' is not true or false"),
        (
            {"switch": [{"name": "a", "address": "h:1"}, {"name": "a", "address": "h:2"}]},
            "config: switch[1].name: 'a' is used twice",
        ),
    ],
)
def test_errors_name_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(data, Path("."))
    assert str(raised.value).startswith(message)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read: No such file or directory"):
        load(tmp_path / "absent.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[api\n")
    with pytest.raises(ConfigError, match=r"broken.toml: not TOML"):
        load(broken)


def test_committed_generated_code_matches_the_proto() -> None:
    differing = protogen.stale(protogen.generate())
    assert differing == [], f"run 'python -m tng_controller.protogen' and commit: {differing} differ from the proto"


def test_protogen_check_reports_stale_files(tmp_path: Path) -> None:
    generated = protogen.generate()
    for name, text in generated.items():
        (tmp_path / name).write_text(text)
    assert protogen.stale(generated, tmp_path) == []
    (tmp_path / "policy_pb2.py").write_text("# edited by hand\n")
    (tmp_path / "policy_pb2.pyi").unlink()
    assert protogen.stale(generated, tmp_path) == ["policy_pb2.py", "policy_pb2.pyi"]
    assert "from . import policy_pb2" in generated["policy_pb2_grpc.py"]


def test_the_replicated_store_is_read_with_its_defaults() -> None:
    config = parse({"store": {"etcd": ["http://127.0.0.1:2379", "http://10.0.0.2"]}}, Path("."))
    assert config.etcd == EtcdConfig(("http://127.0.0.1:2379", "http://10.0.0.2"), "/tng", 2, "")
    named = parse(
        {"store": {"etcd": ["http://e:1"], "etcd_prefix": "/lab", "lease_ttl_s": 5, "replica_name": "a"}}, Path(".")
    )
    assert named.etcd == EtcdConfig(("http://e:1",), "/lab", 5, "a")
    assert parse({}, Path(".")).etcd is None


def test_https_endpoints_take_tls_files_relative_to_the_file(tmp_path: Path) -> None:
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text("pem")
    store = {"etcd": ["https://e1:2379", "https://e2:2379"], "etcd_ca": "ca.pem"}
    assert parse({"store": store}, tmp_path).etcd.tls == EtcdTls(tmp_path / "ca.pem")
    store |= {"etcd_cert": "client.pem", "etcd_key": "client.key"}
    tls = EtcdTls(tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "client.key")
    assert parse({"store": store}, tmp_path).etcd.tls == tls
    assert parse({"store": {"etcd": ["https://e:2379"]}}, tmp_path).etcd.tls == EtcdTls()


def test_an_etcd_user_takes_the_first_line_of_its_password_file(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret word\nignored\n")
    store = {"etcd": ["http://e:2379"], "etcd_user": "tng", "etcd_password_file": "pw"}
    auth = parse({"store": store}, tmp_path).etcd.auth
    assert auth == EtcdAuth("tng", "s3cret word")
    assert "s3cret" not in repr(auth)
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(ConfigError, match=r"store.etcd_password_file: .*pw holds no password on its first line"):
        parse({"store": store}, tmp_path)
    assert parse({"store": {"etcd": ["http://e:2379"]}}, tmp_path).etcd.auth is None


def test_a_switch_takes_tls_files_and_refuses_incomplete_ones(tmp_path: Path) -> None:
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text("pem")
    switch = {"name": "s1", "address": "10.0.0.1:9559", "tls_ca": "ca.pem"}
    assert parse({"switch": [switch]}, tmp_path).switches[0].tls == SwitchTls(tmp_path / "ca.pem")
    both = switch | {"tls_cert": "client.pem", "tls_key": "client.key"}
    tls = SwitchTls(tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "client.key")
    assert parse({"switch": [both]}, tmp_path).switches[0].tls == tls
    assert parse({"switch": [{"name": "s1", "address": "h:1"}]}, tmp_path).switches[0].tls is None
    for bad, message in (
        ({"name": "s1", "address": "h:1", "tls_cert": "client.pem", "tls_key": "client.key"}, "needs tls_ca"),
        (switch | {"tls_cert": "client.pem"}, "switch[0].tls_key: is required with the other"),
        (switch | {"tls_ca": "missing.pem"}, "missing.pem does not exist"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            parse({"switch": [bad]}, tmp_path)
