"""What a run measured: dataclasses, results.json and summary.md."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tng_lab.load import Load
from tng_lab.perf import Fct
from tng_lab.scenario import Workload
from tng_lab.sender_window import WindowSeries
from tng_lab.switch_counters import SwitchCounts
from tng_lab.tcpstats import TcpStats

DELAY_METHOD = (
    "one-way downlink delay per packet, estimated from linkem's queue sampled every sample_ms: "
    "queue drain time at the link's rate (or trace opportunities) plus propagation delay, weighted by the "
    "packets accepted in the following interval, pooled over the workload's links"
)
CAPACITY_METHOD = (
    "capacity_mbps: mean downlink capacity of the workload's links (their sum) over the measured interval, from the "
    "run's reset of the links (the trace's time 0) to the last sample_ms grid instant within the duration, from the "
    "rate or the trace's 1500-byte delivery opportunities; utilization: downlink IP bytes linkem delivered in that "
    "interval, per second, / capacity_mbps"
)


@dataclass(frozen=True, slots=True)
class PathSeries:
    """Per-interval values of one link during a run; interval i ends at t_s[i] (seconds since the run's reset, on
    the sample_ms grid)."""

    t_s: list[float]
    down_mbps: list[float]
    up_mbps: list[float]
    capacity_mbps: list[float | None]  # over the grid interval: the same in every run of the link
    delay_ms: list[float]  # estimated one-way delay of a downlink packet arriving in the interval
    packets: list[int]  # downlink packets accepted into the queue in the interval (the delay sample's weight)


@dataclass(frozen=True, slots=True)
class PathResult:
    down_bytes: int
    up_bytes: int
    down_mbps: float  # over the whole run
    capacity_mbps: float | None  # mean over the measured interval (reset to end of duration); None when unlimited
    measured_down_mbps: float  # downlink IP rate over the measured interval
    dropped_queue: int
    dropped_loss: int
    dropped_other: int
    ecn_marked: int
    series: PathSeries


@dataclass(frozen=True, slots=True)
class Delay:
    p50: float | None
    p95: float | None
    mean: float | None


@dataclass(frozen=True, slots=True)
class UeRun:
    """One UE's perf client in a run (with several UEs every one runs the workload at the same time)."""

    ue: int  # 1..N
    seed: int  # its tng perf seed
    goodput_mbps: float
    bytes_received: int
    retransmitted_packets: int


def jain_fairness(values: list[float]) -> float | None:
    """Jain's index (sum x)^2 / (n sum x^2): 1 when every UE got the same, 1/n when one got everything."""
    squares = sum(value * value for value in values)
    return sum(values) ** 2 / (len(values) * squares) if squares > 0 else None


@dataclass(frozen=True, slots=True)
class RunResult:
    repetition: int
    seed: int  # tng perf's seed
    link_seed: int  # linkem's loss and jitter seed, set by the reset that started the run
    duration_s: float
    goodput_mbps: float
    capacity_mbps: float | None  # of the workload's links, downlink, over the measured interval
    utilization: float | None  # downlink IP bytes delivered in the measured interval / capacity
    bytes_received: int
    bytes_corrupted: int
    retransmitted_packets: int
    sent_packets: int
    delay_ms: Delay
    fct_ms: Fct
    fct_samples_ms: list[float]
    paths: dict[str, PathResult]
    perf_paths: list[dict[str, Any]]
    load: Load
    tcp: TcpStats | None = None  # kernel transports: reordering at the UE and what it cost the server
    switch: SwitchCounts | None = None  # with BMv2: steered, sent and queue-dropped per link; VISIBLE's decisions
    error: str | None = None
    ues: tuple[UeRun, ...] = ()  # per UE; goodput_mbps and the byte and packet counts above are their sums
    fairness: float | None = None  # Jain's index of the UEs' goodputs
    run_s: float | None = None  # from the client's start until its streams ended (tng perf's own clock)
    sender_queueing_ms: dict[str, float] | None = None  # tng: write to first transmission, {"p50", "p95"}
    sender_window: WindowSeries | None = None  # kernel transports: the server's congestion window over the run


