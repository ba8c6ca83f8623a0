"""Top-N rows of a rollup per metric and window, by a chosen statistic."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import CLIENT_COLUMNS

__all__ = ["top_n"]


def top_n(
    rollup: DataFrame,
    n: int,
    by: str,
    *,
    partition_by: Sequence[str] = ("metric_name", "window_start"),
    descending: bool = True,
) -> DataFrame:
    """The ``n`` highest (or lowest) rows by ``by`` in each partition, with their ``rank``.

    Output: the input columns plus ``rank`` (int, 1 = first). Ties are broken
    by the client columns (and ``node_id`` when present) in ascending order,
    so reruns rank identically. Rows whose ``by`` is null are not ranked.
    Apply it to an hourly rollup for "top clients per metric per hour"; a
    per-node rollup ranks client × broker rows (aggregate first to rank
    clients alone, as ``client_health`` does).

    Raises:
        ValueError: ``n`` < 1 or ``by`` is not a column of ``rollup``.
    """
    if n < 1:
        raise ValueError(f"top_n: n must be at least 1, got {n}")
    if by not in rollup.columns:
        raise ValueError(
            f"top_n: {by!r} is not a column of the rollup ({', '.join(rollup.columns)})"
        )
    order = sf.col(by).desc() if descending else sf.col(by).asc()
    ties = [
        sf.col(c).asc_nulls_first() for c in (*CLIENT_COLUMNS, "node_id") if c in rollup.columns
    ]
    window = Window.partitionBy(*partition_by).orderBy(order, *ties)
    ranked = rollup.where(sf.col(by).isNotNull()).withColumn("rank", sf.row_number().over(window))
    return ranked.where(sf.col("rank") <= n)
