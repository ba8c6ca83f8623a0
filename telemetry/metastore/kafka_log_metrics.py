"""The metadata store's position, lag and skipped records as a Prometheus collector.

Read at scrape time; the shared topic's and the local store's alike (the
local store is never behind: its lag is 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.core import Metric

    from telemetry.metastore.backend import MetadataLogStats

__all__ = ["MetadataLogCollector"]


class MetadataLogCollector(Collector):
    """``kip714_metadata_log_*``: how far this node is behind the metadata log, what it skipped."""

    def __init__(self, stats: MetadataLogStats) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Metric]:
        stats = self.stats
        yield GaugeMetricFamily(
            "kip714_metadata_log_lag_records",
            "Offsets of the metadata topic not yet applied on this node (its end as last "
            "fetched minus the next offset to apply).",
            value=stats.lag_records,
        )
        yield GaugeMetricFamily(
            "kip714_metadata_log_apply_delay_seconds",
            "Seconds from the last applied change's append to the topic (the producing "
            "node's clock) to its application on this node.",
            value=stats.last_apply_delay_s,
        )
        yield GaugeMetricFamily(
            "kip714_metadata_log_position",
            "The next offset of the metadata topic this node applies.",
            value=stats.position,
        )
        yield CounterMetricFamily(
            "kip714_metadata_log_applied_records",
            "Messages of the metadata topic (records of the local store) applied on this "
            "node since it started.",
            value=stats.applied_records,
        )
        yield CounterMetricFamily(
            "kip714_metadata_log_skipped_records",
            "Messages of the metadata topic (records of the local store) skipped: "
            "undecodable, or refused by the admin plane's rules (every node skips them).",
            value=stats.skipped_records,
        )
