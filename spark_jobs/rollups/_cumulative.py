"""Cumulative points → per-point deltas, per series, with counter resets handled.

A series is one client instance's metric with one exact attribute set (topic,
partition and node included), in one temporality. Each cumulative point is
classified against the previous point of its series:

* ``diff``: a predecessor at most ``lookback`` earlier with the same
  ``start_time``, and (monotonic series) a value not below it → the delta is
  this point minus the previous one;
* ``reset``: a predecessor exists but ``start_time`` changed, the monotonic
  value went down, or (histograms) the bucket layout changed → the counter
  restarted from zero, so the delta is the point's whole value;
* ``new``: no predecessor within ``lookback``, but the series started
  (``start_time``) within ``lookback`` of the point → the point holds
  everything the series ever counted, so the delta is its whole value;
* ``baseline``: no predecessor within ``lookback`` and an older or unknown
  ``start_time`` → the delta is unknown; the point only serves as the base for
  the next one.

Only points within ``lookback`` count as predecessors, so the result depends
on the data alone, not on how far back a job happened to read; the batch job
reads ``lookback`` before its range for exactly this reason.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import PREPARED_MARKER

__all__ = ["DEFAULT_LOOKBACK", "classify_cumulative"]

DEFAULT_LOOKBACK = timedelta(hours=1)


def classify_cumulative(
    points: DataFrame, lagged: tuple[str, ...], lookback: timedelta, extra_reset: Column | None
) -> DataFrame:
    """Add ``_mode`` (diff|reset|new|baseline) and ``_prev_<c>`` for each column in ``lagged``.

    ``points`` are ``prepare_points`` rows (their ``_series`` column holds the
    sorted attribute entries). ``extra_reset`` may refer to ``_prev_<c>``
    columns (histogram layout change).
    """
    series = Window.partitionBy(
        "client_instance_id", "metric_name", "temporality", PREPARED_MARKER
    ).orderBy("time", "push_offset")
    lookback_us = int(lookback.total_seconds() * 1_000_000)
    with_prev = points
    for column in ("time", "start_time", *lagged):
        with_prev = with_prev.withColumn(f"_prev_{column}", sf.lag(column).over(series))
    micros = sf.unix_micros
    has_prev = sf.col("_prev_time").isNotNull() & (
        micros(sf.col("time")) - micros(sf.col("_prev_time")) <= lookback_us
    )
    start_changed = (
        sf.col("start_time").isNotNull()
        & sf.col("_prev_start_time").isNotNull()
        & (sf.col("start_time") != sf.col("_prev_start_time"))
    )
    reset = start_changed if extra_reset is None else start_changed | extra_reset
    started_recently = sf.col("start_time").isNotNull() & (
        micros(sf.col("time")) - micros(sf.col("start_time")) <= lookback_us
    )
    mode = (
        sf.when(has_prev & sf.coalesce(reset, sf.lit(False)), "reset")
        .when(has_prev, "diff")
        .when(started_recently, "new")
        .otherwise("baseline")
    )
    return with_prev.withColumn("_mode", mode)
