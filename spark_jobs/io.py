"""Reading the landing table and replacing windows of the rollup tables, through Iceberg.

A run reads the landing *as of one snapshot* (the one the pre-flight check
saw), so everything it computes comes from one consistent table state, and
every output commit records that snapshot's id in its snapshot properties
(``kip714.landing-snapshot-id``): the next incremental run starts there.

Outputs are replaced window by window with Iceberg's overwrite by filter: one
commit per table deletes the rows of the run's windows and adds the new ones,
so a reader sees a table's old rows or its new rows, never a part. The
tables are partitioned by ``hours(window_start)`` and a run always covers
whole hours, so the filter only ever selects whole files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import reduce

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark_jobs.lake import LANDING_SNAPSHOT_PROPERTY, Lake, NoDataError
from spark_jobs.spans import Range, merge_ranges

__all__ = [
    "LANDING_SNAPSHOT_PROPERTY",
    "NoDataError",
    "Range",
    "hour_ranges",
    "merge_ranges",
    "read_appended",
    "read_landing",
    "touched_hours",
    "within",
    "write_output",
]


def within(column: str, ranges: Sequence[Range]) -> Column:
    """``column`` lies in one of ``ranges`` (false for no ranges)."""
    col = sf.col(column)
    conditions = [(col >= sf.lit(start)) & (col < sf.lit(end)) for start, end in ranges]
    return reduce(lambda a, b: a | b, conditions, sf.lit(False))


def read_landing(
    spark: SparkSession, lake: Lake, ranges: Sequence[Range], snapshot_id: int | None
) -> DataFrame:
    """Landing rows whose ``time`` lies in ``ranges``, as of ``snapshot_id`` (None: the newest).

    The table is partitioned by ``received_time``; the ``time`` filter still
    prunes whole files through their column statistics.
    """
    version = "" if snapshot_id is None else f" VERSION AS OF {int(snapshot_id)}"
    return spark.sql(f"SELECT * FROM {lake.landing}{version}").where(within("time", ranges))


def read_appended(spark: SparkSession, lake: Lake, after: int, upto: int) -> DataFrame:
    """Rows of the landing's append snapshots after ``after`` up to ``upto`` (inclusive).

    Iceberg's incremental append scan: snapshots that add no new rows
    (compaction's ``replace``) are skipped, so a compacted hour is not new data.
    """
    return (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(after))
        .option("end-snapshot-id", str(upto))
        .load(lake.landing)
    )


def touched_hours(appended: DataFrame) -> list[datetime]:
    """The UTC hours that the ``time`` of appended rows falls in."""
    hours = appended.select(sf.date_trunc("hour", "time").alias("h")).distinct().collect()
    return sorted(row["h"].replace(tzinfo=UTC) for row in hours if row["h"] is not None)


def _create_with(rollup: DataFrame, table: str, landing_snapshot_id: int) -> bool:
    """Create ``table`` holding ``rollup``: one commit (Iceberg's staged create-as-select).

    False if the table exists (another run created it since the pre-flight).
    """
    try:
        (
            rollup.writeTo(table)
            .using("iceberg")
            .partitionedBy(sf.partitioning.hours("window_start"))
            .tableProperty("format-version", "2")
            .option(f"snapshot-property.{LANDING_SNAPSHOT_PROPERTY}", str(landing_snapshot_id))
            .create()
        )
    except AnalysisException as error:
        if error.getCondition() != "TABLE_OR_VIEW_ALREADY_EXISTS":
            raise
        return False
    return True


def write_output(
    rollup: DataFrame,
    lake: Lake,
    name: str,
    ranges: Sequence[Range],
    landing_snapshot_id: int,
    *,
    exists: bool | None = None,
) -> None:
    """Replace the rows of ``ranges`` (by ``window_start``) in table ``name`` with ``rollup``.

    One Iceberg commit, which creates the table if absent (``exists``: what
    the pre-flight saw, None to ask the catalog). ``rollup`` must hold every
    window of ``ranges`` (a window it lacks is left empty): the job's ranges
    are whole hours, and it computes all of them.
    """
    table = lake.table(name)
    spark = rollup.sparkSession
    if exists is None:
        exists = spark.catalog.tableExists(table)
        if not exists:  # the pre-flight saw the landing in this namespace; a caller may not
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    if not exists and _create_with(rollup, table, landing_snapshot_id):
        return
    (
        rollup.writeTo(table)
        .option(f"snapshot-property.{LANDING_SNAPSHOT_PROPERTY}", str(landing_snapshot_id))
        .overwrite(within("window_start", ranges))
    )


def hour_ranges(hours: Iterable[datetime], after: timedelta = timedelta(0)) -> list[Range]:
    """Each hour as a range, extended by ``after`` past its end, merged."""
    return merge_ranges((h, h + timedelta(hours=1) + after) for h in hours)
