"""The latest value of every client series, kept per client instance until it goes away.

Each data point becomes one series: its family (the translated metric name
and kind) and its labels (the pusher's identity, ``broker_id`` for a
forwarded push, and the point's attributes). Gauges and non-monotonic sums
keep the last value; monotonic sums are counters, and histograms
Prometheus histograms: a cumulative point replaces the value, a delta point
is added to it (a delta histogram whose bounds changed starts over).
Exponential histograms and summaries are not translated (counted).

A client instance's series go away with its terminating push, or
max(60 s, 3 × its push interval) after its last push, when Kafka's
``ClientMetricsManager`` would forget the instance too. ``max_series``
bounds memory: points that would start a series beyond it are dropped and
counted. All methods are thread-safe: pushes are applied and scrapes
rendered in worker threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from exporters.otlp_rows import flatten_batch, iter_rows
from exporters.prometheus.names import Kind, label_name, metric_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import LoggedPush

__all__ = ["IDENTITY_LABELS", "Family", "Series", "SeriesStats", "SeriesStore"]

#: Labels every series has, from the push context (``""`` when unknown).
IDENTITY_LABELS: Final = (
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
    "principal",
)
#: The resource attribute a forwarded push carries its broker's id in, and its label.
_BROKER_ATTRIBUTE: Final = ("kafka.broker.id", "broker_id")
#: Kafka's ClientMetricsManager forgets an instance after max(this, 3 × interval).
MIN_EXPIRY_MS: Final = 60_000


@dataclass(slots=True)
class SeriesStats:
    pushes: int = 0
    series: int = 0
    dropped_points: int = 0  # a new series beyond max_series
    unsupported_points: int = 0  # exponential histograms, summaries, no value
    type_conflicts: int = 0  # a name already used by a family of another kind
    terminated_instances: int = 0
    expired_instances: int = 0


@dataclass(slots=True)
class Series:
    labels: dict[str, str]
    value: float = 0.0
    bounds: tuple[float, ...] = ()
    bucket_counts: list[int] = field(default_factory=list)
    count: int = 0
    sum: float = 0.0


@dataclass(slots=True)
class Family:
    name: str
    kind: Kind
    help: str
    series: dict[tuple[tuple[str, str], ...], Series] = field(default_factory=dict)


@dataclass(slots=True)
class _Instance:
    deadline_ms: int
    keys: set[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=set)


class SeriesStore:
    """Series by family, and which instance owns each; see the module docstring."""

    def __init__(self, max_series: int) -> None:
        self.max_series = max_series
        self.stats = SeriesStats()
        self._families: dict[str, Family] = {}
        self._instances: dict[str, _Instance] = {}
        self._count = 0
        self._lock = threading.Lock()

    def apply(self, pushes: Sequence[LoggedPush]) -> None:
        """Take a batch of pushes in log order (blocking: call it from a worker thread)."""
        columns, _ = flatten_batch(p for p in pushes if not p.terminating)
        rows = list(iter_rows(columns))
        with self._lock:
            for push in pushes:
                self.stats.pushes += 1
                if push.terminating:
                    self._forget(push.client_instance_id)
                    self.stats.terminated_instances += 1
                    continue
                deadline = push.received_time_ms + max(MIN_EXPIRY_MS, 3 * push.push_interval_ms)
                instance = self._instances.setdefault(push.client_instance_id, _Instance(0))
                instance.deadline_ms = max(instance.deadline_ms, deadline)
            for row in rows:
                self._apply_row(row)
            self.stats.series = self._count

    def expire(self, now_ms: int) -> None:
        """Forget the instances whose last push is older than their expiry."""
        with self._lock:
            gone = [i for i, state in self._instances.items() if state.deadline_ms <= now_ms]
            for instance_id in gone:
                self._forget(instance_id)
            self.stats.expired_instances += len(gone)
            self.stats.series = self._count

    def snapshot(self) -> list[Family]:
        """Copies of the families with at least one series, for one scrape."""
        with self._lock:
            return [
                Family(
                    f.name,
                    f.kind,
                    f.help,
                    {
                        key: Series(
                            s.labels, s.value, s.bounds, list(s.bucket_counts), s.count, s.sum
                        )
                        for key, s in f.series.items()
                    },
                )
                for f in self._families.values()
                if f.series
            ]

    def _forget(self, instance_id: str) -> None:
        state = self._instances.pop(instance_id, None)
        if state is None:
            return
        for name, key in state.keys:
            family = self._families.get(name)
            if family is not None and family.series.pop(key, None) is not None:
                self._count -= 1

    def _apply_row(self, row: dict[str, Any]) -> None:
        kind = _kind(row)
        instance = self._instances.get(row["client_instance_id"])
        if kind is None or instance is None:
            self.stats.unsupported_points += kind is None
            return
        name = metric_name(row["metric_name"], row["unit"], kind)
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Family(name, kind, row["metric_name"])
        elif family.kind != kind:
            self.stats.type_conflicts += 1
            return
        labels = _labels(row)
        key = tuple(sorted(labels.items()))
        series = family.series.get(key)
        if series is None:
            if self._count >= self.max_series:
                self.stats.dropped_points += 1
                return
            series = family.series[key] = Series(labels)
            self._count += 1
            instance.keys.add((name, key))
        _update(series, row, kind)


def _kind(row: dict[str, Any]) -> Kind | None:
    metric_type = row["metric_type"]
    if metric_type == "gauge":
        return "gauge" if row["value"] is not None else None
    if metric_type == "sum":
        if row["value"] is None:
            return None
        return "counter" if row["is_monotonic"] else "gauge"
    if metric_type == "histogram" and row["bucket_counts"] is not None:
        return "histogram"
    return None


def _labels(row: dict[str, Any]) -> dict[str, str]:
    labels = {name: row[name] or "" for name in IDENTITY_LABELS}
    broker = row["resource_attributes"].get(_BROKER_ATTRIBUTE[0])
    if broker is not None:
        labels[_BROKER_ATTRIBUTE[1]] = broker
    for key, value in row["attributes"].items():
        labels.setdefault(label_name(key), value)  # identity labels win a clash
    return labels


def _update(series: Series, row: dict[str, Any], kind: Kind) -> None:
    delta = row["temporality"] == "delta"
    if kind != "histogram":
        value = float(row["value"])
        series.value = series.value + value if delta and row["metric_type"] == "sum" else value
        return
    bounds = tuple(b if b is not None else float("inf") for b in row["explicit_bounds"] or ())
    counts = [int(c) for c in row["bucket_counts"]]
    if delta and series.bounds == bounds and len(series.bucket_counts) == len(counts):
        series.bucket_counts = [a + b for a, b in zip(series.bucket_counts, counts, strict=True)]
        series.count += int(row["count"] or 0)
        series.sum += float(row["sum"] or 0.0)
    else:
        series.bounds, series.bucket_counts = bounds, counts
        series.count, series.sum = int(row["count"] or 0), float(row["sum"] or 0.0)
