"""The health rules evaluated over the landing: what fired, per client, rule and hour.

The rules are ``health_rules``' (the shipped file, or ``[alerts] rules``):
the same file ``kip714 alerts prometheus`` renders, so the lake and
Prometheus alert on the same conditions. A rule reads its metric's points
(``value``: gauges and sums) in tumbling windows of ``for_s`` seconds per
series (client and ``node_id``), aggregated as the rule says (``last`` with
``for_s = 0``: every point is its own window), and a window fires when the
aggregate compares true with the threshold. Prometheus slides its window
with every evaluation; here windows are aligned to the epoch, as every
rollup's are, so a condition shorter than a window can fire in Prometheus
and not here.

``kip714.client.software_known_bad`` fires for each hour a client whose
software is in a ``[[known_bad]]`` range pushed.
``kip714.client.push_age_intervals`` (a client stopped pushing) is read from
the times of a client's pushes (the distinct ``time`` of its points): its
push interval is the median gap between them (the landing's rows do not
carry the interval the subscription asked, so the lake measures it), and the
rule fires from ``threshold`` intervals after a push until the next one, or,
after the client's last push, if it was not terminating, until the latest
point of the run (the lake's "now"). ``value`` is the silence in intervals.

Every condition is a Spark column expression built on the driver (version
ranges as regular expressions): no Python runs on the executors.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf
from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

from health_rules.versions import WRAPPED_RDKAFKA, version_range_regex
from spark_jobs.rollups._common import CLIENT_COLUMNS, window_column

if TYPE_CHECKING:
    from health_rules import KnownBad, Rule, RuleSet

__all__ = ["ALERTS_SCHEMA", "alert_points", "client_alerts", "push_times"]

ALERTS_SCHEMA = StructType(
    [
        StructField("window_start", TimestampType()),
        StructField("window_end", TimestampType()),
        *(StructField(name, StringType()) for name in CLIENT_COLUMNS),
        StructField("rule", StringType()),
        StructField("severity", StringType()),
        StructField("first_fired", TimestampType()),
        StructField("last_fired", TimestampType()),
        StructField("value", DoubleType()),
        StructField("threshold", DoubleType()),
    ]
)
"""One row per client, rule and hour it fired in; ``value`` is the worst aggregate of the hour."""

_SOFTWARE = "kip714.client.software_known_bad"


def _compare(rule: Rule, value: Column) -> Column:
    threshold = sf.lit(rule.threshold)
    match rule.op:
        case ">":
            return value > threshold
        case ">=":
            return value >= threshold
        case "<":
            return value < threshold
        case "<=":
            return value <= threshold
        case "==":
            return value == threshold
        case _:
            return value != threshold


def _metric_pattern(metric: str) -> str:
    return "^" + ".*".join(re.escape(piece) for piece in metric.split("*")) + "$"


def _fired_windows(points: DataFrame, rule: Rule) -> DataFrame:
    """(fired_start, fired_end, client columns, value) of each window that fired."""
    chosen = points.where(
        sf.col("metric_name").rlike(_metric_pattern(rule.metric)) & sf.col("value").isNotNull()
    )
    if rule.aggregation == "last" and rule.for_s == 0:
        return chosen.where(_compare(rule, sf.col("value"))).select(
            sf.col("time").alias("fired_start"),
            sf.col("time").alias("fired_end"),
            *CLIENT_COLUMNS,
            "value",
        )
    aggregate = {
        "max": sf.max("value"),
        "min": sf.min("value"),
        "avg": sf.avg("value"),
        "last": sf.max_by("value", "time"),
    }[rule.aggregation]
    windows = chosen.groupBy(
        window_column(rule.for_s), *CLIENT_COLUMNS, "metric_name", "node_id"
    ).agg(aggregate.alias("value"))
    return windows.where(_compare(rule, sf.col("value"))).select(
        sf.col("window.start").alias("fired_start"),
        sf.col("window.end").alias("fired_end"),
        *CLIENT_COLUMNS,
        "value",
    )


def _runs(entry: KnownBad) -> Column:
    versions = version_range_regex(entry.first, entry.last)
    name, version = sf.col("client_software_name"), sf.col("client_software_version")
    if entry.library == "librdkafka":
        wrapped = "^.+" + re.escape(WRAPPED_RDKAFKA) + versions + "$"
        return ((name == "librdkafka") & version.rlike(f"^{versions}$")) | version.rlike(wrapped)
    return (name == entry.library) & version.rlike(f"^{versions}$")


def _known_bad_windows(points: DataFrame, rule: Rule, rules: RuleSet) -> DataFrame | None:
    if not rules.known_bad or not rule.holds(1.0):
        return None
    runs_bad = sf.lit(False)
    for entry in rules.known_bad:
        runs_bad = runs_bad | _runs(entry)
    return points.where(sf.coalesce(runs_bad, sf.lit(False))).select(
        sf.col("time").alias("fired_start"),
        sf.col("time").alias("fired_end"),
        *CLIENT_COLUMNS,
        sf.lit(1.0).alias("value"),
    )


_PUSH_AGE = "kip714.client.push_age_intervals"


def _column_or(points: DataFrame, name: str, default: Column) -> Column:
    return sf.col(name) if name in points.columns else default


def _silent_windows(pushes: DataFrame, rule: Rule) -> DataFrame:
    """Spans without a push longer than ``threshold`` of the client's own push intervals."""
    now = pushes.agg(sf.max("time").alias("now"))
    client = Window.partitionBy("client_instance_id").orderBy("time")
    seconds = sf.unix_micros(sf.col("time")) / 1e6
    gaps = pushes.withColumn("next", sf.lead("time").over(client)).withColumn(
        "gap_s", sf.unix_micros(sf.col("next")) / 1e6 - seconds
    )
    interval = gaps.groupBy("client_instance_id").agg(
        sf.percentile_approx("gap_s", 0.5).alias("interval_s")
    )
    spans = gaps.join(interval, "client_instance_id").crossJoin(now)
    until = sf.coalesce(sf.col("next"), sf.col("now"))
    silence = (sf.unix_micros(until) / 1e6 - seconds) / sf.col("interval_s")
    open_end = sf.col("next").isNull() & sf.coalesce(sf.col("terminating"), sf.lit(False))
    fired_start = sf.timestamp_micros(
        ((seconds + sf.lit(rule.threshold) * sf.col("interval_s")) * 1e6).cast("long")
    )
    return (
        spans.where(sf.col("interval_s").isNotNull() & (sf.col("interval_s") > 0) & ~open_end)
        .select(
            fired_start.alias("fired_start"),
            until.alias("fired_end"),
            *CLIENT_COLUMNS,
            silence.alias("value"),
        )
        .where(_compare(rule, sf.col("value")))
    )


