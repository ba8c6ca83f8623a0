"""Gauge rollup: count, min, max, avg, last and exact p50/p95/p99 per window.

Percentiles are exact (linear interpolation between closest ranks, the
definition of numpy's default and Spark's ``percentile``), and the same in
batch and in the incremental job, which a sketch (``percentile_approx``)
does not guarantee. Two plans compute the same numbers (measured on 2 cores,
docs/rollups.md "Performance"):

* ``ranked`` (batch, windows up to ``RANKED_MAX_WINDOW_S``): one shuffle, one
  sort by value inside each group (a ``row_number``; the group's size and
  latest point come from unordered window aggregates over the same sorted
  rows, so there is no second sort by time), then an aggregation with
  fixed-width buffers that picks the two ranks around each quantile. The
  session (``replaceHashWithSortAgg``) streams that aggregation over the
  sorted rows instead of hashing every group. At KIP-714 push rates a
  1-minute group holds about one point, where an object aggregation
  (``collect_list``) spends most of its time falling back to sort-based
  aggregation; this plan is about twice as fast there.
* ``collect`` (streaming, and longer windows): ``sort_array(collect_list)``
  per group. Structured Streaming has no ``row_number``; for hourly groups
  (60 points at a 1-minute push interval) the in-memory object hash
  aggregation (``session`` raises its sort fallback threshold) is the faster
  plan.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import (
    KEY_COLUMNS,
    parse_window,
    prepare_points,
    window_bounds,
    window_column,
)

__all__ = ["GAUGE_QUANTILES", "RANKED_MAX_WINDOW_S", "exact_quantile", "gauge_rollup"]

GAUGE_QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

RANKED_MAX_WINDOW_S = 600
"""Longest window (s) the batch rollup computes with the ``ranked`` plan (few points per group)."""

Method = Literal["auto", "ranked", "collect"]


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


def _position(n: Column, q: float) -> tuple[Column, Column, Column]:
    """``exact_quantile``'s rank ``q·(n−1)`` and its floor and ceiling, the same expressions."""
    position = sf.lit(q) * (n - 1)
    return position, sf.floor(position).cast("int"), sf.ceil(position).cast("int")


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
        ranked = not points.isStreaming and seconds <= RANKED_MAX_WINDOW_S
        method = "ranked" if ranked else "collect"
    if method == "ranked":
        return _ranked(gauges)
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


def _ranked(gauges: DataFrame) -> DataFrame:
    """Exact quantiles from ranks: ``_rank`` by value, ``_last`` the group's latest value.

    ``_last`` is the value of the greatest ``(time, push_offset, value)``, the
    order ``last`` is defined by, taken over the whole group without ordering
    it: one sort (by value) serves every window function.
    """
    group = ("window", *KEY_COLUMNS)
    by_value = Window.partitionBy(*group).orderBy("value")
    whole_group = Window.partitionBy(*group)
    latest = sf.max(sf.struct("time", "push_offset", "value")).over(whole_group)
    ranked = gauges.select(
        *group,
        "value",
        (sf.row_number().over(by_value) - 1).alias("_rank"),
        sf.count(sf.lit(1)).over(whole_group).alias("_n"),
        latest["value"].alias("_last"),
    )
    picks: list[Column] = []
    for name, q in GAUGE_QUANTILES:
        _, low, high = _position(sf.col("_n"), q)
        picks.append(sf.max(sf.when(sf.col("_rank") == low, sf.col("value"))).alias(f"_lo_{name}"))
        picks.append(sf.max(sf.when(sf.col("_rank") == high, sf.col("value"))).alias(f"_hi_{name}"))
    aggregated = ranked.groupBy(*group).agg(
        *_common_aggregates(),
        sf.max("_last").alias("last"),
        *picks,
    )
    quantiles = []
    for name, q in GAUGE_QUANTILES:
        position, low, _ = _position(sf.col("count"), q)
        low_value, high_value = sf.col(f"_lo_{name}"), sf.col(f"_hi_{name}")
        quantiles.append((low_value + (high_value - low_value) * (position - low)).alias(name))
    return aggregated.select(
        *window_bounds(), *KEY_COLUMNS, "count", "min", "max", "avg", "last", *quantiles
    )
