"""The demand behind each quota, per hour and entity, and KIP-599's proposal from it.

``kip714 quotas advise`` answers "how do I define the quota?" for a range
it reads from the landing; this table keeps the same demand per hour, so
the report (a reader of tables) can show it and an operator can see how it
moves. Per hour, quota and (user, client-id): the byte rate per minute (the
CLI's default ``--window-s 60``), its peak and mean over the hour's minutes,
and the proposal, the peak times the headroom (1.5, the CLI's default).

The demand, as the CLI reads it (``telemetry.cli.quota_advice``; the import
contract "spark_jobs reads only the lake" keeps that module out, so the two
metric names and the principal's user are repeated here and a test checks
they agree): Java clients push
``org.apache.kafka.producer.outgoing.byte.rate`` (``producer_byte_rate``'s
demand) and ``org.apache.kafka.consumer.incoming.byte.rate``
(``consumer_byte_rate``'s), a rate per instance; the minute's rate is each
instance's mean, summed over the entity's instances. kip714's own push
quotas read the landing's ``push_bytes`` and ``push_decoded_bytes`` when it
has them: each push once (its rows repeat the sizes), the minute's bytes
over 60 s.

Not here: the replayed throttle share. It records the demand, in time
order, on Kafka's sampled ``Rate`` (``quotas.ClientQuotaManager``), a
sequential state machine per sensor; in Spark it would be a second copy of
``quotas/``, so it stays with ``kip714 quotas advise``. Nor the default
entities (their sensors come from ``quotas.entity``'s precedence).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from spark_jobs.rollups._common import window_bounds, window_column

__all__ = ["HEADROOM", "PUSH_QUOTAS", "QUOTA_ADVICE_COLUMNS", "RATE_QUOTAS", "quota_advice"]

_HOUR_S = 3600
_MINUTE_S = 60
HEADROOM = 1.5
"""``kip714 quotas advise --headroom``'s default."""
RATE_QUOTAS: dict[str, str] = {
    "org.apache.kafka.producer.outgoing.byte.rate": "producer_byte_rate",
    "org.apache.kafka.consumer.incoming.byte.rate": "consumer_byte_rate",
}
"""The pushed rate -> the Kafka quota it is the demand of (as ``quota_advice.RATE_METRICS``)."""
PUSH_QUOTAS: dict[str, str] = {
    "push_bytes": "push_byte_rate",
    "push_decoded_bytes": "push_decoded_byte_rate",
}
"""The landing's push-size column -> kip714's quota (as ``quota_advice.KIP714_QUOTAS``)."""

QUOTA_ADVICE_COLUMNS: tuple[str, ...] = (
    "window_start",
    "window_end",
    "quota",
    "user",
    "client_id",
    "instances",
    "minutes",
    "peak_byte_rate",
    "mean_byte_rate",
    "headroom",
    "proposal_byte_rate",
)


def _principal(points: DataFrame) -> Column:
    if "principal" in points.columns:
        return sf.col("principal")
    return sf.lit(None).cast("string")


def _user(points: DataFrame) -> Column:
    """Kafka's quota user: the principal's name (``User:alice`` -> ``alice``), as the CLI.

    Frames without ``principal`` (the rollups' prepared projection) are anonymous.
    """
    principal = _principal(points)
    return (
        sf.when(principal.isNull() | (principal == ""), sf.lit("ANONYMOUS"))
        .otherwise(sf.regexp_replace(principal, "^[^:]*:", ""))
        .alias("user")
    )


def _rate_minutes(points: DataFrame) -> DataFrame:
    """(quota, user, client_id, minute, instance) -> the instance's mean pushed rate."""
    quota = sf.coalesce(
        *(sf.when(sf.col("metric_name") == m, sf.lit(q)) for m, q in RATE_QUOTAS.items())
    )
    return (
        points.where(sf.col("metric_name").isin(list(RATE_QUOTAS)) & sf.col("value").isNotNull())
        .groupBy(
            quota.alias("quota"),
            _user(points),
            sf.coalesce(sf.col("client_id"), sf.lit("")).alias("client_id"),
            window_column(_MINUTE_S),
            "client_instance_id",
        )
        .agg(sf.avg("value").alias("rate"))
    )


def _push_minutes(points: DataFrame) -> DataFrame | None:
    """The same from the push sizes: each push once, its bytes over the minute's 60 s."""
    columns = [c for c in PUSH_QUOTAS if c in points.columns]
    if not columns or "received_time" not in points.columns:
        return None
    pushes = (
        points.where(sf.coalesce(*(sf.col(c).isNotNull() for c in columns)))
        .groupBy("client_instance_id", "received_time")
        .agg(
            sf.min("time").alias("time"),
            sf.max(_principal(points)).alias("principal"),
            sf.max("client_id").alias("client_id"),
            *(sf.max(c).alias(c) for c in columns),
        )
    )
    stacked = sf.explode(
        sf.array(
            *(
                sf.struct(sf.lit(PUSH_QUOTAS[c]).alias("quota"), sf.col(c).alias("bytes"))
                for c in columns
            )
        )
    ).alias("size")
    return (
        pushes.select("*", stacked)
        .where(sf.col("size.bytes").isNotNull())
        .groupBy(
            sf.col("size.quota").alias("quota"),
            _user(pushes),
            sf.coalesce(sf.col("client_id"), sf.lit("")).alias("client_id"),
            window_column(_MINUTE_S),
            "client_instance_id",
        )
        .agg((sf.sum("size.bytes") / _MINUTE_S).alias("rate"))
    )


def quota_advice(points: DataFrame) -> DataFrame:
    """``QUOTA_ADVICE_COLUMNS`` from landing rows already within the run's ranges."""
    minutes = _rate_minutes(points)
    pushed = _push_minutes(points)
    if pushed is not None:
        minutes = minutes.unionByName(pushed)
    per_minute = minutes.groupBy("quota", "user", "client_id", "window").agg(
        sf.sum("rate").alias("rate"),
        sf.collect_set("client_instance_id").alias("instances"),
    )
    hour = sf.window(sf.col("window.start"), f"{_HOUR_S} seconds").alias("window")
    peak = sf.max("rate")
    return (
        per_minute.groupBy(hour, "quota", "user", "client_id")
        .agg(
            sf.size(sf.array_distinct(sf.flatten(sf.collect_list("instances")))).alias("instances"),
            sf.count(sf.lit(1)).alias("minutes"),
            peak.alias("peak_byte_rate"),
            sf.avg("rate").alias("mean_byte_rate"),
        )
        .select(
            *window_bounds(),
            "quota",
            "user",
            "client_id",
            "instances",
            "minutes",
            "peak_byte_rate",
            "mean_byte_rate",
            sf.lit(HEADROOM).alias("headroom"),
            (sf.col("peak_byte_rate") * HEADROOM).alias("proposal_byte_rate"),
        )
    )
