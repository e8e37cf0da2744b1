"""tngctl: run the tng controller and talk to its policy API (policies, stats, switches, registered hosts)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from tng_controller import config as config_file
from tng_controller import daemon
from tng_controller.cluster import cluster_status
from tng_controller.etcd_client import EtcdError
from tng_controller.pb import policy_pb2 as pb
from tng_controller.pb import policy_pb2_grpc as pb_grpc

DEFAULT_SERVER = os.environ.get("TNG_CONTROLLER", config_file.DEFAULT_LISTEN)
DEFAULT_ETCD = os.environ.get("TNG_ETCD", "http://127.0.0.1:2379")
USAGE_ERROR = 2
API_ERROR = 1
PROTOCOLS = {6: "tcp", 17: "udp"}
STATUS_NAMES = {status.value[0]: status.name for status in grpc.StatusCode}  # ApplyPolicies answers carry numbers


class UsageError(Exception):
    """Bad input from the command line or a file it names (exit status 2)."""


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args, out)
        if args.command == "cluster":
            return _cluster(args, out)
        with _channel(args) as channel:
            return args.run(pb_grpc.PolicyServiceStub(channel), args, out)
    except UsageError as exc:
        _complain(str(exc))
        return USAGE_ERROR
    except grpc.RpcError as exc:
        _complain(_rpc_error(exc, args.server))
        return API_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader (head, less) went away: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _complain(message: str) -> None:
    print(f"tngctl: {' '.join(message.split())}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tngctl", description=__doc__)
    parser.add_argument(
        "--server", default=DEFAULT_SERVER, help=f"policy API address (default $TNG_CONTROLLER or {DEFAULT_SERVER})"
    )
    parser.add_argument("--ca", type=Path, help="CA certificate (PEM): use TLS and check the server against it")
    parser.add_argument("--cert", type=Path, help="client certificate (PEM), with --ca")
    parser.add_argument("--key", type=Path, help="client private key (PEM), with --cert")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the controller")
    serve.add_argument("--config", type=Path, required=True, help="controller configuration (TOML)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    policy = commands.add_parser("policy", help="set, get, remove, list or watch policies")
    policies = policy.add_subparsers(dest="action", required=True, metavar="ACTION")
    set_ = policies.add_parser(
        "set", help="create or replace the policies of a file ('-' for standard input), on one ApplyPolicies stream"
    )
    set_.add_argument("file", help="TOML with [[policy]] tables, or JSON (one policy or a list)")
    set_.set_defaults(run=_policy_set)
    get = policies.add_parser("get", help="show a policy (as TOML that 'policy set' reads back)")
    get.add_argument("name")
    get.set_defaults(run=_policy_get)
    rm = policies.add_parser("rm", help="delete policies")
    rm.add_argument("names", nargs="+", metavar="NAME")
    rm.set_defaults(run=_policy_rm)
    policies.add_parser("ls", help="list the policies").set_defaults(run=_policy_ls)
    watch = policies.add_parser("watch", help="print policy events as they happen, as host agents get them")
    watch.add_argument("--class", dest="classes", action="append", default=[], help="only this traffic class")
    watch.set_defaults(run=_policy_watch)

    commands.add_parser("stats", help="counters per policy and per port").set_defaults(run=_stats)
    commands.add_parser("switches", help="the switches and their connection state").set_defaults(run=_switches)
    commands.add_parser("hosts", help="the host registry: each live registration's addresses and expiry").set_defaults(
        run=_hosts
    )
    cluster = commands.add_parser("cluster", help="the replicas of a replicated controller (from etcd), who leads")
    cluster.add_argument(
        "--etcd",
        action="append",
        default=[],
        help=f"etcd client URL, repeatable (default $TNG_ETCD or {DEFAULT_ETCD})",
    )
    cluster.add_argument(
        "--prefix", default="/tng", help="the cluster's key prefix, [store] etcd_prefix (default /tng)"
    )
    cluster.add_argument("--etcd-ca", type=Path, help="with https:// endpoints: the CA of etcd's certificates")
    cluster.add_argument("--etcd-cert", type=Path, help="with https:// endpoints: a client certificate for etcd")
    cluster.add_argument("--etcd-key", type=Path, help="its key")
    cluster.add_argument("--etcd-user", help="etcd user, with --etcd-password-file ([store] etcd_user)")
    cluster.add_argument(
        "--etcd-password-file",
        type=Path,
        help="file whose first line is the user's password ([store] etcd_password_file)",
    )
    return parser


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_file.load(args.config)
    except config_file.ConfigError as exc:
        raise UsageError(str(exc)) from exc

    def ready(port: int, metrics_port: int | None) -> None:
        api = f"{config.api.listen.rsplit(':', 1)[0]}:{port}"
        metrics = None
        if config.metrics_listen is not None and metrics_port is not None:
            metrics = f"http://{config.metrics_listen.rsplit(':', 1)[0]}:{metrics_port}/metrics"
        store = str(config.store) if config.etcd is None else " ".join(config.etcd.endpoints)
        if args.json:
            ready_line = json.dumps({"api": api, "store": store, "metrics": metrics}, sort_keys=True)
        else:
            ready_line = f"tngctl: serving the policy API on {api}, policies in {store}"
            if metrics is not None:
                ready_line += f", metrics on {metrics}"
        print(ready_line, file=out, flush=True)

    try:
        asyncio.run(daemon.run(config, ready))
    except config_file.ConfigError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot serve: {exc}") from exc
    return 0


def _etcd_tls(
    endpoints: tuple[str, ...], ca: Path | None, cert: Path | None, key: Path | None
) -> config_file.EtcdTls | None:
    """TLS towards etcd as `[store]` has it: with https:// endpoints only, certificate and key together."""
    https = {url.startswith("https://") for url in endpoints}
    if len(https) > 1:
        raise UsageError("--etcd: mixes http:// and https:// endpoints (TLS is used with all or none)")
    if https == {False}:
        if ca or cert or key:
            raise UsageError("--etcd-ca, --etcd-cert and --etcd-key only apply to https:// endpoints")
        return None
    if (cert is None) != (key is None):
        raise UsageError("--etcd-cert and --etcd-key go together")
    return config_file.EtcdTls(ca, cert, key)


