"""From linkem counter samples taken during a run to per-link series, totals and the packet delay distribution.

A run starts by resetting every link (`linkem.reset`): the reset instant is the trace's time 0. The runner then
samples on a grid of `sample_ms` from that instant. The capacity a link offered is computed on the grid (the trace's
delivery opportunities in each grid interval), so two runs on the same link get the same capacity series, however
late the sampler woke up; the delivered rates use the times the counters were actually read. A run's capacity and
utilization cover its measured interval: from the reset to the last grid instant within the workload's duration,
the interval its goodput is counted in (a transport still draining its send buffer after that does not stretch it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from tng_lab.delay import Service, weighted_mean, weighted_percentile
from tng_lab.linkem import Counters, LinkCounters
from tng_lab.results import Delay, PathResult, PathSeries

MTU_BYTES = 1500


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # time.monotonic() when the counters were read
    grid_ms: int  # the grid instant the sample was taken for: ms since the run's reset (the trace's time 0)
    links: dict[str, LinkCounters]
    switch_queues: dict[str, int] = field(default_factory=dict)  # link name -> packets in BMv2's egress queue


def _mbps(byte_delta: int, seconds: float) -> float:
    return byte_delta * 8 / seconds / 1e6 if seconds > 0 else 0.0


def _accepted(before: Counters, after: Counters) -> int:
    arrived = after.packets_in - before.packets_in
    return max(arrived - (after.dropped_queue - before.dropped_queue) - (after.dropped_loss - before.dropped_loss), 0)


def path_result(
    samples: list[Sample],
    name: str,
    service: Service,
    trace_origin: float,
    duration_ms: float,
    switch_pps: int | None = None,
) -> PathResult:
    """Series and totals of link `name` over the samples (the first is taken before the workload starts).

    `trace_origin`: the time.monotonic() of the link's reset, its trace's time 0. `duration_ms`: the workload's
    duration, which bounds the measured interval. `switch_pps`: the rate of BMv2's egress queue toward the link; a
    packet then first waits out that queue (its depth at the sample, drained at that many packets per second), then
    linkem's."""
    start = samples[0].t
    t_s, down, up, capacity, delay, packets = [], [], [], [], [], []
    for before, after in itertools.pairwise(samples):
        seconds = after.t - before.t
        a, b = before.links[name], after.links[name]
        t_s.append(after.grid_ms / 1e3)
        down.append(_mbps(b.down.forwarded_bytes - a.down.forwarded_bytes, seconds))
        up.append(_mbps(b.up.forwarded_bytes - a.up.forwarded_bytes, seconds))
        capacity.append(service.capacity_mbps(before.grid_ms, after.grid_ms))
        accepted = _accepted(a.down, b.down)
        forwarded = b.down.forwarded_packets - a.down.forwarded_packets
        size = (b.down.forwarded_bytes - a.down.forwarded_bytes) / forwarded if forwarded else MTU_BYTES
        switch_wait_ms = before.switch_queues.get(name, 0) * 1e3 / switch_pps if switch_pps else 0.0
        queued_at_ms = (before.t - trace_origin) * 1e3
        delay.append(switch_wait_ms + service.delay_ms(queued_at_ms, a.down.queue_packets, a.down.queue_bytes, size))
        packets.append(accepted)
    first, last = samples[0].links[name], samples[-1].links[name]
    elapsed = samples[-1].t - start
    down_bytes = last.down.forwarded_bytes - first.down.forwarded_bytes
    end = _measured_end(samples, duration_ms)
    measured_bytes = end.links[name].down.forwarded_bytes - first.down.forwarded_bytes
    return PathResult(
        down_bytes=down_bytes,
        up_bytes=last.up.forwarded_bytes - first.up.forwarded_bytes,
        down_mbps=_mbps(down_bytes, elapsed),
        capacity_mbps=service.capacity_mbps(samples[0].grid_ms, end.grid_ms),
        measured_down_mbps=_mbps(measured_bytes, end.t - start),
        dropped_queue=last.down.dropped_queue - first.down.dropped_queue,
        dropped_loss=last.down.dropped_loss - first.down.dropped_loss,
        dropped_other=last.down.dropped_other - first.down.dropped_other,
        ecn_marked=last.down.ecn_marked - first.down.ecn_marked,
        series=PathSeries(t_s, down, up, capacity, delay, packets),
    )


def _measured_end(samples: list[Sample], duration_ms: float) -> Sample:
    """The last sample within the duration on the grid; the last sample of a run that ended sooner."""
    within = [sample for sample in samples[1:] if sample.grid_ms <= duration_ms]
    return within[-1] if within else samples[-1]


def capacity_and_utilization(paths: list[PathResult]) -> tuple[float | None, float | None]:
    """The downlink capacity of a workload's links over the measured interval (their sum) and the share of it they
    delivered; None when a link has no capacity limit (or, for utilization, a trace gave no opportunity at all)."""
    capacities = [path.capacity_mbps for path in paths]
    if not capacities or any(c is None for c in capacities):
        return None, None
    capacity = sum(c for c in capacities if c is not None)
    delivered = sum(path.measured_down_mbps for path in paths)
    return capacity, (delivered / capacity if capacity > 0 else None)


def pooled_delay(paths: list[PathResult]) -> Delay:
    """Packet-weighted delay percentiles over every interval of the given links."""
    values = [d for path in paths for d in path.series.delay_ms]
    weights = [float(p) for path in paths for p in path.series.packets]
    return Delay(
        p50=weighted_percentile(values, weights, 0.50),
        p95=weighted_percentile(values, weights, 0.95),
        mean=weighted_mean(values, weights),
    )
