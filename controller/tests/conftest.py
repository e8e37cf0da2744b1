"""Fixtures of the controller tests: a fake fleet, a running policy API, TLS files of a test CA, and a P4Info."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from finsy.proto import p4i
from google.protobuf import text_format
from tng_controller.api import PolicyServicer, start_server
from tng_controller.config import ApiConfig
from tng_controller.fleet import Change, SwitchWriteError
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc
from tng_controller.store import PolicyStore, StoredPolicy


@dataclass
class FakeFleet:
    """Switches that keep the policy set written to them; `fail` schedules failures of the next writes to a switch."""

    names: list[str]
    installed: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    fail: dict[str, list[bool]] = field(default_factory=dict)  # switch -> whether each of its next writes fails
    changes: list[Change] = field(default_factory=list)  # every change written, to any switch
    refuse: set[str] = field(default_factory=set)  # policies every switch refuses to take

    def writable(self) -> list[str]:
        return list(self.names)

    async def write(self, switch: str, change: Change) -> None:
        self.writes.append(switch)
        self.changes.append(change)
        if (self.fail.get(switch) and self.fail[switch].pop(0)) or self.refuse & {p.name for p in change.new}:
            raise SwitchWriteError(
                switch, "table ingress.classify.flow_policy is full", grpc.StatusCode.RESOURCE_EXHAUSTED
            )
        self.installed[switch] = [(p.name, p.revision, p.policy_id) for p in change.policies]

    def statuses(self) -> list[pb.SwitchStatus]:
        statuses = [
            pb.SwitchStatus(name=name, address=f"127.0.0.1:{9559 + i}", device_id=i + 1, state="CONNECTED")
            for i, name in enumerate(self.names)
        ]
        statuses[0].link_states.add(
            prefix="10.2.0.0/24",
            probe_target="10.2.0.2",
            rtts=[
                pb.ProbeRtt(sent_on="lte", answered_on="wifi", min_rtt_us=45_200, answers=150),
                pb.ProbeRtt(sent_on="wifi", answered_on="wifi", min_rtt_us=15_100, answers=150),
            ],
            delay_difference_us=30_100,
            delay_measured=True,
            delay_state="both links' probes answered on wifi",
            probes_sent=300,
            probes_unanswered=2,
            lte_delay_us=30_000,
            lte_packet_us=1200,
            wifi_packet_us=400,
            preferred_link="wifi",
            spill_depth_packets=76,
            hold_budget_us=34_800,
            hold_slack_packets=87,
        )
        return statuses

    async def stats(self, policies: Sequence[StoredPolicy]) -> pb.GetStatsResponse:
        return pb.GetStatsResponse(
            policies=[pb.PolicyStats(name=p.name, packets=10 * p.policy_id, bytes=15 * p.policy_id) for p in policies],
            ports=[pb.PortStats(switch_name=self.names[0], port=1, role="lte", tx_packets=7, steered_packets=5)],
        )


@dataclass
class RunningApi:
    stub: pb_grpc.PolicyServiceStub
    fleet: FakeFleet
    store: PolicyStore
    address: str


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[RunningApi]:
    store = PolicyStore(tmp_path / "controller.db")
    fleet = FakeFleet(["s1", "s2", "s3"])
    server, port = await start_server(PolicyServicer(store, fleet), ApiConfig(listen="127.0.0.1:0"))
    address = f"127.0.0.1:{port}"
    async with grpc.aio.insecure_channel(address) as channel:
        yield RunningApi(pb_grpc.PolicyServiceStub(channel), fleet, store, address)
    await server.stop(None)
    store.close()


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_cert: Path  # a client certificate of another CA
    other_key: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None, issuer_key, *, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A CA, a server and a client certificate it signed, and a client certificate of another CA (PEM files)."""
    directory = tmp_path_factory.mktemp("tls")
    files: dict[str, Path] = {}

    def write(name: str, data: bytes) -> Path:
        files[name] = directory / name
        files[name].write_bytes(data)
        return files[name]

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("tng test CA", ca_key, None, ca_key, ca=True)
    other_ca_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = _certificate("another CA", other_ca_key, None, other_ca_key, ca=True)
    write("ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    for name, issuer, issuer_key in (("server", ca, ca_key), ("client", ca, ca_key), ("other", other_ca, other_ca_key)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(f"tng {name}", key, issuer, issuer_key, ca=False)
        write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM))
        write(f"{name}.key", _key_pem(key))
    return TlsFiles(
        ca=files["ca.pem"],
        server_cert=files["server.pem"],
        server_key=files["server.key"],
        client_cert=files["client.pem"],
        client_key=files["client.key"],
        other_cert=files["other.pem"],
        other_key=files["other.key"],
    )


