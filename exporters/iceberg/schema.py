"""The lake's table schemas, and landing rows turned into rows Iceberg accepts.

``metrics`` is the landing row schema (``exporters.landing.schema.metrics_schema``,
``exporters.otlp_rows.COLUMNS`` in that order) with Iceberg's types: the
three times are ``timestamptz`` (µs), and every ``uint64`` (``count``,
``exp_zero_count`` and the bucket-count list elements) is ``long``, because
Iceberg (and Spark) have no unsigned integer. Two columns follow:
``node_id``, the broker a per-node metric describes, decoded once from the
data point attributes with the keys the rollups use (``NODE_ID_ATTRIBUTES``),
``ingest_node``, the kip714 server that landed the row, ``log_partition``,
the partition of the pushes topic the push was in (``[log] store = "kafka"``,
where ``push_offset`` is the Kafka offset within it; null for the local log),
and ``push_bytes`` and ``push_decoded_bytes``, the push's payload as sent
and decompressed (the demand of kip714's ``push_byte_rate`` and
``push_decoded_byte_rate`` quotas; the same on every row of a push, which
Parquet's dictionary encoding stores about once a push).

A count above 2^63−1 cannot be a ``long``; such a data point is refused (left
out and counted), never wrapped to a negative number.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc

from exporters.landing.schema import DICTIONARY, encoded, metrics_schema, pushes_schema

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import LoggedPush

__all__ = [
    "INT64_MAX",
    "METRICS_STATISTICS",
    "METRICS_TABLE",
    "NODE_ID_ATTRIBUTES",
    "PUSHES_TABLE",
    "UINT64_COLUMNS",
    "lake_encoded_schema",
    "lake_metrics_schema",
    "lake_pushes_schema",
    "to_lake_rows",
]

METRICS_TABLE: Final = "metrics"
PUSHES_TABLE: Final = "pushes"
#: Attribute keys naming the broker a per-node metric describes, first match
#: wins: librdkafka says ``node.id``, the Java client ``node_id`` (Kafka's
#: ``node-id`` tag snake-cased). The same list as ``spark_jobs.rollups``.
NODE_ID_ATTRIBUTES: Final = ("node.id", "node_id", "node-id")
INT64_MAX: Final = 2**63 - 1
#: The only ``metrics`` columns whose data files carry statistics (Parquet's
#: min, max and null count; Iceberg's column bounds): the commit takes a
#: file's partition values from ``received_time`` and ``metric_type``'s, and
#: the rollups' and compaction's filters prune on ``time`` and
#: ``received_time``. Nothing prunes on the others (a file holds every
#: client's and every metric's rows of its hour), and computing their
#: statistics was a quarter of a librdkafka point's Parquet encoding and of
#: an SDK point's (about 1,000 and 2,400 instructions a point).
METRICS_STATISTICS: Final = ("time", "received_time", "metric_type")
_NODE_ID_KEYS: Final = pa.array(NODE_ID_ATTRIBUTES, pa.string())
UINT64_COLUMNS: Final = (
    "count",
    "exp_zero_count",
    "bucket_counts",
    "exp_positive_bucket_counts",
    "exp_negative_bucket_counts",
)


def _signed(field: pa.Field) -> pa.Field:
    if field.type == pa.uint64():
        return pa.field(field.name, pa.int64())
    if pa.types.is_list(field.type) and field.type.value_type == pa.uint64():
        return pa.field(field.name, pa.list_(pa.int64()))
    return field


@functools.cache
def lake_metrics_schema() -> pa.Schema:
    """The Arrow schema of the ``metrics`` table (the Iceberg schema is converted from it)."""
    fields = [_signed(f) for f in metrics_schema()]
    fields += [
        pa.field("node_id", pa.string()),
        pa.field("ingest_node", pa.string()),
        pa.field("log_partition", pa.int32()),
        pa.field("push_bytes", pa.int64()),
        pa.field("push_decoded_bytes", pa.int64()),
    ]
    return pa.schema(fields)


@functools.cache
def lake_pushes_schema() -> pa.Schema:
    """The raw ``pushes`` table: ``landing.schema.pushes_schema`` plus ``ingest_node``."""
    return pa.schema([*pushes_schema(), pa.field("ingest_node", pa.string())])


def _overflowing(table: pa.Table) -> pa.Array | None:
    """A mask of rows holding a count above 2^63−1, or ``None`` when there is none."""
    mask: pa.Array | None = None
    limit = pa.scalar(INT64_MAX, pa.uint64())
    for name in UINT64_COLUMNS:
        column = table.column(name)
        if pa.types.is_list(column.type):
            values = pc.list_flatten(column)
            if len(values) == 0 or not pc.any(pc.greater(values, limit)).as_py():
                continue
            parents = pc.list_parent_indices(column)
            bad_parents = pc.filter(parents, pc.greater(values, limit))
            row = pc.is_in(pa.array(range(table.num_rows), pa.int64()), value_set=bad_parents)
        else:
            if not pc.any(pc.greater(column, limit)).as_py():
                continue
            row = pc.fill_null(pc.greater(column, limit), False)
        mask = row if mask is None else pc.or_(mask, row)
    return mask


def _node_ids(attributes: pa.ChunkedArray) -> pa.Array:
    """Per row, the value of the first ``NODE_ID_ATTRIBUTES`` key in its attributes (or null).

    As ``map_lookup(..., "first")`` per key, coalesced in key order, but over
    the flattened maps at once: ``map_lookup`` walks every map per key and was
    a fifth of the landing's flattening. A row almost always holds at most
    one of the keys; then each row's value is found by counting (no sort).
    """
    rows = len(attributes)
    maps = attributes.combine_chunks() if attributes.num_chunks != 1 else attributes.chunk(0)
    # The keys and items of a sliced map array are its whole children: cut them to the slice.
    first, last = maps.offsets[0].as_py(), maps.offsets[-1].as_py()
    keys, values = maps.keys.slice(first, last - first), maps.items.slice(first, last - first)
    offsets = pc.subtract(maps.offsets, pa.scalar(first, maps.offsets.type))
    rank = pc.index_in(keys, value_set=_NODE_ID_KEYS)
    hit = pc.is_valid(rank)
    if not pc.any(hit).as_py():
        return pa.nulls(rows, pa.string())
    # Hits per row: the running count of hits, read at each row's first and last entry.
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(hit.cast(pa.int64()))])
    per_row = pc.subtract(_take(running, offsets.slice(1)), _take(running, offsets.slice(0, rows)))
    if pc.max(per_row).as_py() > 1:
        return _node_ids_sorted(maps, rows)
    found = pc.greater(per_row, 0)
    ordinal = pc.subtract(pc.cumulative_sum(found.cast(pa.int64())), pa.scalar(1, pa.int64()))
    index = pc.if_else(found, ordinal, pa.scalar(None, pa.int64()))
    return _take(values.filter(hit), index)


def _take(values: pa.Array, index: pa.Array) -> pa.Array:
    """``values[index]`` for an index computed above (in bounds): Arrow's check skipped."""
    return pc.take(values, index, boundscheck=False)


