"""Flatten logged OTLP pushes into landing-schema columns, one row per data point.

Every exporter that lands rows (Parquet, jsonl) shares this one definition of
a row, so the Parquet files, the jsonl lines and the Spark rollups agree on
column names and meanings. ``docs/exporters.md`` documents
the schema column by column.

Why columns: the landing feeds ``pyarrow.Table.from_pydict`` and
flattening is the expensive step of the pipeline (measured on the recorded
librdkafka pushes: about 4.5 µs per data point, of which 0.2 µs is the
protobuf parse and about 3 µs is reading fields through the protobuf
runtime), so the primary output is a ``dict`` of equally long lists, built
with as few Python calls per data point as possible. Row dicts
(``iter_rows``) are a derived view for the jsonl exporter and tests.

Choices a reader of the landed data must know:

* Times (``time``, ``start_time``, ``received_time``) are ``int``
  nanoseconds since the Unix epoch, UTC: no ``datetime`` objects on the hot
  path, and no precision lost before the writer picks its unit.
  ``arrow_schema()`` types them ``timestamp[ns, UTC]``; a writer that stores
  ``timestamp[us, UTC]`` casts. A data point without ``time_unix_nano`` (0)
  takes ``received_time`` and is counted in ``FlattenStats.missing_times``;
  ``start_time`` 0 (unknown, per OTLP) becomes ``None``.
* Client identity comes from the push context (the server observed it). A
  resource attribute named ``client_id``, ``client_software_name`` or
  ``client_software_version`` fills that column only when the context lacks
  it. ``client_instance_id``, ``client_source_address`` and ``principal`` are
  never taken from the payload: a client must not be able to claim another
  identity. All resource attributes are kept in ``resource_attributes``.
* ``value`` is a double: ``as_int`` is converted with ``float`` (exact up to
  2**53). NaN and ±infinity never land: the value becomes ``None`` and is
  counted (``nan_values`` / ``inf_values``); the same holds for ``sum``,
  ``min``, ``max``, ``explicit_bounds`` and ``quantile_values``. A data point
  with no value (neither ``as_int`` nor ``as_double``, or the OTLP
  ``NO_RECORDED_VALUE`` flag) lands with its value columns ``None`` and is
  counted in ``missing_values``.
* Attribute values are stringified: string as is; int in decimal (``1`` →
  ``"1"``); bool ``"true"``/``"false"``; double with ``repr`` (``0.5`` →
  ``"0.5"``, NaN → ``"nan"``, ∞ → ``"inf"``); bytes as standard base64 (as
  OTLP/JSON does); arrays and kvlists as compact JSON of their converted
  elements (``[1,"a",true]``, ``{"k":"v"}``; bytes inside as base64 strings,
  non-finite doubles as strings); an unset value as ``""``. Repeated keys:
  the last one wins.
* Repeated metric names in one push stay separate rows (librdkafka repeats a
  per-broker metric once per broker, told apart by the ``node.id``
  attribute); nothing is aggregated here.
* Nothing raises for bad data. An undecodable payload yields no rows and is
  counted, with its offset, in ``FlattenStats``; a metric with no data points
  (``empty_metrics``) or with no or an unknown data type
  (``unknown_metric_types``) yields no rows and is counted. Exemplars and
  ``description`` are not landed.
* ``resource_attributes`` dicts are shared by all rows of one resource; treat
  every dict and list in the columns as read-only.
"""

from __future__ import annotations

import base64
import gc
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, MetricsData, NumberDataPoint

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from opentelemetry.proto.common.v1.common_pb2 import KeyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import (
        ExponentialHistogramDataPoint,
        HistogramDataPoint,
        SummaryDataPoint,
    )

    from exporters.api import LoggedPush

__all__ = [
    "COLUMNS",
    "Columns",
    "FlattenStats",
    "arrow_schema",
    "count_data_points",
    "flatten",
    "flatten_batch",
    "iter_rows",
    "new_columns",
    "num_rows",
]

Columns = dict[str, list[Any]]
"""Column name → one value per row; every list has the same length."""

