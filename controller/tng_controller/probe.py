"""The link prober's arithmetic, without a switch or a clock of its own: the probes in flight, the windowed minimum
round trip of one LWIP route's probes per (link sent on, port answered on), and the downlink delay difference
d = delay_down(LTE) - delay_down(Wi-Fi) those minima give.

A probe's round trip is its downlink delay, the target's answer and the uplink delay of whichever link the answer
came back on, plus the queueing on the way; the minimum over a window filters the queueing out. Two probes answered
on the same port share the uplink part, so their difference is the downlink difference. When each link's probes are
answered on that link, the uplink delays differ too: the links are taken to be symmetric (half the difference)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

SEQUENCES = 1 << 16  # an ICMP echo sequence number is 16 bits
# A minimum over fewer answers is mostly noise (the controller's own scheduling): a (link, port) pair counts from
# this many answers in the window on.
MIN_ANSWERS = 5


@dataclass(slots=True)
class RttWindow:
    """Round trips of the probes sent on one link and answered on one port, over the last `window_s` seconds."""

    window_s: float
    _samples: deque[tuple[float, float]] = field(default_factory=deque)  # (answered at, round trip), oldest first
    last_at: float = float("-inf")

    def add(self, rtt_s: float, now: float) -> None:
        self._samples.append((now, rtt_s))
        self.last_at = now

    def minimum(self, now: float) -> tuple[float, int] | None:
        """The smallest round trip in the window and how many answers it holds; None without any."""
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        if not self._samples:
            return None
        return min(rtt for _, rtt in self._samples), len(self._samples)


@dataclass(frozen=True, slots=True)
class DelayDifference:
    """d in microseconds, or None with the reason in `state` (else how d was derived), and the round trip through
    the later link (its downlink, the uplink the answers shared) in microseconds: a steered flow's round trip once
    it uses both links."""

    us: float | None
    state: str
    later_rtt_us: float | None = None


@dataclass(frozen=True, slots=True)
class PathRtt:
    sent_on: int
    answered_on: int
    min_rtt_s: float
    answers: int


class RouteProbe:
    """The probes of one LWIP route: counts per link, and the round-trip windows per (link sent on, port answered
    on)."""

    def __init__(self, lte_port: int, wifi_port: int, window_s: float) -> None:
        self.lte_port = lte_port
        self.wifi_port = wifi_port
        self.window_s = window_s
        self.sent = {lte_port: 0, wifi_port: 0}
        self.unanswered = {lte_port: 0, wifi_port: 0}
        self._windows: dict[tuple[int, int], RttWindow] = {}

    def link_name(self, port: int) -> str:
        return {self.lte_port: "lte", self.wifi_port: "wifi"}.get(port, f"port {port}")

    def answered(self, sent_on: int, answered_on: int, rtt_s: float, now: float) -> None:
        window = self._windows.setdefault((sent_on, answered_on), RttWindow(self.window_s))
        window.add(rtt_s, now)

    def rtts(self, now: float) -> list[PathRtt]:
        """The windowed minima, by link sent on and port answered on; pairs without answers in the window left out."""
        found = []
        for (sent_on, answered_on), window in sorted(self._windows.items()):
            minimum = window.minimum(now)
            if minimum is not None:
                found.append(PathRtt(sent_on, answered_on, *minimum))
        return found

    def difference(self, now: float) -> DelayDifference:
        """d from the windowed minima of pairs with MIN_ANSWERS answers: over a port both links' probes were answered
        on (the one answered last if several), else over each link's own port (symmetric links), else unknown with
        the reason."""
        minima: dict[int, dict[int, float]] = {self.lte_port: {}, self.wifi_port: {}}
        answered = {self.lte_port: 0, self.wifi_port: 0}
        for rtt in self.rtts(now):
            answered[rtt.sent_on] += rtt.answers
            if rtt.answers >= MIN_ANSWERS:
                minima[rtt.sent_on][rtt.answered_on] = rtt.min_rtt_s
        lte, wifi = minima[self.lte_port], minima[self.wifi_port]
        for port, answers in ((self.lte_port, lte), (self.wifi_port, wifi)):
            if not answers:
                return DelayDifference(None, self._silence(port, answered[port]))
        common = lte.keys() & wifi.keys()
        if common:
            port = max(common, key=self._answered_last)
            how = f"both links' probes answered on {self.link_name(port)}"
            return DelayDifference((lte[port] - wifi[port]) * 1e6, how, max(lte[port], wifi[port]) * 1e6)
        if self.lte_port in lte and self.wifi_port in wifi:
            lte_rtt, wifi_rtt = lte[self.lte_port], wifi[self.wifi_port]
            how = "each link's probes answered on that link (links taken as symmetric)"
            # The later link's downlink and the earlier link's uplink: half of each round trip.
            return DelayDifference((lte_rtt - wifi_rtt) / 2 * 1e6, how, (lte_rtt + wifi_rtt) / 2 * 1e6)
        answered_on = [
            f"{self.link_name(port)} probes on {', '.join(self.link_name(p) for p in sorted(answers))}"
            for port, answers in ((self.lte_port, lte), (self.wifi_port, wifi))
        ]
        return DelayDifference(None, f"answers came back crossed ({'; '.join(answered_on)}): no common uplink")

    def _answered_last(self, answered_on: int) -> float:
        """When both links' probes were last answered on `answered_on`."""
        return min(self._windows[(sent_on, answered_on)].last_at for sent_on in (self.lte_port, self.wifi_port))

    def _silence(self, port: int, answers: int) -> str:
        name = self.link_name(port)
        if not self.sent[port]:
            return f"no {name} probe sent yet"
        if answers:
            window = f"within the last {self.window_s:g} s"
            return f"{answers} answers to {name} probes {window} (the minimum needs {MIN_ANSWERS} on one port)"
        return (
            f"no answer to {name} probes within the last {self.window_s:g} s "
            f"({self.sent[port]} sent, {self.unanswered[port]} unanswered)"
        )


@dataclass(frozen=True, slots=True)
class _InFlight:
    route: RouteProbe
    sent_on: int
    sent_at: float


class Outstanding:
    """Probes in flight by ICMP sequence number (one counter for a switch's routes); a probe unanswered for
    `timeout_s` is counted as unanswered on its route and forgotten."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._next = 0
        self._in_flight: dict[int, _InFlight] = {}

    def sent(self, route: RouteProbe, port: int, now: float) -> int:
        """Records a probe sent on `port` now and returns its sequence number."""
        while self._next in self._in_flight:  # only after 65536 probes within one timeout
            self._next = (self._next + 1) % SEQUENCES
        sequence = self._next
        self._next = (self._next + 1) % SEQUENCES
        self._in_flight[sequence] = _InFlight(route, port, now)
        route.sent[port] += 1
        return sequence

    def answered(self, sequence: int, answered_on: int, now: float) -> RouteProbe | None:
        """Records the answer to probe `sequence` that came back on port `answered_on`; the probe's route, or None
        for a sequence number not in flight (late, duplicated or not ours)."""
        probe = self._in_flight.pop(sequence, None)
        if probe is None:
            return None
        probe.route.answered(probe.sent_on, answered_on, now - probe.sent_at, now)
        return probe.route

    def expire(self, now: float) -> None:
        for sequence, probe in list(self._in_flight.items()):
            if now - probe.sent_at >= self.timeout_s:
                del self._in_flight[sequence]
                probe.route.unanswered[probe.sent_on] += 1
