"""Incremental (Structured Streaming, availableNow) equals the batch rollups on the same files."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_jobs.incremental import not_prefixed_glob, run
from spark_jobs.io import read_landing
from spark_jobs.rollups import gauge_rollup, sum_rollup
from tests.spark_jobs.landing_data import two_hours
from tests.spark_jobs.support import at, write_landing


def assert_same_as_batch(spark: SparkSession, data: str) -> None:
    landing = read_landing(spark, data, at(0), at(0, hour=6))
    for name, batch in (
        ("gauges_1h", gauge_rollup(landing, "1h")),
        ("sums_1h", sum_rollup(landing, "1h")),
    ):
        streamed = spark.read.parquet(f"{data}/rollups/{name}").drop("date", "hour")
        assertDataFrameEqual(streamed, batch, rtol=1e-9)


def test_incremental_runs_match_batch_after_each_run(spark: SparkSession, tmp_path: Path) -> None:
    rows = two_hours()
    first = [r for r in rows if r["time"] < at(30, hour=5)]
    write_landing(tmp_path, first, "part-1")
    summary = run(spark, str(tmp_path), [3600], timedelta(hours=1))
    assert summary.rows_read["gauges_1h"] == len(first)
    assert_same_as_batch(spark, str(tmp_path))

    write_landing(tmp_path, [r for r in rows if r["time"] >= at(30, hour=5)], "part-2")
    (tmp_path / "metrics" / "date=2026-11-21" / "hour=04" / "compacted-x-0.parquet").write_bytes(
        (tmp_path / "metrics" / "date=2026-11-21" / "hour=04" / "part-1.parquet").read_bytes()
    )  # a compaction output is not new data for the stream
    summary = run(spark, str(tmp_path), [3600], timedelta(hours=1))
    assert summary.rows_read["gauges_1h"] == len(rows) - len(first)
    (tmp_path / "metrics" / "date=2026-11-21" / "hour=04" / "part-1.parquet").unlink()
    assert_same_as_batch(spark, str(tmp_path))


def test_glob_excludes_exactly_the_prefix() -> None:
    assert not_prefixed_glob("ab") == "{[!a]*.parquet,a[!b]*.parquet}"
