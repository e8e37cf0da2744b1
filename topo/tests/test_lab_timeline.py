"""From linkem counter samples to per-link series, totals and pooled delay percentiles."""

from dataclasses import replace

import pytest
from tng_lab.delay import Service, TraceSchedule
from tng_lab.linkem import Counters, LinkCounters
from tng_lab.timeline import Sample, capacity_and_utilization, path_result, pooled_delay

ZERO = Counters(**{name: 0 for name in Counters.__dataclass_fields__})


def sample(
    t: float, forwarded: int, accepted: int, queue: int, up_bytes: int = 0, grid_ms: int | None = None
) -> Sample:
    down = replace(
        ZERO,
        packets_in=accepted + 2,
        dropped_queue=2,
        forwarded_packets=forwarded,
        forwarded_bytes=forwarded * 1500,
        queue_packets=queue,
        queue_bytes=queue * 1500,
    )
    grid = round(t * 1e3) if grid_ms is None else grid_ms
    return Sample(t, grid, {"lte": LinkCounters(down, replace(ZERO, forwarded_bytes=up_bytes))})


def test_series_totals_and_delay_of_a_rate_link() -> None:
    # The run's reset at 10 s; 1000 packets per 0.5 s = 24 Mbit/s; the queue grows from 0 to 100 packets.
    samples = [
        sample(10.0, 0, 0, 0, grid_ms=0),
        sample(10.5, 1000, 1000, 100, 62_500, grid_ms=500),
        sample(11.0, 2000, 2000, 100, 62_500, grid_ms=1000),
    ]
    service = Service(propagation_ms=20.0, rate_bps=24e6)
    result = path_result(samples, "lte", service, trace_origin=10.0, duration_ms=1000)
    assert result.series.t_s == [0.5, 1.0]
    assert result.series.down_mbps == pytest.approx([24.0, 24.0])
    assert result.series.up_mbps == pytest.approx([1.0, 0.0])
    assert result.series.capacity_mbps == [24.0, 24.0]
    assert result.series.packets == [1000, 1000]  # accepted: arrivals minus queue drops
    # First interval starts with an empty queue: 0.5 ms for the packet itself; then 100 packets ahead: 50.5 ms.
    assert result.series.delay_ms == pytest.approx([20.5, 70.5])
    assert result.down_bytes == 3_000_000 and result.up_bytes == 62_500
    assert result.down_mbps == pytest.approx(24.0)
    assert result.capacity_mbps == 24.0
    assert capacity_and_utilization([result]) == (24.0, pytest.approx(1.0))
    delay = pooled_delay([result])
    assert delay.p50 == pytest.approx(20.5) and delay.p95 == pytest.approx(70.5)
    assert delay.mean == pytest.approx(45.5)


def test_idle_link_has_no_delay_samples() -> None:
    samples = [sample(0.0, 0, 0, 0), sample(0.2, 0, 0, 0)]
    result = path_result(samples, "lte", Service(propagation_ms=5.0), trace_origin=0.0, duration_ms=200)
    assert result.series.capacity_mbps == [None]
    assert pooled_delay([result]).p95 is None
    assert capacity_and_utilization([result]) == (None, None)


def test_capacity_follows_the_grid_so_runs_on_a_trace_get_the_same_series() -> None:
    # One opportunity per ms (12 Mbit/s) in the first 100 ms of every 400 ms, then one at 400 ms.
    trace = TraceSchedule(tuple([*range(1, 101), 400]))
    service = Service(propagation_ms=10.0, trace=trace)
    # Two runs read their counters at different moments after the grid instants (the sampler wakes up late).
    punctual = [sample(5.0 + k * 0.2, 100 * k, 100 * k, 0, grid_ms=200 * k) for k in range(5)]
    late = [sample(9.0 + k * 0.2 + 0.013 * (k % 3), 100 * k, 100 * k, 0, grid_ms=200 * k) for k in range(5)]
    first = path_result(punctual, "lte", service, trace_origin=5.0, duration_ms=800)
    second = path_result(late, "lte", service, trace_origin=9.0, duration_ms=800)
    assert first.series.capacity_mbps == second.series.capacity_mbps
    # [0, 200): 100 opportunities; [200, 400): none (400 belongs to the next bin); [400, 600): 400 and 401..500.
    assert first.series.capacity_mbps == pytest.approx([6.0, 0.0, 6.06, 0.0])
    assert first.series.t_s == second.series.t_s == [0.2, 0.4, 0.6, 0.8]
    assert first.series.down_mbps != second.series.down_mbps  # delivered rates use the real sample times
    assert first.capacity_mbps == pytest.approx(201 * 1500 * 8 / 0.8 / 1e6)
    capacity, utilization = capacity_and_utilization([first, second])
    assert capacity == pytest.approx(2 * 3.015)
    assert utilization == pytest.approx((first.down_mbps + second.down_mbps) / capacity)


def test_capacity_and_utilization_cover_the_duration_not_a_longer_run() -> None:
    # 12 Mbit/s (one opportunity per ms); the workload's duration is 1 s, but its client ran 0.4 s longer, draining
    # at 6 Mbit/s.
    trace = TraceSchedule(tuple(range(1, 1001)))
    samples = [sample(0.2 * k, 200 * k if k <= 5 else 1000 + 100 * (k - 5), 0, 0, grid_ms=200 * k) for k in range(8)]
    result = path_result(samples, "lte", Service(propagation_ms=10.0, trace=trace), trace_origin=0.0, duration_ms=1000)
    assert result.capacity_mbps == pytest.approx(999 * 1500 * 8 / 1e6)  # [0, 1000 ms): the one at 1000 ms is later
    assert result.measured_down_mbps == pytest.approx(12.0)  # 1000 packets in the first second
    assert result.down_mbps == pytest.approx(1200 * 1500 * 8 / 1.4 / 1e6)  # the whole run, drain included
    assert capacity_and_utilization([result])[1] == pytest.approx(1000 / 999)
    # A run that ended before its duration is measured up to its end.
    short = path_result(
        samples[:3], "lte", Service(propagation_ms=10.0, trace=trace), trace_origin=0.0, duration_ms=1000
    )
    assert short.capacity_mbps == pytest.approx(399 * 1500 * 8 / 0.4 / 1e6)