#: The columns only rows of some kinds fill (a kind's data files leave the others out:
#: ``exporters.iceberg.rows.ABSENT_BY_KIND``).
HISTOGRAM_COLUMNS: tuple[str, ...] = (
    "count",
    "sum",
    "min",
    "max",
    "bucket_counts",
    "explicit_bounds",
)
EXPONENTIAL_COLUMNS: tuple[str, ...] = (
    "exp_scale",
    "exp_zero_count",
    "exp_zero_threshold",
    "exp_positive_offset",
    "exp_positive_bucket_counts",
    "exp_negative_offset",
    "exp_negative_bucket_counts",
)
SUMMARY_COLUMNS: tuple[str, ...] = ("quantiles", "quantile_values")

COLUMNS: tuple[str, ...] = (
    "time",
    "start_time",
    "received_time",
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "principal",
    "metric_name",
    "metric_type",
    "temporality",
    "is_monotonic",
    "unit",
    "value",
    *HISTOGRAM_COLUMNS,
    *EXPONENTIAL_COLUMNS,
    *SUMMARY_COLUMNS,
    "attributes",
    "resource_attributes",
    "scope_name",
    "scope_version",
    "terminating",
    "push_offset",
)
"""Landing column names in their canonical order (jsonl key order, Parquet order)."""

# OTLP AggregationTemporality: 0 UNSPECIFIED, 1 DELTA, 2 CUMULATIVE.
_TEMPORALITY = {1: "delta", 2: "cumulative"}
_NO_RECORDED_VALUE = 1  # DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_NS_PER_MS = 1_000_000
_MAX_REPORTED_OFFSETS = 1000

# Columns only some metric types fill. They are padded with None lazily (when
# a later row of that type, or the end of the push, needs them aligned), so a
# gauge-only push never touches the histogram columns row by row.
_HISTOGRAM_COLUMNS = ("count", "sum", "min", "max", "bucket_counts", "explicit_bounds")
_EXP_COLUMNS = (
    "count",
    "sum",
    "min",
    "max",
    "exp_scale",
    "exp_zero_count",
    "exp_zero_threshold",
    "exp_positive_offset",
    "exp_positive_bucket_counts",
    "exp_negative_offset",
    "exp_negative_bucket_counts",
)
_SUMMARY_COLUMNS = ("count", "sum", "quantiles", "quantile_values")
_SPARSE_COLUMNS = ("value", *dict.fromkeys((*_HISTOGRAM_COLUMNS, *_EXP_COLUMNS, *_SUMMARY_COLUMNS)))


@dataclass(slots=True)
class FlattenStats:
    """What flattening met besides clean data points, so nothing vanishes silently.

    Counts cover the pushes of one ``flatten_batch`` call; ``merge`` folds
    them into an exporter's running totals.
    """

    pushes: int = 0
    data_points: int = 0
    nan_values: int = 0
    inf_values: int = 0
    missing_values: int = 0
    missing_times: int = 0
    empty_metrics: int = 0
    unknown_metric_types: int = 0
    undecodable_payloads: int = 0
    undecodable_offsets: list[int] = field(default_factory=list)
    """Offsets of undecodable pushes, the first 1000 only, for the log line."""
    oversized_pushes: int = 0
    """Pushes skipped whole for holding more than ``max_data_points_per_push`` data points."""

    def merge(self, other: FlattenStats) -> None:
        """Add ``other``'s counters to this one (running totals in an exporter)."""
        self.pushes += other.pushes
        self.data_points += other.data_points
        self.nan_values += other.nan_values
        self.inf_values += other.inf_values
        self.missing_values += other.missing_values
        self.missing_times += other.missing_times
        self.empty_metrics += other.empty_metrics
        self.unknown_metric_types += other.unknown_metric_types
        self.undecodable_payloads += other.undecodable_payloads
        self.oversized_pushes += other.oversized_pushes
        room = _MAX_REPORTED_OFFSETS - len(self.undecodable_offsets)
        if room > 0:
            self.undecodable_offsets.extend(other.undecodable_offsets[:room])


#: ``Metric``'s data fields (gauge, sum, histogram, exponential_histogram, summary).
_DATA_FIELDS: Final = frozenset({5, 7, 9, 10, 11})


