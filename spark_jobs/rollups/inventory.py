"""The fleet's inventory: one row per client instance and hour it pushed in.

The report's first screen counts clients by type, software, principal and
ingest node from this table. Why a rollup rather than the report reading
the landing: the landing holds every point (60 a push), the inventory one
row per client and hour, and the principal and ingest node are on no other
rollup (they are not part of a series' key).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import CLIENT_COLUMNS, window_bounds, window_column

__all__ = ["INVENTORY_COLUMNS", "client_inventory"]

_HOUR_S = 3600
_KIND = r"^org\.apache\.kafka\.(producer|consumer)\."

INVENTORY_COLUMNS: tuple[str, ...] = (
    "window_start",
    "window_end",
    *CLIENT_COLUMNS,
    "client_type",
    "principal",
    "ingest_node",
    "pushes",
    "points",
    "first_seen",
    "last_seen",
)


def _column_or_null(points: DataFrame, name: str) -> Column:
    """A landing column an older table may not have (then null)."""
    if name in points.columns:
        return sf.col(name)
    return sf.lit(None).cast("string")


def client_inventory(points: DataFrame) -> DataFrame:
    """``INVENTORY_COLUMNS`` from landing rows already within the run's ranges.

    ``client_type`` is ``producer`` or ``consumer`` from the KIP-714 metric
    names' prefix (null when the client pushed neither kind). ``pushes``
    counts distinct ``(ingest_node, push_offset)``: a push offset is unique
    per node's log. ``principal`` and ``ingest_node`` are the greatest seen in
    the hour (a client keeps one principal per connection; a client that
    moved nodes within the hour shows one of them).
    """
    kind = sf.nullif(sf.regexp_extract("metric_name", _KIND, 1), sf.lit(""))
    node = _column_or_null(points, "ingest_node")
    return (
        points.groupBy(window_column(_HOUR_S), *CLIENT_COLUMNS)
        .agg(
            sf.max(kind).alias("client_type"),
            sf.max(_column_or_null(points, "principal")).alias("principal"),
            sf.max(node).alias("ingest_node"),
            sf.count_distinct(sf.coalesce(node, sf.lit("")), sf.col("push_offset")).alias("pushes"),
            sf.count(sf.lit(1)).alias("points"),
            sf.min("time").alias("first_seen"),
            sf.max("time").alias("last_seen"),
        )
        .select(*window_bounds(), *INVENTORY_COLUMNS[2:])
    )