def _etcd_auth(user: str | None, password_file: Path | None) -> config_file.EtcdAuth | None:
    """User authentication towards etcd as `[store]` has it: the user and the password file together."""
    if user is None and password_file is None:
        return None
    if user is None or password_file is None:
        raise UsageError("--etcd-user and --etcd-password-file go together")
    try:
        return config_file.EtcdAuth(user, config_file.etcd_password(password_file))
    except ValueError as exc:
        raise UsageError(f"--etcd-password-file: {exc}") from exc


def _cluster(args: argparse.Namespace, out: TextIO) -> int:
    endpoints = tuple(args.etcd or [DEFAULT_ETCD])
    for url in endpoints:
        try:
            config_file.etcd_endpoint(url)
        except ValueError as exc:
            raise UsageError(f"--etcd: {exc}") from exc
    tls = _etcd_tls(endpoints, args.etcd_ca, args.etcd_cert, args.etcd_key)
    auth = _etcd_auth(args.etcd_user, args.etcd_password_file)
    try:
        status = asyncio.run(cluster_status(endpoints, args.prefix, args.timeout, tls, auth))
    except EtcdError as exc:
        _complain(str(exc))
        return API_ERROR
    if args.json:
        _print_json(status.as_dict(), out)
        return 0
    print(f"etcd revision {status.etcd_revision}, leader {status.leader or '(none)'}", file=out)
    rows = [
        [
            r.name,
            r.api,
            "leader" if r.name == status.leader else "follower",
            str(r.election_id),
            f"{r.lease} ({r.lease_ttl_s} s left)",
            "-" if r.revision is None else str(r.revision),
            r.health,
            r.switches or "-",
        ]
        for r in status.replicas
    ]
    _print_table(["REPLICA", "API", "ROLE", "ELECTION ID", "LEASE", "REVISION", "HEALTH", "SWITCHES"], rows, out)
    return 0


@contextmanager
def _channel(args: argparse.Namespace) -> Iterator[grpc.Channel]:
    """A channel to the policy API, TLS when --ca is given."""
    if (args.cert is None) != (args.key is None):
        raise UsageError("--cert and --key go together")
    if args.cert and not args.ca:
        raise UsageError("--cert needs --ca")
    if args.ca:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(args.ca),
            private_key=_read(args.key) if args.key else None,
            certificate_chain=_read(args.cert) if args.cert else None,
        )
        channel = grpc.secure_channel(args.server, credentials)
    else:
        channel = grpc.insecure_channel(args.server)
    with channel:
        yield channel


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from exc


