"""The full rollup set of one run, planned so each point is shuffled once per rollup of its kind.

Why a plan rather than independent rollups (docs/rollups.md "Performance"):
each rollup used to decode the ``attributes`` map and shuffle the points
again for every grouping, and the hourly rollups, top-N and the health view
recomputed from raw points. Here every rollup reads one projection of the
landing (``prepare_points``), hash-partitioned by series
(``prepare_partitioned``), so it reads only its kind's columns and shuffles
them once; the shortest window's sum and histogram rollups are computed from
it and persisted, every longer window's sums and histograms are merged from
them (exact: their statistics compose), and top-N and the health view read
the persisted hourly results. Gauges are the exception: exact percentiles do
not compose, so every gauge window is computed from the points.

The caller writes ``outputs`` in order (persisted inputs first, so they are
materialised by their own write) and calls ``unpersist`` at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from spark_jobs.io import Range, within
from spark_jobs.rollups import (
    alert_points,
    client_alerts,
    client_health,
    client_inventory,
    gauge_rollup,
    histogram_rollup,
    prepare_points,
    push_times,
    quota_advice,
    sum_rollup,
    top_n,
    window_label,
)
from spark_jobs.rollups.gauges import SORTED_MAX_WINDOW_S
from spark_jobs.rollups.histograms import histogram_rollup_from
from spark_jobs.rollups.sums import sum_rollup_from

if TYPE_CHECKING:
    from health_rules import RuleSet

__all__ = [
    "HOUR_S",
    "SERIES_PARTITIONING",
    "STORAGE",
    "RollupSet",
    "ScanStats",
    "plan_rollups",
    "prepare_partitioned",
    "scan_stats",
]

HOUR_S = 3600
STORAGE = StorageLevel.DISK_ONLY
"""Persisted results (the 1-minute sums and histograms, the hourly gauges and sums) live on
local disk: at 10M points ``MEMORY_AND_DISK`` overflowed the 1 GiB driver heap when the
job still persisted its projection (a spilled block is read back into one heap buffer),
and the peak RSS target (< 2 GiB, JVM included) rules out a larger heap."""


@dataclass
class RollupSet:
    """The run's outputs by name, in write order, and the frames to unpersist afterwards."""

    outputs: dict[str, DataFrame] = field(default_factory=dict)
    persisted: list[DataFrame] = field(default_factory=list)

    def keep(self, frame: DataFrame) -> DataFrame:
        persisted = frame.persist(STORAGE)
        self.persisted.append(persisted)
        return persisted

    def unpersist(self) -> None:
        for frame in self.persisted:
            frame.unpersist()
        self.persisted.clear()


SERIES_PARTITIONING = ("client_instance_id", "metric_name")
"""What the projection is hash-partitioned by: a prefix of every rollup's key."""