def _node_ids_sorted(maps: pa.MapArray, rows: int) -> pa.Array:
    """``_node_ids`` when some row holds two of the keys: the first key in key order wins."""
    # Arrow's list kernels take no map: the same offsets over (key, value) as a list.
    entries = pa.ListArray.from_arrays(
        maps.offsets, pa.StructArray.from_arrays([maps.keys, maps.items], ["key", "value"])
    )
    items = pc.list_flatten(entries)
    rank = pc.index_in(pc.struct_field(items, "key"), value_set=_NODE_ID_KEYS)
    hit = pc.is_valid(rank)
    found = pa.table(
        {
            "row": pc.list_parent_indices(entries).filter(hit),
            "rank": rank.filter(hit),
            "value": pc.struct_field(items, "value").filter(hit),
        }
    )
    # A stable sort: among equal keys the first in the map stays first.
    found = found.take(pc.sort_indices(found, [("row", "ascending"), ("rank", "ascending")]))
    row = found.column("row").combine_chunks()
    first = pc.fill_null(pc.not_equal(pc.pairwise_diff(row), 0), True)
    found = found.filter(first)
    mask = pc.is_in(pa.array(range(rows), row.type), value_set=found.column("row"))
    return pc.replace_with_mask(
        pa.nulls(rows, pa.string()), mask, found.column("value").combine_chunks()
    )


@functools.cache
def lake_encoded_schema() -> pa.Schema:
    """``lake_metrics_schema()`` as a lane writes it: repeating strings as dictionaries.

    The same values and the same Parquet columns (the data files carry no
    Arrow schema, so readers see plain strings); Parquet's dictionary
    encoding takes the dictionaries as they are instead of hashing every row.
    """
    schema = encoded(lake_metrics_schema())
    return schema.set(schema.get_field_index("ingest_node"), pa.field("ingest_node", DICTIONARY))


