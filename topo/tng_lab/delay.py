"""Per-packet one-way delay of the downlink, estimated from linkem's queue, and weighted percentiles.

A packet that reaches a drop-tail FIFO holding `q` packets (`b` bytes) leaves after those and itself were served,
then waits out the propagation delay:
- constant rate `r`: delay = (b + own size) * 8 / r + propagation;
- Mahimahi trace: delay = time until the (q+1)-th delivery opportunity from now + propagation (one packet per
  opportunity, whatever its size; the trace loops, and its time 0 is when linkem started).
The runner samples the queue every `sample_ms`; each sample stands for the packets that the link forwarded in the
interval that follows it, so percentiles are over packets, as in Pantheon (throughput vs 95th-percentile delay).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True, slots=True)
class TraceSchedule:
    """The delivery opportunities (ms) of a looping Mahimahi trace."""

    opportunities_ms: tuple[int, ...]

    @property
    def period_ms(self) -> int:
        return self.opportunities_ms[-1]

    def nth_after(self, t_ms: float, n: int) -> float:
        """Time (ms) of the n-th opportunity strictly after `t_ms` (n >= 1)."""
        period, count = self.period_ms, len(self.opportunities_ms)
        loops, offset = divmod(t_ms, period)
        index = bisect.bisect_right(self.opportunities_ms, offset) + n - 1
        extra_loops, index = divmod(index, count)
        return (loops + extra_loops) * period + self.opportunities_ms[index]

    def capacity_mbps(self, start_ms: float, end_ms: float) -> float:
        """Mean rate of 1500-byte opportunities in [start_ms, end_ms)."""
        if end_ms <= start_ms:
            return 0.0
        return (self.count_before(end_ms) - self.count_before(start_ms)) * 1500 * 8 / ((end_ms - start_ms) * 1e3)

    def count_before(self, t_ms: float) -> int:
        """Opportunities strictly before `t_ms`; loop k holds k * period + each timestamp."""
        loops, offset = divmod(t_ms, self.period_ms)
        in_this_loop = bisect.bisect_left(self.opportunities_ms, offset)
        if loops == 0:
            return in_this_loop
        # The previous loop's last opportunities may fall exactly on t_ms (timestamps run up to the period).
        in_previous_loop = bisect.bisect_left(self.opportunities_ms, offset + self.period_ms)
        return (int(loops) - 1) * len(self.opportunities_ms) + in_previous_loop + in_this_loop


@dataclass(frozen=True, slots=True)
class Service:
    """What serves a direction's queue: a constant rate, a trace, or nothing (unlimited)."""

    propagation_ms: float
    rate_bps: float | None = None
    trace: TraceSchedule | None = None

    def delay_ms(self, t_ms: float, queue_packets: int, queue_bytes: int, packet_bytes: float) -> float:
        """One-way delay of a packet of `packet_bytes` arriving at `t_ms` (since linkem started) behind the queue."""
        if self.rate_bps is not None:
            return (queue_bytes + packet_bytes) * 8 / self.rate_bps * 1e3 + self.propagation_ms
        if self.trace is not None:
            return self.trace.nth_after(t_ms, queue_packets + 1) - t_ms + self.propagation_ms
        return self.propagation_ms

    def capacity_mbps(self, start_ms: float, end_ms: float) -> float | None:
        if self.rate_bps is not None:
            return self.rate_bps / 1e6
        if self.trace is not None:
            return self.trace.capacity_mbps(start_ms, end_ms)
        return None


def weighted_percentile(values: list[float], weights: list[float], q: float) -> float | None:
    """The smallest value whose cumulative weight reaches `q` of the total (nearest rank); None without weight."""
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    total = sum(w for _, w in pairs)
    if total <= 0:
        return None
    cumulative = list(accumulate(w for _, w in pairs))
    index = bisect.bisect_left(cumulative, q * total - 1e-9 * total)
    return pairs[min(index, len(pairs) - 1)][0]


def weighted_mean(values: list[float], weights: list[float]) -> float | None:
    total = sum(weights)
    return sum(v * w for v, w in zip(values, weights, strict=True)) / total if total > 0 else None
