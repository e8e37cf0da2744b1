"""Tng's DSL experiment (seed 004, section 5, Figures 5 and 6) in the lab with real processes.

A `tng relay` process in its own namespace between a DSL link (10/1 Mbit/s, 10 ms each way, about a second of
buffer) and a 100 Mbit/s core link (50 ms each way, one BDP of buffer), both emulated by linkem; real `tng perf`
server and client; kernel TCP CUBIC cross traffic on the core, one flow more every `--level-seconds` up to
`--max-cross`. Three schemes, each on a fresh topology, per direction: split (the relay runs Vegas on its DSL side
and CUBIC on its core side), end-to-end CUBIC and end-to-end Vegas (the relay namespace only routes). The split
scheme's client names the relay by address, or, with `--on-path`, addresses its SECTIONs to the server and the relay
namespace diverts them to the relay (docs/architecture.md, "Relays"). The topology is tng_lab.relay_lab_net;
docs/lab.md, "Tng's DSL experiment with real processes", has what was measured.

    python -m tng_lab.relay_lab --out build/lab/relay-lab [--direction both] [--level-seconds 30] [--max-cross 4] \
        [--repeat 1] [--on-path]

`--repeat N` runs the three schemes N times in turn (split, CUBIC, Vegas, split, ...) and pools the runs per level
(tng_lab.relay_lab_repeats).

Writes `relay-lab.json` (per direction, run and scheme: a 1 s timeline, per-level goodput and p95 delays, bytes
checked and corrupted, the relay's counters and its trace; per level and run the split/CUBIC ratios against Tng's
targets, and pooled over the runs) and, per direction, `<direction>-levels.png` (the ratios per level), and per run
(`-run<k>` after the direction when there are several) `<direction>-goodput.png`, `<direction>-delay.png` (the data
sender's smoothed RTT, from its qlog), `<direction>-dsl-queue.png` (the DSL queue in the sending direction, from
linkem) and `<direction>-relay.png` (the split run at the relay: its queue, what it received, forwarded and dropped,
its downstream window beside the data sender's bytes in flight). Prints the comparison as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tng_lab import relay_figure, relay_lab_repeats, relay_lab_report
from tng_lab.load import LoadMeter
from tng_lab.netns import LabError, run_prefix, sh
from tng_lab.perf import PerfServer
from tng_lab.procs import spawn
from tng_lab.relay_lab_net import CLIENT, CROSS, RELAY_CORE, RELAY_DSL, SERVER, Links, QueueSampler, build
from tng_lab.relay_procs import (
    END_GRACE_S,
    RELAY_PORT,
    client_argv,
    divert_sections,
    start_relay,
    stop_relay,
    trace_path,
    transfer_report,
    wait_exit,
)
from tng_lab.runner import REPO, Binaries, ShieldedExitStack

PERF_PORT, CROSS_PORT = 5201, 5202


@dataclass(frozen=True, slots=True)
class Direction:
    """Who sends. `tng perf` always sends from its server, so an upload runs the perf server on the DSL host and the
    client (which opens the connection and names the relay) beyond the core; the relay's flags follow: its DSL side
    is `toward-client` for a download and `toward-server` for an upload."""

    name: str
    sender: str  # namespace role of the tng perf server (the data sender)
    sender_address: str
    receiver: str  # namespace role of the tng perf client
    relay_address: str  # the relay as the receiver reaches it
    relay_ccs: tuple[str, str]  # --toward-client-cc, --toward-server-cc
    split_sender_cc: str  # the sender's own section: the core's CUBIC downloading, the DSL's Vegas uploading
    cross_sender: str
    cross_sender_address: str
    cross_receiver: str
    dsl_sending: str  # linkem direction of the DSL that carries the data: ab (down) or ba (up)


DIRECTIONS = {
    "download": Direction(
        "download", "server", SERVER, "client", RELAY_DSL, ("vegas", "cubic"), "cubic", "server", SERVER, "cross", "ab"
    ),
    "upload": Direction(
        "upload", "client", CLIENT, "server", RELAY_CORE, ("cubic", "vegas"), "vegas", "cross", CROSS, "server", "ba"
    ),
}


@dataclass(frozen=True, slots=True)
class Scheme:
    label: str  # relay_figure's labels and colours
    cc: str | None  # the data sender's tng controller; None: the direction's split_sender_cc
    split: bool


SPLIT, CUBIC, VEGAS = (scheme.label for scheme in relay_figure.SCHEMES)
SCHEMES = (Scheme(SPLIT, None, True), Scheme(CUBIC, "cubic", False), Scheme(VEGAS, "vegas", False))


@dataclass(frozen=True, slots=True)
class Options:
    out: Path
    binaries: Binaries
    links: Links
    level_s: float
    max_cross: int
    relay_queue: int
    on_path: bool = False  # the split scheme's relay intercepts on the path instead of being addressed
    repeat: int = 1  # runs of every scheme, pooled per level

    @property
    def total_s(self) -> float:
        return self.level_s * (self.max_cross + 1)


def say(text: str) -> None:
    print(f"relay_lab: {text}", file=sys.stderr, flush=True)


def cross_report(start_s: float, started_s: float, status: int, stdout: Path) -> dict[str, Any]:
    flow: dict[str, Any] = {"start_s": start_s, "started_s": round(started_s, 3), "exit_status": status}
    try:
        report = json.loads(stdout.read_text())
        flow.update({key: report[key] for key in ("goodput_mbps", "bytes_received", "bytes_corrupted", "sender_cc")})
    except (OSError, ValueError, KeyError) as err:
        flow["error"] = f"no report ({err})"
    return flow


def run_name(options: Options, direction: Direction, run: int) -> str:
    """The direction's name, with the run's number when there are several (log directories, figures)."""
    return f"{direction.name}-run{run}" if options.repeat > 1 else direction.name


def run_scheme(options: Options, direction: Direction, scheme: Scheme, run: int = 1) -> dict[str, Any]:
    """One scheme on a fresh topology; everything it starts is gone when it returns."""
    slug = f"{run_name(options, direction, run)}-{'e2e-' + scheme.cc if scheme.cc else 'split'}"
    logs = options.out / "logs" / slug
    logs.mkdir(parents=True, exist_ok=True)
    cc = scheme.cc or direction.split_sender_cc
    with ShieldedExitStack() as stack:
        net, linkems = build(stack, run_prefix(), options.binaries.linkem, options.links, logs)
        qlog = ("--qlog", str(logs / "qlog"))
        sender_ns = net.ns(direction.sender)
        sender = PerfServer(options.binaries.tng, sender_ns, direction.sender_address, PERF_PORT, logs, extra_args=qlog)
        stack.callback(sender.stop)
        sender.ensure(cc)
        cross_server = PerfServer(
            options.binaries.tng, net.ns(direction.cross_sender), direction.cross_sender_address, CROSS_PORT, logs
        )
        stack.callback(cross_server.stop)
        cross_server.ensure(None)
        relay = None
        if scheme.split:
            on_path_port = PERF_PORT if options.on_path else None
            if on_path_port is not None:
                divert_sections(net.ns("relay"), on_path_port)
            relay = start_relay(
                options.binaries.tng,
                net.ns("relay"),
                direction.relay_ccs,
                options.relay_queue,
                logs,
                on_path_port=on_path_port,
            )
        if relay is not None:
            stack.callback(relay.stop)
        sampler = QueueSampler(net)
        sampler.start()
        stack.callback(sampler.stop)
        relay_route = "on-path" if options.on_path else f"{direction.relay_address}:{RELAY_PORT}"
        via = ["--relay", relay_route] if relay else []
        argv = client_argv(
            options.binaries.tng,
            net.ns(direction.receiver),
            f"{direction.sender_address}:{PERF_PORT}",
            options.total_s,
            ["--cc", cc, *via],
        )
        pids = {f"linkem-{name}": child.pid for name, child in linkems.items()}
        pids |= {"sender": sender.current().pid, **({"relay": relay.pid} if relay else {})}
        meter = LoadMeter(pids)
        t0_unix, t0 = time.time(), time.monotonic()
        client = spawn("tng perf client", argv, logs / "client.log", stdout=logs / "client.out")
        stack.callback(client.stop)
        crosses = []
        for k in range(1, options.max_cross + 1):
            start_s = k * options.level_s
            while time.monotonic() < t0 + start_s:
                client.check()
                meter.tick()
                time.sleep(min(0.5, max(0.0, t0 + start_s - time.monotonic())))
            started_s = time.monotonic() - t0
            cross_argv = client_argv(
                options.binaries.tng,
                net.ns(direction.cross_receiver),
                f"{direction.cross_sender_address}:{CROSS_PORT}",
                options.total_s - start_s,
                ["--transport", "tcp", "--cc", "cubic", "--json"],
            )
            out = logs / f"cross-{k}.json"
            cross = spawn(f"cross flow {k}", cross_argv, logs / f"cross-{k}.log", stdout=out)
            stack.callback(cross.stop)
            crosses.append((start_s, started_s, cross, out))
            say(f"{direction.name}, {scheme.label}: {k} cross flow(s) from {started_s:.1f} s")
        deadline = t0 + options.total_s + END_GRACE_S
        status = wait_exit(client, deadline, meter)
        flows = [cross_report(s, real, wait_exit(c, deadline, meter), out) for s, real, c, out in crosses]
        sampler.stop()
        load = meter.finish({})
        relay_trace = stop_relay(relay, trace_path(logs, "relay")) if relay else None
        sender.stop()  # the qlog is complete once the server is gone
        transfer = transfer_report(status, logs / "client.log", logs / "client.out")
        samples = list(sampler.samples)
    sender_metrics = relay_lab_report.sender_metrics(logs / "qlog")
    report = relay_lab_report.scheme_report(options, direction, t0_unix, transfer, sender_metrics, samples, flows)
    report.update({"label": scheme.label, "sender_cc": cc, "split": scheme.split, "relay": None})
    if relay_trace is not None:
        report["relay"] = relay_lab_report.relay_report(options, t0_unix, relay_trace, report)
    report["load"] = dataclasses.asdict(load)
    report["logs"] = str(logs)
    return report


def run_direction(options: Options, direction: Direction) -> dict[str, Any]:
    """Every scheme `options.repeat` times, the schemes in turn within each run; the runs' comparisons pooled."""
    runs = []
    for run in range(1, options.repeat + 1):
        schemes = {}
        for scheme in SCHEMES:
            which = f"{direction.name}, {scheme.label}"
            which += f", run {run}/{options.repeat}" if options.repeat > 1 else ""
            say(f"{which}: {options.total_s:g} s on a fresh topology ...")
            schemes[scheme.label] = run_scheme(options, direction, scheme, run)
            transfer = schemes[scheme.label]["transfer"]
            say(
                f"{which}: goodput {transfer['goodput_mbps']} Mbit/s, "
                f"{transfer['bytes_checked']} bytes checked, {transfer['bytes_corrupted']} corrupted"
            )
        runs.append({"schemes": schemes, "comparison": relay_lab_report.compare(schemes)})
    return {"runs": runs, "comparison": relay_lab_repeats.pool([run["comparison"] for run in runs])}


