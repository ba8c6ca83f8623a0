"""What the rollups leave out, counted, so nothing is dropped silently.

Exponential histograms are not rolled up yet: merging needs a common scale
(downscale every point to the smallest scale in the group, re-index the
positive and negative buckets, add the zero buckets) and no Kafka client
sends them today, so they are counted and reported instead.
Summaries carry precomputed quantiles that cannot be merged at all.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from spark_jobs.rollups.histograms import valid_histogram

__all__ = ["unrolled_points"]


def unrolled_points(points: DataFrame, *, by_metric: bool = False) -> DataFrame:
    """Points no rollup uses, by reason (and ``metric_name`` with ``by_metric``).

    Output: ``metric_type, reason`` (string), [``metric_name``,] ``points``
    (bigint). Naming the metrics tells a user *which* gauges came without a
    value (the Java client's averages over an empty window are NaN). Reasons:
    ``not supported`` (exponential histograms, summaries, unknown types),
    ``no value`` (gauges and sums whose value was NaN/±inf/absent at the
    source) and ``malformed buckets`` (histograms, see ``histograms``).
    """
    metric_type = sf.col("metric_type")
    reason = (
        sf.when(metric_type.isin("gauge", "sum") & sf.col("value").isNull(), "no value")
        .when((metric_type == "histogram") & ~valid_histogram(), "malformed buckets")
        .when(~metric_type.isin("gauge", "sum", "histogram"), "not supported")
    )
    keys = ["metric_type", "reason", *(["metric_name"] if by_metric else [])]
    flagged = points.select("metric_type", "metric_name", reason.alias("reason")).where(
        sf.col("reason").isNotNull()
    )
    return flagged.groupBy(*keys).agg(sf.count(sf.lit(1)).alias("points"))
