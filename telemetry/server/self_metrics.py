"""The server's own metrics for Prometheus, read from plain counters at scrape time.

The hot paths (the listener, the manager, the log's writer thread, the
exporter hosts) keep plain integer counters; this collector turns them into
Prometheus families only when ``/metrics`` is scraped, so measuring costs
nothing per push. Names follow Prometheus conventions with a ``kip714_``
prefix, base units, and ``_total`` for counters.
"""

from __future__ import annotations

import asyncio
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from exporters.iceberg.exporter import COMMIT_BUCKETS_S
from exporters.iceberg.retention import RetentionStats
from telemetry.enforcement.metrics import gather_quota_families, quota_families
from telemetry.ingest import FSYNC_BUCKETS_S
from telemetry.server.exporter_host import EXPORT_BUCKETS_S

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from aiohttp import web

    from exporters.iceberg.retention import PeriodicRetention
    from telemetry.core.manager import TelemetryManager
    from telemetry.http.authentication import HttpAuthenticator
    from telemetry.ingest import IngestLog
    from telemetry.kafka.listener import KafkaListener
    from telemetry.server.exporter_host import ExporterHost


def cumulative_buckets(bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, float]]:
    """Non-cumulative counts per bound (plus overflow) as Prometheus's cumulative buckets."""
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(bounds, counts, strict=False):
        running += count
        buckets.append((repr(bound), float(running)))
    buckets.append(("+Inf", float(running + counts[-1])))
    return buckets