@dataclass(slots=True)
class WorkloadResult:
    workload: Workload
    cc: str | None  # the congestion control in force (for kernel transports, the server's default if unset)
    runs: list[RunResult] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None  # why it could not be set up (e.g. the controller refused its policy); it did not run

    def ok_runs(self) -> list[RunResult]:
        return [run for run in self.runs if run.error is None]

    def status(self) -> str:
        if self.skipped:
            return "skipped"
        return "failed" if self.error or any(run.error for run in self.runs) else "ok"

    def reason(self) -> str | None:
        """Why it was skipped or failed (its first failed run's error), None when it ran well."""
        return self.skipped or self.error or next((run.error for run in self.runs if run.error), None)

    def summary(self) -> dict[str, Any]:
        """Means (and sample standard deviations over repetitions) of the headline numbers of the good runs."""
        runs = self.ok_runs()
        return {
            "status": self.status(),
            "runs": len(runs),
            "goodput_mbps": _stats([run.goodput_mbps for run in runs]),
            "capacity_mbps": _stats([run.capacity_mbps for run in runs if run.capacity_mbps is not None]),
            "utilization": _stats([run.utilization for run in runs if run.utilization is not None]),
            "delay_p95_ms": _stats([run.delay_ms.p95 for run in runs if run.delay_ms.p95 is not None]),
            "delay_p50_ms": _stats([run.delay_ms.p50 for run in runs if run.delay_ms.p50 is not None]),
            "fct_p50_ms": _stats([run.fct_ms.p50 for run in runs if run.fct_ms.count]),
            "fct_p99_ms": _stats([run.fct_ms.p99 for run in runs if run.fct_ms.count]),
            "flows": sum(run.fct_ms.count for run in runs),
            "retransmitted_packets": sum(run.retransmitted_packets for run in runs),
            "path_mbytes": {
                name: round(statistics.fmean(run.paths[name].down_bytes for run in runs) / 1e6, 3)
                for name in self.workload.paths
                if runs
            },
            "ue_goodput_mbps": _per_ue_means(runs),
            "fairness": _stats([run.fairness for run in runs if run.fairness is not None]),
            "run_s": _stats([run.run_s for run in runs if run.run_s is not None]),
            "sender_queueing_p95_ms": _stats(
                [run.sender_queueing_ms["p95"] for run in runs if run.sender_queueing_ms is not None]
            ),
            "cwnd_mean_packets": _stats(
                [run.sender_window.cwnd_mean_packets for run in runs if run.sender_window is not None]
            ),
            "tcp": _mean_counts([run.tcp.to_json() for run in runs if run.tcp is not None]),
            "switch": _mean_counts([run.switch.to_json() for run in runs if run.switch is not None]),
        }


def _per_ue_means(runs: list[RunResult]) -> list[float]:
    """Each UE's goodput, the mean over runs (UE 1 first)."""
    by_ue: dict[int, list[float]] = {}
    for run in runs:
        for ue in run.ues:
            by_ue.setdefault(ue.ue, []).append(ue.goodput_mbps)
    return [round(statistics.fmean(by_ue[ue]), 3) for ue in sorted(by_ue)]


