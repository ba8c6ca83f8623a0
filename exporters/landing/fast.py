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
import operator
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from exporters.landing.schema import encoded_metrics_schema, metrics_schema, ns_to_us
from exporters.otlp_rows import COLUMNS, FlattenStats

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

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


#: The fields ptars decodes, per OTLP message; the others it skips as unknown fields.
#: Decoding into Arrow costs per field and nesting level, not per byte: the
#: recursive ``AnyValue`` alone (arrays and key-value lists of values, built
#: for every attribute) was a quarter of it. Kept: every field a row is made
#: of, and every string field (ptars validates UTF-8 as upb does, so a push
#: the reference flattener cannot parse is never landed by this path either).
#: ``ArrayValue``, ``KeyValueList``, ``ExponentialHistogram`` and ``Summary``
#: are decoded as empty messages, markers whose presence leaves the push to the
#: reference flattener, which parses (or refuses) their contents.
_DECODED: Final[dict[str, tuple[str, ...]]] = {
    "MetricsData": ("resource_metrics",),
    "ResourceMetrics": ("resource", "scope_metrics", "schema_url"),
    "ScopeMetrics": ("scope", "metrics", "schema_url"),
    "Metric": (
        "name",
        "description",
        "unit",
        "gauge",
        "sum",
        "histogram",
        "exponential_histogram",
        "summary",
        "metadata",
    ),
    "Gauge": ("data_points",),
    "Sum": ("data_points", "aggregation_temporality", "is_monotonic"),
    "Histogram": ("data_points", "aggregation_temporality"),
    "ExponentialHistogram": (),
    "Summary": (),
    "NumberDataPoint": (
        "attributes",
        "start_time_unix_nano",
        "time_unix_nano",
        "as_double",
        "as_int",
        "exemplars",
        "flags",
    ),
    "HistogramDataPoint": (
        "attributes",
        "start_time_unix_nano",
        "time_unix_nano",
        "count",
        "sum",
        "bucket_counts",
        "explicit_bounds",
        "exemplars",
        "flags",
        "min",
        "max",
    ),
    "Exemplar": ("filtered_attributes",),
    "Resource": ("attributes", "entity_refs"),
    "EntityRef": ("schema_url", "type", "id_keys", "description_keys"),
    "InstrumentationScope": ("name", "version", "attributes"),
    "KeyValue": ("key", "value"),
    "AnyValue": ("string_value", "int_value", "array_value", "kvlist_value"),
    "ArrayValue": (),
    "KeyValueList": (),
}
_MARKERS: Final = ("array_value", "kvlist_value")


def _decoded_file(file: Any, pool: Any, added: set[str]) -> Any:
    """``file`` (and what it imports) with only the ``_DECODED`` fields, added to ``pool``."""
    from google.protobuf import descriptor_pb2  # noqa: PLC0415

    for dependency in file.dependencies:
        _decoded_file(dependency, pool, added)
    if file.name in added:
        return pool.FindFileByName(file.name)
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    messages = [m for m in proto.message_type if m.name in _DECODED]
    del proto.message_type[:]
    for message in messages:
        fields = [f for f in message.field if f.name in _DECODED[message.name]]
        # Proto3 ``optional`` fields keep their synthetic oneof (it gives them presence).
        used = sorted({f.oneof_index for f in fields if f.HasField("oneof_index")})
        oneofs = [message.oneof_decl[i] for i in used]
        for f in fields:
            if f.HasField("oneof_index"):
                f.oneof_index = used.index(f.oneof_index)
        del message.field[:]
        message.field.extend(fields)
        del message.oneof_decl[:]
        message.oneof_decl.extend(oneofs)
        del message.nested_type[:]
        proto.message_type.append(message)
    pool.Add(proto)
    added.add(file.name)
    return pool.FindFileByName(file.name)


_PER_PUSH: Final = ("offset", "received_time_ms", *(name for name, _ in _CONTEXT))
_per_push_fields: Final = operator.attrgetter(*_PER_PUSH)


