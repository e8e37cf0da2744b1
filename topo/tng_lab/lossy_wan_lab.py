"""Tng's lossy-WAN experiment (seed 004, section 6.2, Figure 10) in the lab with real processes.

A long `tng perf` transfer from a host on one site's LAN (100 Mbit/s, 1 ms RTT) over a WAN of reserved capacity
(20 Mbit/s, 100 ms RTT) to a host beside the WAN's far end, both links emulated by linkem; the WAN's random loss
(both directions) rises every `--step-seconds` (default 0, 0.05, 0.1, 0.2, 0.5, 1, 2 %). Per controller (default
NewReno and Vegas, the paper's Reno-like and Vegas-like schemes), two runs on fresh topologies:

- split: a `tng relay` at each end of the WAN (the receiver opens the connection through the near one, which sends
  on through the far one, `--next-relay`); the sender's LAN section and the receiver's section run the controller,
  the WAN section a fixed rate, the WAN's (its losses are not congestion); what the WAN loses is recovered end to end;
- end to end: the relay namespaces only route, and the sender's controller reads every random loss as congestion.

The topology is tng_lab.lossy_wan_lab_net; the simulator's counterpart is host-agent/scenarios/relay-lossy-wan.toml
with tng_lab.lossy_wan_figure, whose table and plot this module shares. docs/lab.md, "Tng's lossy WAN with real
processes", has what was measured.

    python -m tng_lab.lossy_wan_lab --out build/lab/lossy-wan-lab [--controllers newreno,vegas] [--step-seconds 10]

Writes `lossy-wan-lab.json` (per run: the receiver's goodput per second and per loss level, bytes checked and
corrupted, the loss the WAN applied and dropped, the relays' counters; per loss level the split / end-to-end ratio
of each controller) and `cumulative.png` (megabytes delivered over time). Prints the per-level table as JSON.
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

from tng_lab import linkem, lossy_wan_figure
from tng_lab.load import LoadMeter
from tng_lab.lossy_wan_lab_net import RELAY_A_WAN, RELAY_B_NEAR, SENDER, Links, Net, build
from tng_lab.netns import LabError, run_prefix, sh
from tng_lab.perf import PerfServer
from tng_lab.procs import spawn
from tng_lab.relay_procs import (
    END_GRACE_S,
    RELAY_PORT,
    client_argv,
    start_relay,
    stop_relay,
    trace_path,
    transfer_report,
    wait_exit,
)
from tng_lab.runner import REPO, Binaries, ShieldedExitStack

PERF_PORT = 5201
DEFAULT_LOSSES_PERCENT = "0,0.05,0.1,0.2,0.5,1,2"  # relay-lossy-wan.toml's loss_steps


@dataclass(frozen=True, slots=True)
class Options:
    out: Path
    binaries: Binaries
    links: Links
    step_s: float
    losses: tuple[float, ...]  # fractions, one per step
    relay_queue: int

    @property
    def total_s(self) -> float:
        return self.step_s * len(self.losses)


def say(text: str) -> None:
    print(f"lossy_wan_lab: {text}", file=sys.stderr, flush=True)


def levels(options: Options, seconds: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """Per loss step, the receiver's mean goodput over the whole seconds inside it (progress second s covers the
    interval (s - 1, s] of the transfer)."""
    rows = []
    for k, loss in enumerate(options.losses):
        start, end = k * options.step_s, (k + 1) * options.step_s
        inside = [mbps for s, mbps in seconds if start < s <= end]
        goodput = round(sum(inside) / len(inside), 3) if inside else 0.0
        rows.append({"from_s": start, "to_s": end, "random_loss": loss, "goodput_mbps": goodput})
    return rows


def relay_report(trace: list[dict[str, Any]]) -> dict[str, Any]:
    """A relay's counters from the last line of its trace and how many lines it wrote."""
    return {"samples": len(trace), **trace[-1]["stats"]}


def wan_report(net: Net) -> dict[str, Any]:
    counters = linkem.counters(net.control("wan"))
    return {
        "toward_receiver": dataclasses.asdict(counters.down),
        "toward_sender": dataclasses.asdict(counters.up),
    }


