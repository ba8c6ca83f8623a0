"""Reading the landing and writing rollups: the only module that knows the directory layout.

Layout: ``<data>/metrics/date=YYYY-MM-DD/hour=HH/*.parquet``
for the landing and ``<data>/rollups/<name>/date=…/hour=…/`` for outputs.

The landing is read from an explicit file list, not by pointing Spark at
``<data>/metrics``: listing only the hour directories in range is the
partition pruning, and listing each hour ourselves lets the reader honour the
compaction protocol (``compaction``): an hour whose listing shows a
``_compaction-*`` manifest is mid-swap, so the reader waits for the swap to
finish, and only two identical listings in a row without a manifest are
trusted. Rollups are written with dynamic partition overwrite, so a rerun
replaces exactly the ``date/hour`` partitions it produced and leaves every
other hour alone.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark_jobs._hadoop import HadoopFS
from spark_jobs.schema import landing_schema

__all__ = [
    "COMPACTED_PREFIX",
    "COMPACTION_MANIFEST_PREFIX",
    "DataDirNotFoundError",
    "HourBusyError",
    "NoDataError",
    "hours_in",
    "landing_files",
    "landing_path",
    "read_landing",
    "rollup_path",
    "write_rollup",
]

COMPACTED_PREFIX = "compacted-"
"""Name prefix of compaction outputs (``compaction`` writes them, the stream skips them)."""

COMPACTION_MANIFEST_PREFIX = "_compaction-"
"""An hour directory holding a file with this prefix is being compacted (or needs recovery)."""

_HOUR = timedelta(hours=1)
_LISTING_ATTEMPTS = 200
_LISTING_PAUSE_S = 0.05


class DataDirNotFoundError(FileNotFoundError):
    """The data directory does not exist."""


class NoDataError(LookupError):
    """No landing file has data points in the requested time range."""


class HourBusyError(RuntimeError):
    """An hour stayed mid-compaction for longer than a reader waits (a crashed compactor)."""


def landing_path(data_dir: str) -> str:
    return f"{data_dir.rstrip('/')}/metrics"


def rollup_path(data_dir: str, name: str) -> str:
    return f"{data_dir.rstrip('/')}/rollups/{name}"


def hours_in(start: datetime, end: datetime) -> list[datetime]:
    """The UTC hours (as their start) that overlap ``[start, end)``."""
    hour = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hours = []
    while hour < end:
        hours.append(hour)
        hour += _HOUR
    return hours


def _is_data_file(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith(("_", "."))


def _stable_files(fs: HadoopFS, hour_dir: str) -> list[str]:
    """Data files of one hour from two equal listings with no compaction manifest in between."""
    previous: list[tuple[str, bool]] | None = None
    for _ in range(_LISTING_ATTEMPTS):
        listing = fs.list(hour_dir)
        busy = any(name.startswith(COMPACTION_MANIFEST_PREFIX) for name, _ in listing)
        if not busy and listing == previous:
            return [name for name, is_dir in listing if not is_dir and _is_data_file(name)]
        previous = None if busy else listing
        if busy:
            time.sleep(_LISTING_PAUSE_S)
    raise HourBusyError(
        f"{hour_dir} is still being compacted after "
        f"{_LISTING_ATTEMPTS * _LISTING_PAUSE_S:.0f} s; "
        "run `python -m spark_jobs.compaction --recover` to finish or undo a crashed compaction"
    )


def landing_files(spark: SparkSession, data_dir: str, start: datetime, end: datetime) -> list[str]:
    """Qualified paths of the landing files of every hour overlapping ``[start, end)``.

    Raises:
        DataDirNotFoundError: ``data_dir`` does not exist.
    """
    fs = HadoopFS(spark, data_dir)
    if not fs.is_dir(data_dir):
        raise DataDirNotFoundError(f"data directory not found: {data_dir}")
    root = landing_path(data_dir)
    dates = {name for name, is_dir in fs.list(root) if is_dir}
    files: list[str] = []
    for hour in hours_in(start, end):
        date_dir = f"date={hour:%Y-%m-%d}"
        if date_dir not in dates:
            continue
        hour_dir = f"{root}/{date_dir}/hour={hour:%H}"
        files.extend(fs.qualify(f"{hour_dir}/{name}") for name in _stable_files(fs, hour_dir))
    return files


def read_landing(spark: SparkSession, data_dir: str, start: datetime, end: datetime) -> DataFrame:
    """Landing rows with ``start <= time < end``, read with the explicit landing schema.

    Raises:
        DataDirNotFoundError: ``data_dir`` does not exist.
        NoDataError: no landing file in the hours of the range.
    """
    files = landing_files(spark, data_dir, start, end)
    if not files:
        raise NoDataError(
            f"no landing data between {start:%Y-%m-%dT%H:%M}Z and {end:%Y-%m-%dT%H:%M}Z "
            f"under {landing_path(data_dir)}"
        )
    root = HadoopFS(spark, data_dir).qualify(landing_path(data_dir))
    rows = spark.read.schema(landing_schema()).option("basePath", root).parquet(*files)
    return rows.where((sf.col("time") >= sf.lit(start)) & (sf.col("time") < sf.lit(end)))


def write_rollup(rollup: DataFrame, data_dir: str, name: str) -> str:
    """Write ``rollup`` under ``rollups/<name>/date=…/hour=…`` (from ``window_start``).

    Replaces the partitions present in ``rollup`` and nothing else, so the
    caller must pass every window of each hour it writes (the job does: it
    works in whole hours). Returns the output path.
    """
    path = rollup_path(data_dir, name)
    partitioned = rollup.withColumn(
        "date", sf.date_format("window_start", "yyyy-MM-dd")
    ).withColumn("hour", sf.date_format("window_start", "HH"))
    (
        partitioned.repartition("date", "hour")
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("date", "hour")
        .parquet(path)
    )
    return path