TERNARY, EXACT, LPM = p4i.MatchField.TERNARY, p4i.MatchField.EXACT, p4i.MatchField.LPM
TABLES = {
    "ingress.classify.connection_policy": ([("connection_id", 64, EXACT)], ["ingress.classify.set_policy"]),
    "ingress.classify.flow_policy": (
        [(name, width, TERNARY) for name, width in (("src_addr", 32), ("dst_addr", 32), ("protocol", 8))]
        + [(name, 16, TERNARY) for name in ("src_port", "dst_port")],
        ["ingress.classify.set_policy"],
    ),
    "ingress.steering.modes": (
        [("policy", 8, EXACT)],
        [
            "ingress.steering.steer_flow_hash",
            "ingress.steering.steer_weighted",
            "ingress.steering.steer_qdepl",
            "ingress.steering.steer_qdepl_measured",
            "ingress.steering.steer_lowest_rtt",
            "ingress.steering.steer_lte_only",
            "ingress.steering.steer_wifi_only",
            "ingress.steering.steer_earliest_arrival",
        ],
    ),
    "ingress.steering.link_state": ([("lte_port", 9, EXACT)], ["ingress.steering.set_link_state"]),
    "ingress.visible.params": ([("policy", 8, EXACT)], ["ingress.visible.visible_on"]),
    "egress.backpressure.thresholds": ([("policy", 8, EXACT)], ["egress.backpressure.set_thresholds"]),
    "ingress.port_role": ([("ingress_port", 9, EXACT)], ["ingress.set_port_role"]),
    "ingress.forwarding.routes": (
        [("dst_addr", 32, LPM)],
        [
            "ingress.forwarding.route",
            "ingress.forwarding.route_lwip",
            "ingress.forwarding.punt",
            "ingress.forwarding.drop",
        ],
    ),
    "egress.port_mac": ([("egress_port", 9, EXACT)], ["egress.set_source_mac"]),
    "egress.backpressure.port_capacity": ([("egress_port", 9, EXACT)], ["egress.backpressure.set_capacity"]),
}
ACTIONS = {
    "ingress.classify.set_policy": [("policy", 8)],
    "ingress.steering.steer_flow_hash": [],
    "ingress.steering.steer_weighted": [("lte_weight", 16), ("wifi_weight", 16)],
    "ingress.steering.steer_qdepl": [("lte_rate", 16), ("wifi_rate", 16)],
    "ingress.steering.steer_qdepl_measured": [],
    "ingress.steering.steer_lowest_rtt": [("preferred_link", 8), ("spill_depth", 32)],
    "ingress.steering.steer_lte_only": [],
    "ingress.steering.steer_wifi_only": [],
    "ingress.steering.steer_earliest_arrival": [],
    "ingress.steering.set_link_state": [
        ("lte_delay_us", 32),
        ("wifi_delay_us", 32),
        ("lte_packet_us", 32),
        ("wifi_packet_us", 32),
    ],
    "ingress.visible.visible_on": [
        ("segment_size", 16),
        ("hold_budget_us", 32),
        ("hold_slack", 16),
        ("boost_max_depth", 32),
        ("boost_max", 16),
        ("retransmit_max", 8),
        ("alpha_shift", 8),
        ("beta_shift", 8),
        ("idle_timeout_us", 32),
        ("report_bytes", 32),
        ("queue_aware_hold", 1),
    ],
    "egress.backpressure.set_thresholds": [("feedback_min_us", 32), ("ecn_mark_us", 32)],
    "ingress.set_port_role": [("role", 8)],
    "ingress.forwarding.route": [("port", 9), ("dst_mac", 48)],
    "ingress.forwarding.route_lwip": [("lte_port", 9), ("lte_dst_mac", 48), ("wifi_port", 9), ("wifi_dst_mac", 48)],
    "ingress.forwarding.punt": [],
    "ingress.forwarding.drop": [],
    "egress.set_source_mac": [("mac", 48)],
    "egress.backpressure.set_capacity": [("rate_kbps", 32)],
}
PACKET_METADATA = {"packet_in": [("ingress_port", 9), ("_pad", 7)], "packet_out": [("egress_port", 9), ("_pad", 7)]}
COUNTERS = {"ingress.classify.policy_packets": 256, "egress.port_tx": 512, "ingress.steering.steered": 512}


def contract_p4info() -> p4i.P4Info:
    info = p4i.P4Info()
    action_ids = {}
    for i, (name, params) in enumerate(ACTIONS.items()):
        action_ids[name] = 0x01000000 + i
        action = info.actions.add()
        action.preamble.id, action.preamble.name = action_ids[name], name
        action.preamble.alias = name.rsplit(".", 1)[1]
        for j, (param, width) in enumerate(params, 1):
            action.params.add(id=j, name=param, bitwidth=width)
    for i, (name, (fields, actions)) in enumerate(TABLES.items()):
        table = info.tables.add(size=1024)
        table.preamble.id, table.preamble.name, table.preamble.alias = 0x02000000 + i, name, name.rsplit(".", 1)[1]
        for j, (match_field, width, kind) in enumerate(fields, 1):
            table.match_fields.add(id=j, name=match_field, bitwidth=width, match_type=kind)
        for action in actions:
            table.action_refs.add(id=action_ids[action])
    for i, (name, size) in enumerate(COUNTERS.items()):
        counter = info.counters.add(size=size)
        counter.preamble.id, counter.preamble.name, counter.preamble.alias = 0x03000000 + i, name, name
        counter.spec.unit = p4i.CounterSpec.BOTH
    for i, (name, fields) in enumerate(PACKET_METADATA.items()):
        metadata = info.controller_packet_metadata.add()
        metadata.preamble.id, metadata.preamble.name, metadata.preamble.alias = 0x40000000 + i, name, name
        for j, (field_name, width) in enumerate(fields, 1):
            metadata.metadata.add(id=j, name=field_name, bitwidth=width)
    return info


@pytest.fixture
def contract_pipeline(tmp_path: Path) -> tuple[Path, Path]:
    """A P4Info with the policy tables, actions and counters of the tng pipeline as p4src/README.md documents them
    (made-up ids), and a stand-in bmv2.json: for fake P4Runtime servers, and for compiling until p4c built the real
    one."""
    p4info = tmp_path / "contract.p4info.txtpb"
    p4info.write_text(text_format.MessageToString(contract_p4info()))
    blob = tmp_path / "bmv2.json"
    blob.write_text("{}")
    return p4info, blob
