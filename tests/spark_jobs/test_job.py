"""The job entry (`kip714 rollup`, `python -m spark_jobs.job`): outputs, reruns, errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_jobs.io import read_landing
from spark_jobs.job import main
from spark_jobs.rollups import gauge_rollup
from tests.spark_jobs.landing_data import PRODUCER, two_hours
from tests.spark_jobs.support import at, point, write_landing

RANGE = ["--from", "2026-11-21T04:00Z", "--to", "2026-11-21T06:00Z"]


def test_rollup_writes_every_output_and_a_rerun_picks_up_late_data(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path)
    write_landing(tmp_path, two_hours(), "part-1")
    assert main(["--data-dir", data, *RANGE]) == 0
    out = capsys.readouterr().out
    assert "120 data points read" in out
    for name in ("gauges_1m", "sums_1h", "histograms_1m", "top_clients_1h", "client_health_1h"):
        assert name in out
    assert "top clients by p99 request latency" in out
    assert out.index("p2 (producer") < out.index("p1 (producer")  # p2's latency is 3x p1's

    gauges = spark.read.parquet(f"{data}/rollups/gauges_1m").drop("date", "hour")
    landing = read_landing(spark, data, at(0), at(0, hour=6))
    assertDataFrameEqual(gauges, gauge_rollup(landing, "1m"))
    health = spark.read.parquet(f"{data}/rollups/client_health_1h")
    assert health.count() == 4  # two clients, two hours

    # A late file for 04:00 lands; rerunning the same hours replaces those partitions only.
    late = point(time=at(30, 30), metric_name=PRODUCER + "record.queue.time.avg", value=100.0,
                 client_id="p1", client_instance_id="p1-i", push_offset=99)  # fmt: skip
    write_landing(tmp_path, [late], "part-late")
    assert main(["--data-dir", data, *RANGE]) == 0
    capsys.readouterr()
    hourly = spark.read.parquet(f"{data}/rollups/gauges_1h")
    queue = hourly.where(
        (hourly.metric_name == PRODUCER + "record.queue.time.avg") & (hourly.client_id == "p1")
    )
    assert sorted((r["hour"], r["count"], r["max"]) for r in queue.collect()) == [
        (4, 7, 100.0),
        (5, 6, 1.0),
    ]


def test_no_data_in_range_is_one_line_and_status_2(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_landing(tmp_path, [point(time=at(0, 1))], "part-1")
    assert (
        main(
            ["--data-dir", str(tmp_path), "--from", "2020-01-01T00:00", "--to", "2020-01-01T02:00"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("kip714 rollup: error: no landing data between 2020-01-01T00:00Z")


def test_missing_data_dir_is_one_line_and_status_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spark_jobs.job", "--data-dir", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == f"kip714 rollup: error: data directory not found: {tmp_path / 'nope'}\n"
