"""Explicit-bucket histogram rollup: buckets merged element-wise, percentiles from buckets.

Only points with the same bucket layout merge: ``explicit_bounds`` is part of
the key, so a client that changes its bounds (or two clients with different
bounds) produce separate rows instead of an invented re-bucketing. A point
whose ``bucket_counts`` does not have ``len(explicit_bounds) + 1`` entries,
or whose bounds contain a null (a non-finite bound at the source), is
malformed and left out; ``coverage.unrolled_points`` counts it.

Percentile estimate (``bucket_quantile``): OTLP bucket ``i`` holds values in
``(bounds[i-1], bounds[i]]``, the first bucket ``(-inf, bounds[0]]`` and the
last ``(bounds[-1], +inf)``. The target rank is ``q × count``; the estimate
interpolates linearly inside the bucket where the cumulative count reaches
that rank, as Prometheus' ``histogram_quantile`` does. The open ends are
closed with the merged ``min`` and ``max`` when the points carry them (else
the first bucket collapses to its upper bound and the last to its lower
bound), and the result is clamped to ``[min, max]``.
"""

from __future__ import annotations

import operator
from datetime import timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame
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
from spark_jobs.rollups.gauges import GAUGE_QUANTILES

__all__ = [
    "bucket_quantile",
    "cumulative_counts",
    "histogram_rollup",
    "histogram_rollup_from",
    "rank_bucket",
    "valid_histogram",
]

_COLUMNS = (*PREPARED_POINT_COLUMNS, "push_offset", "explicit_bounds")


def valid_histogram() -> Column:
    """True for a histogram point whose buckets match its bounds."""
    bounds = sf.coalesce(sf.col("explicit_bounds"), sf.array().cast("array<double>"))
    buckets = sf.col("bucket_counts")
    # "No null element" as "compacting drops nothing": the same test without a lambda
    # (Spark interprets higher-order functions row by row, outside generated code).
    return (
        (sf.col("metric_type") == "histogram")
        & buckets.isNotNull()
        & (sf.size(buckets) == sf.size(bounds) + 1)
        & (sf.size(sf.array_compact(bounds)) == sf.size(bounds))
        & (sf.size(sf.array_compact(buckets)) == sf.size(buckets))
    )


def cumulative_counts(buckets: Column) -> Column:
    """Running totals of an array of counts (``[1, 2, 1]`` → ``[1, 3, 4]``)."""
    zero = sf.lit(0).cast("bigint")
    return sf.aggregate(
        buckets,
        sf.array().cast("array<bigint>"),
        lambda acc, x: sf.concat(
            acc, sf.array(sf.coalesce(sf.try_element_at(acc, sf.lit(-1)), zero) + x)
        ),
    )


def rank_bucket(cumulative: Column, q: float) -> Column:
    """0-based index of the bucket where the cumulative count reaches ``q × total``."""
    rank = sf.lit(q) * sf.element_at(cumulative, -1)
    return sf.size(sf.filter(cumulative, lambda c: c < rank))


_MAX_UNROLLED = 64
"""Longest layout whose running totals and ranks are unrolled into plain expressions."""


def _unrolled_counts(buckets: Column, max_buckets: int) -> Column:
    """``cumulative_counts`` without a lambda, for arrays of at most ``max_buckets``.

    Totals past an array's end are null (``try_element_at``) and sliced off.
    """
    totals: list[Column] = []
    for i in range(1, max_buckets + 1):
        item = sf.try_element_at(buckets, sf.lit(i))
        totals.append(item if not totals else totals[-1] + item)
    return sf.slice(sf.array(*totals), 1, sf.size(buckets))


def _unrolled_rank(cumulative: Column, q: float, max_buckets: int) -> Column:
    """``rank_bucket`` without a lambda: one comparison per index (false past the end)."""
    rank = sf.lit(q) * sf.element_at(cumulative, -1)
    below = [
        sf.when(sf.try_element_at(cumulative, sf.lit(i)) < rank, 1).otherwise(0)
        for i in range(1, max_buckets + 1)
    ]
    return reduce(operator.add, below)