def _policy_set(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    changes = [pb.PolicyChange(set=policy) for policy in load_policies(args.file)]
    return _apply(stub, args, changes, out)


def _policy_get(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    policy = stub.GetPolicy(pb.GetPolicyRequest(name=args.name), timeout=args.timeout)
    if args.json:
        _print_json(_as_dict(policy), out)
    else:
        out.write(policy_toml(policy))
    return 0


def _policy_rm(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    return _apply(stub, args, [pb.PolicyChange(delete=name) for name in args.names], out)


def _apply(
    stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, changes: list[pb.PolicyChange], out: TextIO
) -> int:
    """Sends `changes` on one ApplyPolicies stream and reports each answer as it comes: applied on `out`, refused
    (with the controller's reason) on standard error. Exit status 1 when any was refused."""
    refused = 0
    reports = []
    results = stub.ApplyPolicies(iter(changes), timeout=args.timeout)
    for change, result in zip(changes, results, strict=False):
        name = change.set.name if change.HasField("set") else change.delete
        if result.code != grpc.StatusCode.OK.value[0]:
            refused += 1
            code = STATUS_NAMES.get(result.code, str(result.code))
            reports.append({"name": name, "refused": code, "message": result.message})
            if not args.json:
                _complain(f"{name}: {code}: {result.message}")
        elif change.HasField("set"):
            reports.append(_as_dict(result))
            if not args.json:
                switches = ", ".join(result.switches) or "no switch"
                print(f"{name}: revision {result.policy.revision}, written to {switches}", file=out, flush=True)
        else:
            reports.append({"deleted": name, "revision": str(result.policy.revision)})
            if not args.json:
                print(f"{name}: deleted", file=out, flush=True)
    if args.json:
        _print_json(reports, out)
    return API_ERROR if refused else 0


def _policy_ls(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    policies = stub.ListPolicies(pb.ListPoliciesRequest(), timeout=args.timeout).policies
    if args.json:
        _print_json([_as_dict(p) for p in policies], out)
        return 0
    rows = [
        [p.name, str(p.revision), str(p.match.priority), describe_match(p.match), describe_switch(p), describe_host(p)]
        for p in policies
    ]
    _print_table(["NAME", "REV", "PRIO", "MATCH", "SWITCHES", "HOSTS"], rows, out)
    return 0


def _policy_watch(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    for event in stub.WatchPolicies(pb.WatchPoliciesRequest(traffic_classes=args.classes)):
        if args.json:
            print(json.dumps(_as_dict(event), sort_keys=True), file=out, flush=True)
            continue
        kind = pb.PolicyEvent.Kind.Name(event.kind).removeprefix("KIND_").lower()
        if event.kind == pb.PolicyEvent.KIND_SYNCED:
            print("synced", file=out, flush=True)
        else:
            print(f"{kind} {event.policy.name} revision {event.policy.revision}", file=out, flush=True)
    return 0


def _stats(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    stats = stub.GetStats(pb.GetStatsRequest(), timeout=args.timeout)
    if args.json:
        _print_json(_as_dict(stats), out)
        return 0
    _print_table(["POLICY", "PACKETS", "BYTES"], [[p.name, str(p.packets), str(p.bytes)] for p in stats.policies], out)
    if stats.ports:
        print(file=out)
        rows = [
            [
                p.switch_name,
                str(p.port),
                p.role,
                str(p.tx_packets),
                str(p.tx_bytes),
                str(p.steered_packets),
                f"{p.rate_estimate_bps / 1e6:.2f}",
            ]
            for p in stats.ports
        ]
        _print_table(["SWITCH", "PORT", "ROLE", "TX PACKETS", "TX BYTES", "STEERED", "RATE MBIT/S"], rows, out)
    if stats.controller_metrics:
        print(file=out)
        rows = [
            [m.name, ",".join(f"{k}={v}" for k, v in sorted(m.labels.items())) or "-", f"{m.value:g}"]
            for m in sorted(stats.controller_metrics, key=lambda m: (m.name, sorted(m.labels.items())))
        ]
        _print_table(["METRIC", "LABELS", "VALUE"], rows, out)
    return 0


def _switches(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    switches = stub.ListSwitches(pb.ListSwitchesRequest(), timeout=args.timeout).switches
    if args.json:
        _print_json([_as_dict(s) for s in switches], out)
        return 0
    rows = [
        [
            s.name,
            s.address,
            str(s.device_id),
            s.state,
            f"{s.pipeline_cookie:#x}",
            s.helper or "-",
            str(s.classified_flows),
            f"{s.qdepl_lte_share:.3f}" if s.qdepl_lte_share else "-",
            s.last_error,
        ]
        for s in switches
    ]
    headers = ["NAME", "ADDRESS", "DEVICE", "STATE", "PIPELINE", "HELPER", "FLOWS", "LTE SHARE", "LAST ERROR"]
    _print_table(headers, rows, out)
    links = [[s.name, *_link_state_row(route)] for s in switches for route in s.link_states]
    if links:
        print(file=out)
        headers = ["SWITCH", "ROUTE", "PROBE", "MIN RTT (SENT>ANSWERED)", "D", "LINK STATE", "PREFERRED", "SPILL"]
        _print_table([*headers, "HOLD", "HOLD SLACK", "PROBES"], links, out)
    return 0


def _hosts(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, out: TextIO) -> int:
    hosts = stub.ListHosts(pb.ListHostsRequest(), timeout=args.timeout).hosts
    if args.json:
        _print_json([_as_dict(h) for h in hosts], out)
        return 0

    def utc(unix_ms: int) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(unix_ms / 1000))

    rows = [
        [h.identity, str(h.sequence), utc(h.registered_unix_ms), utc(h.expires_unix_ms), " ".join(h.addresses)]
        for h in hosts
    ]
    _print_table(["IDENTITY", "SEQUENCE", "REGISTERED (UTC)", "EXPIRES (UTC)", "ADDRESSES"], rows, out)
    return 0


def _link_state_row(route: pb.RouteLinkState) -> list[str]:
    """A route's measurements and what was derived from them; D is the measured delay difference, LINK STATE what
    the switch holds (each link's delay and time per packet)."""
    rtts = ", ".join(f"{r.sent_on}>{r.answered_on} {_ms(r.min_rtt_us)}" for r in route.rtts)
    written = (
        f"lte +{_ms(route.lte_delay_us)} {route.lte_packet_us} us/pkt, "
        f"wifi +{_ms(route.wifi_delay_us)} {route.wifi_packet_us} us/pkt"
    )
    if route.reorder_allowance_us:
        written += f" (|d| less a reorder allowance of {_ms(route.reorder_allowance_us)})"
    probes = f"{route.probes_sent} sent, {route.probes_unanswered} unanswered: " if route.probe_target else ""
    return [
        route.prefix,
        route.probe_target or "-",
        rtts or "-",
        _ms(route.delay_difference_us) if route.delay_measured else "-",
        written,
        route.preferred_link,
        str(route.spill_depth_packets or "-"),
        _ms(route.hold_budget_us) if route.hold_budget_us else "-",
        str(route.hold_slack_packets or "-"),
        probes + route.delay_state,
    ]


def _ms(microseconds: int) -> str:
    return f"{microseconds / 1000:.1f} ms"


def load_policies(source: str) -> list[pb.Policy]:
    """The policies of a TOML file of [[policy]] tables or a JSON file of one policy or a list ('-': stdin)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise UsageError(f"{source}: {exc.strerror}") from exc
    name = "standard input" if source == "-" else source
    try:
        data = json.loads(text) if source.endswith(".json") or source == "-" else None
    except json.JSONDecodeError as exc:
        if source != "-":
            raise UsageError(f"{name}: not JSON: {exc}") from exc
        data = None  # standard input that is not JSON is TOML
    if data is not None:
        items = data if isinstance(data, list) else [data]
    else:
        try:
            items = tomllib.loads(text).get("policy", [])
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{name}: not TOML: {exc}") from exc
    if not isinstance(items, list) or not items:
        raise UsageError(f"{name}: no policy in it (TOML: [[policy]] tables; JSON: an object or a list of them)")
    return [_policy(item, f"{name}: policy[{i}]") for i, item in enumerate(items)]


def _policy(item: Any, where: str) -> pb.Policy:
    if not isinstance(item, dict):
        raise UsageError(f"{where}: not a table")
    match = item.get("match")
    if isinstance(match, dict) and "connection_id" in match and "has_connection_id" not in match:
        match = {**match, "has_connection_id": True}  # the host agents' files say only connection_id
        item = {**item, "match": match}
    try:
        return json_format.ParseDict(item, pb.Policy())
    except json_format.ParseError as exc:
        raise UsageError(f"{where}: {exc}") from exc


def policy_toml(policy: pb.Policy) -> str:
    """A [[policy]] table of `policy` that load_policies reads back to the same message."""
    lines = ["[[policy]]", *_toml_table(_plain(policy), ["policy"])]
    return "\n".join(lines) + "\n"


def _plain(message: Message) -> dict[str, Any]:
    """The set fields of `message` as Python values: messages as dicts, enums by name, maps as dicts."""
    data: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            data[field.name] = {str(k): v for k, v in sorted(value.items())}
        elif field.message_type is not None:
            data[field.name] = _plain(value)
        elif field.enum_type is not None:
            data[field.name] = field.enum_type.values_by_number[value].name
        else:
            data[field.name] = value
    return data


def _toml_table(data: dict[str, Any], path: list[str]) -> Iterator[str]:
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and k != "congestion_control_per_path"}
    for key, value in data.items():
        if key not in tables:
            yield f"{key} = {_toml_value(value)}"
    for key, value in tables.items():
        yield ""
        yield f"[{'.'.join([*path, key])}]"
        yield from _toml_table(value, [*path, key])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def describe_match(match: pb.Match) -> str:
    parts = []
    if match.traffic_class:
        parts.append(f"class={match.traffic_class}")
    if match.has_connection_id:
        parts.append(f"conn={match.connection_id:#x}")
    if match.src_prefix:
        parts.append(f"src={match.src_prefix}")
    if match.dst_prefix:
        parts.append(f"dst={match.dst_prefix}")
    if match.ip_protocol:
        parts.append(PROTOCOLS.get(match.ip_protocol, f"proto={match.ip_protocol}"))
    for name in ("src_port", "dst_port"):
        port = getattr(match, name)
        if port.mask:
            mask = "" if port.mask == 0xFFFF else f"/{port.mask:#06x}"
            parts.append(f"{name.split('_')[0]}port={port.value}{mask}")
    return " ".join(parts) or "any"


def describe_switch(policy: pb.Policy) -> str:
    if not policy.HasField("switch_policy"):
        return "-"
    switch = policy.switch_policy
    parts = [pb.Aggregation.Name(switch.aggregation).removeprefix("AGGREGATION_").lower().replace("_", "-")]
    if switch.steering:
        steering = pb.SteeringMode.Name(switch.steering).removeprefix("STEERING_MODE_").lower().replace("_", "-")
        if switch.steering in (pb.STEERING_MODE_WEIGHTED, pb.STEERING_MODE_QDEPL):
            steering += f" {switch.lte_weight}:{switch.wifi_weight}"
        parts.append(steering)
    if switch.visible.enabled:
        parts.append("visible")
    if switch.backpressure.feedback:
        parts.append("feedback")
    if switch.backpressure.ecn_threshold_us:
        parts.append(f"ecn>{switch.backpressure.ecn_threshold_us}us")
    return " ".join(parts)


def describe_host(policy: pb.Policy) -> str:
    host = policy.host_policy
    parts = [host.congestion_control] if host.congestion_control else []
    parts += [f"path{k}={v}" for k, v in sorted(host.congestion_control_per_path.items())]
    parts += [p for p in (host.scheduler, host.tail_loss) if p]
    if host.rate_cap_kbps:
        parts.append(f"cap={host.rate_cap_kbps}kbit/s")
    return " ".join(parts) or "-"


def _as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _print_json(data: Any, out: TextIO) -> None:
    print(json.dumps(data, indent=2, sort_keys=True), file=out)


def _print_table(headers: list[str], rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out)


def _rpc_error(exc: grpc.RpcError, server: str) -> str:
    code: grpc.StatusCode = exc.code()  # type: ignore[attr-defined]
    details: str = exc.details() or ""  # type: ignore[attr-defined]
    if code == grpc.StatusCode.UNAVAILABLE and "not applied" not in details:
        return f"cannot reach the controller at {server}: {details}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"the controller at {server} did not answer in time"
    return f"{code.name}: {details}"


if __name__ == "__main__":
    sys.exit(main())
