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
``ClientMetricsManager`` would forget the instance too. Two series of the
server's own describe each instance (identity labels only):
``kip714_client_last_push_timestamp_seconds`` and
``kip714_client_push_interval_seconds``. They stay max(60 s, 10 × the
interval) after the last push, so an alert rule can still name a client
that stopped pushing after its other series are gone (``absent()`` cannot:
it has no labels to name it by); a terminating push removes them at once,
since a client that said goodbye did not stop unexpectedly. Client metrics
whose names translate into ``kip714_`` are dropped and counted
(``reserved_name_points``): that prefix is the server's.

Memory and the scrape are bounded by bytes as well as by count, since one
attribute value may be 256 KiB: a label value longer than
``max_label_value_bytes`` is truncated (a label *name* that long is
dropped), a series keeps at most ``max_labels_per_series`` labels (the
identity labels, then the attributes in label-name order: the same labels
whatever order the attributes came in), and a point that would start a
series beyond ``max_series`` or take the accounted bytes beyond
``max_bytes`` is dropped; each is counted. A series' accounted bytes are
its lines in a scrape (a histogram has one per bucket) plus what it holds
in memory.

Two families must not expose the same name with different TYPE lines (a
gauge ``req_total`` and a counter ``req``, a histogram ``h`` and a gauge
``h_count``): the family that has live series first keeps its names, and
points of the other are dropped and counted (``type_conflicts``) until the
first has no series left. All methods are thread-safe: pushes are applied
and scrapes rendered in worker threads.
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

__all__ = [
    "IDENTITY_LABELS",
    "Family",
    "Series",
    "SeriesLimits",
    "SeriesStats",
    "SeriesStore",
    "exposed_names",
]

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
#: The instance's own series outlive its metrics by this many push intervals.
PRESENCE_INTERVALS: Final = 10
#: The server's series about each instance: (name, help text).
LAST_PUSH: Final = (
    "kip714_client_last_push_timestamp_seconds",
    "When the client instance last pushed (Unix seconds, as kip714 received it).",
)
PUSH_INTERVAL: Final = (
    "kip714_client_push_interval_seconds",
    "The push interval the client instance was told to use (seconds).",
)
#: Translated names with this prefix are the server's own; client points taking one are dropped.
RESERVED_PREFIX: Final = "kip714_"


#: What a series costs besides its text: the objects that hold it, per series and per label.
_SERIES_OVERHEAD: Final = 256
_LABEL_OVERHEAD: Final = 112
#: A sample line's value, separators and line end.
_SAMPLE_OVERHEAD: Final = 32
#: A family's HELP and TYPE lines besides its name and help text, and its objects.
_FAMILY_OVERHEAD: Final = 256
_HISTOGRAM_LABEL: Final = "le"


@dataclass(slots=True)
class SeriesStats:
    pushes: int = 0
    series: int = 0
    #: Accounted bytes of the live series and their families (bounded by ``max_bytes``).
    series_bytes: int = 0
    dropped_points: int = 0  # a new series beyond max_series
    dropped_points_max_bytes: int = 0  # a new or grown series beyond max_bytes
    truncated_label_values: int = 0  # longer than max_label_value_bytes
    dropped_labels: int = 0  # beyond max_labels_per_series, or a name too long
    unsupported_points: int = 0  # exponential histograms, summaries, no value
    type_conflicts: int = 0  # a name another live family exposes with another TYPE
    terminated_instances: int = 0
    expired_instances: int = 0
    reserved_name_points: int = 0  # a client metric translating into the server's kip714_ names


@dataclass(frozen=True, slots=True)
class SeriesLimits:
    """The bounds of a :class:`SeriesStore` (the exporter's options of the same names)."""

    max_series: int = 100_000
    max_label_value_bytes: int = 1024
    max_labels_per_series: int = 64
    max_bytes: int = 256 * 1024 * 1024


@dataclass(slots=True)
class Series:
    labels: dict[str, str]
    value: float = 0.0
    bounds: tuple[float, ...] = ()
    bucket_counts: list[int] = field(default_factory=list)
    count: int = 0
    sum: float = 0.0
    #: What this series adds to ``SeriesStats.series_bytes``.
    accounted_bytes: int = 0


@dataclass(slots=True)
class Family:
    name: str
    kind: Kind
    help: str
    series: dict[tuple[tuple[str, str], ...], Series] = field(default_factory=dict)
    accounted_bytes: int = 0