def bucket_quantile(
    cumulative: Column,
    bounds: Column,
    minimum: Column,
    maximum: Column,
    q: float,
    k: Column | None = None,
) -> Column:
    """Estimate the ``q`` quantile from merged buckets (interpolation: module docstring).

    ``cumulative`` is ``cumulative_counts`` of the merged bucket counts and
    ``k`` its ``rank_bucket``; pass both as columns computed in an earlier
    projection. Higher-order functions run interpreted and Spark does not
    share them between the branches of a ``when``, so recomputing them inline
    made the rollup several times slower.
    """
    total = sf.element_at(cumulative, -1)
    rank = sf.lit(q) * total
    if k is None:
        k = rank_bucket(cumulative, q)
    last = sf.size(cumulative) - 1
    lower = sf.when(k > 0, sf.element_at(bounds, k)).otherwise(
        sf.coalesce(minimum, sf.when(last > 0, sf.element_at(bounds, 1)))
    )
    upper = sf.when(k < last, sf.element_at(bounds, k + 1)).otherwise(
        sf.coalesce(maximum, sf.when(last > 0, sf.element_at(bounds, last)))
    )
    lower = sf.coalesce(lower, upper)
    upper = sf.coalesce(upper, lower)
    before = sf.when(k > 0, sf.element_at(cumulative, k)).otherwise(sf.lit(0).cast("bigint"))
    in_bucket = sf.element_at(cumulative, k + 1) - before
    estimate = lower + (upper - lower) * (rank - before) / in_bucket
    return sf.when(total > 0, sf.least(sf.greatest(estimate, minimum), maximum))


def _deltas(points: DataFrame, lookback: timedelta) -> DataFrame:
    """Per-point delta histograms: delta points as they are, cumulative ones differenced."""
    hist = (
        prepare_points(points)
        .where(valid_histogram())
        .select(*_COLUMNS, "count", "sum", "min", "max", "bucket_counts")
    )
    out = ("count", "sum", "min", "max", "bucket_counts", "_baseline")
    # One pass over both temporalities (no union of two reads of the input): delta
    # points ride through the series window and are taken as they are.
    is_delta = sf.col("temporality") != "cumulative"
    classified = classify_cumulative(
        hist.where(sf.col("temporality").isNotNull()),
        ("count", "sum", "bucket_counts", "explicit_bounds"),
        lookback,
        (sf.col("count") < sf.col("_prev_count"))
        | (sf.col("explicit_bounds") != sf.col("_prev_explicit_bounds")),
    )
    mode = sf.col("_mode")
    diff = ~is_delta & (mode == "diff")
    whole = is_delta | mode.isin("reset", "new")
    return classified.select(
        *_COLUMNS,
        sf.when(diff, sf.col("count") - sf.col("_prev_count"))
        .when(whole, sf.col("count"))
        .alias(out[0]),
        sf.when(diff, sf.col("sum") - sf.col("_prev_sum")).when(whole, sf.col("sum")).alias(out[1]),
        # A cumulative point's min/max cover its whole lifetime, not the increase.
        sf.when(whole, sf.col("min")).alias(out[2]),
        sf.when(whole, sf.col("max")).alias(out[3]),
        sf.when(diff, sf.zip_with("bucket_counts", "_prev_bucket_counts", lambda a, b: a - b))
        .when(whole, sf.col("bucket_counts"))
        .alias(out[4]),
        (~is_delta & (mode == "baseline")).cast("int").alias(out[5]),
    )


def histogram_rollup(
    points: DataFrame,
    window: str | timedelta,
    *,
    lookback: timedelta = DEFAULT_LOOKBACK,
    max_buckets: int | None = None,
) -> DataFrame:
    """Merged histograms per window, key and bucket layout.

    Output: ``window_start, window_end`` (timestamp), the key columns,
    ``explicit_bounds`` (array<double>), ``points, baseline_points``
    (bigint), ``count`` (bigint), ``sum, min, max`` (double),
    ``bucket_counts`` (array<bigint>), ``p50, p95, p99`` (double, estimated
    from the merged buckets). Cumulative histograms are differenced per
    series like cumulative sums (see ``_cumulative``); their ``min``/``max``
    only count when a point is taken whole (new series or reset).

    ``max_buckets`` (at least the longest ``bucket_counts`` of the input)
    selects the plan without per-element lambdas (``_merged``).
    """
    seconds = parse_window(window)
    aggregated = (
        _deltas(points, lookback)
        .groupBy(window_column(seconds), *KEY_COLUMNS, "explicit_bounds")
        .agg(
            sf.count(sf.lit(1)).alias("points"),
            sf.sum("_baseline").cast("bigint").alias("baseline_points"),
            *_merged(max_buckets),
        )
    )
    return _finish(aggregated, max_buckets)


