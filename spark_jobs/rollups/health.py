"""Per-client health: the standard KIP-714 producer/consumer metrics in one row per window.

The metric names are KIP-714's standard set: the Java
client names every metric ``org.apache.kafka.<producer|consumer>.<...>`` and
librdkafka pushes the same names. The view is built from the gauge and sum
rollups of one window length (hourly in the job), not from raw points, so it
costs a small shuffle instead of another scan of the landing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import CLIENT_COLUMNS

__all__ = ["HEALTH_METRICS", "client_health"]

_PREFIX = r"^org\.apache\.kafka\.(producer|consumer)\.(.+)$"

HEALTH_METRICS: dict[str, str] = {
    "request_latency_avg": "node.request.latency.avg",
    "request_latency_max": "node.request.latency.max",
    "queue_time_avg": "record.queue.time.avg",
    "queue_time_max": "record.queue.time.max",
    "throttle_time_avg": "produce.throttle.time.avg",
    "throttle_time_max": "produce.throttle.time.max",
    "connection_creation_rate": "connection.creation.rate",
    "connection_creation_total": "connection.creation.total",
}
"""Health inputs → metric name after ``org.apache.kafka.<producer|consumer>.``.

Queue and throttle time exist for producers only, so they are null for consumers.
"""

_KEYS = ("window_start", "window_end", *CLIENT_COLUMNS, "client_type")


def _is(metric: str) -> Column:
    return sf.col("_metric") == HEALTH_METRICS[metric]


def _mean(metric: str) -> Column:
    """Mean over all points (all brokers) from per-key means: Σ avg·count ÷ Σ count."""
    weighted = sf.sum(sf.when(_is(metric), sf.col("avg") * sf.col("count")))
    return weighted / sf.sum(sf.when(_is(metric), sf.col("count")))


def client_health(gauges: DataFrame, sums: DataFrame) -> DataFrame:
    """One row per client and window from ``gauge_rollup`` and ``sum_rollup`` outputs.

    Both inputs must use the same window length. Output: ``window_start,
    window_end`` (timestamp), ``client_id, client_instance_id,
    client_software_name, client_software_version``, ``client_type``
    (producer|consumer), then (double, milliseconds unless noted):
    ``request_latency_avg_ms`` (mean of ``node.request.latency.avg`` over
    all brokers), ``request_latency_p99_ms`` (its p99 at the worst broker),
    ``request_latency_max_ms`` (max of ``node.request.latency.max``),
    ``queue_time_avg_ms, queue_time_max_ms, throttle_time_avg_ms,
    throttle_time_max_ms`` (``record.queue.time.*``,
    ``produce.throttle.time.*``; producers), ``connection_creation_rate``
    (per second, mean of the gauge) and ``connections_created`` (increase of
    ``connection.creation.total``). A client with none of these metrics in
    a window has no row; a missing metric is null.
    """
    wanted = list(HEALTH_METRICS.values())
    kind = sf.regexp_extract("metric_name", _PREFIX, 1)
    metric = sf.regexp_extract("metric_name", _PREFIX, 2)
    gauge_part = gauges.select(
        *_KEYS[:2],
        *CLIENT_COLUMNS,
        kind.alias("client_type"),
        metric.alias("_metric"),
        "count",
        "avg",
        "max",
        "p99",
        sf.lit(None).cast("double").alias("delta"),
    )
    sum_part = sums.select(
        *_KEYS[:2],
        *CLIENT_COLUMNS,
        kind.alias("client_type"),
        metric.alias("_metric"),
        sf.lit(None).cast("bigint").alias("count"),
        sf.lit(None).cast("double").alias("avg"),
        sf.lit(None).cast("double").alias("max"),
        sf.lit(None).cast("double").alias("p99"),
        "delta",
    )
    both = gauge_part.unionByName(sum_part).where(sf.col("_metric").isin(wanted))
    return both.groupBy(*_KEYS).agg(
        _mean("request_latency_avg").alias("request_latency_avg_ms"),
        sf.max(sf.when(_is("request_latency_avg"), sf.col("p99"))).alias("request_latency_p99_ms"),
        sf.max(sf.when(_is("request_latency_max"), sf.col("max"))).alias("request_latency_max_ms"),
        _mean("queue_time_avg").alias("queue_time_avg_ms"),
        sf.max(sf.when(_is("queue_time_max"), sf.col("max"))).alias("queue_time_max_ms"),
        _mean("throttle_time_avg").alias("throttle_time_avg_ms"),
        sf.max(sf.when(_is("throttle_time_max"), sf.col("max"))).alias("throttle_time_max_ms"),
        _mean("connection_creation_rate").alias("connection_creation_rate"),
        sf.sum(sf.when(_is("connection_creation_total"), sf.col("delta"))).alias(
            "connections_created"
        ),
    )
