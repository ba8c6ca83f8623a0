"""Sum rollup: the increase of each counter per window and its per-second rate.

Delta points are summed as they are. Cumulative points are first turned into
per-point deltas per series (``_cumulative``: resets, new series, and
baseline points whose delta is unknown), then summed the same way, so a
metric that arrives in both temporalities (two clients, or one client before
and after a subscription change) still adds up to one increase per window.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import (
    KEY_COLUMNS,
    PREPARED_POINT_COLUMNS,
    parse_window,
    prepare_points,
    window_bounds,
    window_column,
)
from spark_jobs.rollups._cumulative import DEFAULT_LOOKBACK, classify_cumulative

__all__ = ["sum_rollup", "sum_rollup_from"]

_COLUMNS = (*PREPARED_POINT_COLUMNS, "is_monotonic", "push_offset", "value")


def sum_rollup(
    points: DataFrame,
    window: str | timedelta,
    *,
    lookback: timedelta = DEFAULT_LOOKBACK,
    include_cumulative: bool = True,
) -> DataFrame:
    """Counter increase per window and key.

    Output: ``window_start, window_end`` (timestamp), the key columns
    (``metric_name, client_id, client_instance_id, client_software_name,
    client_software_version, node_id``), ``points`` (bigint: sum points in
    the window), ``baseline_points`` (bigint: cumulative points whose delta is
    unknown), ``resets`` (bigint: counter resets detected), ``delta``
    (double: sum of the known deltas, null if none is known) and
    ``rate_per_s`` (double: ``delta`` ÷ window seconds).

    A cumulative point's whole increase since its predecessor lands in the
    point's own window. ``include_cumulative=False`` rolls up delta points
    only; Structured Streaming needs it, as it has no per-series ``lag``.
    """
    seconds = parse_window(window)
    sums = (
        prepare_points(points)
        .where((sf.col("metric_type") == "sum") & sf.col("value").isNotNull())
        .select(*_COLUMNS)
    )
    is_delta = sf.col("temporality") == "delta"
    if not include_cumulative:
        delta = sums.where(is_delta).select(
            "*",
            sf.col("value").alias("_delta"),
            sf.lit(0).alias("_reset"),
            sf.lit(0).alias("_baseline"),
        )
    else:
        # One pass over both temporalities (no union of two reads of the input):
        # delta points ride through the series window and keep their own value.
        classified = classify_cumulative(
            sums.where(is_delta | (sf.col("temporality") == "cumulative")),
            ("value",),
            lookback,
            sf.coalesce(sf.col("is_monotonic"), sf.lit(False))
            & (sf.col("value") < sf.col("_prev_value")),
        )
        mode = sf.when(~is_delta, sf.col("_mode"))
        delta = classified.select(
            *_COLUMNS,
            sf.when(is_delta, sf.col("value"))
            .when(mode == "diff", sf.col("value") - sf.col("_prev_value"))
            .when(mode.isin("reset", "new"), sf.col("value"))
            .alias("_delta"),
            sf.coalesce((mode == "reset").cast("int"), sf.lit(0)).alias("_reset"),
            sf.coalesce((mode == "baseline").cast("int"), sf.lit(0)).alias("_baseline"),
        )
    aggregated = delta.groupBy(window_column(seconds), *KEY_COLUMNS).agg(
        sf.count(sf.lit(1)).alias("points"),
        sf.sum("_baseline").cast("bigint").alias("baseline_points"),
        sf.sum("_reset").cast("bigint").alias("resets"),
        sf.sum("_delta").alias("delta"),
    )
    return _finish(aggregated, seconds)


def _finish(aggregated: DataFrame, seconds: int) -> DataFrame:
    return aggregated.select(
        *window_bounds(),
        *KEY_COLUMNS,
        "points",
        "baseline_points",
        "resets",
        "delta",
        (sf.col("delta") / sf.lit(float(seconds))).alias("rate_per_s"),
    )


def sum_rollup_from(sums: DataFrame, window: str | timedelta) -> DataFrame:
    """A longer window's sum rollup from a shorter window's ``sum_rollup`` output.

    Why: every column is a sum (``points``, ``baseline_points``, ``resets``,
    ``delta``; a cumulative point's delta does not depend on the window), so
    the hourly rollup is the sum of the 1-minute rows: exactly the rollup of
    the raw points, for a fraction of the work. The shorter window must
    divide ``window`` (every window divides a day; 1m divides 1h).
    """
    seconds = parse_window(window)
    aggregated = sums.groupBy(window_column(seconds, "window_start"), *KEY_COLUMNS).agg(
        sf.sum("points").alias("points"),
        sf.sum("baseline_points").alias("baseline_points"),
        sf.sum("resets").alias("resets"),
        sf.sum("delta").alias("delta"),
    )
    return _finish(aggregated, seconds)