@dataclass(slots=True)
class _Instance:
    deadline_ms: int  # its metrics' series expire then
    presence_until_ms: int = 0  # and its last-push and interval series then
    keys: set[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=set)
    presence: set[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=set)


class SeriesStore:
    """Series by family, and which instance owns each; see the module docstring."""

    def __init__(self, limits: SeriesLimits | int) -> None:
        self.limits = limits if isinstance(limits, SeriesLimits) else SeriesLimits(limits)
        self.stats = SeriesStats()
        self._families: dict[str, Family] = {}
        #: Every name a live family exposes (its TYPE line's and its samples'), to its family.
        self._exposed: dict[str, str] = {}
        self._instances: dict[str, _Instance] = {}
        self._count = 0
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def max_series(self) -> int:
        return self.limits.max_series

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
                presence = max(MIN_EXPIRY_MS, PRESENCE_INTERVALS * push.push_interval_ms)
                instance.presence_until_ms = max(
                    instance.presence_until_ms, push.received_time_ms + presence
                )
                self._present(instance, push)
            for row in rows:
                self._apply_row(row)
            self._publish()

    def expire(self, now_ms: int) -> None:
        """Forget the instances whose last push is older than their expiry."""
        with self._lock:
            gone = [i for i, s in self._instances.items() if s.presence_until_ms <= now_ms]
            for instance_id in gone:
                self._forget(instance_id)
            self.stats.expired_instances += len(gone)
            for state in self._instances.values():
                if state.keys and state.deadline_ms <= now_ms:
                    self._drop_series(state.keys)
                    state.keys = set()
            self._publish()

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

    def _publish(self) -> None:
        self.stats.series = self._count
        self.stats.series_bytes = self._bytes

    def _forget(self, instance_id: str) -> None:
        state = self._instances.pop(instance_id, None)
        if state is not None:
            self._drop_series(state.keys | state.presence)

    def _drop_series(self, keys: set[tuple[str, tuple[tuple[str, str], ...]]]) -> None:
        for name, key in keys:
            family = self._families.get(name)
            if family is None:
                continue
            series = family.series.pop(key, None)
            if series is not None:
                self._count -= 1
                self._bytes -= series.accounted_bytes
            if not family.series:
                self._drop_family(family)

    def _drop_family(self, family: Family) -> None:
        """A family without series releases its names (another kind may take them) and bytes."""
        del self._families[family.name]
        for exposed in exposed_names(family.name, family.kind):
            if self._exposed.get(exposed) == family.name:
                del self._exposed[exposed]
        self._bytes -= family.accounted_bytes

    def _family(self, name: str, kind: Kind, help_text: str) -> Family | None:
        """The family to put a point in; None (counted) if it would clash or not fit."""
        family = self._families.get(name)
        if family is not None:
            if family.kind == kind:
                return family
            self.stats.type_conflicts += 1
            return None
        names = exposed_names(name, kind)
        if any(exposed in self._exposed for exposed in names):
            self.stats.type_conflicts += 1
            return None
        cost = _FAMILY_OVERHEAD + 2 * len(name) + _text_bytes(help_text)
        if self._bytes + cost > self.limits.max_bytes:
            self.stats.dropped_points_max_bytes += 1
            return None
        family = self._families[name] = Family(name, kind, help_text, accounted_bytes=cost)
        self._exposed.update(dict.fromkeys(names, name))
        self._bytes += cost
        return family

    def _apply_row(self, row: dict[str, Any]) -> None:
        kind = _kind(row)
        instance = self._instances.get(row["client_instance_id"])
        if kind is None or instance is None:
            self.stats.unsupported_points += kind is None
            return
        name = metric_name(row["metric_name"], row["unit"], kind)
        if name.startswith(RESERVED_PREFIX):
            self.stats.reserved_name_points += 1
            return
        family = self._family(name, kind, row["metric_name"])
        if family is None:
            return
        labels = self._labels(row, kind)
        key = tuple(sorted(labels.items()))
        series = family.series.get(key)
        if series is None:
            series = self._new_series(family, key, labels, _bucket_count(row, kind), instance.keys)
            if series is None:
                return
        elif kind == "histogram" and _bucket_count(row, kind) != len(series.bucket_counts):
            cost = _series_bytes(name, kind, series.labels, _bucket_count(row, kind))
            if self._bytes - series.accounted_bytes + cost > self.limits.max_bytes:
                self.stats.dropped_points_max_bytes += 1
                return
            self._bytes += cost - series.accounted_bytes
            series.accounted_bytes = cost
        _update(series, row, kind)

    def _new_series(
        self,
        family: Family,
        key: tuple[tuple[str, str], ...],
        labels: dict[str, str],
        buckets: int,
        owner: set[tuple[str, tuple[tuple[str, str], ...]]],
    ) -> Series | None:
        """A new series in ``family`` owned by ``owner``, or None (counted) past a bound."""
        if self._count >= self.limits.max_series:
            self.stats.dropped_points += 1
            self._drop_empty(family)
            return None
        cost = _series_bytes(family.name, family.kind, labels, buckets)
        if self._bytes + cost > self.limits.max_bytes:
            self.stats.dropped_points_max_bytes += 1
            self._drop_empty(family)
            return None
        series = family.series[key] = Series(labels, accounted_bytes=cost)
        self._count += 1
        self._bytes += cost
        owner.add((family.name, key))
        return series

    def _present(self, instance: _Instance, push: LoggedPush) -> None:
        """Set the instance's last-push and interval series from ``push`` (identity labels)."""
        labels = {
            "client_id": self._value(push.client_id or ""),
            "client_instance_id": self._value(push.client_instance_id),
            "client_software_name": self._value(push.client_software_name or ""),
            "client_software_version": self._value(push.client_software_version or ""),
            "principal": self._value(push.principal or ""),
        }
        key = tuple(sorted(labels.items()))
        for (name, help_text), value in (
            (LAST_PUSH, push.received_time_ms / 1000),
            (PUSH_INTERVAL, push.push_interval_ms / 1000),
        ):
            family = self._family(name, "gauge", help_text)
            if family is None:
                continue
            series = family.series.get(key) or self._new_series(
                family, key, labels, 0, instance.presence
            )
            if series is not None:
                series.value = value

    def _drop_empty(self, family: Family) -> None:
        if not family.series:
            self._drop_family(family)

    def _labels(self, row: dict[str, Any], kind: Kind) -> dict[str, str]:
        """The point's labels within the bounds: identity first, then attributes by name."""
        limits = self.limits
        labels = {name: self._value(row[name] or "") for name in IDENTITY_LABELS}
        broker = row["resource_attributes"].get(_BROKER_ATTRIBUTE[0])
        if broker is not None:
            labels[_BROKER_ATTRIBUTE[1]] = self._value(broker)
        attributes = row["attributes"]
        if not attributes:
            return labels
        # Sorted by label name (then key, for keys that translate alike), so the labels a
        # series keeps do not depend on the order the client sent its attributes in.
        translated = sorted((label_name(key), key) for key in attributes)
        dropped = 0
        for name, key in translated:
            if name in labels:
                continue  # identity labels win a clash; the first key of a name wins
            if (
                len(labels) >= limits.max_labels_per_series
                or len(name) > limits.max_label_value_bytes
                or (kind == "histogram" and name == _HISTOGRAM_LABEL)
            ):
                dropped += 1
                continue
            labels[name] = self._value(attributes[key])
        self.stats.dropped_labels += dropped
        return labels

    def _value(self, value: str) -> str:
        limit = self.limits.max_label_value_bytes
        if len(value) * 4 <= limit:  # no UTF-8 character takes more than 4 bytes
            return value
        encoded = value.encode()
        if len(encoded) <= limit:
            return value
        self.stats.truncated_label_values += 1
        return encoded[:limit].decode(errors="ignore")  # cut at a character boundary


def exposed_names(name: str, kind: Kind) -> tuple[str, ...]:
    """The names a family shows in the text format: its TYPE line's and its samples'."""
    if kind == "gauge":
        return (name,)
    if kind == "counter":
        return (name, f"{name}_total")
    return (name, f"{name}_bucket", f"{name}_count", f"{name}_sum")


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def _bucket_count(row: dict[str, Any], kind: Kind) -> int:
    if kind != "histogram":
        return 0
    return len(row["bucket_counts"] or ())


def _series_bytes(name: str, kind: Kind, labels: dict[str, str], buckets: int) -> int:
    """A series' lines in a scrape plus the objects that hold it (module docstring)."""
    label_text = sum(len(k) + _text_bytes(v) + 4 for k, v in labels.items())  # k="v",
    line = len(name) + 8 + label_text + _SAMPLE_OVERHEAD
    if kind == "histogram":
        lines = (buckets + 1) * (line + 32) + 2 * line  # _bucket{le=...} (and +Inf), _count, _sum
        held = 16 * buckets
    else:
        lines = line
        held = 0
    return lines + label_text + held + _SERIES_OVERHEAD + _LABEL_OVERHEAD * len(labels)


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
