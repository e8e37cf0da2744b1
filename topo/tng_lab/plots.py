"""PNG plots of a run's results (matplotlib's Agg renderer, no display needed)."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import ScalarFormatter

from tng_lab.results import LabResults, WorkloadResult

TRANSPORT_COLORS = {"tng": "#d62728", "tcp": "#1f77b4", "mptcp": "#2ca02c"}
PATH_COLORS = ["#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#e377c2", "#1f77b4"]
WORKLOAD_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
DPI = 110


def _label(result: WorkloadResult) -> str:
    workload = result.workload
    cc = f" {result.cc}" if result.cc else ""
    return f"{workload.name} ({workload.transport}{cc})"


def _colors(results: list[WorkloadResult]) -> list[str]:
    """Transport colours when each transport appears once (as in the bar charts), else one colour per workload."""
    transports = [result.workload.transport for result in results]
    if len(set(transports)) == len(transports):
        return [TRANSPORT_COLORS[transport] for transport in transports]
    return [WORKLOAD_COLORS[index % len(WORKLOAD_COLORS)] for index in range(len(results))]


def _measured(results: LabResults) -> list[WorkloadResult]:
    return [w for w in results.workloads if w.ok_runs()]


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=DPI)
    return path


def _transport_legend(figure: Figure, transports: set[str]) -> None:
    handles = [Patch(color=TRANSPORT_COLORS[t], label=t) for t in sorted(transports)]
    figure.legend(handles=handles, loc="outside lower center", ncols=len(handles), title="transport", fontsize=8)


def plot_all(results: LabResults, out_dir: Path) -> list[Path]:
    """Writes every plot that has data and returns their paths."""
    measured = _measured(results)
    if not measured:
        return []
    plots = [
        throughput_over_time(results, measured, out_dir / "throughput.png"),
        delay_cdf(measured, out_dir / "delay_cdf.png"),
        comparison(measured, out_dir / "comparison.png"),
        throughput_vs_delay(measured, out_dir / "throughput_delay.png"),
    ]
    with_flows = [w for w in measured if any(run.fct_ms.count for run in w.ok_runs())]
    if with_flows:
        plots.append(fct_cdf(with_flows, out_dir / "fct_cdf.png"))
    with_window = [w for w in measured if w.ok_runs()[0].sender_window is not None]
    if with_window:
        plots.append(sender_window(results, with_window, out_dir / "sender_window.png"))
    return plots


def throughput_over_time(results: LabResults, measured: list[WorkloadResult], path: Path) -> Path:
    """One panel per workload (its first good run): downlink Mbit/s per link, their sum, and the link capacity."""
    columns = 1 if len(measured) <= 2 else 2
    rows = math.ceil(len(measured) / columns)
    figure = _figure(7 * columns, 2.8 * rows + 0.6)
    axes = figure.subplots(rows, columns, squeeze=False)
    link_names = list(results.links)
    for index, result in enumerate(measured):
        ax: Axes = axes[index // columns][index % columns]
        run = result.ok_runs()[0]
        total: list[float] = []
        for name in result.workload.paths:
            series = run.paths[name].series
            color = PATH_COLORS[link_names.index(name) % len(PATH_COLORS)]
            ax.step(series.t_s, series.down_mbps, where="pre", color=color, label=name)
            if any(c is not None for c in series.capacity_mbps):
                capacity = [c if c is not None else math.nan for c in series.capacity_mbps]
                ax.step(series.t_s, capacity, where="pre", color=color, linestyle=":", label=f"{name} capacity")
            total = [a + b for a, b in zip(total, series.down_mbps, strict=True)] if total else list(series.down_mbps)
        if len(result.workload.paths) > 1:
            ax.step(run.paths[result.workload.paths[0]].series.t_s, total, where="pre", color="black", label="sum")
        ax.set_title(f"{_label(result)}: goodput {run.goodput_mbps:.2f} Mbit/s", fontsize=10)
        ax.set_ylabel("Mbit/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        if index + columns >= len(measured):  # nothing below it
            ax.set_xlabel("time since the run started: the links' reset (s)")
    for index in range(len(measured), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    figure.suptitle(f"{results.scenario}: downlink throughput per link (linkem counters, {results.sample_ms} ms bins)")
    return _save(figure, path)


def sender_window(results: LabResults, with_window: list[WorkloadResult], path: Path) -> Path:
    """One panel per kernel workload (its first good run): the server's congestion window and packets in flight
    against the window that keeps its links busy (sender_window.WindowSeries.needed_packets), and the smoothed RTT."""
    columns = 1 if len(with_window) <= 2 else 2
    rows = math.ceil(len(with_window) / columns)
    figure = _figure(7 * columns, 2.6 * rows + 0.6)
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, result in enumerate(with_window):
        ax: Axes = axes[index // columns][index % columns]
        run = result.ok_runs()[0]
        window = run.sender_window
        assert window is not None
        ax.step(window.t_s, window.cwnd_packets, where="post", color="#1f77b4", label="cwnd")
        ax.step(window.t_s, window.in_flight_packets, where="post", color="#2ca02c", linewidth=0.8, label="in flight")
        if window.needed_packets is not None:
            ax.axhline(window.needed_packets, color="black", linestyle="--", linewidth=1, label="window the links need")
        ax.set_ylabel("packets")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        rtt = ax.twinx()
        rtt.plot(window.t_s, window.srtt_ms, color="#7f7f7f", linewidth=0.8, label="srtt")
        rtt.set_ylabel("srtt (ms)", color="#7f7f7f", fontsize=8)
        rtt.set_ylim(bottom=0)
        handles = ax.get_legend_handles_labels()[0] + rtt.get_legend_handles_labels()[0]
        ax.legend(handles=handles, fontsize=7, loc="upper left")
        ax.set_title(f"{_label(result)}: goodput {run.goodput_mbps:.2f} Mbit/s", fontsize=10)
        if index + columns >= len(with_window):
            ax.set_xlabel("time since the run started: the links' reset (s)")
    for index in range(len(with_window), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    figure.suptitle(f"{results.scenario}: the data sender's window (ss -tin every {results.sample_ms} ms)")
    return _save(figure, path)


def _weighted_cdf(values: list[float], weights: list[float]) -> tuple[list[float], list[float]]:
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    total = sum(w for _, w in pairs)
    xs, ys, acc = [], [], 0.0
    for value, weight in pairs:
        acc += weight
        xs.append(value)
        ys.append(acc / total)
    return xs, ys


def delay_cdf(measured: list[WorkloadResult], path: Path) -> Path:
    figure = _figure(7.5, 4.5)
    ax = figure.subplots()
    for result, color in zip(measured, _colors(measured), strict=True):
        values, weights = [], []
        for run in result.ok_runs():
            for name in result.workload.paths:
                values += run.paths[name].series.delay_ms
                weights += [float(p) for p in run.paths[name].series.packets]
        if sum(weights) <= 0:
            continue
        xs, ys = _weighted_cdf(values, weights)
        ax.step(xs, ys, where="post", color=color, label=_label(result))
    ax.axhline(0.95, color="gray", linestyle=":", linewidth=1)
    ax.text(ax.get_xlim()[0], 0.955, " p95", color="gray", fontsize=8, va="bottom")
    ax.set_xlabel("estimated one-way downlink delay per packet (ms)")
    ax.set_ylabel("fraction of packets")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Packet delay CDF (queueing + propagation, from linkem's queue)")
    return _save(figure, path)


def fct_cdf(with_flows: list[WorkloadResult], path: Path) -> Path:
    """Empirical CDF where `tng perf` reported every flow; the p50 and p99 points where it reported only those."""
    figure = _figure(7.5, 4.5)
    ax = figure.subplots()
    for result, color in zip(with_flows, _colors(with_flows), strict=True):
        runs = result.ok_runs()
        samples = sorted(v for run in runs for v in run.fct_samples_ms)
        if samples:
            ys = [(i + 1) / len(samples) for i in range(len(samples))]
            ax.step(samples, ys, where="post", color=color, label=f"{_label(result)}, {len(samples)} flows")
        else:
            run = runs[0]
            xs = [run.fct_ms.p50, run.fct_ms.p99]
            ax.plot(xs, [0.5, 0.99], "o--", color=color, label=f"{_label(result)}: p50, p99 of {run.fct_ms.count}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("flow completion time (ms; rr mode: request latency)")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Flow completion time CDF")
    return _save(figure, path)


def _bars(ax: Axes, measured: list[WorkloadResult], key: str, ylabel: str, scale: float = 1.0) -> None:
    """One bar per workload: the mean of summary `key` times `scale`, sd as the error bar; no bar without data."""
    names, means, errors, colors = [], [], [], []
    for result in measured:
        stats = result.summary()[key]
        names.append(result.workload.name)
        means.append(stats["mean"] * scale if stats else math.nan)
        errors.append(stats["sd"] * scale if stats else 0.0)
        colors.append(TRANSPORT_COLORS[result.workload.transport])
    bars = ax.bar(range(len(names)), means, yerr=errors, color=colors, capsize=3)
    ax.bar_label(bars, labels=["-" if math.isnan(m) else f"{m:.1f}" for m in means], fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")


def comparison(measured: list[WorkloadResult], path: Path) -> Path:
    figure = _figure(max(10.0, 1.6 * len(measured) + 4), 4.8)
    goodput, utilization, delay = figure.subplots(1, 3)
    _bars(goodput, measured, "goodput_mbps", "goodput (Mbit/s)")
    goodput.set_title("Goodput")
    _bars(utilization, measured, "utilization", "delivered downlink / link capacity (%)", scale=100.0)
    utilization.axhline(100.0, color="gray", linestyle=":", linewidth=1)
    utilization.set_ylim(0, max(115.0, utilization.get_ylim()[1]))  # room for the labels above a full link
    utilization.set_title("Utilization of the links' capacity")
    _bars(delay, measured, "delay_p95_ms", "95th-percentile one-way delay (ms)")
    delay.set_title("Packet delay, 95th percentile")
    _transport_legend(figure, {result.workload.transport for result in measured})
    figure.suptitle("Transports compared on the same emulated network (mean ± sd over repetitions)")
    return _save(figure, path)


def throughput_vs_delay(measured: list[WorkloadResult], path: Path) -> Path:
    """Pantheon's view: goodput against 95th-percentile delay, delay axis reversed so better is up and right."""
    figure = _figure(7.5, 5.2)
    ax = figure.subplots()
    points = []
    for result in measured:
        summary = result.summary()
        if summary["delay_p95_ms"]:
            points.append((result, summary["delay_p95_ms"]["mean"], summary["goodput_mbps"]["mean"]))
    for rank, (result, x, y) in enumerate(sorted(points, key=lambda point: point[1])):
        ax.scatter([x], [y], color=TRANSPORT_COLORS[result.workload.transport], s=40, zorder=3)
        below = rank % 2 == 1  # neighbours along the delay axis alternate above and below their points
        offset, va = ((0, -9), "top") if below else ((0, 7), "bottom")
        ax.annotate(_label(result), (x, y), textcoords="offset points", xytext=offset, ha="center", va=va, fontsize=8)
    if points:
        worst, best = max(x for _, x, _ in points), min(x for _, x, _ in points)
        margin = 0.2 * max(worst - best, worst * 0.1)
        ax.set_xlim(worst + margin, max(best - margin, 0.0))
        ax.set_ylim(0, 1.15 * max(y for _, _, y in points))
    ax.set_xlabel("95th-percentile one-way delay (ms, reversed: better to the right)")
    ax.set_ylabel("goodput (Mbit/s)")
    ax.grid(alpha=0.3)
    ax.set_title("Throughput vs delay (Pantheon-style)")
    _transport_legend(figure, {result.workload.transport for result, _, _ in points})
    return _save(figure, path)