class ServerCollector(Collector):
    """Collects from the live server components."""

    def __init__(
        self,
        manager: TelemetryManager,
        listener: KafkaListener,
        log: IngestLog | None,
        hosts: Sequence[ExporterHost],
        rollup_retention: PeriodicRetention | None = None,
        readiness: Callable[[], list[str]] | None = None,
        lake_rollup_retention: PeriodicRetention | None = None,
    ) -> None:
        self.manager = manager
        self.listener = listener
        self.log = log
        self.hosts = hosts
        self.rollup_retention = rollup_retention
        self.lake_rollup_retention = lake_rollup_retention
        self.readiness = readiness

    @property
    def max_entity_series(self) -> int:
        """``[limits] max_entity_series`` as it stands (SIGHUP changes it)."""
        return self.listener.enforcement.limit_settings.max_entity_series

    def collect(self) -> Iterable[Metric]:
        """Everything at once, on the caller's thread (``/metrics`` uses :meth:`gather`)."""
        yield from self._telemetry()
        yield from self._listener()
        yield from quota_families(
            self.listener.enforcement, self.listener.clock(), self.max_entity_series
        )
        yield from self._rest()

    async def gather(self) -> list[Metric]:
        """:meth:`collect` on the event loop, the quota sensors a slice at a time."""
        families = [*self._telemetry(), *self._listener()]
        families += await gather_quota_families(
            self.listener.enforcement, self.listener.clock, self.max_entity_series
        )
        families += self._rest()
        return families

    def _rest(self) -> Iterable[Metric]:
        yield from self._log()
        yield from self._exporters()
        yield from self._retention()
        if self.readiness is not None:
            yield GaugeMetricFamily(
                "kip714_ready",
                "1 while /readyz answers 200; 0 while it lists reasons (log, exporters, stopping).",
                value=0.0 if self.readiness() else 1.0,
            )

    def _telemetry(self) -> Iterable[Metric]:
        stats = self.manager.stats
        pushes = CounterMetricFamily(
            "kip714_push_requests",
            "PushTelemetry requests answered, by outcome and Kafka error code.",
            labels=["outcome", "error_code"],
        )
        for code, count in sorted(stats.push_responses.items()):
            outcome = "accepted" if code == 0 else "refused"
            pushes.add_metric([outcome, code.name], count)
        yield pushes
        gets = CounterMetricFamily(
            "kip714_get_subscriptions_requests",
            "GetTelemetrySubscriptions requests answered, by Kafka error code.",
            labels=["error_code"],
        )
        for code, count in sorted(stats.get_responses.items()):
            gets.add_metric([code.name], count)
        yield gets
        yield GaugeMetricFamily(
            "kip714_client_instances",
            "Client instances in the cache.",
            value=self.manager.instance_count,
        )
        instances = CounterMetricFamily(
            "kip714_client_instance_events",
            "Client instances created and removed, by event.",
            labels=["event"],
        )
        for event, count in (
            ("created", stats.instances_created),
            ("evicted", stats.instances_evicted),
            ("expired", stats.instances_expired),
            ("disconnected", stats.instances_disconnected),
        ):
            instances.add_metric([event], count)
        yield instances

    def _listener(self) -> Iterable[Metric]:
        stats = self.listener.stats
        yield GaugeMetricFamily(
            "kip714_kafka_connections",
            "Open Kafka-protocol connections.",
            value=stats.connections_open,
        )
        closed = CounterMetricFamily(
            "kip714_kafka_connections_closed",
            "Kafka-protocol connections closed, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(stats.closed_for.items()):
            closed.add_metric([reason], count)
        yield closed
        requests = CounterMetricFamily(
            "kip714_kafka_requests", "Kafka-protocol requests, by API.", labels=["api"]
        )
        for api, count in sorted(stats.requests.items()):
            requests.add_metric([api], count)
        yield requests
        security = self.listener.security
        if security is not None:
            sasl = CounterMetricFamily(
                "kip714_kafka_sasl_authentications",
                "SASL exchanges on the Kafka listener, by result (KIP-368 re-authentications "
                "apart).",
                labels=["result"],
            )
            sasl.add_metric(["authenticated"], security.authentications)
            sasl.add_metric(["reauthenticated"], security.reauthentications)
            sasl.add_metric(["failed"], security.failures)
            yield sasl

    def _log(self) -> Iterable[Metric]:
        if self.log is None:  # the log in Kafka: KafkaLogCollector
            return
        stats = self.log.stats
        yield GaugeMetricFamily(
            "kip714_log_bytes",
            "Bytes the ingest log retains on disk.",
            value=self.log.retained_bytes,
        )
        yield GaugeMetricFamily(
            "kip714_log_end_offset",
            "The next offset the ingest log assigns.",
            value=self.log.log_end,
        )
        yield CounterMetricFamily(
            "kip714_log_appends", "Pushes appended to the ingest log.", value=stats.appends
        )
        fsync = HistogramMetricFamily(
            "kip714_log_fsync_seconds", "Latency of the ingest log's group-commit fsyncs."
        )
        fsync.add_metric(
            [],
            cumulative_buckets(FSYNC_BUCKETS_S, stats.fsync_bucket_counts),
            stats.fsync_seconds_total,
        )
        yield fsync
        full = GaugeMetricFamily(
            "kip714_log_full",
            "1 while pushes are refused because exporters are too far behind "
            "for the disk budget; the reason label says which.",
            labels=["reason"],
        )
        full.add_metric(
            [stats.last_refusal_reason if stats.full else ""], 1.0 if stats.full else 0.0
        )
        yield full
        yield CounterMetricFamily(
            "kip714_log_refused_full",
            "Pushes refused with THROTTLING_QUOTA_EXCEEDED for the disk budget "
            "or max_pending_decoded_bytes.",
            value=stats.refused_full,
        )
        yield CounterMetricFamily(
            "kip714_log_refused_pending_decoded",
            "Pushes refused because [log] max_pending_decoded_bytes was reached.",
            value=stats.refused_pending_decoded,
        )
        yield GaugeMetricFamily(
            "kip714_log_pending_decoded_bytes",
            "Decoded bytes of pushes logged since start that some exporter has not consumed.",
            value=stats.pending_decoded_bytes,
        )

    def _exporters(self) -> Iterable[Metric]:
        lag = GaugeMetricFamily(
            "kip714_exporter_lag_pushes",
            "Pushes logged but not yet exported, per exporter.",
            labels=["exporter"],
        )
        exported = CounterMetricFamily(
            "kip714_exporter_pushes", "Pushes exported, per exporter.", labels=["exporter"]
        )
        failures = CounterMetricFamily(
            "kip714_exporter_failures", "Failed export attempts, per exporter.", labels=["exporter"]
        )
        skipped = CounterMetricFamily(
            "kip714_exporter_skipped_pushes",
            "Pushes an exporter refused permanently and that were skipped.",
            labels=["exporter"],
        )
        latency = HistogramMetricFamily(
            "kip714_export_duration_seconds",
            "Time of successful export calls, per exporter.",
            labels=["exporter"],
        )
        undecodable = CounterMetricFamily(
            "kip714_landing_undecodable",
            "Logged pushes whose payload is not OTLP, skipped by a landing, per exporter.",
            labels=["exporter"],
        )
        landing_skipped = CounterMetricFamily(
            "kip714_landing_skipped_pushes",
            "Logged pushes a landing skipped whole, per exporter and reason: undecodable "
            "(not OTLP) or max_data_points_per_push (more data points than that option).",
            labels=["exporter", "reason"],
        )
        commit_latency = HistogramMetricFamily(
            "kip714_landing_commit_seconds",
            'Time of a landing\'s own Iceberg commits (per node; with [log] store = "kafka" '
            "the fleet's committer's are kip714_landing_fleet_commit_seconds), with retries.",
            labels=["exporter"],
        )
        plugin_stats = GaugeMetricFamily(
            "kip714_exporter_stat",
            "An exporter's own counters (its stats object's numeric fields), by name.",
            labels=["exporter", "stat"],
        )
        for host in self.hosts:
            exporter_stats = getattr(host.exporter, "stats", None)
            for stat, value in _numeric_fields(exporter_stats):
                plugin_stats.add_metric([host.name, stat], value)
            # A landing's table maintenance (the iceberg exporter's compaction, expiry,
            # retention and orphan cleanup) keeps its own counters beside its stats.
            maintenance = getattr(host.exporter, "maintenance_stats", None)
            for stat, value in _numeric_fields(maintenance):
                plugin_stats.add_metric([host.name, f"maintenance_{stat}"], value)
            skipped_undecodable = getattr(exporter_stats, "undecodable_payloads", None)
            if isinstance(skipped_undecodable, int):  # the landings' FlattenStats
                undecodable.add_metric([host.name], skipped_undecodable)
                landing_skipped.add_metric([host.name, "undecodable"], skipped_undecodable)
            commit_counts = getattr(exporter_stats, "commit_bucket_counts", None)
            if isinstance(commit_counts, list):  # the iceberg landing's own commits
                commit_latency.add_metric(
                    [host.name],
                    cumulative_buckets(COMMIT_BUCKETS_S, commit_counts),
                    float(getattr(exporter_stats, "commit_seconds_total", 0.0)),
                )
            oversized = getattr(exporter_stats, "oversized_pushes", None)
            if isinstance(oversized, int):
                landing_skipped.add_metric([host.name, "max_data_points_per_push"], oversized)
            lag.add_metric([host.name], host.lag)
            exported.add_metric([host.name], host.stats.exported_pushes)
            failures.add_metric([host.name], host.stats.failures)
            skipped.add_metric([host.name], host.stats.skipped_pushes)
            latency.add_metric(
                [host.name],
                cumulative_buckets(EXPORT_BUCKETS_S, host.stats.export_bucket_counts),
                host.stats.export_seconds_total,
            )
        yield from (
            lag,
            exported,
            failures,
            skipped,
            latency,
            undecodable,
            landing_skipped,
            commit_latency,
            plugin_stats,
        )

    def _retention(self) -> Iterable[Metric]:
        """Retention's deletions, per dataset: ``rollups`` and each pruning exporter's name."""
        datasets: list[tuple[str, RetentionStats]] = []
        if self.rollup_retention is not None:
            datasets.append(("rollups", self.rollup_retention.stats))
        if self.lake_rollup_retention is not None:
            datasets.append((self.lake_rollup_retention.name, self.lake_rollup_retention.stats))
        for host in self.hosts:
            stats = getattr(host.exporter, "retention_stats", None)
            if isinstance(stats, RetentionStats):
                datasets.append((host.name, stats))
        partitions = CounterMetricFamily(
            "kip714_retention_deleted_partitions",
            "Hour partitions deleted by retention, per dataset (rollups or an exporter's name).",
            labels=["dataset"],
        )
        deleted_bytes = CounterMetricFamily(
            "kip714_retention_deleted_bytes",
            "Bytes deleted by retention, per dataset.",
            labels=["dataset"],
        )
        failures = CounterMetricFamily(
            "kip714_retention_failures",
            "Retention passes that failed (each is logged and retried), per dataset.",
            labels=["dataset"],
        )
        for dataset, stats in datasets:
            partitions.add_metric([dataset], stats.partitions_deleted)
            deleted_bytes.add_metric([dataset], stats.bytes_deleted)
            failures.add_metric([dataset], stats.failures)
        yield from (partitions, deleted_bytes, failures)


def _numeric_fields(stats: object) -> list[tuple[str, float]]:
    """The int/float fields of an exporter's stats (a dataclass or a plain object)."""
    if stats is None:
        return []
    if dataclasses.is_dataclass(stats):
        names = [f.name for f in dataclasses.fields(stats)]
    else:
        names = [name for name in vars(stats) if not name.startswith("_")]
    values = []
    for name in names:
        value = getattr(stats, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            values.append((name, float(value)))
    return values


class BasicAuthCollector(Collector):
    """HTTP Basic on the ingestion routes: hashes by kind and cost, and what the memo saved."""

    def __init__(self, authenticator: HttpAuthenticator) -> None:
        self.authenticator = authenticator

    def collect(self) -> Iterable[Metric]:
        authenticator = self.authenticator
        stats = authenticator.stats
        hashes = CounterMetricFamily(
            "kip714_http_basic_hashes",
            "Password hashes HTTP Basic computed, by kind (PLAIN's PBKDF2 or a SCRAM mechanism) "
            "and iteration count, unknown users' dummies included.",
            labels=["kind", "iterations"],
        )
        for (kind, iterations), count in sorted(authenticator.work().items()):
            hashes.add_metric([kind, str(iterations)], count)
        yield hashes
        remembered = CounterMetricFamily(
            "kip714_http_basic_remembered",
            "HTTP Basic requests served from a remembered credential (no hash), and remembered "
            "credentials dropped because the user's credential changed or went.",
            labels=["event"],
        )
        remembered.add_metric(["hit"], stats.memo_hits)
        remembered.add_metric(["invalidated"], stats.memo_invalidated)
        yield remembered
        yield GaugeMetricFamily(
            "kip714_http_basic_remembered_credentials",
            "Credentials remembered now (at most 10,000, each for at most 60 s).",
            value=authenticator.memo_entries,
        )


class SelfMetrics:
    """The server's collectors, gathered on the event loop and rendered on a thread of their own.

    Every collector reads state the event loop mutates (plain counters,
    quota sensors whose measurement purges samples), so gathering stays on
    the loop: cheap collectors at once, the quota sensors a slice at a time
    (:meth:`ServerCollector.gather`). What is gathered is plain data, so the
    text (8 MB with 100,000 quota entities before ``max_entity_series``) is
    rendered on one thread of its own, never on the loop nor on its default
    executor; one scrape renders at a time and the others wait their turn.
    """

    def __init__(self, server: ServerCollector) -> None:
        self.server = server
        self.collectors: list[Collector] = []
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kip714-metrics")
        self._turn = asyncio.Lock()

    def register(self, collector: Collector) -> None:
        self.collectors.append(collector)

    async def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition text for an ``Accept`` header, and its content type."""
        async with self._turn:
            families = await self.server.gather()
            for collector in self.collectors:
                families.extend(collector.collect())
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, _render, families, accept)

    def close(self) -> None:
        """Drop a render not yet started; a running one finishes on its own."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def on_cleanup(self, _: web.Application) -> None:
        """The HTTP app's cleanup: :meth:`close`."""
        self.close()


class _Gathered(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def _render(families: list[Metric], accept: str | None) -> tuple[bytes, str]:
    encoder, content_type = choose_encoder(accept or "")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Gathered(families))
    return encoder(registry), content_type