def run_scheme(options: Options, cc: str, split: bool) -> dict[str, Any]:
    """One run on a fresh topology; everything it starts is gone when it returns."""
    slug = f"{'split' if split else 'e2e'}-{cc}"
    logs = options.out / "logs" / slug
    logs.mkdir(parents=True, exist_ok=True)
    wan_rate = f"fixed:{options.links.wan_mbit:g}mbit"
    with ShieldedExitStack() as stack:
        net, linkems = build(stack, run_prefix(), options.binaries.linkem, options.links, logs)
        sender = PerfServer(options.binaries.tng, net.ns("sender"), SENDER, PERF_PORT, logs)
        stack.callback(sender.stop)
        sender.ensure(cc)
        relays = {}
        if split:
            # The receiver opens the connection, so relay-b's sections toward the client carry the data to it and
            # relay-a's toward the client carry it over the WAN.
            tng, queue = options.binaries.tng, options.relay_queue
            relays["relay-a"] = start_relay(tng, net.ns("relay-a"), (wan_rate, cc), queue, logs, name="relay-a")
            next_relay = f"{RELAY_A_WAN}:{RELAY_PORT}"
            relays["relay-b"] = start_relay(
                tng, net.ns("relay-b"), (cc, wan_rate), queue, logs, next_relay=next_relay, name="relay-b"
            )
            for relay in relays.values():
                stack.callback(relay.stop)
        via = ["--relay", f"{RELAY_B_NEAR}:{RELAY_PORT}"] if split else []
        server = f"{SENDER}:{PERF_PORT}"
        argv = client_argv(options.binaries.tng, net.ns("receiver"), server, options.total_s, ["--cc", cc, *via])
        pids = {f"linkem-{name}": child.pid for name, child in linkems.items()}
        pids |= {"sender": sender.current().pid} | {name: relay.pid for name, relay in relays.items()}
        meter = LoadMeter(pids)
        if options.losses[0]:
            net.set_loss(options.losses[0])
        t0 = time.monotonic()
        client = spawn("tng perf client", argv, logs / "client.log", stdout=logs / "client.out")
        stack.callback(client.stop)
        applied = [{"random_loss": options.losses[0], "at_s": 0.0}]
        for k in range(1, len(options.losses)):
            while time.monotonic() < t0 + k * options.step_s:
                client.check()
                meter.tick()
                time.sleep(min(0.2, max(0.0, t0 + k * options.step_s - time.monotonic())))
            net.set_loss(options.losses[k])
            applied.append({"random_loss": options.losses[k], "at_s": round(time.monotonic() - t0, 3)})
        status = wait_exit(client, t0 + options.total_s + END_GRACE_S, meter)
        load = meter.finish({})
        wan = wan_report(net)
        traces = {name: stop_relay(relay, trace_path(logs, name)) for name, relay in relays.items()}
        sender.stop()
        transfer = transfer_report(status, logs / "client.log", logs / "client.out")
    seconds = transfer["goodput_per_second"]
    return {
        "controller": cc,
        "split": split,
        "transfer": transfer,
        "timeline": [{"t_s": float(s), "goodput_mbps": mbps} for s, mbps in seconds],
        "levels": levels(options, seconds),
        "loss_applied": applied,
        "wan": wan,
        "relays": {name: relay_report(trace) for name, trace in traces.items()},
        "load": dataclasses.asdict(load),
        "logs": str(logs),
    }


def verified(runs: dict[str, dict[str, Any]]) -> bool:
    """Every transfer ended well with no corrupted byte."""
    return all(run["transfer"]["verified"] and not run["transfer"]["bytes_corrupted"] for run in runs.values())


def parse_losses(text: str) -> tuple[float, ...]:
    try:
        percents = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--losses: {text!r} is not a comma-separated list of percentages") from None
    if not percents or any(not 0 <= p < 100 for p in percents):
        raise argparse.ArgumentTypeError(f"--losses: {text!r}: give at least one percentage in [0, 100)")
    return tuple(p / 100 for p in percents)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.lossy_wan_lab", description=__doc__.split("\n\n")[0])
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "lab" / f"lossy-wan-lab-{stamp}")
    parser.add_argument("--controllers", default="newreno,vegas", help="comma-separated (default newreno,vegas)")
    parser.add_argument("--step-seconds", type=float, default=10.0, help="seconds per loss rate")
    parser.add_argument(
        "--losses", type=parse_losses, default=parse_losses(DEFAULT_LOSSES_PERCENT), help="WAN loss %% per step"
    )
    parser.add_argument("--relay-queue", type=int, default=256, help="tng relay --queue-limit (packets)")
    parser.add_argument("--bin-dir", type=Path, default=None, help="where tng and linkem are (default target/release)")
    args = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    controllers = [cc.strip() for cc in args.controllers.split(",") if cc.strip()]
    if not controllers:
        parser.error("--controllers: name at least one")
    try:
        binaries = Binaries.locate(args.bin_dir)
    except LabError as err:
        say(str(err))
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    options = Options(args.out, binaries, Links(), args.step_seconds, args.losses, args.relay_queue)
    pairs = lossy_wan_figure.schemes(controllers)
    report: dict[str, Any] = {
        "experiment": "Tng's lossy WAN with real processes (seed 004, Figure 10)",
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "links": options.links.describe(),
        "step_s": options.step_s,
        "random_loss_steps": list(options.losses),
        "relay_queue_limit": options.relay_queue,
        "binaries": {"tng": str(binaries.tng), "linkem": str(binaries.linkem)},
        "cpus": os.cpu_count(),
        "uptime_before": sh(["uptime"]).strip(),
    }
    runs: dict[str, dict[str, Any]] = {}
    try:
        for cc, split_scheme, end_to_end in pairs:
            for scheme, split in ((split_scheme, True), (end_to_end, False)):
                say(f"{scheme.label}: {options.total_s:g} s on a fresh topology ...")
                runs[scheme.label] = run_scheme(options, cc, split)
                transfer = runs[scheme.label]["transfer"]
                say(
                    f"{scheme.label}: goodput {transfer['goodput_mbps']} Mbit/s, {transfer['bytes_checked']} bytes "
                    f"checked, {transfer['bytes_corrupted']} corrupted"
                )
    except LabError as err:
        say(f"error: {err} (everything this run created was removed)")
        return 1
    except KeyboardInterrupt as err:
        say(f"interrupted by {err}; everything this run created was removed")
        return 130
    report["uptime_after"] = sh(["uptime"]).strip()
    report["verified"] = verified(runs)
    report["levels"] = lossy_wan_figure.levels_table(pairs, runs)
    report["runs"] = runs
    (args.out / "lossy-wan-lab.json").write_text(json.dumps(report, indent=1) + "\n")
    title = "LAN - tng relay - 20 Mbit/s WAN, random loss - tng relay - receiver (lab, real processes)"
    plot = lossy_wan_figure.plot(pairs, runs, title, args.out)
    say(f"wrote {args.out / 'lossy-wan-lab.json'}, {plot}")
    summary = {"lossy_wan_lab": str(args.out / "lossy-wan-lab.json"), "verified": report["verified"]}
    print(json.dumps({**summary, "levels": report["levels"]}, indent=1))
    return 0 if report["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
