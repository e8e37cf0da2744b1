"""From linkem counter samples to per-link series, totals and pooled delay percentiles."""

from dataclasses import replace

import pytest
from tng_lab.delay import Service
from tng_lab.linkem import Counters, LinkCounters
from tng_lab.timeline import Sample, path_result, pooled_delay

ZERO = Counters(**{name: 0 for name in Counters.__dataclass_fields__})


def sample(t: float, forwarded: int, accepted: int, queue: int, up_bytes: int = 0) -> Sample:
    down = replace(
        ZERO,
        packets_in=accepted + 2,
        dropped_queue=2,
        forwarded_packets=forwarded,
        forwarded_bytes=forwarded * 1500,
        queue_packets=queue,
        queue_bytes=queue * 1500,
    )
    return Sample(t, {"lte": LinkCounters(down, replace(ZERO, forwarded_bytes=up_bytes))})


def test_series_totals_and_delay_of_a_rate_link() -> None:
    # 10 s after linkem started; 1000 packets per 0.5 s = 24 Mbit/s; the queue grows from 0 to 100 packets.
    samples = [sample(10.0, 0, 0, 0), sample(10.5, 1000, 1000, 100, 62_500), sample(11.0, 2000, 2000, 100, 62_500)]
    service = Service(propagation_ms=20.0, rate_bps=24e6)
    result = path_result(samples, "lte", service, linkem_start=0.0)
    assert result.series.t_s == [0.5, 1.0]
    assert result.series.down_mbps == pytest.approx([24.0, 24.0])
    assert result.series.up_mbps == pytest.approx([1.0, 0.0])
    assert result.series.capacity_mbps == [24.0, 24.0]
    assert result.series.packets == [1000, 1000]  # accepted: arrivals minus queue drops
    # First interval starts with an empty queue: 0.5 ms for the packet itself; then 100 packets ahead: 50.5 ms.
    assert result.series.delay_ms == pytest.approx([20.5, 70.5])
    assert result.down_bytes == 3_000_000 and result.up_bytes == 62_500
    assert result.down_mbps == pytest.approx(24.0)
    delay = pooled_delay([result])
    assert delay.p50 == pytest.approx(20.5) and delay.p95 == pytest.approx(70.5)
    assert delay.mean == pytest.approx(45.5)


def test_idle_link_has_no_delay_samples() -> None:
    samples = [sample(0.0, 0, 0, 0), sample(0.2, 0, 0, 0)]
    result = path_result(samples, "lte", Service(propagation_ms=5.0), linkem_start=0.0)
    assert result.series.capacity_mbps == [None]
    assert pooled_delay([result]).p95 is None
