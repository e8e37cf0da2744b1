"""Per-packet delay from linkem's queue, trace schedules, and weighted percentiles."""

import pytest
from tng_lab.delay import Service, TraceSchedule, weighted_mean, weighted_percentile


def test_rate_link_delay_is_queue_drain_plus_own_packet_plus_propagation() -> None:
    service = Service(propagation_ms=25.0, rate_bps=12e6)
    # 100 packets of 1500 bytes ahead at 12 Mbit/s drain in 100 ms; the packet itself takes 1 ms.
    assert service.delay_ms(0.0, 100, 150_000, 1500) == pytest.approx(126.0)
    assert service.delay_ms(0.0, 0, 0, 1500) == pytest.approx(26.0)


def test_unlimited_link_adds_only_propagation() -> None:
    assert Service(propagation_ms=5.0).delay_ms(10.0, 3, 4500, 1500) == 5.0
    assert Service(propagation_ms=5.0).capacity_mbps(0, 100) is None


def test_trace_delay_counts_opportunities_and_wraps_around_the_loop() -> None:
    trace = TraceSchedule((1, 2, 2, 10))  # four opportunities per 10 ms period
    assert trace.nth_after(0.0, 1) == 1
    assert trace.nth_after(1.0, 1) == 2  # strictly after
    assert trace.nth_after(1.0, 2) == 2  # two opportunities in the same millisecond
    assert trace.nth_after(1.0, 4) == 11  # wraps: the next period starts at 10
    assert trace.nth_after(25.0, 1) == 30
    service = Service(propagation_ms=20.0, trace=trace)
    # At t = 3 ms with 1 packet queued, the packet leaves on the 2nd opportunity after 3 ms: 11 ms.
    assert service.delay_ms(3.0, 1, 1500, 1500) == pytest.approx(11 - 3 + 20)


def test_trace_capacity_is_opportunities_per_window() -> None:
    trace = TraceSchedule(tuple(range(1, 1001)))  # one per millisecond: 12 Mbit/s
    assert trace.capacity_mbps(0.5, 1000.5) == pytest.approx(12.0)
    assert trace.capacity_mbps(1500.5, 2500.5) == pytest.approx(12.0)
    assert trace.capacity_mbps(0, 1000) == pytest.approx(999 * 1500 * 8 / 1e6)  # [0, 1000) misses the one at 1000
    assert trace.capacity_mbps(1000, 2000) == pytest.approx(12.0)  # ... which the next window starts with
    assert Service(0.0, trace=trace).capacity_mbps(0.5, 200.5) == pytest.approx(12.0)


def test_weighted_percentile_counts_packets_not_samples() -> None:
    values, weights = [10.0, 100.0], [96.0, 4.0]
    assert weighted_percentile(values, weights, 0.95) == 10.0
    assert weighted_percentile(values, weights, 0.97) == 100.0
    assert weighted_percentile([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1], 0.5) == 2.0
    assert weighted_percentile([5.0], [0.0], 0.5) is None
    assert weighted_mean(values, weights) == pytest.approx(13.6)