@functools.cache
def _handler() -> Any:
    try:
        ptars = importlib.import_module("ptars")
    except ImportError:
        return None
    from google.protobuf import descriptor_pool  # noqa: PLC0415
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData  # noqa: PLC0415

    pool = descriptor_pool.DescriptorPool()
    file = _decoded_file(MetricsData.DESCRIPTOR.file, pool, set())
    message = file.message_types_by_name["MetricsData"]
    return ptars.HandlerPool([file]).get_for_message(message)


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
    strings, ints = pc.struct_field(value, "string_value"), pc.struct_field(value, "int_value")
    # Usually all of one kind (librdkafka's are integers, an SDK's strings): no coalescing.
    if ints.null_count == len(ints):
        text = strings
    elif strings.null_count == len(strings):
        text = _as_text(ints)
    else:
        text = pc.coalesce(strings, _as_text(ints))
    return pa.MapArray.from_arrays(offsets, pc.struct_field(items, "key"), text)


def _as_text(ints: Any) -> Any:
    """Integer attribute values as text, each distinct value formatted once.

    They repeat (librdkafka's are broker ids and partitions): hashing them and
    formatting the distinct ones cost a third less than formatting every one.
    """
    encoded = pc.dictionary_encode(ints)
    return _take(encoded.dictionary.cast(pa.string()), encoded.indices)


def _marked(lists: Any) -> Any:
    """Per value, whether it holds an array or key-value list (decoded as markers only)."""
    value = pc.struct_field(lists, "value")
    return pc.or_(*(pc.is_valid(pc.struct_field(value, name)) for name in _MARKERS))


def _marked_lists(lists: Any) -> Any:
    """The indices of the lists (of ``KeyValue``) holding an array or key-value list value."""
    items, parents = _children(lists)
    return pc.unique(parents.filter(_marked(items)))


def _odd_attributes(lists: Any) -> Any:
    """Per list: some value that is not a string or an int, or a repeated key."""
    items, parents = _children(lists)
    value = pc.struct_field(items, "value")
    # Neither a string nor an int, or both (AnyValue is a oneof: protobuf
    # keeps the last one on the wire, which only the reference path knows).
    odd_value = pc.or_(
        pc.equal(
            pc.is_null(pc.struct_field(value, "string_value")),
            pc.is_null(pc.struct_field(value, "int_value")),
        ),
        _marked(items),
    )
    odd = pc.unique(parents.filter(odd_value))
    lengths = pc.fill_null(pc.list_value_length(lists), 0)
    crowded = pc.greater(lengths, 1)
    if pc.any(crowded).as_py() and _repeats(pc.struct_field(items, "key"), parents, lengths):
        # Repeated keys (the last wins in otlp_rows) only matter with 2+ attributes.
        # A pair (parent, key) as one integer: a hash pass over integers finds
        # which lists repeat one far cheaper than grouping by two columns.
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


#: Up to this many attributes per list, repeated keys are looked for by comparing
#: each key with the next few in its list (no hashing); longer lists are hashed.
_SHORT_LISTS: Final = 8


def _repeats(keys: Any, parents: Any, lengths: Any) -> bool:
    """Whether some list holds a key twice (``keys`` flattened, ``parents`` their lists')."""
    longest = pc.max(lengths).as_py() or 0
    if longest > _SHORT_LISTS:
        return True  # let the hash pass decide
    count = len(keys)
    for distance in range(1, longest):
        same_list = pc.equal(parents.slice(0, count - distance), parents.slice(distance))
        same_key = pc.equal(keys.slice(0, count - distance), keys.slice(distance))
        if pc.any(pc.and_(same_list, same_key)).as_py():
            return True
    return False


def flatten_fast(
    pushes: Sequence[LoggedPush], *, by_kind: bool = False
) -> tuple[pa.Table, FlattenStats, list[int]] | None:
    """Rows of the pushes the vectorised path handles, and which pushes it left out.

    Returns ``None`` when it cannot run (ptars missing, or no push decodes);
    otherwise ``(table, stats, indices of left-out pushes)``, the table's rows
    in log order (with ``by_kind``, grouped by kind first: gauges, sums,
    histograms, each kind's in log order) and exactly ``otlp_rows``'s rows
    for the others. A push
    ptars cannot decode is left out alone, so garbage from one client does
    not send everybody's pushes down the slow path.
    """
    handler = _handler()
    if handler is None or not pushes:
        return None
    try:
        batch = handler.list_to_record_batch([p.payload for p in pushes])
    except Exception:  # whatever ptars raises, the reference path decides
        return _without_undecodable(handler, pushes, by_kind=by_kind)
    return _flatten(pushes, batch, by_kind=by_kind)