def _mean_counts(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The mean over runs of every count in nested dictionaries of the same shape (None without any run)."""
    if not reports or any(report is None for report in reports):
        return None
    first = reports[0]
    if isinstance(first, dict):
        return {key: _mean_counts([report[key] for report in reports]) for key in first}
    return round(statistics.fmean(reports), 1)


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.fmean(values), 3), "sd": round(sd, 3), "min": min(values), "max": max(values)}


@dataclass(slots=True)
class LabResults:
    scenario: str
    scenario_file: Path
    description: str
    started: str
    duration_s: float
    repeat: int
    seed: int
    sample_ms: int
    switch: str  # how packets cross the in-path switch, with the reason
    links: dict[str, dict[str, str]]  # name -> {"down": description, "up": description, "down_spec": ...}
    host: dict[str, Any]
    workloads: list[WorkloadResult] = field(default_factory=list)
    ues: int = 1  # UEs sharing the links; every workload ran one client per UE
    pcap_dir: Path | None = None  # with --pcap: where the captures of both ends of every link are
    delay_method: str = DELAY_METHOD
    capacity_method: str = CAPACITY_METHOD

    def failed(self) -> list[WorkloadResult]:
        return [w for w in self.workloads if w.status() == "failed"]


def to_json(results: LabResults) -> dict[str, Any]:
    data = plain(results)
    for entry, workload in zip(data["workloads"], results.workloads, strict=True):
        entry["summary"] = workload.summary()
        entry["status"] = workload.status()
    return data


def plain(value: Any) -> Any:
    """`value` as JSON types: dataclasses as objects, paths as strings, floats to 4 decimals."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float):
        return round(value, 4)
    return value


def write_json(results: LabResults, path: Path) -> Path:
    path.write_text(json.dumps(to_json(results), indent=2) + "\n")
    return path


def _fmt(stats: dict[str, float] | None, digits: int = 1) -> str:
    if stats is None:
        return "-"
    text = f"{stats['mean']:.{digits}f}"
    return f"{text} ± {stats['sd']:.{digits}f}" if stats["sd"] else text


def _percent(stats: dict[str, float] | None) -> dict[str, float] | None:
    return {key: value * 100 for key, value in stats.items()} if stats else None


def summary_table(results: LabResults) -> str:
    """The Markdown table of summary.md: one row per workload."""
    header = (
        "| workload | transport | cc | mode | paths | goodput Mbit/s | capacity Mbit/s | utilization % | p95 delay ms "
        "| FCT p50 / p99 ms | flows | retrans | MB per path | CPU % (client, server, linkem) | load avg |"
    )
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    for result in results.workloads:
        workload = result.workload
        paths = "+".join(workload.paths)
        if workload.steering:  # one connection, the switch picks the link of every packet
            paths += f" (switch: {workload.steering}{_visible_label(workload)})"
        first = [workload.name, workload.transport, result.cc or "-", workload.mode, paths]
        if result.status() != "ok":
            reason = result.reason()
            rows.append("| " + " | ".join([*first, f"{result.status()}: {reason}", *["-"] * 9]) + " |")
            continue
        summary = result.summary()
        runs = result.ok_runs()
        fct = "-"
        if summary["fct_p50_ms"]:
            fct = f"{_fmt(summary['fct_p50_ms'])} / {_fmt(summary['fct_p99_ms'])}"
        per_path = ", ".join(f"{name} {mb:.1f}" for name, mb in summary["path_mbytes"].items())
        cpu = _cpu_column(runs)
        load = statistics.fmean(run.load.loadavg_max for run in runs)
        rows.append(
            "| "
            + " | ".join(
                [
                    *first,
                    _fmt(summary["goodput_mbps"], 2),
                    _fmt(summary["capacity_mbps"], 2),
                    _fmt(_percent(summary["utilization"])),
                    _fmt(summary["delay_p95_ms"]),
                    fct,
                    str(summary["flows"]),
                    str(summary["retransmitted_packets"]),
                    per_path,
                    cpu,
                    f"{load:.1f}",
                ]
            )
            + " |"
        )
    return "\n".join(rows) + "\n"


def _cpu_column(runs: list[RunResult]) -> str:
    def mean_of(predicate: Callable[[str], bool]) -> float:
        values = [sum(v for k, v in run.load.cpu_percent.items() if predicate(k)) for run in runs]
        return statistics.fmean(values)

    client = mean_of(lambda name: name == "client")
    server = mean_of(lambda name: name == "server")
    linkem = mean_of(lambda name: name.startswith("linkem"))
    return f"{client:.0f}, {server:.0f}, {linkem:.0f}"


def ue_table(results: LabResults) -> str:
    """summary.md's table of several UEs: each one's goodput per workload and Jain's index over them."""
    header = "| workload | " + " | ".join(f"UE {ue}" for ue in range(1, results.ues + 1)) + " | Jain's index |"
    rows = [header, "|" + "---|" * (results.ues + 2)]
    for result in results.workloads:
        if result.status() != "ok":
            continue
        summary = result.summary()
        cells = [f"{mbps:.2f}" for mbps in summary["ue_goodput_mbps"]]
        cells += ["-"] * (results.ues - len(cells))
        rows.append("| " + " | ".join([result.workload.name, *cells, _fmt(summary["fairness"], 3)]) + " |")
    return "\n".join(rows) + "\n"


def where_packets_went_table(results: LabResults) -> str:
    """The second table of summary.md: for kernel TCP workloads, reordering at the UE and what it cost the sender;
    with BMv2, what the switch did (means over the good runs). Empty when no workload has any of it."""
    header = (
        "| workload | UE out-of-order segments | DSACKs (spurious retransmissions) | server retransmissions "
        "| reordering detected / reductions undone | steered per link | queue drops per link "
        "| lost before the pipeline | VISIBLE held / SACK hidden / boosted / retransmit requests |"
    )
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    for result in results.workloads:
        summary = result.summary() if result.status() == "ok" else None
        if summary is None or (summary["tcp"] is None and summary["switch"] is None):
            continue
        tcp, switch = summary["tcp"], summary["switch"]
        cells = ["-"] * 4
        if tcp is not None:
            receiver, sender = tcp["receiver"], tcp["sender"]
            cells[:4] = [
                f"{receiver['out_of_order_queued']:.0f}",
                f"{sender['dsacks_received']:.0f}",
                f"{sender['retransmitted_segments']:.0f}",
                f"{sender['reordering_detected']:.0f} / {sender['reductions_undone']:.0f}",
            ]
        cells += ["-"] * 4
        if switch is not None:
            links = switch["links"]
            visible = switch["visible"]
            cells[4] = ", ".join(f"{name} {counts['steered']:.0f}" for name, counts in links.items())
            cells[5] = ", ".join(f"{name} {counts['queue_drops']:.0f}" for name, counts in links.items())
            if switch.get("input_losses") is not None:
                cells[6] = f"{switch['input_losses']:.0f}"
            if result.workload.visible:
                decisions = ("held", "sack_hidden", "boosted", "retransmit_requested")
                cells[7] = " / ".join(f"{visible[name]:.0f}" for name in decisions)
        rows.append("| " + " | ".join([result.workload.name, *cells]) + " |")
    return "\n".join(rows) + "\n" if len(rows) > 2 else ""


def summary_markdown(results: LabResults, plots: list[Path]) -> str:
    lines = [
        f"# {results.scenario}",
        "",
        results.description.strip(),
        "",
        f"- scenario: `{results.scenario_file}`; started {results.started}",
        f"- {results.duration_s:g} s per workload, {results.repeat} repetition(s), seed {results.seed}",
        f"- in-path switch: {results.switch}",
        f"- machine: {results.host.get('cores')} cores, kernel {results.host.get('kernel')}",
    ]
    for name, link in results.links.items():
        lines.append(f"- link `{name}`: down {link['down']}; up {link['up']}")
    if results.ues > 1:
        lines.append(f"- {results.ues} UEs behind the links, one client each at once: goodput is their sum")
    if results.pcap_dir is not None:
        lines.append(
            f"- packet captures of both ends of every link: `{results.pcap_dir}` "
            "(decode tng with `tshark -X lua_script:tools/wireshark/tng.lua`)"
        )
    lines += [
        "",
        summary_table(results),
        f"Delay: {results.delay_method}. Capacity and utilization: {results.capacity_method}. "
        "FCT: flow completion times (rr mode: request latency) from `tng perf`. "
        "CPU %: 100 = one core, averaged over the workload. Load avg: highest 1-minute load average seen.",
        "",
    ]
    if results.ues > 1:
        lines += ["Goodput per UE (Mbit/s, mean over runs) and Jain's fairness index:", "", ue_table(results)]
    packets = where_packets_went_table(results)
    if packets:
        lines += [
            "Where the packets went (means per run): the kernel's TCP counters at the UE and the server (nstat), and "
            "with BMv2 the switch's counters (forwarded minus sent per link = drops in that port's egress queue; lost "
            "before the pipeline: received by the switch's interfaces, never forwarded, dropped or held by it).",
            "",
            packets,
        ]
    if plots:
        lines.append("Plots: " + ", ".join(f"[{plot.name}]({plot.name})" for plot in plots))
        lines.append("")
    return "\n".join(lines)


def write_summary(results: LabResults, plots: list[Path], path: Path) -> Path:
    path.write_text(summary_markdown(results, plots))
    return path


def _visible_label(workload: Workload) -> str:
    return {None: "", "hold": ", VISIBLE hold only", "full": ", VISIBLE"}[workload.visible]
