"""The HTTP ingestion routes' counters as a Prometheus collector, read at scrape time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.core import Metric

    from telemetry.http.ingest import HttpIngestStats

__all__ = ["HttpIngestCollector"]


class HttpIngestCollector(Collector):
    """``kip714_http_ingest_responses_total{route,status}``."""

    def __init__(self, stats: HttpIngestStats) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Metric]:
        responses = CounterMetricFamily(
            "kip714_http_ingest_responses",
            "Responses of the HTTP ingestion routes, by route and HTTP status.",
            labels=["route", "status"],
        )
        for (route, status), count in sorted(self.stats.responses.items()):
            responses.add_metric([route, str(status)], count)
        yield responses