def _without_undecodable(
    handler: Any, pushes: Sequence[LoggedPush], *, by_kind: bool
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
    table, stats, left_out = _flatten(subset, batch, by_kind=by_kind)
    kept = set(good) - {good[i] for i in left_out}
    return table, stats, [i for i in range(len(pushes)) if i not in kept]


def _flatten(
    pushes: Sequence[LoggedPush], batch: pa.RecordBatch, *, by_kind: bool = False
) -> tuple[pa.Table, FlattenStats, list[int]]:
    rm, rm_push = _children(batch.column("resource_metrics"))
    sm, sm_rm = _children(pc.struct_field(rm, "scope_metrics"))
    metric, metric_sm = _children(pc.struct_field(sm, "metrics"))
    sm_push = _take(rm_push, sm_rm)
    metric_push = _take(sm_push, metric_sm)

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
    # Two kinds set: the wire carried both members of Metric's oneof, and
    # protobuf keeps the last (the reference flattener knows which).
    kinds = pc.add(
        pc.add(is_gauge.cast(pa.int8()), is_sum.cast(pa.int8())), is_hist.cast(pa.int8())
    )
    odd_metric = pc.or_(
        pc.or_(pc.or_(other, pc.invert(known)), pc.equal(counts, 0)),
        pc.greater(kinds, pa.scalar(1, pa.int8())),
    )
    point, point_metric = _points(gauge_points, sum_points, hist_points, by_kind=by_kind)
    decoded_attributes = point.pop("decoded_attributes")
    decoded_metric = point.pop("decoded_metric")
    point_push = _take(metric_push, point_metric)
    resource_attributes = pc.struct_field(pc.struct_field(rm, "resource"), "attributes")
    res_items, res_parent = _children(resource_attributes)
    identity_in_resource = pc.is_in(pc.struct_field(res_items, "key"), pa.array(_IDENTITY_KEYS))

    odd_pushes = pa.concat_arrays(
        [
            metric_push.filter(odd_metric),
            *_marked_elsewhere(
                sm, sm_push, metric, metric_push, (gauge_points, sum_points, hist_points)
            ),
            point_push.filter(
                pc.and_(pc.is_valid(point["as_double"]), pc.is_valid(point["as_int"]))
            ),
            _take(metric_push, _take(decoded_metric, _odd_attributes(decoded_attributes))),
            _take(rm_push, _odd_attributes(resource_attributes)),
            _take(rm_push, res_parent.filter(identity_in_resource)),
        ]
    )
    left_out = sorted(set(pc.unique(odd_pushes).to_pylist()))
    if left_out:
        keep = pc.invert(pc.is_in(point_push, pa.array(left_out, point_push.type)))
        point = {name: column.filter(keep) for name, column in point.items()}
        point_metric, point_push = point_metric.filter(keep), point_push.filter(keep)
    rows = len(point_metric)
    # Every metric kept, each with one point (librdkafka's shape): a row's metric is
    # the row's own index, and taking per-metric columns per row copies nothing.
    one_each = rows == len(metric_push) and not left_out and not by_kind
    per_metric = _taker(None if one_each else point_metric)
    stats = FlattenStats(pushes=len(pushes) - len(left_out), data_points=rows)

    per_push, received_ns = _per_push_columns(pushes, point_push)
    time_ns, start_ns = _times(point, received_ns, point_push, stats)
    point_is_hist = per_metric(is_hist)
    value = _values(point, point_is_hist, stats)
    histogram = _histograms(point, point_is_hist, stats)

    # -- per metric, per scope, per resource, per push: computed once, then per row
    # either taken (numbers) or referenced by a dictionary's indices (strings): a
    # push's 60 rows share one copy of its client's strings, which Parquet's
    # dictionary encoding then writes without hashing them row by row.
    point_sm = per_metric(metric_sm)
    point_rm = _take(sm_rm, point_sm)
    scope = pc.struct_field(sm, "scope")
    columns: dict[str, Any] = {
        "time": ns_to_us(time_ns),
        "start_time": ns_to_us(start_ns),
        **per_push,
        **_metric_columns(metric, per_metric),
        "value": value,
        **histogram,
        "attributes": point["attributes"],
        "resource_attributes": _resource_maps(resource_attributes, point_rm),
        "scope_name": _per_row(_empty_to_null(pc.struct_field(scope, "name")), _taker(point_sm)),
        "scope_version": _per_row(
            _empty_to_null(pc.struct_field(scope, "version")), _taker(point_sm)
        ),
    }
    schema = encoded_metrics_schema()
    arrays = [
        columns[name] if name in columns else pa.nulls(rows, schema.field(name).type)
        for name in COLUMNS
    ]
    return pa.Table.from_arrays(arrays, schema=schema), stats, left_out


def _marked_elsewhere(
    sm: Any, sm_push: Any, metric: Any, metric_push: Any, lists: Sequence[Any]
) -> list[Any]:
    """Pushes with an array or key-value list where no row reads it, but the parser would.

    Scope attributes, metric metadata and exemplars' attributes: ptars
    skips those values unread, so the reference flattener decides such a
    push (it lands it or finds it malformed).
    """
    scope_attributes = pc.struct_field(pc.struct_field(sm, "scope"), "attributes")
    return [
        _take(metric_push, _marked_lists(pc.struct_field(metric, "metadata"))),
        _take(sm_push, _marked_lists(scope_attributes)),
        *(_take(metric_push, _exemplars_marked(points)) for points in lists),
    ]


def _exemplars_marked(points: Any) -> Any:
    """Metric indices of ``points`` (per metric lists) with an exemplar attribute marked."""
    values, parents = _children(points)
    exemplars, exemplar_point = _children(pc.struct_field(values, "exemplars"))
    if not len(exemplars):
        return pa.array([], parents.type)
    marked = _marked_lists(pc.struct_field(exemplars, "filtered_attributes"))
    return _take(parents, _take(exemplar_point, marked))


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


def _points(
    gauge_points: Any, sum_points: Any, hist_points: Any, *, by_kind: bool = False
) -> tuple[dict[str, Any], Any]:
    """The data points' fields, in payload order, and each point's metric index.

    Gauge, sum and histogram points are flattened apart and gathered into
    payload order by one computed index (where each metric's points start
    among the flattened ones, plus the point's rank in its metric), which
    copies only these fields: choosing between the nested lists per metric
    (``if_else``) copied every nested buffer, and sorting by metric index
    cost as much as the copy. ``attributes`` comes as a map (``_map``) and
    ``decoded_attributes`` as decoded, in the flattened order, with
    ``decoded_metric`` its points' metric indices (for ``_odd_attributes``).
    A field a kind of point lacks (a gauge's ``count``) is null. A metric's
    points are those of its first kind set (gauge, sum, histogram): one with
    two is left to the reference flattener anyway. With ``by_kind`` the points
    stay grouped by kind (gauges, sums, histograms; each kind's in payload
    order), as flattened: nothing is gathered.
    """
    lists = (gauge_points, sum_points, hist_points)
    sources = [_children(points) for points in lists]
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
        fields = {name: field(values, name) for name in _POINT_FIELDS}
        fields["decoded_attributes"], fields["decoded_metric"] = fields["attributes"], parents
        fields["attributes"] = _map(fields["attributes"])
        return fields, parents
    attributes = pa.concat_arrays([field(v, "attributes") for v, _ in sources])
    if by_kind:
        point_metric = pa.concat_arrays([p for _, p in sources])
        fields = {
            name: pa.concat_arrays([field(v, name) for v, _ in sources])
            if any(v.type.get_field_index(name) >= 0 for v, _ in parts)
            else pa.nulls(len(point_metric), types[name])
            for name in _POINT_FIELDS
            if name != "attributes"
        }
        fields["attributes"] = _map(attributes)
        fields["decoded_attributes"], fields["decoded_metric"] = attributes, point_metric
        return fields, point_metric
    gather, point_metric = _gather(lists, [len(values) for values, _ in sources])
    rows = len(point_metric)
    # Only fields some part has are gathered: a push without histograms moves
    # no histogram column.
    fields = {
        name: _take(pa.concat_arrays([field(v, name) for v, _ in sources]), gather)
        if any(v.type.get_field_index(name) >= 0 for v, _ in parts)
        else pa.nulls(rows, types[name])
        for name in _POINT_FIELDS
        if name != "attributes"
    }
    fields["attributes"] = _take(_map(attributes), gather)
    fields["decoded_attributes"] = attributes
    fields["decoded_metric"] = pa.concat_arrays([p for _, p in sources])
    return fields, point_metric


def _gather(lists: Sequence[Any], sizes: Sequence[int]) -> tuple[Any, Any]:
    """Indices into the kinds' points flattened one after the other, in payload order.

    ``lists`` are each kind's per-metric point lists (null where a metric
    is of another kind), ``sizes`` how many points each kind has. Returns
    (indices, each row's metric index).
    """
    int64 = pa.int64()
    lengths = [pc.list_value_length(points) for points in lists]
    counts = pc.fill_null(pc.coalesce(*lengths), 0).cast(int64)
    starts = []
    base = 0
    for length, size in zip(lengths, sizes, strict=True):
        filled = pc.fill_null(length, 0).cast(int64)
        start = pc.add(pc.subtract(pc.cumulative_sum(filled), filled), pa.scalar(base, int64))
        starts.append(pc.if_else(pc.is_valid(length), start, pa.scalar(None, int64)))
        base += size
    ends = pc.cumulative_sum(counts)
    rows = ends[-1].as_py() if len(ends) else 0
    shift = pc.subtract(pc.fill_null(pc.coalesce(*starts), 0), pc.subtract(ends, counts))
    offsets = pa.concat_arrays([pa.array([0], int64), ends])
    point_metric = pc.list_parent_indices(pa.LargeListArray.from_arrays(offsets, pa.nulls(rows)))
    ones = pa.repeat(pa.scalar(1, int64), rows)
    rank = pc.subtract(pc.cumulative_sum(ones), pa.scalar(1, int64))
    return pc.add(_take(shift, point_metric), rank), point_metric


def _times(
    point: dict[str, Any], received_ns: Any, point_push: Any, stats: FlattenStats
) -> tuple[Any, Any]:
    """``time`` (unset: the push's receive time, counted) and ``start_time`` (unset: null)."""
    time_ns = point["time_unix_nano"]
    zero = pa.scalar(0, pa.uint64())  # a bare 0 is int64, and OTLP times can exceed it
    unset = pc.equal(time_ns, zero)
    stats.missing_times = pc.sum(unset.cast(pa.int64())).as_py() or 0
    if stats.missing_times:
        time_ns = pc.if_else(unset, _take(received_ns, point_push), time_ns)
    start_ns = point["start_time_unix_nano"]
    start_ns = pc.if_else(pc.equal(start_ns, zero), pa.scalar(None, pa.uint64()), start_ns)
    return time_ns, start_ns


def _values(point: dict[str, Any], is_hist: Any, stats: FlattenStats) -> Any:
    """The ``value`` column: NaN and ±inf never land; NO_RECORDED_VALUE means no value.

    Histogram points have no value; one flagged NO_RECORDED_VALUE counts as missing.
    """
    as_double, as_int = point["as_double"], point["as_int"]
    flagged = _flagged(point)
    if pc.all(pc.is_finite(as_double)).as_py() is not False and not pc.any(flagged).as_py():
        # The usual batch: every double finite, no point flagged; a null is a missing value.
        value = pc.coalesce(as_double, as_int.cast(pa.float64()))
        stats.missing_values += _count(pc.and_(pc.is_null(value), pc.invert(is_hist)))
        return value
    nan = pc.fill_null(pc.is_nan(as_double), False)
    inf = pc.fill_null(pc.is_inf(as_double), False)
    stats.nan_values += _count(nan)
    stats.inf_values += _count(inf)
    value = pc.coalesce(as_double, as_int.cast(pa.float64()))
    no_value = pc.or_(pc.or_(nan, inf), pc.is_null(value))
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
    flagged = _flagged(point)
    columns: dict[str, Any] = {}
    if not pc.any(pc.and_(is_hist, flagged)).as_py():
        # No histogram point flagged: every row keeps what it has (other kinds' rows
        # have none of these fields, so theirs are null already).
        for name in _HISTOGRAM_FIELDS:
            column = point[name]
            if name in {"sum", "min", "max"}:
                column = _finite(column, stats)
            elif name == "explicit_bounds":
                column = _finite_lists(column, is_hist, stats)
            columns[name] = column.cast(schema.field(name).type)
        return columns
    keep = pc.and_(is_hist, pc.invert(flagged))
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
    if pc.all(pc.is_finite(values)).as_py() is not False:  # true, or null when all are null
        return values
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


def _per_push_columns(pushes: Sequence[LoggedPush], point_push: Any) -> tuple[dict[str, Any], Any]:
    """The columns each push decides, per row, and each push's receive time in ns.

    The pushes' fields are read in one pass (a column per field); strings
    become dictionaries over the per-push values, times are converted per push.
    """
    context = dict(zip(_PER_PUSH, zip(*map(_per_push_fields, pushes), strict=True), strict=True))
    received_ns = pc.multiply(
        pa.array(context["received_time_ms"], pa.uint64()), pa.scalar(1_000_000, pa.uint64())
    )
    per_row = _taker(point_push)
    columns: dict[str, Any] = {
        "received_time": per_row(ns_to_us(received_ns)),
        "push_offset": per_row(pa.array(context["offset"], pa.int64())),
    }
    as_indices = _taker(pc.cast(point_push, pa.int32(), safe=False))  # < 2**31 pushes
    for name, kind in _CONTEXT:
        values = pa.array(context[name], kind)
        columns[name] = _per_row(values, as_indices) if kind == pa.string() else per_row(values)
    return columns, received_ns


def _metric_columns(metric: Any, per_metric: Callable[[Any], Any]) -> dict[str, Any]:
    """The columns each metric decides, per row (``per_metric``: a metric column per row)."""
    sums, hist = pc.struct_field(metric, "sum"), pc.struct_field(metric, "histogram")
    is_gauge = pc.is_valid(pc.struct_field(metric, "gauge"))
    is_sum, is_hist = pc.is_valid(sums), pc.is_valid(hist)
    codes = pc.if_else(
        is_sum,
        pc.struct_field(sums, "aggregation_temporality"),
        pc.if_else(
            is_hist,
            pc.struct_field(hist, "aggregation_temporality"),
            pa.scalar(None, pa.int32()),
        ),
    )
    monotonic = pc.if_else(
        is_sum, pc.struct_field(sums, "is_monotonic"), pa.scalar(None, pa.bool_())
    )
    return {
        "metric_name": _per_row(pc.struct_field(metric, "name"), per_metric),
        "metric_type": _coded(_metric_types(is_gauge, is_sum), per_metric, _METRIC_TYPES),
        "temporality": _coded(_temporalities(is_gauge, codes), per_metric, _TEMPORALITIES),
        "is_monotonic": per_metric(monotonic),
        "unit": _per_row(_empty_to_null(pc.struct_field(metric, "unit")), per_metric),
    }


_METRIC_TYPES: Final = pa.array(["gauge", "sum", "histogram"])
_TEMPORALITIES: Final = pa.array(["none", "delta", "cumulative"])


def _metric_types(is_gauge: Any, is_sum: Any) -> Any:
    """Per metric, its index in ``_METRIC_TYPES`` (gauge, sum, else histogram)."""
    zero, one, two = (pa.scalar(i, pa.int32()) for i in range(3))
    return pc.if_else(is_gauge, zero, pc.if_else(is_sum, one, two))


def _temporalities(is_gauge: Any, codes: Any) -> Any:
    """Per metric, its index in ``_TEMPORALITIES``: OTLP's 1 delta, 2 cumulative, else none."""
    none = pa.scalar(0, pa.int32())
    known = pc.and_(pc.invert(is_gauge), pc.or_(pc.equal(codes, 1), pc.equal(codes, 2)))
    return pc.if_else(pc.fill_null(known, False), codes.cast(pa.int32()), none)


def _taker(index: Any) -> Callable[[Any], Any]:
    """``values`` → ``values[index]``; with no index, ``values`` themselves."""
    if index is None:
        return lambda values: values
    return lambda values: _take(values, index)


def _take(values: Any, index: Any) -> Any:
    """``values[index]`` for an index this module computed (a parent's, a rank): in bounds.

    Arrow checks every index against the values otherwise, and the dictionaries'
    indices likewise (``safe=False`` below): a tenth of the flattening.
    """
    return pc.take(values, index, boundscheck=False)


def _coded(codes: Any, per_row: Callable[[Any], Any], names: pa.Array) -> pa.DictionaryArray:
    """Per row, ``names[per_row(codes)]``, as a dictionary column over ``names``."""
    return pa.DictionaryArray.from_arrays(per_row(codes), names, safe=False)


def _per_row(strings: Any, per_row: Callable[[Any], Any]) -> pa.DictionaryArray:
    """``per_row(strings)`` as a dictionary column: the strings are encoded once, not per row."""
    encoded = pc.dictionary_encode(strings)
    return pa.DictionaryArray.from_arrays(per_row(encoded.indices), encoded.dictionary, safe=False)


def _resource_maps(attributes: Any, point_rm: Any) -> Any:
    """Each row's resource attributes; one empty map per row when no resource has any."""
    if len(pc.list_flatten(attributes)) == 0:
        rows = len(point_rm)
        empty = pa.array([], pa.string())
        offsets = pa.repeat(pa.scalar(0, pa.int32()), rows + 1)
        return pa.MapArray.from_arrays(offsets, empty, empty)
    return _take(_map(attributes), point_rm)