def _by_hour(fired: DataFrame, rule: Rule) -> DataFrame:
    worst = sf.min("value") if rule.op in ("<", "<=") else sf.max("value")
    hour = sf.date_trunc("hour", sf.col("fired_start"))
    return (
        fired.groupBy(hour.alias("window_start"), *CLIENT_COLUMNS)
        .agg(
            sf.min("fired_start").alias("first_fired"),
            sf.max("fired_end").alias("last_fired"),
            worst.alias("value"),
        )
        .select(
            "window_start",
            (sf.col("window_start") + sf.expr("INTERVAL 1 HOUR")).alias("window_end"),
            *CLIENT_COLUMNS,
            sf.lit(rule.name).alias("rule"),
            sf.lit(rule.severity).alias("severity"),
            "first_fired",
            "last_fired",
            sf.col("value").cast(DoubleType()).alias("value"),
            sf.lit(rule.threshold).alias("threshold"),
        )
    )


def alert_points(points: DataFrame, rules: RuleSet) -> DataFrame:
    """The points any rule reads, and only the columns they need (worth persisting: small)."""
    metrics = [r.metric for r in rules.rules if not r.metric.startswith("kip714.")]
    wanted = sf.lit(False)
    if metrics:
        wanted = sf.col("metric_name").rlike("|".join(f"(?:{_metric_pattern(m)})" for m in metrics))
    for entry in rules.known_bad:
        wanted = wanted | sf.coalesce(_runs(entry), sf.lit(False))
    return points.where(wanted).select("time", "metric_name", *CLIENT_COLUMNS, "node_id", "value")


def push_times(points: DataFrame) -> DataFrame:
    """One row per push: the client, its points' ``time`` and whether it was terminating."""
    terminating = _column_or(points, "terminating", sf.lit(False))
    return points.groupBy(*CLIENT_COLUMNS, "time").agg(sf.max(terminating).alias("terminating"))


def client_alerts(points: DataFrame, rules: RuleSet, pushes: DataFrame | None = None) -> DataFrame:
    """``ALERTS_SCHEMA`` rows from landing (or prepared) points already within the run's ranges.

    ``pushes``: ``push_times`` of every landing point of the ranges (``points`` may hold only
    the ones the rules read); computed from ``points`` when not given.
    """
    hourly: list[DataFrame] = []
    for rule in rules.rules:
        if rule.metric == _SOFTWARE:
            fired = _known_bad_windows(points, rule, rules)
        elif rule.metric == _PUSH_AGE:
            fired = _silent_windows(push_times(points) if pushes is None else pushes, rule)
        else:
            fired = _fired_windows(points, rule)
        if fired is not None:
            hourly.append(_by_hour(fired, rule))
    if not hourly:
        return points.sparkSession.createDataFrame([], ALERTS_SCHEMA)
    result = hourly[0]
    for more in hourly[1:]:
        result = result.unionByName(more)
    return result
