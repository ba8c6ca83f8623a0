"""``kip714_log_*`` of the ingest log in Kafka: acknowledgements, refusals, group lag per partition.

Read at scrape time from the producer's counters (``KafkaPushLog.stats``)
and from each exporter's consumer (``KafkaExporterHost``): each node shows
the lag of the partitions its members are assigned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from telemetry.ingest.kafka_log import ACK_BUCKETS_S
from telemetry.server.kafka_exporter_host import KafkaExporterHost

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from prometheus_client.core import Metric

    from telemetry.ingest.kafka_log import KafkaPushLog
    from telemetry.server.exporter_host import ExporterHost

__all__ = ["KafkaLogCollector"]


class KafkaLogCollector(Collector):
    def __init__(self, log: KafkaPushLog, hosts: Sequence[ExporterHost]) -> None:
        self.log = log
        self.hosts = hosts

    def collect(self) -> Iterable[Metric]:
        stats = self.log.stats
        yield CounterMetricFamily(
            "kip714_log_appends", "Pushes produced to the pushes topic.", value=stats.appends
        )
        ack = HistogramMetricFamily(
            "kip714_log_ack_seconds",
            "From producing a push to the cluster's acknowledgement (acks=all).",
        )
        running = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip(ACK_BUCKETS_S, stats.ack_bucket_counts, strict=False):
            running += count
            buckets.append((repr(bound), float(running)))
        buckets.append(("+Inf", float(running + stats.ack_bucket_counts[-1])))
        ack.add_metric([], buckets, stats.ack_seconds_total)
        yield ack
        yield CounterMetricFamily(
            "kip714_log_delivery_failures",
            "Pushes the cluster did not acknowledge in time (answered as refused, throttled).",
            value=stats.delivery_failures,
        )
        yield CounterMetricFamily(
            "kip714_log_refused_unavailable",
            "Pushes refused (THROTTLING_QUOTA_EXCEEDED / 503) while the cluster could not be "
            "reached or the pushes topic was missing.",
            value=stats.refused_unavailable,
        )
        full = GaugeMetricFamily(
            "kip714_log_full",
            "1 while pushes are refused; the reason label says why.",
            labels=["reason"],
        )
        full.add_metric(
            [stats.last_refusal_reason if stats.full else ""], 1.0 if stats.full else 0.0
        )
        yield full
        lag = GaugeMetricFamily(
            "kip714_log_group_lag_records",
            "Records of the pushes topic not yet exported, per exporter's group and partition "
            "assigned to this node (the end as last fetched minus the next offset).",
            labels=["exporter", "group", "partition"],
        )
        undecodable = CounterMetricFamily(
            "kip714_log_undecodable_records",
            "Records of the pushes topic that do not decode, skipped, per exporter.",
            labels=["exporter"],
        )
        for host in self.hosts:
            if not isinstance(host, KafkaExporterHost):
                continue
            for partition, records in sorted(host.lags.items()):
                lag.add_metric([host.name, host.group, str(partition)], float(records))
            undecodable.add_metric([host.name], float(host.undecodable))
        yield lag
        yield undecodable
