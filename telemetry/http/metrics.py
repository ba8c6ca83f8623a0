"""The HTTP ingestion routes' counters as a Prometheus collector, read at scrape time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from prometheus_client.core import Metric

    from telemetry.http.connections import HttpConnectionStats
    from telemetry.http.ingest import HttpIngestStats

__all__ = ["HttpConnectionCollector", "HttpIngestCollector"]


class HttpIngestCollector(Collector):
    """``kip714_http_ingest_responses_total{route,status}``, and the OTLP route's identity
    cache (``kip714_http_identity_cache_bytes``, its byte bound's measure, and ``_entries``)
    and decoding queue (``kip714_http_otlp_decode_queued``)."""

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
        cache = self.stats.identity_cache
        if cache is not None:
            yield GaugeMetricFamily(
                "kip714_http_identity_cache_bytes",
                "Bytes the OTLP route's identity cache holds "
                "(bounded by [telemetry] identity_cache_max_bytes).",
                value=cache.held_bytes,
            )
            yield GaugeMetricFamily(
                "kip714_http_identity_cache_entries",
                "Identities the OTLP route's identity cache holds.",
                value=len(cache),
            )
        decoder = self.stats.decoder
        if decoder is not None:
            yield GaugeMetricFamily(
                "kip714_http_otlp_decode_queued",
                "OTLP bodies waiting for a decoding thread ([http] decode_threads).",
                value=decoder.queued(),
            )


class HttpConnectionCollector(Collector):
    """``kip714_http_connections`` (open), ``kip714_http_connections_refused_total{reason}``,
    ``kip714_http_connections_closed_total{reason}`` (timeouts)."""

    def __init__(self, stats: HttpConnectionStats) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Metric]:
        stats = self.stats
        yield GaugeMetricFamily(
            "kip714_http_connections", "HTTP connections open now.", value=stats.open
        )
        yield _by_reason(
            "kip714_http_connections_refused",
            "HTTP connections closed unserved by [limits] or [[quotas.ips]], by reason.",
            stats.refused,
        )
        yield _by_reason(
            "kip714_http_connections_closed",
            "HTTP connections closed by the server for a header or body timeout, by reason.",
            stats.closed,
        )


def _by_reason(name: str, documentation: str, counts: Mapping[str, int]) -> Metric:
    family = CounterMetricFamily(name, documentation, labels=["reason"])
    for reason, count in sorted(counts.items()):
        family.add_metric([reason], count)
    return family
