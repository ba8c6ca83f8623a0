"""The vectorised flattener: OTLP bytes to landing rows without a Python object per data point.

Why: flattening through the protobuf runtime costs about 6 µs per data point
(``exporters.otlp_rows``), almost all of it Python reading fields one by
one; the throughput target (240,000 data points/s on the second core)
allows about 3 µs for decoding, flattening, encoding and writing together.
`ptars <https://pypi.org/project/ptars/>`_ (Rust) decodes serialized
messages straight into nested Arrow arrays (about 0.6 µs per data point);
from there every landing column is a handful of Arrow compute kernels over
whole columns (``list_flatten``, ``list_parent_indices``, ``take``).

Scope: the shapes Kafka clients and OpenTelemetry SDKs send: gauges, sums and
explicit-bucket histograms whose attribute values are strings or integers. A
push with anything else (exponential histograms, summaries,
empty or unknown metrics, other attribute kinds, duplicate attribute keys,
identity in resource attributes, both value fields set) is flattened by
``otlp_rows`` instead, as is a push ptars cannot decode, so the rows are
always exactly the reference flattener's; the tests check both paths agree.
When ptars is not installed, everything takes the reference path.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from exporters.landing.schema import metrics_schema, ns_to_us
from exporters.otlp_rows import COLUMNS, FlattenStats

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import LoggedPush

__all__ = ["available", "flatten_fast"]

_NO_RECORDED: Final = 1  # DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_IDENTITY_KEYS: Final = ("client_id", "client_software_name", "client_software_version")
_CONTEXT: Final = (
    ("client_instance_id", pa.string()),
    ("client_id", pa.string()),
    ("client_software_name", pa.string()),
    ("client_software_version", pa.string()),
    ("client_source_address", pa.string()),
    ("principal", pa.string()),
    ("terminating", pa.bool_()),
)


@functools.cache
def _handler() -> Any:
    try:
        ptars = importlib.import_module("ptars")
    except ImportError:
        return None
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData  # noqa: PLC0415

    pool = ptars.HandlerPool([MetricsData.DESCRIPTOR.file])
    return pool.get_for_message(MetricsData.DESCRIPTOR)


def available() -> bool:
    """Whether the vectorised path can run here (ptars is installed)."""
    return _handler() is not None


def _children(lists: Any) -> tuple[Any, Any]:
    """(flattened values, index of each value's parent) of a list array."""
    return pc.list_flatten(lists), pc.list_parent_indices(lists)


def _empty_to_null(strings: Any) -> Any:
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


def _map(lists: Any) -> Any:
    """``list<struct<key, value: AnyValue>>`` (string or int values) → ``map<string, string>``."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0)
    offsets = pa.concat_arrays(
        [pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())]
    )
    items = pc.list_flatten(lists)
    value = pc.struct_field(items, "value")
    text = pc.coalesce(
        pc.struct_field(value, "string_value"),
        pc.struct_field(value, "int_value").cast(pa.string()),
    )
    return pa.MapArray.from_arrays(offsets, pc.struct_field(items, "key"), text)


def _odd_attributes(lists: Any) -> Any:
    """Per list: some value that is not a string or an int, or a repeated key."""
    items, parents = _children(lists)
    value = pc.struct_field(items, "value")
    odd_value = pc.and_(
        pc.is_null(pc.struct_field(value, "string_value")),
        pc.is_null(pc.struct_field(value, "int_value")),
    )
    odd = pc.unique(parents.filter(odd_value))
    lengths = pc.fill_null(pc.list_value_length(lists), 0)
    crowded = pc.greater(lengths, 1)
    if pc.any(crowded).as_py():
        # Repeated keys (the last wins in otlp_rows) only matter with 2+ attributes.
        # A pair (parent, key) as one integer: a hash pass over integers finds
        # whether any repeats (rarely) far cheaper than grouping by two columns.
        keys = pc.struct_field(items, "key").dictionary_encode()
        pairs = pc.add(
            pc.multiply(parents.cast(pa.int64()), pa.scalar(len(keys.dictionary), pa.int64())),
            keys.indices.cast(pa.int64()),
        )
        if len(pc.unique(pairs)) < len(pairs):
            table = pa.table({"parent": parents, "pair": pairs})
            counted = table.group_by(["pair"]).aggregate([("parent", "min"), ("pair", "count")])
            repeated = counted.filter(pc.greater(counted["pair_count"], 1))["parent_min"]
            odd = pc.unique(pa.concat_arrays([odd, repeated.combine_chunks().cast(odd.type)]))
    return odd


def flatten_fast(pushes: Sequence[LoggedPush]) -> tuple[pa.Table, FlattenStats, list[int]] | None:
    """Rows of the pushes the vectorised path handles, and which pushes it left out.

    Returns ``None`` when it cannot run (ptars missing, or no push decodes);
    otherwise ``(table, stats, indices of left-out pushes)``, the table's rows
    in log order and exactly ``otlp_rows``'s rows for the others. A push
    ptars cannot decode is left out alone, so garbage from one client does
    not send everybody's pushes down the slow path.
    """
    handler = _handler()
    if handler is None or not pushes:
        return None
    try:
        batch = handler.list_to_record_batch([p.payload for p in pushes])
    except Exception:  # whatever ptars raises, the reference path decides
        return _without_undecodable(handler, pushes)
    return _flatten(pushes, batch)


def _without_undecodable(
    handler: Any, pushes: Sequence[LoggedPush]
) -> tuple[pa.Table, FlattenStats, list[int]] | None:
    good: list[int] = []
    for index, push in enumerate(pushes):
        with contextlib.suppress(Exception):
            handler.list_to_record_batch([push.payload])
            good.append(index)
    if not good:
        return None
    subset = [pushes[i] for i in good]
    try:
        batch = handler.list_to_record_batch([p.payload for p in subset])
    except Exception:
        return None
    table, stats, left_out = _flatten(subset, batch)
    kept = set(good) - {good[i] for i in left_out}
    return table, stats, [i for i in range(len(pushes)) if i not in kept]


def _flatten(
    pushes: Sequence[LoggedPush], batch: pa.RecordBatch
) -> tuple[pa.Table, FlattenStats, list[int]]:
    rm, rm_push = _children(batch.column("resource_metrics"))
    sm, sm_rm = _children(pc.struct_field(rm, "scope_metrics"))
    metric, metric_sm = _children(pc.struct_field(sm, "metrics"))
    sm_push = pc.take(rm_push, sm_rm)
    metric_push = pc.take(sm_push, metric_sm)

    gauge, sums = pc.struct_field(metric, "gauge"), pc.struct_field(metric, "sum")
    hist = pc.struct_field(metric, "histogram")
    is_gauge, is_sum, is_hist = pc.is_valid(gauge), pc.is_valid(sums), pc.is_valid(hist)
    other = pc.or_(
        pc.is_valid(pc.struct_field(metric, "exponential_histogram")),
        pc.is_valid(pc.struct_field(metric, "summary")),
    )
    gauge_points = pc.struct_field(gauge, "data_points")
    sum_points = pc.struct_field(sums, "data_points")
    hist_points = pc.struct_field(hist, "data_points")
    counts = pc.fill_null(
        pc.if_else(
            is_gauge,
            pc.list_value_length(gauge_points),
            pc.if_else(is_sum, pc.list_value_length(sum_points), pc.list_value_length(hist_points)),
        ),
        0,
    )
    known = pc.or_(pc.or_(is_gauge, is_sum), is_hist)
    odd_metric = pc.or_(pc.or_(other, pc.invert(known)), pc.equal(counts, 0))
    point, point_metric = _points(gauge_points, sum_points, hist_points)
    point_push = pc.take(metric_push, point_metric)
    resource_attributes = pc.struct_field(pc.struct_field(rm, "resource"), "attributes")
    res_items, res_parent = _children(resource_attributes)
    identity_in_resource = pc.is_in(pc.struct_field(res_items, "key"), pa.array(_IDENTITY_KEYS))

    odd_pushes = pa.concat_arrays(
        [
            metric_push.filter(odd_metric),
            point_push.filter(
                pc.and_(pc.is_valid(point["as_double"]), pc.is_valid(point["as_int"]))
            ),
            pc.take(point_push, _odd_attributes(point["attributes"])),
            pc.take(rm_push, _odd_attributes(resource_attributes)),
            pc.take(rm_push, res_parent.filter(identity_in_resource)),
        ]
    )
    left_out = sorted(set(pc.unique(odd_pushes).to_pylist()))
    if left_out:
        keep = pc.invert(pc.is_in(point_push, pa.array(left_out, point_push.type)))
        point = {name: column.filter(keep) for name, column in point.items()}
        point_metric, point_push = point_metric.filter(keep), point_push.filter(keep)
    rows = len(point_metric)
    stats = FlattenStats(pushes=len(pushes) - len(left_out), data_points=rows)

    received_ns = pa.array([p.received_time_ms * 1_000_000 for p in pushes], pa.uint64())
    time_ns, start_ns = _times(point, pc.take(received_ns, point_push), stats)
    point_is_hist = pc.take(is_hist, point_metric)
    value = _values(point, point_is_hist, stats)
    histogram = _histograms(point, point_is_hist, stats)

    # -- per metric, per scope, per resource, per push: computed once, taken per row
    codes = pc.if_else(
        is_sum,
        pc.struct_field(sums, "aggregation_temporality"),
        pc.if_else(
            is_hist,
            pc.struct_field(hist, "aggregation_temporality"),
            pa.scalar(None, pa.int32()),
        ),
    )
    temporality = pc.if_else(is_gauge, pa.scalar("none"), pc.fill_null(_temporality(codes), "none"))
    monotonic = pc.if_else(
        is_sum, pc.struct_field(sums, "is_monotonic"), pa.scalar(None, pa.bool_())
    )
    metric_type = pc.if_else(
        is_gauge,
        pa.scalar("gauge"),
        pc.if_else(is_sum, pa.scalar("sum"), pa.scalar("histogram")),
    )
    point_sm = pc.take(metric_sm, point_metric)
    point_rm = pc.take(sm_rm, point_sm)
    scope = pc.struct_field(sm, "scope")
    columns: dict[str, Any] = {
        "time": ns_to_us(time_ns),
        "start_time": ns_to_us(start_ns),
        "received_time": ns_to_us(pc.take(received_ns, point_push)),
        "metric_name": pc.take(pc.struct_field(metric, "name"), point_metric),
        "metric_type": pc.take(metric_type, point_metric),
        "temporality": pc.take(temporality, point_metric),
        "is_monotonic": pc.take(monotonic, point_metric),
        "unit": pc.take(_empty_to_null(pc.struct_field(metric, "unit")), point_metric),
        "value": value,
        **histogram,
        "attributes": _map(point["attributes"]),
        "resource_attributes": pc.take(_map(resource_attributes), point_rm),
        "scope_name": pc.take(_empty_to_null(pc.struct_field(scope, "name")), point_sm),
        "scope_version": pc.take(_empty_to_null(pc.struct_field(scope, "version")), point_sm),
        "push_offset": pc.take(pa.array([p.offset for p in pushes], pa.int64()), point_push),
    }
    for name, kind in _CONTEXT:
        per_push = pa.array([getattr(p, name) for p in pushes], kind)
        columns[name] = pc.take(per_push, point_push)
    schema = metrics_schema()
    arrays = [
        columns[name] if name in columns else pa.nulls(rows, schema.field(name).type)
        for name in COLUMNS
    ]
    return pa.Table.from_arrays(arrays, schema=schema), stats, left_out


_NUMBER_FIELDS: Final = ("as_double", "as_int")
_HISTOGRAM_FIELDS: Final = ("count", "sum", "min", "max", "bucket_counts", "explicit_bounds")
_POINT_FIELDS: Final = (
    "time_unix_nano",
    "start_time_unix_nano",
    "flags",
    "attributes",
    *_NUMBER_FIELDS,
    *_HISTOGRAM_FIELDS,
)


def _points(gauge_points: Any, sum_points: Any, hist_points: Any) -> tuple[dict[str, Any], Any]:
    """The data points' fields, in payload order, and each point's metric index.

    Gauge, sum and histogram points are flattened apart and merged by metric
    index (a stable sort), which copies only these flat fields: choosing
    between the nested lists per metric (``if_else``) copied every nested
    buffer and cost more than the decoding. A field a kind of point lacks
    (a gauge's ``count``, a histogram's ``as_double``) is null.
    """
    sources = [_children(gauge_points), _children(sum_points), _children(hist_points)]
    types = {
        name: point_type.field(name).type
        for values, _ in sources[1:]
        for point_type in [values.type]
        for name in _POINT_FIELDS
        if point_type.get_field_index(name) >= 0
    }
    parts = [(values, parents) for values, parents in sources if len(values)] or sources[:1]

    def field(values: Any, name: str) -> Any:
        if values.type.get_field_index(name) < 0:
            return pa.nulls(len(values), types[name])
        return pc.struct_field(values, name)

    if len(parts) == 1:
        values, parents = parts[0]
        return {name: field(values, name) for name in _POINT_FIELDS}, parents
    parents = pa.concat_arrays([p for _, p in parts])
    order = pc.sort_indices(parents)
    rows = len(parents)
    # Only fields some part has are merged: a push without histograms moves no
    # histogram column through the sort.
    fields = {
        name: pc.take(pa.concat_arrays([field(v, name) for v, _ in parts]), order)
        if any(v.type.get_field_index(name) >= 0 for v, _ in parts)
        else pa.nulls(rows, types[name])
        for name in _POINT_FIELDS
    }
    return fields, pc.take(parents, order)


def _times(point: dict[str, Any], received_ns: Any, stats: FlattenStats) -> tuple[Any, Any]:
    """``time`` (unset: the push's receive time, counted) and ``start_time`` (unset: null)."""
    time_ns = point["time_unix_nano"]
    zero = pa.scalar(0, pa.uint64())  # a bare 0 is int64, and OTLP times can exceed it
    unset = pc.equal(time_ns, zero)
    stats.missing_times = pc.sum(unset.cast(pa.int64())).as_py() or 0
    if stats.missing_times:
        time_ns = pc.if_else(unset, received_ns, time_ns)
    start_ns = point["start_time_unix_nano"]
    start_ns = pc.if_else(pc.equal(start_ns, zero), pa.scalar(None, pa.uint64()), start_ns)
    return time_ns, start_ns


def _values(point: dict[str, Any], is_hist: Any, stats: FlattenStats) -> Any:
    """The ``value`` column: NaN and ±inf never land; NO_RECORDED_VALUE means no value.

    Histogram points have no value; one flagged NO_RECORDED_VALUE counts as missing.
    """
    as_double, as_int = point["as_double"], point["as_int"]
    nan = pc.fill_null(pc.is_nan(as_double), False)
    inf = pc.fill_null(pc.is_inf(as_double), False)
    stats.nan_values += _count(nan)
    stats.inf_values += _count(inf)
    value = pc.coalesce(as_double, as_int.cast(pa.float64()))
    no_value = pc.or_(pc.or_(nan, inf), pc.is_null(value))
    flagged = _flagged(point)
    missing = pc.or_(pc.is_null(value), pc.and_(flagged, pc.invert(no_value)))
    stats.missing_values += _count(pc.if_else(is_hist, flagged, missing))
    return pc.if_else(pc.or_(no_value, flagged), pa.scalar(None, pa.float64()), value)


def _flagged(point: dict[str, Any]) -> Any:
    flags = pc.bit_wise_and(point["flags"], pa.scalar(_NO_RECORDED, pa.uint32()))
    return pc.not_equal(flags, 0)


def _count(mask: Any) -> int:
    return int(pc.sum(mask.cast(pa.int64())).as_py() or 0)


def _histograms(point: dict[str, Any], is_hist: Any, stats: FlattenStats) -> dict[str, Any]:
    """``count`` … ``explicit_bounds`` of histogram points; null elsewhere and when flagged.

    As ``otlp_rows``: an unset optional ``sum``/``min``/``max`` is null; NaN
    and ±inf (there and in the bounds) land as null and are counted; a point
    flagged NO_RECORDED_VALUE keeps none of them.
    """
    schema = metrics_schema()
    if not pc.any(is_hist).as_py():
        return {name: pa.nulls(len(is_hist), schema.field(name).type) for name in _HISTOGRAM_FIELDS}
    keep = pc.and_(is_hist, pc.invert(_flagged(point)))
    columns: dict[str, Any] = {}
    for name in _HISTOGRAM_FIELDS:
        column = point[name]
        if name in {"sum", "min", "max"}:
            column = _finite(pc.if_else(keep, column, pa.scalar(None, column.type)), stats)
        elif name == "explicit_bounds":
            column = _finite_lists(column, keep, stats)
        kind = schema.field(name).type
        columns[name] = pc.if_else(keep, column.cast(kind), pa.scalar(None, kind))
    return columns


def _finite(values: Any, stats: FlattenStats) -> Any:
    """``values`` with NaN and ±inf as null, counted."""
    nan = pc.fill_null(pc.is_nan(values), False)
    inf = pc.fill_null(pc.is_inf(values), False)
    stats.nan_values += _count(nan)
    stats.inf_values += _count(inf)
    return pc.if_else(pc.or_(nan, inf), pa.scalar(None, pa.float64()), values)


def _finite_lists(lists: Any, keep: Any, stats: FlattenStats) -> Any:
    """Lists of doubles with NaN and ±inf elements as null, counted in the kept rows only."""
    lists = lists.cast(pa.list_(pa.float64()))
    kept = lists.filter(keep)
    elements = pc.list_flatten(kept)
    if len(elements) == 0 or pc.all(pc.is_finite(elements)).as_py():
        return lists
    stats.nan_values += _count(pc.is_nan(elements))
    stats.inf_values += _count(pc.is_inf(elements))
    items = lists.values  # the whole child: ``offsets`` index into it, slice or not
    clean = pc.if_else(pc.is_finite(items), items, pa.scalar(None, pa.float64()))
    return pa.ListArray.from_arrays(lists.offsets, clean, mask=pc.is_null(lists))


def _temporality(codes: Any) -> Any:
    """OTLP AggregationTemporality (1 delta, 2 cumulative, else none) as text."""
    return pc.case_when(
        pc.make_struct(pc.equal(codes, 1), pc.equal(codes, 2)),
        pa.scalar("delta"),
        pa.scalar("cumulative"),
    )