def histogram_rollup_from(
    histograms: DataFrame, window: str | timedelta, *, max_buckets: int | None = None
) -> DataFrame:
    """A longer window's histogram rollup from a shorter window's ``histogram_rollup`` output.

    Why: points, counts, sums, min/max and bucket counts all compose (sums,
    min of mins, element-wise bucket sums), and the percentiles are a function
    of the merged buckets and min/max alone, so the result equals the rollup
    of the raw points. The shorter window must divide ``window``.
    """
    seconds = parse_window(window)
    aggregated = histograms.groupBy(
        window_column(seconds, "window_start"), *KEY_COLUMNS, "explicit_bounds"
    ).agg(
        sf.sum("points").alias("points"),
        sf.sum("baseline_points").alias("baseline_points"),
        *_merged(max_buckets),
    )
    return _finish(aggregated, max_buckets)


def _bucket_sums(max_buckets: int) -> Column:
    """Element-wise sums as one ``sum`` per bucket index: plain hash aggregation, no lambdas.

    Every point of a group has the same layout (``explicit_bounds`` is in the
    key, malformed points are left out), so the sums of the first ``size``
    indexes are the merged buckets; the indexes past it sum only nulls.
    """
    sums = [
        sf.sum(sf.try_element_at("bucket_counts", sf.lit(i))) for i in range(1, max_buckets + 1)
    ]
    return sf.slice(sf.array(*sums), 1, sf.max(sf.size("bucket_counts")))


def _merged(max_buckets: int | None = None) -> list[Column]:
    """Aggregates that merge histograms: sums, min/max and element-wise bucket counts.

    With ``max_buckets`` the buckets are summed per index (``_bucket_sums``),
    which measured faster than folding ``collect_list`` with ``zip_with``;
    without it (the longest layout unknown) the fold is used.
    """
    zeros = sf.array_repeat(sf.lit(0).cast("bigint"), sf.max(sf.size("bucket_counts")))
    merged = (
        _bucket_sums(max_buckets)
        if max_buckets
        else sf.aggregate(
            sf.collect_list("bucket_counts"),
            zeros,
            lambda acc, x: sf.zip_with(acc, x, lambda a, b: a + b),
        )
    )
    return [
        sf.sum("count").cast("bigint").alias("count"),
        sf.sum("sum").alias("sum"),
        sf.min("min").alias("min"),
        sf.max("max").alias("max"),
        merged.alias("bucket_counts"),
    ]


def _finish(aggregated: DataFrame, max_buckets: int | None = None) -> DataFrame:
    """Output columns and bucket percentiles of merged histograms.

    With ``max_buckets`` (up to ``_MAX_UNROLLED``) the running totals and
    ranks are plain expressions, which Spark compiles, instead of lambdas.
    """
    buckets, cumulative = sf.col("bucket_counts"), sf.col("_cumulative")
    if max_buckets is not None and 0 < max_buckets <= _MAX_UNROLLED:
        totals = _unrolled_counts(buckets, max_buckets)
        ranks = [_unrolled_rank(cumulative, q, max_buckets) for _, q in GAUGE_QUANTILES]
    else:
        totals = cumulative_counts(buckets)
        ranks = [rank_bucket(cumulative, q) for _, q in GAUGE_QUANTILES]
    with_cumulative = aggregated.withColumn("_cumulative", totals).select(
        "*", *(k.alias(f"_k_{name}") for k, (name, _) in zip(ranks, GAUGE_QUANTILES, strict=True))
    )
    return with_cumulative.select(
        *window_bounds(),
        *KEY_COLUMNS,
        "explicit_bounds",
        "points",
        "baseline_points",
        "count",
        "sum",
        "min",
        "max",
        "bucket_counts",
        *(
            bucket_quantile(
                sf.col("_cumulative"),
                sf.col("explicit_bounds"),
                sf.col("min"),
                sf.col("max"),
                q,
                sf.col(f"_k_{name}"),
            ).alias(name)
            for name, q in GAUGE_QUANTILES
        ),
    )
