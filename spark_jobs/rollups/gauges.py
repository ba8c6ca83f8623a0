"""Gauge rollup: count, min, max, avg, last and exact p50/p95/p99 per window.

Percentiles are exact (linear interpolation between closest ranks, the
definition of numpy's default and Spark's ``percentile``), and the same in
batch and in the incremental job, which a sketch (``percentile_approx``)
does not guarantee. Every plan collects each group's values
(``sort_array(collect_list)``) and reads the quantiles from that array; two
plans differ in how the aggregation meets its groups (measured on 2 cores,
docs/rollups.md "Performance"):

* ``sorted`` (batch, windows up to ``SORTED_MAX_WINDOW_S``): the points are
  sorted by group inside their partitions first, so the aggregation streams
  over each group (``SortAggregate``: the session's ``replaceHashWithSortAgg``)
  instead of keeping a hash map of buffers. At KIP-714 push rates a 1-minute
  group holds about one point, and an object hash aggregation then falls
  back to sort-based aggregation for most of its input; sorted first, the
  10M-point benchmark's 1-minute gauges took 7.5-8.3 s against 11.3-11.9 s
  for the window-function plan this replaced (one ``row_number`` sort and
  two window passes). The input should be partitioned by a subset of the
  group (the pipeline's projection is): otherwise the aggregation shuffles
  after the sort, and only the sort is wasted, not the result.
* ``collect`` (streaming, and longer windows): the same aggregation, hashed.
  Structured Streaming cannot sort inside partitions; for hourly groups (60
  points at a 1-minute push interval) the in-memory object hash aggregation
  (``session`` raises its sort fallback threshold) merges each task's points
  before its shuffle, the faster plan there.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import (
    KEY_COLUMNS,
    parse_window,
    prepare_points,
    window_bounds,
    window_column,
)

__all__ = ["GAUGE_QUANTILES", "SORTED_MAX_WINDOW_S", "exact_quantile", "gauge_rollup"]

GAUGE_QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

SORTED_MAX_WINDOW_S = 600
"""Longest window (s) the batch rollup computes with the ``sorted`` plan (few points per group)."""

Method = Literal["auto", "sorted", "collect"]


def exact_quantile(sorted_values: Column, q: float) -> Column:
    """The ``q`` quantile of an ascending array: value at rank ``q·(n−1)``, interpolated.

    Null for an empty array.
    """
    n = sf.size(sorted_values)
    position = sf.lit(q) * (n - 1)
    low = sf.floor(position).cast("int")
    high = sf.ceil(position).cast("int")
    low_value = sf.element_at(sorted_values, low + 1)
    high_value = sf.element_at(sorted_values, high + 1)
    return sf.when(n > 0, low_value + (high_value - low_value) * (position - low))


def gauge_rollup(
    points: DataFrame, window: str | timedelta, *, method: Method = "auto"
) -> DataFrame:
    """Gauge statistics per window and key.

    Output: ``window_start, window_end`` (timestamp), ``metric_name,
    client_id, client_instance_id, client_software_name,
    client_software_version, node_id`` (string), ``count`` (bigint: points
    with a value), ``min, max, avg, last, p50, p95, p99`` (double).

    ``last`` is the value of the latest point (by ``time``, then
    ``push_offset``; equal times within one push, e.g. one gauge per topic,
    resolve to the largest value so the result never depends on row order).
    Points without a value (NaN or ±inf at the source) are left out. A
    window without gauge points has no row. ``method`` picks the plan
    (module docstring); every plan gives the same numbers.
    """
    seconds = parse_window(window)
    gauges = (
        prepare_points(points)
        .where((sf.col("metric_type") == "gauge") & sf.col("value").isNotNull())
        .select(window_column(seconds), *KEY_COLUMNS, "time", "push_offset", "value")
    )
    if method == "auto":
        short = not points.isStreaming and seconds <= SORTED_MAX_WINDOW_S
        method = "sorted" if short else "collect"
    if method == "sorted":
        return _collected(gauges.sortWithinPartitions("window", *KEY_COLUMNS))
    return _collected(gauges)


def _common_aggregates() -> list[Column]:
    return [
        sf.count("value").alias("count"),
        sf.min("value").alias("min"),
        sf.max("value").alias("max"),
        sf.avg("value").alias("avg"),
    ]


def _collected(gauges: DataFrame) -> DataFrame:
    aggregated = gauges.groupBy("window", *KEY_COLUMNS).agg(
        *_common_aggregates(),
        sf.max(sf.struct("time", "push_offset", "value")).alias("_last"),
        sf.sort_array(sf.collect_list("value")).alias("_sorted"),
    )
    return aggregated.select(
        *window_bounds(),
        *KEY_COLUMNS,
        "count",
        "min",
        "max",
        "avg",
        sf.col("_last.value").alias("last"),
        *(exact_quantile(sf.col("_sorted"), q).alias(name) for name, q in GAUGE_QUANTILES),
    )
