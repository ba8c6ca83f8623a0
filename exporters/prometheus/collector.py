"""The series store as a prometheus-client ``Collector``: one family per translated name.

Series of one family may carry different attribute labels; the family
gets the union of label names and a series lacks a label as ``""``, which
Prometheus reads as absent.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from exporters.prometheus.series import Family, SeriesStore

__all__ = ["SeriesCollector"]


class SeriesCollector(Collector):
    """Expires stale instances, then yields what is left (called by each scrape)."""

    def __init__(
        self, store: SeriesStore, clock_ms: Callable[[], int] = lambda: time.time_ns() // 10**6
    ) -> None:
        self._store = store
        self._clock_ms = clock_ms

    def collect(self) -> Iterator[Metric]:
        self._store.expire(self._clock_ms())
        for family in self._store.snapshot():
            yield _metric(family)


def _metric(family: Family) -> Metric:
    names = sorted({name for series in family.series.values() for name in series.labels})
    documentation = f"{family.help} (KIP-714 client metric)"
    if family.kind == "gauge":
        gauge = GaugeMetricFamily(family.name, documentation, labels=names)
        for series in family.series.values():
            gauge.add_metric([series.labels.get(n, "") for n in names], series.value)
        return gauge
    if family.kind == "counter":
        counter = CounterMetricFamily(family.name, documentation, labels=names)
        for series in family.series.values():
            counter.add_metric([series.labels.get(n, "") for n in names], series.value)
        return counter
    histogram = HistogramMetricFamily(family.name, documentation, labels=names)
    for series in family.series.values():
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*series.bounds, float("inf")), series.bucket_counts, strict=False):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        if not buckets or buckets[-1][0] != "+Inf":
            buckets.append(("+Inf", series.count))
        histogram.add_metric(
            [series.labels.get(n, "") for n in names], buckets, sum_value=series.sum
        )
    return histogram
