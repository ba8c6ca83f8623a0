"""Incremental rollups: the gauge and delta-sum rollups as Structured Streaming.

The landing directory is a Parquet file source with the explicit landing
schema; each run uses ``trigger(availableNow=True)``, so it processes every
file that appeared since the last run and stops, with the files seen and the
open windows kept in a checkpoint (``<data>/rollups/_checkpoints/<name>``).

Same numbers as batch: the streaming query aggregates with the very
functions the batch job uses (``gauge_rollup``, ``sum_rollup``) and runs in
update mode; every micro-batch's changed rows (complete aggregates of their
keys, from state) are merged into the same ``rollups/<name>`` partitions the
batch job writes, replacing the rows of the same keys. After a run the
output equals the batch rollup of the same files, open windows included.

Limits, all documented in docs/rollups.md:

* ``--lateness`` is the watermark: state of a window is dropped once the
  newest event time seen is that far past the window's end, and points
  arriving later are ignored (a batch rerun of those hours picks them up).
* Cumulative sums need each series' previous point, which a streaming
  aggregation cannot look up, and histograms are not streamed: both stay
  with the batch job.
* Compaction outputs (``compacted-*.parquet``) are excluded by a name filter
  so a compacted hour is not counted twice; an hour compacted before the
  stream first saw it is therefore only in the batch results.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark_jobs import io
from spark_jobs._hadoop import HadoopFS
from spark_jobs.io import COMPACTED_PREFIX
from spark_jobs.rollups import KEY_COLUMNS, gauge_rollup, sum_rollup, window_label
from spark_jobs.schema import landing_schema

__all__ = ["IncrementalSummary", "not_prefixed_glob", "run"]


@dataclass
class IncrementalSummary:
    """Rows each streaming query took in and merged."""

    rows_read: dict[str, int] = field(default_factory=dict)
    rows_updated: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        lines = ["kip714 rollup --incremental:"]
        lines += [
            f"  {name:<24} {self.rows_read[name]:>10,} data points read, "
            f"{self.rows_updated.get(name, 0):>8,} rows updated"
            for name in self.rows_read
        ]
        return "\n".join(lines)


def not_prefixed_glob(prefix: str) -> str:
    """A Hadoop glob matching ``*.parquet`` names that do not start with ``prefix``.

    Globs cannot negate a string, so it spells out every way of differing from
    the prefix at some position: ``{[!c]*,c[!o]*,co[!m]*,...}``.
    """
    branches = [f"{prefix[:i]}[!{prefix[i]}]*.parquet" for i in range(len(prefix))]
    return "{" + ",".join(branches) + "}"


def _same_key(left: str, right: str) -> Column:
    columns = ("window_start", *KEY_COLUMNS)
    conditions = (sf.col(f"{left}.{c}").eqNullSafe(sf.col(f"{right}.{c}")) for c in columns)
    return reduce(lambda a, b: a & b, conditions)


def _merge_into(data_dir: str, name: str, updates: DataFrame) -> int:
    """Replace the rows of ``updates``' keys in their output partitions; returns rows updated."""
    spark = updates.sparkSession
    updates = updates.localCheckpoint(eager=True)
    rows = updates.count()
    if rows == 0:
        return 0
    path = io.rollup_path(data_dir, name)
    fs = HadoopFS(spark, data_dir)
    hours = updates.select(
        sf.date_format("window_start", "yyyy-MM-dd").alias("d"),
        sf.date_format("window_start", "HH").alias("h"),
    ).distinct()
    dirs = [f"{path}/date={r['d']}/hour={r['h']}" for r in hours.collect()]
    present = [d for d in dirs if fs.exists(d)]
    merged = updates
    if present:
        existing = spark.read.option("basePath", path).parquet(*present).drop("date", "hour")
        kept = existing.alias("e").join(updates.alias("u"), _same_key("e", "u"), "left_anti")
        merged = kept.select(*updates.columns).unionByName(updates)
    # Materialise before overwriting the partitions the merge reads from.
    io.write_rollup(merged.localCheckpoint(eager=True), data_dir, name)
    return rows


def _queries(stream: DataFrame, windows: Iterable[int]) -> list[tuple[str, DataFrame]]:
    queries = []
    for seconds in windows:
        window = timedelta(seconds=seconds)
        label = window_label(window)
        queries.append((f"gauges_{label}", gauge_rollup(stream, window)))
        queries.append((f"sums_{label}", sum_rollup(stream, window, include_cumulative=False)))
    return queries


def run(
    spark: SparkSession, data_dir: str, windows: Iterable[int], lateness: timedelta
) -> IncrementalSummary:
    """Process every landing file not yet seen, for each window's gauge and sum rollups.

    Raises:
        io.DataDirNotFoundError: ``data_dir`` does not exist.
    """
    fs = HadoopFS(spark, data_dir)
    if not fs.is_dir(data_dir):
        raise io.DataDirNotFoundError(f"data directory not found: {data_dir}")
    landing = io.landing_path(data_dir)
    if not fs.is_dir(landing):
        raise io.NoDataError(f"no landing data under {landing}")
    stream = (
        spark.readStream.schema(landing_schema())
        .option("pathGlobFilter", not_prefixed_glob(COMPACTED_PREFIX))
        .parquet(landing)
        .withWatermark("time", f"{int(lateness.total_seconds())} seconds")
    )
    summary = IncrementalSummary()
    for name, rollup in _queries(stream, windows):
        updated = [0]

        def merge(
            batch: DataFrame, _batch_id: int, name: str = name, updated: list[int] = updated
        ) -> None:
            updated[0] += _merge_into(data_dir, name, batch)

        query = (
            rollup.writeStream.outputMode("update")
            .foreachBatch(merge)
            .option("checkpointLocation", f"{data_dir.rstrip('/')}/rollups/_checkpoints/{name}")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        exception = query.exception()
        if exception is not None:
            raise exception
        summary.rows_read[name] = sum(
            int(progress.get("numInputRows", 0)) for progress in query.recentProgress
        )
        summary.rows_updated[name] = updated[0]
    return summary