def count_data_points(payload: bytes, limit: int) -> int:
    """An OTLP ``MetricsData`` payload's data points, counted at the wire level up to ``limit + 1``.

    For a landing's per-push bound, before anything is decoded: an empty
    data point is 2 bytes, so a 14 MiB payload can hold 7 million of them.
    A payload shorter than ``2 * (limit + 1)`` bytes cannot exceed ``limit``
    and is not walked at all (returns 0); otherwise the walk reads tags and
    lengths only, and stops once it has counted past ``limit``. Malformed
    wire data ends the count where it is (flattening then judges the push).
    """
    if len(payload) < 2 * (limit + 1):
        return 0
    view = memoryview(payload)
    count = 0
    for rm_start, rm_end in _len_fields(view, 0, len(view), 1):
        for sm_start, sm_end in _len_fields(view, rm_start, rm_end, 2):
            for m_start, m_end in _len_fields(view, sm_start, sm_end, 2):
                for d_start, d_end in _len_fields(view, m_start, m_end, _DATA_FIELDS):
                    for _ in _len_fields(view, d_start, d_end, 1):
                        count += 1
                        if count > limit:
                            return count
    return count


def _len_fields(
    view: memoryview, pos: int, end: int, wanted: int | frozenset[int]
) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each length-delimited field numbered ``wanted`` in ``view[pos:end]``."""
    single = isinstance(wanted, int)
    while pos < end:
        tag = view[pos]
        pos += 1
        if tag & 0x80:
            tag, pos = _uvarint(view, pos, end, tag & 0x7F, 7)
        wire = tag & 7
        if wire == 2:
            length = view[pos] if pos < end else 0x80
            pos += 1
            if length & 0x80:
                length, pos = _uvarint(view, pos, end, length & 0x7F, 7)
            if pos < 0 or pos + length > end:
                return
            number = tag >> 3
            if number == wanted if single else number in wanted:  # type: ignore[operator]
                yield pos, pos + length
            pos += length
        elif wire == 0:
            _, pos = _uvarint(view, pos, end, 0, 0)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            return
        if pos < 0:
            return


def _uvarint(view: memoryview, pos: int, end: int, value: int, shift: int) -> tuple[int, int]:
    """A varint read on from ``pos``, ``shift`` bits of it so far in ``value``; -1 if malformed."""
    while pos < end and shift < 64:
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return 0, -1


def new_columns() -> Columns:
    """Empty columns in ``COLUMNS`` order (what a batch without data points yields)."""
    return {name: [] for name in COLUMNS}


def num_rows(columns: Columns) -> int:
    """The number of rows in ``columns``."""
    return len(columns["time"])


def iter_rows(columns: Columns) -> Iterator[dict[str, Any]]:
    """Yield one dict per row, keys in ``COLUMNS`` order (the jsonl line shape)."""
    names = tuple(columns)
    for values in zip(*columns.values(), strict=True):
        yield dict(zip(names, values, strict=True))


def flatten(push: LoggedPush) -> tuple[Columns, FlattenStats]:
    """Flatten one push; see ``flatten_batch``."""
    return flatten_batch((push,))


def flatten_batch(pushes: Iterable[LoggedPush]) -> tuple[Columns, FlattenStats]:
    """Flatten pushes, in order, into one set of columns: one row per data point.

    Never raises for bad payloads; see the module docstring for what is
    counted instead.

    The cyclic garbage collector is paused while the columns are built:
    flattening allocates a few containers per data point and creates no
    reference cycles, so the collections it would trigger find nothing and
    cost about a fifth of the time. GC is process-wide; it is re-enabled
    only by the call that disabled it.

    Returns:
        The columns (every name in ``COLUMNS``, equally long lists) and what
        flattening counted on the way.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _flatten(pushes)
    finally:
        if paused:
            gc.enable()


