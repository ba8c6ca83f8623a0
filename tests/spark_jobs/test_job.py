"""The job entry (`kip714 rollup`, `python -m spark_jobs.job`): outputs, reruns, errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_jobs.io import LANDING_SNAPSHOT_PROPERTY, read_landing, write_output
from spark_jobs.job import main
from spark_jobs.lake import Lake
from spark_jobs.rollups import gauge_rollup
from tests.spark_jobs.lake_writer import append_rows
from tests.spark_jobs.landing_data import PRODUCER, two_hours
from tests.spark_jobs.support import at, point

RANGE = ["--from", "2026-11-21T04:00Z", "--to", "2026-11-21T06:00Z"]


def lake_args(lake: Lake) -> list[str]:
    return ["--data-dir", str(lake.catalog_file.parent.parent), "--namespace", lake.namespace]


def test_rollup_writes_every_output_and_a_rerun_picks_up_late_data(
    spark: SparkSession, lake: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    first = append_rows(lake, two_hours())
    assert main([*lake_args(lake), *RANGE]) == 0
    out = capsys.readouterr().out
    assert "120 data points read" in out
    for name in (
        "gauges_1m", "sums_1h", "histograms_1m", "top_clients_1h", "client_health_1h",
        "quota_advice_1h",
    ):  # fmt: skip
        assert name in out
    assert "top clients by p99 request latency" in out
    assert out.index("p2 (producer") < out.index("p1 (producer")  # p2's latency is 3x p1's

    gauges = spark.table(lake.table("gauges_1m"))
    landing = read_landing(spark, lake, [(at(0), at(0, hour=6))], None)
    assertDataFrameEqual(gauges, gauge_rollup(landing, "1m"))
    assert spark.table(lake.table("client_health_1h")).count() == 4  # two clients, two hours
    snapshots = lake.table("gauges_1h") + ".snapshots"
    # One commit creates the table with the run's rows and records the landing snapshot.
    recorded = spark.sql(
        f"SELECT summary['{LANDING_SNAPSHOT_PROPERTY}'] AS s FROM {snapshots}"
    ).collect()
    assert [r["s"] for r in recorded] == [str(first)]

    # A late point for 04:30 lands at 05:50; rerunning the same hours replaces their windows.
    late = point(time=at(30, 30), received_time=at(50, hour=5), client_id="p1",
                 metric_name=PRODUCER + "record.queue.time.avg", value=100.0,
                 client_instance_id="p1-i", push_offset=99)  # fmt: skip
    append_rows(lake, [late])
    assert main([*lake_args(lake), *RANGE]) == 0
    capsys.readouterr()
    hourly = spark.table(lake.table("gauges_1h"))
    queue = hourly.where(
        (hourly.metric_name == PRODUCER + "record.queue.time.avg") & (hourly.client_id == "p1")
    )
    assert sorted((r["window_start"].hour, r["count"], r["max"]) for r in queue.collect()) == [
        (4, 7, 100.0),
        (5, 6, 1.0),
    ]


def test_an_output_created_since_the_pre_flight_is_overwritten_not_an_error(
    spark: SparkSession, lake: Lake
) -> None:
    append_rows(lake, two_hours())  # the catalog and the namespace, as in a run
    hours = [(at(0), at(0, hour=6))]
    schema = "window_start timestamp, client_id string"
    # The pre-flight saw no table: the first write creates it, with its rows, in one commit.
    write_output(spark.createDataFrame([(at(0), "old")], schema), lake, "probe", hours, 1,
                 exists=False)  # fmt: skip
    # Another run's pre-flight also saw none, but the table exists by its write.
    write_output(spark.createDataFrame([(at(5), "new")], schema), lake, "probe", hours, 2,
                 exists=False)  # fmt: skip
    assert [r["client_id"] for r in spark.table(lake.table("probe")).collect()] == ["new"]
    recorded = spark.sql(
        f"SELECT operation, summary['{LANDING_SNAPSHOT_PROPERTY}'] AS s"
        f" FROM {lake.table('probe')}.snapshots ORDER BY committed_at"
    ).collect()
    assert [(r["operation"], r["s"]) for r in recorded] == [("append", "1"), ("overwrite", "2")]


def test_points_left_out_are_named_by_metric(
    spark: SparkSession, lake: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    nan = [point(time=at(1, s), metric_name="java.avg", value=None) for s in range(3)]
    append_rows(lake, [*nan, point(time=at(2), metric_name="ok", value=1.0),
                       point(time=at(3), metric_name="other.avg", value=None)])  # fmt: skip
    assert main([*lake_args(lake), *RANGE, "--windows", "1h"]) == 0
    out = capsys.readouterr().out
    assert "not rolled up: 4 gauge points (no value):" in out
    assert out.index("3  java.avg") < out.index("1  other.avg")


def test_no_data_in_range_is_refused_before_any_jvm(tmp_path: Path) -> None:
    lake = Lake.under(tmp_path)
    append_rows(lake, [point(time=at(0, 1))])
    command = [sys.executable, "-m", "spark_jobs.job", "--data-dir", str(tmp_path),
               "--from", "2020-01-01T00:00", "--to", "2020-01-01T02:00"]  # fmt: skip
    # No JVM can start with this JAVA_HOME: status 2 (not 1) shows none was needed.
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                            env=env)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith(
        "kip714 rollup: error: no landing data between 2020-01-01T00:00Z"
    )
    assert result.stderr.count("\n") == 1


_IMPORTED = """
import sys
from telemetry.cli.main import main
code = main(sys.argv[1:])
heavy = ("pyspark", "py4j", "exporters", "telemetry.server", "telemetry.cli.lake")
# The one server module the CLI shares: how a config file's relative paths resolve
# (standard library only), so the rollup reads a file as the server does.
light = {"telemetry.server", "telemetry.server.config_paths"}
print(sorted(m for m in sys.modules if m.startswith(heavy) and m not in light))
sys.exit(code)
"""


def test_kip714_rollup_refuses_an_empty_range_without_importing_spark_or_the_server(
    tmp_path: Path,
) -> None:
    lake = Lake.under(tmp_path)
    append_rows(lake, [point(time=at(0, 1))])
    command = [sys.executable, "-c", _IMPORTED, "rollup", "--data-dir", str(tmp_path),
               "--from", "2020-01-01T00:00", "--to", "2020-01-01T02:00"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "no landing data between 2020-01-01T00:00Z" in result.stderr
    assert result.stdout == "[]\n"


def test_missing_data_dir_and_missing_lake_are_one_line_and_status_2(tmp_path: Path) -> None:
    for data_dir, message in (
        (tmp_path / "nope", f"data directory not found: {tmp_path / 'nope'}"),
        (tmp_path, f"no lake catalog at {tmp_path / 'lake' / 'catalog.db'}"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "spark_jobs.job", "--data-dir", str(data_dir)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2
        assert result.stderr == f"kip714 rollup: error: {message}\n"
