"""The link monitor's arithmetic: depletion-rate estimates of the LTE and Wi-Fi ports from successive egress.port_tx
readings (EWMA), and the qdepl rates they call for, rewritten only when the LTE share moves past a band."""

from __future__ import annotations

from dataclasses import dataclass

MAX_RATE = 0xFFFF  # steer_qdepl's rate parameters are 16 bits


@dataclass(slots=True)
class _Reading:
    byte_count: int
    packet_count: int
    at: float


class LinkRates:
    """Rate estimates (bit/s) of a switch's ports: an EWMA of the transmit rate over each interval in which the port
    sent something. Idle intervals say nothing about how fast a link drains, so they leave the estimate alone; a port
    with a configured capacity starts from it."""

    def __init__(self, weight: float, nominal_bps: dict[int, float]) -> None:
        self._weight = weight
        self._estimates: dict[int, float] = dict(nominal_bps)
        self._last: dict[int, _Reading] = {}

    def observe(self, port: int, byte_count: int, packet_count: int, now: float) -> None:
        """One reading of the port's transmit counters (cumulative) at time `now` (seconds)."""
        last = self._last.get(port)
        self._last[port] = _Reading(byte_count, packet_count, now)
        if last is None or now <= last.at:
            return
        sent_bytes, sent_packets = byte_count - last.byte_count, packet_count - last.packet_count
        if sent_bytes < 0 or sent_packets < 0:
            return  # the counters were reset (the switch restarted): this reading is the new baseline
        if sent_packets == 0:
            return
        sample = sent_bytes * 8 / (now - last.at)
        previous = self._estimates.get(port)
        self._estimates[port] = sample if previous is None else previous + self._weight * (sample - previous)

    def estimate(self, port: int) -> float | None:
        return self._estimates.get(port)

    def forget_readings(self) -> None:
        """The next reading of every port is a new baseline (the counters may have been reset)."""
        self._last.clear()


def qdepl_rates(lte_bps: float, wifi_bps: float) -> tuple[int, int]:
    """steer_qdepl(lte_rate, wifi_rate) for the two links' rates: the same ratio, scaled into 16 bits. Only the ratio
    matters to the pipeline (it compares depth / rate of the two links and splits in proportion to the rates)."""
    top = max(lte_bps, wifi_bps)
    if top <= 0:
        return (1, 1)
    scale = MAX_RATE / top
    return (
        max(1, round(lte_bps * scale)) if lte_bps > 0 else 0,
        max(1, round(wifi_bps * scale)) if wifi_bps > 0 else 0,
    )


class QdeplShare:
    """The rates written to qdepl policies, with hysteresis: lambda_LTE = mu_LTE / (mu_LTE + mu_WiFi) is rewritten
    only when it moved by more than `band` since the last write, and at most once per `interval_s`."""

    def __init__(self, band: float, interval_s: float) -> None:
        self._band = band
        self._interval_s = interval_s
        self.rates: tuple[int, int] | None = None  # None: nothing measured, qdepl policies keep their weights
        self.share: float | None = None
        self._written_at: float | None = None

    def update(self, lte_bps: float | None, wifi_bps: float | None, now: float) -> bool:
        """Takes the links' current estimates; True when the rates to write changed."""
        if lte_bps is None or wifi_bps is None or lte_bps + wifi_bps <= 0:
            return False
        share = lte_bps / (lte_bps + wifi_bps)
        if self.share is not None:
            if abs(share - self.share) <= self._band:
                return False
            if self._written_at is not None and now - self._written_at < self._interval_s:
                return False
        self.share = share
        self.rates = qdepl_rates(lte_bps, wifi_bps)
        self._written_at = now
        return True