def _flatten(  # noqa: PLR0912, PLR0915 -- one inlined hot loop, by design
    pushes: Iterable[LoggedPush],
) -> tuple[Columns, FlattenStats]:
    stats = FlattenStats()
    b = _Builder()
    time_col = b.time
    time_append = time_col.append
    start_append = b.start.append
    attrs_append = b.attrs.append
    meta_append = b.meta.append
    value_col = b.sparse["value"]
    value_append = value_col.append
    # Unbound methods: upb builds a bound-method object on every attribute
    # lookup, which costs more than the call itself.
    metric_kind = Metric.WhichOneof
    number_kind = NumberDataPoint.WhichOneof
    any_kind = AnyValue.WhichOneof
    temporalities = _TEMPORALITY
    isnan = math.isnan
    nan = inf = missing = missing_times = empty = unknown = 0

    for push in pushes:
        stats.pushes += 1
        data = MetricsData()
        try:
            data.ParseFromString(push.payload)
        except Exception:
            # upb raises DecodeError for malformed bytes (too deep nesting
            # included); whatever the parser raises, the push is unreadable,
            # and one bad push must not stop the exporter loop.
            stats.undecodable_payloads += 1
            if len(stats.undecodable_offsets) < _MAX_REPORTED_OFFSETS:
                stats.undecodable_offsets.append(push.offset)
            continue
        received_ns = push.received_time_ms * _NS_PER_MS
        b.received_ns = received_ns
        for rm in data.resource_metrics:
            context = _context(push, _attributes(rm.resource.attributes), received_ns)
            for sm in rm.scope_metrics:
                scope = sm.scope
                tail = (scope.name or None, scope.version or None, *context)
                for metric in sm.metrics:
                    kind = metric_kind(metric, "data")
                    if kind == "gauge":
                        points = metric.gauge.data_points
                        if not points:
                            empty += 1
                            continue
                        meta = (metric.name, "gauge", "none", None, metric.unit or None, *tail)
                    elif kind == "sum":
                        body = metric.sum
                        points = body.data_points
                        if not points:
                            empty += 1
                            continue
                        temporality = temporalities.get(body.aggregation_temporality, "none")
                        monotonic = body.is_monotonic
                        meta = (metric.name, "sum", temporality, monotonic, metric.unit or None)
                        meta += tail
                    elif kind in {"histogram", "exponential_histogram", "summary"}:
                        head: tuple[Any, ...]
                        if kind == "histogram":
                            hist = metric.histogram
                            temporality = temporalities.get(hist.aggregation_temporality, "none")
                            head = (metric.name, kind, temporality, None, metric.unit or None)
                            n = b.histogram(hist.data_points, head + tail)
                        elif kind == "exponential_histogram":
                            exp = metric.exponential_histogram
                            temporality = temporalities.get(exp.aggregation_temporality, "none")
                            head = (metric.name, kind, temporality, None, metric.unit or None)
                            n = b.exp_histogram(exp.data_points, head + tail)
                        else:
                            head = (metric.name, kind, "none", None, metric.unit or None)
                            n = b.summary(metric.summary.data_points, head + tail)
                        if not n:
                            empty += 1
                        continue
                    else:
                        unknown += 1
                        continue
                    short = len(time_col) - len(value_col)
                    if short:
                        value_col.extend([None] * short)
                    # The hot loop: librdkafka sends only gauges and sums, one
                    # point per metric, so everything here is inlined.
                    for dp in points:
                        t = dp.time_unix_nano
                        if not t:
                            t = received_ns
                            missing_times += 1
                        time_append(t)
                        start_append(dp.start_time_unix_nano or None)
                        which = number_kind(dp, "value")
                        v: float | None
                        if which == "as_double":
                            v = dp.as_double
                            if v - v != 0.0:  # only NaN and ±inf
                                if isnan(v):
                                    nan += 1
                                else:
                                    inf += 1
                                v = None
                        elif which == "as_int":
                            v = float(dp.as_int)
                        else:
                            v = None
                            missing += 1
                        if dp.flags & _NO_RECORDED_VALUE and v is not None:
                            v = None
                            missing += 1
                        value_append(v)
                        point_attrs = dp.attributes
                        if point_attrs:
                            d: dict[str, str] = {}
                            for kv in point_attrs:
                                av = kv.value
                                akind = any_kind(av, "value")
                                if akind == "string_value":
                                    d[kv.key] = av.string_value
                                elif akind == "int_value":
                                    d[kv.key] = str(av.int_value)
                                else:
                                    d[kv.key] = _any_to_str(av, akind)
                            attrs_append(d)
                        else:
                            attrs_append({})
                        meta_append(meta)

    stats.data_points = len(time_col)
    stats.nan_values = nan + b.nan
    stats.inf_values = inf + b.inf
    stats.missing_values = missing + b.missing
    stats.missing_times = missing_times + b.missing_times
    stats.empty_metrics = empty
    stats.unknown_metric_types = unknown
    return b.columns(), stats


# Per-row values that are constant for a metric (the first seven) or a
# resource (the rest): built once as a tuple, appended once per row and
# transposed into columns at the end, instead of one list append per column.
_META_COLUMNS = (
    "metric_name",
    "metric_type",
    "temporality",
    "is_monotonic",
    "unit",
    "scope_name",
    "scope_version",
    "received_time",
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "principal",
    "resource_attributes",
    "terminating",
    "push_offset",
)