def verified(report: dict[str, Any]) -> bool:
    """Every tng transfer and cross flow ended well with no corrupted byte."""
    for result in report["directions"].values():
        for scheme in (scheme for run in result["runs"] for scheme in run["schemes"].values()):
            if not scheme["transfer"]["verified"] or scheme["transfer"]["bytes_corrupted"]:
                return False
            if any(flow.get("exit_status") != 0 or flow.get("bytes_corrupted") for flow in scheme["cross_traffic"]):
                return False
    return True


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.relay_lab", description=__doc__.split("\n\n")[0])
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "lab" / f"relay-lab-{stamp}")
    parser.add_argument("--direction", choices=("download", "upload", "both"), default="both")
    parser.add_argument("--level-seconds", type=float, default=30.0, help="seconds per cross-traffic level")
    parser.add_argument("--max-cross", type=int, default=4, help="cross flows at most (one more per level)")
    parser.add_argument("--relay-queue", type=int, default=64, help="tng relay --queue-limit (packets)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every scheme, pooled per level (default 1)")
    parser.add_argument(
        "--on-path",
        action="store_true",
        help="the split scheme's relay intercepts what it routes (tng relay --on-path; clients: --relay on-path)",
    )
    parser.add_argument("--bin-dir", type=Path, default=None, help="where tng and linkem are (default target/release)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        binaries = Binaries.locate(args.bin_dir)
    except LabError as err:
        say(str(err))
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    options = Options(
        args.out, binaries, Links(), args.level_seconds, args.max_cross, args.relay_queue, args.on_path, args.repeat
    )
    names = ["download", "upload"] if args.direction == "both" else [args.direction]
    report: dict[str, Any] = {
        "experiment": "Tng's DSL experiment with real processes (seed 004, Figures 5 and 6)",
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "links": options.links.describe(),
        "relay_queue_limit": options.relay_queue,
        "relay_found": "on the path" if options.on_path else "by address",
        "level_s": options.level_s,
        "max_cross": options.max_cross,
        "repeat": options.repeat,
        "binaries": {"tng": str(binaries.tng), "linkem": str(binaries.linkem)},
        "cpus": os.cpu_count(),
        "uptime_before": sh(["uptime"]).strip(),
        "directions": {},
    }
    try:
        for name in names:
            report["directions"][name] = run_direction(options, DIRECTIONS[name])
    except LabError as err:
        say(f"error: {err} (everything this run created was removed)")
        return 1
    except KeyboardInterrupt as err:
        say(f"interrupted by {err}; everything this run created was removed")
        return 130
    report["uptime_after"] = sh(["uptime"]).strip()
    report["verified"] = verified(report)
    (args.out / "relay-lab.json").write_text(json.dumps(report, indent=1) + "\n")
    plots = []
    for name, result in report["directions"].items():
        title = f"{name}: DSL 10/1 Mbit/s, tng relay, 100 Mbit/s core (lab, real processes)"
        plots.append(relay_lab_repeats.plot_levels(name, result["comparison"], args.out, title))
        for run, run_result in enumerate(result["runs"], start=1):
            run_title = title + (f", run {run}" if options.repeat > 1 else "")
            plots += relay_lab_report.plot(
                run_name(options, DIRECTIONS[name], run), run_result["schemes"], args.out, run_title
            )
    say("wrote " + ", ".join(str(path) for path in [args.out / "relay-lab.json", *plots]))
    summary = {name: result["comparison"] for name, result in report["directions"].items()}
    print(
        json.dumps({"relay_lab": str(args.out / "relay-lab.json"), "verified": report["verified"], **summary}, indent=1)
    )
    return 0 if report["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
