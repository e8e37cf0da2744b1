"""The controller's own metrics: one Prometheus registry, served over HTTP (`[metrics] listen`) and in `GetStats`
(`tngctl stats`), so both show the same numbers. docs/controller.md ("Metrics") lists the names."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tng_controller.pb import policy_pb2 as pb

LOGGER = logging.getLogger(__name__)
PREFIX = "tng_controller_"
# P4Runtime writes take from a fraction of a millisecond (one entry on a quiet BMv2) to seconds (a full sync).
WRITE_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
REASONS = ("sync", "new_flows", "link_monitor")  # why a switch's tables were reconciled
OUTCOMES = ("applied", "refused")  # of a policy change

Gauges = Callable[[], Iterable[Metric]]


class _Callback(Collector):
    def __init__(self, collect: Gauges) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()


class Metrics:
    """Counters and histograms the controller's parts update as things happen, and gauges read from their state
    when scraped (registered with `gauges`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.switch_writes = Counter(
            PREFIX + "switch_writes", "P4Runtime WriteRequests sent, per switch", ["switch"], registry=r
        )
        self.switch_write_updates = Counter(
            PREFIX + "switch_write_updates",
            "Updates (entry inserts, modifies, deletes) written",
            ["switch"],
            registry=r,
        )
        self.switch_write_errors = Counter(
            PREFIX + "switch_write_errors", "WriteRequests the switch refused or that failed", ["switch"], registry=r
        )
        self.switch_write_seconds = Histogram(
            PREFIX + "switch_write_seconds",
            "Time from sending a WriteRequest to its answer",
            ["switch"],
            buckets=WRITE_BUCKETS_S,
            registry=r,
        )
        self.reconcile_runs = Counter(
            PREFIX + "reconcile_runs",
            "Reconciliations of a switch's tables with what it should hold (sync on connect, refreshes)",
            ["switch", "reason"],
            registry=r,
        )
        self.reconcile_corrections = Counter(
            PREFIX + "reconcile_corrections",
            "Updates reconciliations wrote: entries that were missing, stale or different",
            ["switch", "reason"],
            registry=r,
        )
        self.digest_lists = Counter(
            PREFIX + "digest_lists", "New-flow digest lists received (and acked)", ["switch"], registry=r
        )
        self.digested_flows = Counter(PREFIX + "digested_flows", "Flows in new-flow digests", ["switch"], registry=r)
        self.classified_flows = Counter(
            PREFIX + "classified_flows", "Digested flows that got a traffic class", ["switch"], registry=r
        )
        self.link_samples = Counter(
            PREFIX + "link_monitor_samples",
            "Port transmit counter readings the link monitor took",
            ["switch"],
            registry=r,
        )
        self.policy_changes = Counter(
            PREFIX + "policy_changes", "Policy changes (sets and deletes) by outcome", ["outcome"], registry=r
        )
        self.policy_batches = Counter(PREFIX + "policy_batches", "Batches of policy changes written", registry=r)
        self.policy_batch_size = Histogram(
            PREFIX + "policy_batch_size", "Changes per written batch", buckets=BATCH_BUCKETS, registry=r
        )
        for outcome in OUTCOMES:
            self.policy_changes.labels(outcome)

    def add_switch(self, switch: str) -> None:
        """Starts the switch's counters at 0, so that they are exported (and rates computed) before they count."""
        for counter in (
            self.switch_writes,
            self.switch_write_updates,
            self.switch_write_errors,
            self.switch_write_seconds,
            self.digest_lists,
            self.digested_flows,
            self.classified_flows,
            self.link_samples,
        ):
            counter.labels(switch)
        for reason in REASONS:
            self.reconcile_runs.labels(switch, reason)
            self.reconcile_corrections.labels(switch, reason)

    def replica(self) -> ReplicaMetrics:
        """The counters of a replica of a replicated controller (one controller has none)."""
        return ReplicaMetrics(self.registry)

    def gauges(self, collect: Gauges) -> None:
        """Adds gauges computed when scraped (from the event loop: the HTTP endpoint and GetStats run on it)."""
        self.registry.register(_Callback(collect))

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)

    def samples(self) -> list[pb.MetricSample]:
        """Every sample but histogram buckets and creation times, as GetStats carries them."""
        return [
            pb.MetricSample(name=sample.name, labels=sample.labels, value=sample.value)
            for family in self.registry.collect()
            for sample in family.samples
            if not sample.name.endswith(("_bucket", "_created"))
        ]


class ReplicaMetrics:
    """A replica's leadership and etcd counters, in `registry` (None: a registry of their own, read by nobody)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry or CollectorRegistry()
        self.elections_won = Counter(PREFIX + "elections_won", "Times this replica became the leader", registry=r)
        self.takeovers = Counter(
            PREFIX + "takeovers", "Elections won after another replica had led (a takeover)", registry=r
        )
        self.leadership_lost = Counter(
            PREFIX + "leadership_lost", "Times this replica stopped leading (lease lost or another leads)", registry=r
        )
        self.etcd_failovers = Counter(
            PREFIX + "etcd_failovers", "Times the etcd client moved to another endpoint", registry=r
        )

    def won(self, *, takeover: bool) -> None:
        self.elections_won.inc()
        if takeover:
            self.takeovers.inc()

    def lost(self) -> None:
        self.leadership_lost.inc()


def gauge(
    name: str, documentation: str, labels: Iterable[str], values: Iterable[tuple[Iterable[str], float]]
) -> Metric:
    """A gauge family of labelled values, for `Metrics.gauges` callbacks."""
    family = GaugeMetricFamily(PREFIX + name, documentation, labels=list(labels))
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


async def serve(metrics: Metrics, host: str, port: int) -> asyncio.Server:
    """Serves `GET /metrics` (Prometheus text format) on host:port; anything else gets 404."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            target = request.split(b"\r\n", 1)[0].split(b" ")
            if len(target) >= 2 and target[0] == b"GET" and target[1].split(b"?")[0] == b"/metrics":
                status, kind, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), metrics.exposition()
            else:
                status, kind, body = b"404 Not Found", b"text/plain", b"only GET /metrics is served here\n"
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + kind
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a client that sent no complete request, or left: nothing to answer
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    LOGGER.info("metrics on http://%s:%d/metrics", host, port)
    return server
