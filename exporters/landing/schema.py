"""The landing's rows as Arrow: the ``metrics`` rows flattened pushes become, and raw ``pushes``.

The ``metrics`` rows are ``exporters.otlp_rows``'s row schema, with one
storage change: the three times are ``timestamp[us, UTC]``, not
nanoseconds. Spark (and most engines) read Parquet timestamps at microsecond
precision and refuse or mangle nanosecond ones, while no client metric is
meaningful below a microsecond; the cast truncates. ``exporters.iceberg.schema``
turns these rows into the lake table's.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from exporters.otlp_rows import COLUMNS, arrow_schema

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import LoggedPush
    from exporters.otlp_rows import Columns

__all__ = [
    "DICTIONARY",
    "ENCODED_COLUMNS",
    "TIME_COLUMNS",
    "decoded",
    "encoded",
    "encoded_metrics_schema",
    "hours_of",
    "metrics_schema",
    "metrics_table",
    "ns_to_us",
    "pushes_schema",
    "pushes_table",
    "split_by_hour",
]

TIME_COLUMNS: Final = ("time", "start_time", "received_time")
#: String columns that repeat within a push (its client's) or a metric: the
#: vectorised flattener gives them as dictionaries over the per-push or
#: per-metric strings, whose values are the same as plain strings'.
ENCODED_COLUMNS: Final = (
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "principal",
    "metric_name",
    "metric_type",
    "temporality",
    "unit",
    "scope_name",
    "scope_version",
)
DICTIONARY: Final = pa.dictionary(pa.int32(), pa.string())
US_PER_HOUR: Final = 3_600_000_000
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")


@functools.cache
def metrics_schema() -> pa.Schema:
    """``otlp_rows.arrow_schema()`` with the times stored as ``timestamp[us, UTC]``."""
    base = arrow_schema()
    fields = [pa.field(f.name, _TIMESTAMP) if f.name in TIME_COLUMNS else f for f in base]
    return pa.schema(fields)


@functools.cache
def encoded_metrics_schema() -> pa.Schema:
    """``metrics_schema()`` with the ``ENCODED_COLUMNS`` as ``DICTIONARY``."""
    return encoded(metrics_schema())


@functools.cache
def encoded(schema: pa.Schema) -> pa.Schema:
    """``schema`` with those of the ``ENCODED_COLUMNS`` it has (as strings) as ``DICTIONARY``."""
    return pa.schema(
        [
            pa.field(f.name, DICTIONARY)
            if f.name in ENCODED_COLUMNS and f.type == pa.string()
            else f
            for f in schema
        ]
    )


def decoded(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns as plain ones (the same values)."""
    fields = [
        pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


@functools.cache
def pushes_schema() -> pa.Schema:
    """One row per push: its context and the decompressed OTLP bytes, for re-flattening."""
    return pa.schema(
        [
            ("push_offset", pa.int64()),
            ("received_time", _TIMESTAMP),
            ("client_instance_id", pa.string()),
            ("subscription_id", pa.int64()),
            ("client_id", pa.string()),
            ("client_software_name", pa.string()),
            ("client_software_version", pa.string()),
            ("client_source_address", pa.string()),
            ("client_source_port", pa.int32()),
            ("principal", pa.string()),
            ("push_interval_ms", pa.int64()),
            ("terminating", pa.bool_()),
            ("content_type", pa.string()),
            ("payload", pa.large_binary()),
        ]
    )


@functools.cache
def _build_schema() -> pa.Schema:
    # Times arrive as uint64 nanoseconds: OTLP's fixed64 can exceed int64, which
    # timestamp[ns] cannot hold, so they are divided down to µs before the cast.
    base = arrow_schema()
    return pa.schema([pa.field(f.name, pa.uint64()) if f.name in TIME_COLUMNS else f for f in base])


def metrics_table(columns: Columns) -> pa.Table:
    """Flattened columns (``otlp_rows``) as a table of ``metrics_schema()``."""
    table = pa.Table.from_pydict(columns, schema=_build_schema())
    arrays = [
        ns_to_us(table.column(name)) if name in TIME_COLUMNS else table.column(name)
        for name in COLUMNS
    ]
    return pa.Table.from_arrays(arrays, schema=metrics_schema())


def ns_to_us(column: Any) -> Any:
    """uint64 nanoseconds → ``timestamp[us, UTC]`` (truncating; every uint64 fits)."""
    # A uint64 of ns over 1,000 always fits an int64: no range check per value.
    micros = pc.divide(column, pa.scalar(1000, pa.uint64()))
    return pc.cast(micros, pa.int64(), safe=False).cast(_TIMESTAMP)


def pushes_table(pushes: Sequence[LoggedPush]) -> pa.Table:
    """The raw ``pushes`` rows of ``pushes``, in order."""
    return pa.Table.from_pydict(
        {
            "push_offset": [p.offset for p in pushes],
            "received_time": [p.received_time_ms * 1000 for p in pushes],
            "client_instance_id": [p.client_instance_id for p in pushes],
            "subscription_id": [p.subscription_id for p in pushes],
            "client_id": [p.client_id for p in pushes],
            "client_software_name": [p.client_software_name for p in pushes],
            "client_software_version": [p.client_software_version for p in pushes],
            "client_source_address": [p.client_source_address for p in pushes],
            "client_source_port": [p.client_source_port for p in pushes],
            "principal": [p.principal for p in pushes],
            "push_interval_ms": [p.push_interval_ms for p in pushes],
            "terminating": [p.terminating for p in pushes],
            "content_type": [p.content_type for p in pushes],
            "payload": [p.payload for p in pushes],
        },
        schema=pushes_schema(),
    )


def hours_of(column: Any) -> Any:
    """Hours since the epoch (int64) of a ``timestamp[us]`` column."""
    return pc.divide(column.cast(pa.int64()), US_PER_HOUR)


def split_by_hour(table: pa.Table, hours: Any) -> list[tuple[int, pa.Table]]:
    """``table`` cut into one piece per partition hour: ``(hours since epoch, rows)``.

    ``hours`` holds each row's hour (``hours_of``). Almost every batch falls
    in one hour, which costs one ``min``/``max`` and no copy; only a batch
    that crosses an hour is filtered per hour.
    """
    if table.num_rows == 0:
        return []
    bounds = pc.min_max(hours)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low == high:
        return [(int(low), table)]
    return [
        (int(hour), table.filter(pc.equal(hours, hour)))
        for hour in sorted(pc.unique(hours).to_pylist())
    ]