def _context(push: LoggedPush, resource_attrs: dict[str, str], received_ns: int) -> tuple[Any, ...]:
    client_id = push.client_id
    software_name = push.client_software_name
    software_version = push.client_software_version
    if resource_attrs:
        if client_id is None:
            client_id = resource_attrs.get("client_id")
        if software_name is None:
            software_name = resource_attrs.get("client_software_name")
        if software_version is None:
            software_version = resource_attrs.get("client_software_version")
    return (
        received_ns,
        push.client_instance_id,
        client_id,
        software_name,
        software_version,
        push.client_source_address,
        push.principal,
        resource_attrs,
        push.terminating,
        push.offset,
    )


class _Builder:
    """Columns under construction, and the point types kept out of the hot loop."""

    __slots__ = (
        "attrs",
        "inf",
        "meta",
        "missing",
        "missing_times",
        "nan",
        "received_ns",
        "sparse",
        "start",
        "time",
    )

    def __init__(self) -> None:
        self.time: list[int] = []
        self.start: list[int | None] = []
        self.attrs: list[dict[str, str]] = []
        self.meta: list[tuple[Any, ...]] = []
        # Filled by some metric types only; padded with None lazily, when a
        # later row needs the column aligned, and once at the end.
        self.sparse: Columns = {name: [] for name in _SPARSE_COLUMNS}
        self.received_ns = 0
        self.nan = 0
        self.inf = 0
        self.missing = 0
        self.missing_times = 0

    def columns(self) -> Columns:
        rows = len(self.time)
        parts: Columns = {"time": self.time, "start_time": self.start, "attributes": self.attrs}
        if rows:
            parts.update(zip(_META_COLUMNS, map(list, zip(*self.meta, strict=True)), strict=True))
        else:
            parts.update((name, []) for name in _META_COLUMNS)
        for name, column in self.sparse.items():
            short = rows - len(column)
            if short:
                column.extend([None] * short)
            parts[name] = column
        return {name: parts[name] for name in COLUMNS}

    def finite(self, value: float) -> float | None:
        if value - value != 0.0:
            if math.isnan(value):
                self.nan += 1
            else:
                self.inf += 1
            return None
        return value

    def finite_list(self, values: Sequence[float]) -> list[float | None]:
        out: list[float | None] = list(values)
        total = sum(values)
        if total - total != 0.0:  # some element is NaN or ±inf (or the sum overflowed)
            out = [self.finite(v) for v in values]
        return out

    def _row(self, dp: Any, meta: tuple[Any, ...], names: tuple[str, ...]) -> bool:
        """Append the columns every point has; False if the point has no value."""
        t = dp.time_unix_nano
        if not t:
            t = self.received_ns
            self.missing_times += 1
        self.time.append(t)
        self.start.append(dp.start_time_unix_nano or None)
        self.attrs.append(_attributes(dp.attributes))
        self.meta.append(meta)
        if dp.flags & _NO_RECORDED_VALUE:
            self.missing += 1
            return False
        row = len(self.time) - 1
        for name in names:
            column = self.sparse[name]
            short = row - len(column)
            if short:
                column.extend([None] * short)
        return True

    def _optional(self, dp: Any, name: str) -> float | None:
        return self.finite(getattr(dp, name)) if dp.HasField(name) else None

    def histogram(self, points: Sequence[HistogramDataPoint], meta: tuple[Any, ...]) -> int:
        sparse = self.sparse
        for dp in points:
            if self._row(dp, meta, _HISTOGRAM_COLUMNS):
                sparse["count"].append(dp.count)
                sparse["sum"].append(self._optional(dp, "sum"))
                sparse["min"].append(self._optional(dp, "min"))
                sparse["max"].append(self._optional(dp, "max"))
                sparse["bucket_counts"].append(list(dp.bucket_counts))
                sparse["explicit_bounds"].append(self.finite_list(dp.explicit_bounds))
        return len(points)

    def exp_histogram(
        self, points: Sequence[ExponentialHistogramDataPoint], meta: tuple[Any, ...]
    ) -> int:
        sparse = self.sparse
        for dp in points:
            if self._row(dp, meta, _EXP_COLUMNS):
                sparse["count"].append(dp.count)
                sparse["sum"].append(self._optional(dp, "sum"))
                sparse["min"].append(self._optional(dp, "min"))
                sparse["max"].append(self._optional(dp, "max"))
                sparse["exp_scale"].append(dp.scale)
                sparse["exp_zero_count"].append(dp.zero_count)
                sparse["exp_zero_threshold"].append(self.finite(dp.zero_threshold))
                sparse["exp_positive_offset"].append(dp.positive.offset)
                sparse["exp_positive_bucket_counts"].append(list(dp.positive.bucket_counts))
                sparse["exp_negative_offset"].append(dp.negative.offset)
                sparse["exp_negative_bucket_counts"].append(list(dp.negative.bucket_counts))
        return len(points)

    def summary(self, points: Sequence[SummaryDataPoint], meta: tuple[Any, ...]) -> int:
        sparse = self.sparse
        for dp in points:
            if self._row(dp, meta, _SUMMARY_COLUMNS):
                quantiles = dp.quantile_values
                sparse["count"].append(dp.count)
                sparse["sum"].append(self.finite(dp.sum))
                sparse["quantiles"].append(self.finite_list([q.quantile for q in quantiles]))
                sparse["quantile_values"].append(self.finite_list([q.value for q in quantiles]))
        return len(points)


