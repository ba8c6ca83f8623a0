"""The series store as a prometheus-client ``Collector``: one family per translated name.

Each series is rendered with its own labels only. Series of one family may
carry different attribute labels, and giving every series the union of
them (a missing one as ``""``) would let one family's many distinct
attribute keys multiply into every line of the scrape.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporters.prometheus.series import RESERVED_PREFIX

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
    documentation = (
        family.help
        if family.name.startswith(RESERVED_PREFIX)
        else f"{family.help} (KIP-714 client metric)"
    )
    name = family.name
    metric = Metric(name, documentation, family.kind)
    if family.kind == "gauge":
        for series in family.series.values():
            metric.add_sample(name, series.labels, series.value)
        return metric
    if family.kind == "counter":
        for series in family.series.values():
            metric.add_sample(f"{name}_total", series.labels, series.value)
        return metric
    for series in family.series.values():
        running = 0
        has_inf = False
        for bound, count in zip((*series.bounds, float("inf")), series.bucket_counts, strict=False):
            running += count
            has_inf = bound == float("inf")
            le = "+Inf" if has_inf else repr(bound)
            metric.add_sample(f"{name}_bucket", {**series.labels, "le": le}, running)
        if not has_inf:
            metric.add_sample(f"{name}_bucket", {**series.labels, "le": "+Inf"}, series.count)
        metric.add_sample(f"{name}_count", series.labels, series.count)
        metric.add_sample(f"{name}_sum", series.labels, series.sum)
    return metric