def to_lake_rows(
    table: pa.Table,
    ingest_node: str,
    *,
    encoded: bool = False,
    pushes: Sequence[LoggedPush] | None = None,
    keyed: bool = False,
    partitioned: bool = False,
) -> tuple[pa.Table, int]:
    """Landing rows (``metrics_schema``) as ``metrics`` table rows, and how many were refused.

    ``table``'s string columns may be dictionaries (``landing.schema.ENCODED_COLUMNS``).
    The rows are of ``lake_metrics_schema()``, or with ``encoded`` of
    ``lake_encoded_schema()`` (the same values). With ``pushes`` (those
    ``table`` was flattened from), each row gets its push's partition
    (pushes of the pushes topic, ``partitioned``) and sizes, found by its
    ``push_offset``; with ``keyed``, ``table`` was flattened from copies of
    ``pushes`` whose offset is their index (offsets repeat across the
    topic's partitions), and rows get the real offset back. Without
    ``pushes`` those columns are null.
    """
    refused = 0
    mask = _overflowing(table)
    if mask is not None:
        refused = pc.sum(pc.cast(mask, pa.int64())).as_py() or 0
        table = table.filter(pc.invert(mask))
    schema = lake_encoded_schema() if encoded else lake_metrics_schema()
    per_push = [pa.nulls(table.num_rows, schema.field(name).type) for name in _PER_PUSH]
    if pushes is not None:
        numbers = [p.offset for p in pushes]
        offsets = pa.array(numbers, pa.int64())
        index = table.column("push_offset")
        if keyed:
            where = table.schema.get_field_index("push_offset")
            table = table.set_column(where, "push_offset", pc.take(offsets, index))
        elif _consecutive(numbers):  # a local log's batch: no hashing of each row's offset
            index = pc.subtract(index, pa.scalar(numbers[0], pa.int64()))
        else:  # one log: its offsets are unique
            index = pc.index_in(index, value_set=offsets)
        per_push = [
            pa.nulls(table.num_rows, schema.field(name).type)
            if values.count(None) == len(values)
            else pc.take(pa.array(values, schema.field(name).type), index)
            for name, values in zip(
                _PER_PUSH, _per_push_values(pushes, partitioned=partitioned), strict=True
            )
        ]
    arrays = [table.column(f.name).cast(schema.field(f.name).type) for f in metrics_schema()]
    arrays.append(
        _node_ids(table.column("attributes")) if table.num_rows else pa.array([], pa.string())
    )
    node = _constant(ingest_node, table.num_rows)
    if encoded:
        zeros = pa.repeat(pa.scalar(0, pa.int32()), table.num_rows)
        node = pa.DictionaryArray.from_arrays(
            zeros, pa.array([ingest_node], pa.string()), safe=False
        )
    arrays.append(node)
    arrays.extend(per_push)
    return pa.Table.from_arrays(arrays, schema=schema), refused


def _consecutive(offsets: list[int]) -> bool:
    """Whether ``offsets`` are ``first, first + 1, ...``: each row's push is then its offset's."""
    return not offsets or (
        offsets[-1] - offsets[0] == len(offsets) - 1 and all(map(operator.lt, offsets, offsets[1:]))
    )


#: The ``metrics`` columns a push decides, past ``metrics_schema``'s (``_per_push_values``).
_PER_PUSH: Final = ("log_partition", "push_bytes", "push_decoded_bytes")


def _per_push_values(
    pushes: Sequence[LoggedPush], *, partitioned: bool
) -> tuple[list[int | None], list[int | None], list[int | None]]:
    """``_PER_PUSH``'s values of ``pushes``: the partition only for pushes of the topic."""
    return (
        [p.partition for p in pushes] if partitioned else [None] * len(pushes),
        [p.received_bytes for p in pushes],
        [len(p.payload) if p.decoded_bytes is None else p.decoded_bytes for p in pushes],
    )


def _constant(text: str, rows: int) -> pa.Array:
    """``rows`` copies of ``text`` as a plain string column, built without a Python list."""
    return pa.repeat(pa.scalar(text, pa.string()), rows)


def to_lake_pushes(raw: pa.Table, ingest_node: str) -> pa.Table:
    """Raw ``pushes`` rows (``pushes_schema``) with the landing node added."""
    return raw.append_column("ingest_node", _constant(ingest_node, raw.num_rows))


def concat(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """One table of ``tables`` (or an empty one of ``schema``)."""
    return pa.concat_tables(tables) if tables else schema.empty_table()
