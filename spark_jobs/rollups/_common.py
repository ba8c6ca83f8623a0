"""What every rollup shares: window parsing, the client key, the prepared projection.

Rollups group by metric and client (``client_id``, ``client_instance_id``,
software name and version) and, where the data point carries it, the broker
the metric describes: the landing's ``node_id`` column, which the landing
decodes from whichever attribute the client used (librdkafka ``node.id``, the
Java client ``node_id``), so no rollup reads the attribute map for it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from spark_jobs.spans import parse_window, window_label

__all__ = [
    "CLIENT_COLUMNS",
    "KEY_COLUMNS",
    "parse_window",
    "prepare_points",
    "series_attributes",
    "window_bounds",
    "window_column",
    "window_label",
]

CLIENT_COLUMNS: tuple[str, ...] = (
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
)
"""One client, as the broker (not the payload) identified it."""

KEY_COLUMNS: tuple[str, ...] = ("metric_name", *CLIENT_COLUMNS, "node_id")
"""The grouping key of the gauge, sum and histogram rollups (after the window)."""


def series_attributes(attributes: str = "attributes") -> Column:
    """A map's entries in key order: a groupable stand-in for the map (maps cannot be keys)."""
    return sf.array_sort(sf.map_entries(sf.coalesce(sf.col(attributes), sf.create_map())))


PREPARED_MARKER = "_series"
#: What every prepared point carries: time, the series keys and its temporality.
PREPARED_POINT_COLUMNS = (
    "time",
    "start_time",
    "metric_name",
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
    "node_id",
    PREPARED_MARKER,
    "temporality",
)
"""Column that only ``prepare_points`` adds: its presence means "already prepared"."""


def prepare_points(points: DataFrame) -> DataFrame:
    """The landing rows narrowed to what the rollups read.

    Why: reading the wide landing row was repeated by every rollup; the job
    now prepares the landing once, persists the result and feeds it to all
    rollups of a run. The attribute map survives only as ``_series`` (its
    sorted entries), and only on cumulative points, the only ones that need
    their exact series. Idempotent: a prepared frame is returned as it is, so
    every rollup can call it on landing rows or on the job's prepared frame.
    """
    if PREPARED_MARKER in points.columns:
        return points
    cumulative = sf.col("temporality") == "cumulative"
    return points.select(
        "time",
        "start_time",
        "metric_name",
        "metric_type",
        *CLIENT_COLUMNS,
        "node_id",
        "temporality",
        "is_monotonic",
        "push_offset",
        "value",
        "count",
        "sum",
        "min",
        "max",
        "bucket_counts",
        "explicit_bounds",
        sf.when(cumulative, series_attributes()).alias(PREPARED_MARKER),
    )


def window_column(seconds: int, time: str = "time") -> Column:
    """The tumbling window of ``time``, aligned to the epoch (so to UTC hours and days).

    ``sf.window`` rather than arithmetic on the timestamp because Structured
    Streaming only evicts state for keys it knows to be event-time windows;
    batch and incremental then share one definition. Group by it, then
    ``window_bounds`` turns it into ``window_start``/``window_end``.
    """
    return sf.window(sf.col(time), f"{seconds} seconds").alias("window")


def window_bounds() -> list[Column]:
    """``window_start``, ``window_end`` from a grouped ``window`` struct."""
    return [sf.col("window.start").alias("window_start"), sf.col("window.end").alias("window_end")]