def _attributes(attributes: Sequence[KeyValue]) -> dict[str, str]:
    out: dict[str, str] = {}
    for kv in attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "string_value":
            out[kv.key] = value.string_value
        elif kind == "int_value":
            out[kv.key] = str(value.int_value)
        else:
            out[kv.key] = _any_to_str(value, kind)
    return out


def _any_to_str(value: AnyValue, kind: str | None) -> str:  # noqa: PLR0911
    """Stringify the rarer AnyValue kinds (rules in the module docstring)."""
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind in {"array_value", "kvlist_value"}:
        return json.dumps(_any_to_json(value), separators=(",", ":"), allow_nan=False)
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return str(value.int_value)
    return ""


def _any_to_json(value: AnyValue) -> Any:  # noqa: PLR0911
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        d = value.double_value
        return d if d - d == 0.0 else repr(d)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind == "array_value":
        return [_any_to_json(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_to_json(kv.value) for kv in value.kvlist_value.values}
    return None


def arrow_schema() -> Any:
    """The ``pyarrow.Schema`` of ``COLUMNS`` for ``pyarrow.Table.from_pydict``.

    ``from_pydict`` would infer the attribute dicts as structs and the times
    as plain integers; this schema makes them ``map<string, string>`` and
    ``timestamp[ns, UTC]``. pyarrow is imported here, not at module import,
    so the jsonl path never pays for it.
    """
    import pyarrow as pa  # noqa: PLC0415

    ts = pa.timestamp("ns", tz="UTC")
    string_map = pa.map_(pa.string(), pa.string())
    types: dict[str, Any] = {
        "time": ts,
        "start_time": ts,
        "received_time": ts,
        "client_instance_id": pa.string(),
        "client_id": pa.string(),
        "client_software_name": pa.string(),
        "client_software_version": pa.string(),
        "client_source_address": pa.string(),
        "principal": pa.string(),
        "metric_name": pa.string(),
        "metric_type": pa.string(),
        "temporality": pa.string(),
        "is_monotonic": pa.bool_(),
        "unit": pa.string(),
        "value": pa.float64(),
        "count": pa.uint64(),
        "sum": pa.float64(),
        "min": pa.float64(),
        "max": pa.float64(),
        "bucket_counts": pa.list_(pa.uint64()),
        "explicit_bounds": pa.list_(pa.float64()),
        "exp_scale": pa.int32(),
        "exp_zero_count": pa.uint64(),
        "exp_zero_threshold": pa.float64(),
        "exp_positive_offset": pa.int32(),
        "exp_positive_bucket_counts": pa.list_(pa.uint64()),
        "exp_negative_offset": pa.int32(),
        "exp_negative_bucket_counts": pa.list_(pa.uint64()),
        "quantiles": pa.list_(pa.float64()),
        "quantile_values": pa.list_(pa.float64()),
        "attributes": string_map,
        "resource_attributes": string_map,
        "scope_name": pa.string(),
        "scope_version": pa.string(),
        "terminating": pa.bool_(),
        "push_offset": pa.int64(),
    }
    return pa.schema([(name, types[name]) for name in COLUMNS])