def prepare_partitioned(points: DataFrame, partitions: int | None = None) -> DataFrame:
    """``prepare_points`` of the landing rows, hash-partitioned by series (not persisted).

    Why partitioned: every rollup groups (or, for cumulative points, orders a
    window) by keys that include ``client_instance_id`` and ``metric_name``,
    so with the projection hash-partitioned by them Spark plans each rollup
    with exactly one exchange, below which it pushes the rollup's own filter
    (its kind of point) and column pruning into the Iceberg scan.
    ``partitions`` defaults to the session's shuffle partitions, rounded up
    to a multiple of the cores: every later stage runs one task per
    partition, and 5 tasks on 2 cores leave one core idle for the last of
    three rounds.

    Why not persisted (docs/rollups.md "Performance"): building the
    ``DISK_ONLY`` cache of the whole projection (columnar cached batches
    written to and read back from local disk) cost more than every rollup
    re-reading its own kind's columns through Iceberg and shuffling only
    those rows: gauges, which are 65 % of the points, read only flat columns,
    which Iceberg reads vectorized.
    """
    spark = points.sparkSession
    wanted = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    cores = max(1, spark.sparkContext.defaultParallelism)
    count = -(-wanted // cores) * cores
    return prepare_points(points).repartition(count, *SERIES_PARTITIONING)


@dataclass(frozen=True, slots=True)
class ScanStats:
    rows: int
    """Points in the run's ranges (the summary's "data points read")."""
    max_buckets: int | None
    """The longest histogram ``bucket_counts``, None without histograms."""


def scan_stats(points: DataFrame, ranges: Sequence[Range]) -> ScanStats:
    """One action over the landing rows (or their projection): only three columns are read."""
    histogram = sf.col("metric_type") == "histogram"
    row = points.agg(
        sf.count(sf.when(within("time", ranges), sf.lit(1))).alias("rows"),
        sf.max(sf.when(histogram, sf.size("bucket_counts"))).alias("max_buckets"),
    ).first()
    assert row is not None
    return ScanStats(int(row["rows"]), row["max_buckets"])


def plan_rollups(
    prepared: DataFrame,
    ranges: Sequence[Range],
    windows: list[int],
    *,
    top: int = 10,
    top_by: str = "p99",
    max_buckets: int | None = None,
    points: DataFrame | None = None,
    rules: RuleSet | None = None,
) -> RollupSet:
    """Every output of a run over ``ranges`` (whole windows of the largest length).

    ``prepared`` holds the prepared landing from ``DEFAULT_LOOKBACK`` before
    each range (cumulative points need their predecessor), partitioned by
    series (``prepare_partitioned``).
    Outputs: ``gauges_<w>``, ``sums_<w>``, ``histograms_<w>`` per window,
    then ``top_clients_1h``, ``client_health_1h``, ``client_inventory_1h`` (who pushed,
    from which principal and node), ``client_alerts_1h`` (the
    health ``rules``; the shipped ones when ``None``) and ``quota_advice_1h`` (each
    quota entity's demand and KIP-599's proposal). ``max_buckets``
    (``scan_stats``) lets histograms merge without per-element lambdas.

    ``points``: the same landing rows before partitioning (``prepared`` is
    ``prepare_partitioned(points)``). Gauge windows longer than
    ``SORTED_MAX_WINDOW_S`` read them instead: their object aggregation then
    merges each task's points per group before its own shuffle (an hourly
    group holds about 60 points), which moved fewer rows than shuffling
    every point by series first (docs/rollups.md "Performance").
    """
    result = RollupSet()
    in_range = prepared.where(within("time", ranges))
    unpartitioned = in_range if points is None else points.where(within("time", ranges))

    def gauges_of(window: timedelta) -> DataFrame:
        long = window.total_seconds() > SORTED_MAX_WINDOW_S
        return gauge_rollup(unpartitioned if long else in_range, window)

    inside = within("window_start", ranges)
    ordered = sorted(windows)
    base = ordered[0]
    derive = [w for w in ordered[1:] if w % base == 0]
    needs_hourly_sums = HOUR_S not in ordered or HOUR_S in derive
    keep_base = bool(derive) or (needs_hourly_sums and HOUR_S % base == 0)
    sums: dict[int, DataFrame] = {}
    histograms: dict[int, DataFrame] = {}
    gauges: dict[int, DataFrame] = {}
    for seconds in ordered:
        window = timedelta(seconds=seconds)
        if seconds in derive:
            sums[seconds] = sum_rollup_from(sums[base], window)
            histograms[seconds] = histogram_rollup_from(
                histograms[base], window, max_buckets=max_buckets
            )
        else:
            sums[seconds] = sum_rollup(prepared, window).where(inside)
            histograms[seconds] = histogram_rollup(prepared, window, max_buckets=max_buckets).where(
                inside
            )
        gauges[seconds] = gauges_of(window)
        if seconds == base and keep_base:
            sums[seconds] = result.keep(sums[seconds])
            histograms[seconds] = result.keep(histograms[seconds])
        if seconds == HOUR_S:
            gauges[seconds] = result.keep(gauges[seconds])
            sums[seconds] = result.keep(sums[seconds])
        label = window_label(window)
        result.outputs[f"gauges_{label}"] = gauges[seconds]
        result.outputs[f"sums_{label}"] = sums[seconds]
        result.outputs[f"histograms_{label}"] = histograms[seconds]
    hourly = timedelta(hours=1)
    gauges_1h = gauges.get(HOUR_S)
    if gauges_1h is None:
        gauges_1h = result.keep(gauges_of(hourly))
    sums_1h = sums.get(HOUR_S)
    if sums_1h is None:
        if HOUR_S % base == 0:
            sums_1h = sum_rollup_from(sums[base], hourly)
        else:
            sums_1h = sum_rollup(prepared, hourly).where(inside)
    result.outputs["top_clients_1h"] = top_n(gauges_1h, top, top_by)
    _plan_answers(result, gauges_1h, sums_1h, unpartitioned, rules)
    return result


def _plan_answers(
    result: RollupSet,
    gauges_1h: DataFrame,
    sums_1h: DataFrame,
    points: DataFrame,
    rules: RuleSet | None,
) -> None:
    """The hourly per-client tables the report opens on: health, inventory, alerts, and the
    quota advice."""
    result.outputs["client_health_1h"] = client_health(gauges_1h, sums_1h)
    result.outputs["client_inventory_1h"] = client_inventory(points)
    if rules is None:
        from health_rules import load_rules  # noqa: PLC0415 - reads the shipped file

        rules = load_rules()
    # The few points the rules read, persisted: each rule reads them once more.
    alerting = result.keep(alert_points(points, rules))
    result.outputs["client_alerts_1h"] = client_alerts(alerting, rules, push_times(points))
    result.outputs["quota_advice_1h"] = quota_advice(points)
