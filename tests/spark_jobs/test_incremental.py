"""`--incremental`: appends since the recorded landing snapshot; late points, compaction."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_jobs.io import read_landing
from spark_jobs.job import main, parse_args, plan
from spark_jobs.lake import Lake
from spark_jobs.pipeline import plan_rollups
from spark_jobs.rollups import prepare_points
from tests.spark_jobs.lake_writer import append_rows, catalog
from tests.spark_jobs.landing_data import PRODUCER, two_hours
from tests.spark_jobs.support import at, point

RANGE = ["--from", "2026-11-21T04:00Z", "--to", "2026-11-21T06:00Z"]
QUEUE = PRODUCER + "record.queue.time.avg"


def lake_args(lake: Lake) -> list[str]:
    return ["--data-dir", str(lake.catalog_file.parent.parent), "--namespace", lake.namespace]


def counter(minute: int, value: float, hour: int, **fields: Any) -> dict[str, Any]:
    """A cumulative monotonic counter of client p1 that started at 04:00."""
    return point(time=at(minute, hour=hour), metric_name="s", metric_type="sum",
                 temporality="cumulative", is_monotonic=True, start_time=at(0), value=value,
                 client_id="p1", client_instance_id="p1-i", **fields)  # fmt: skip


def gauges_1m_rows(lake: Lake) -> list[tuple[Any, ...]]:
    """The table as a pyiceberg reader outside Spark sees its current snapshot."""
    table = catalog(lake).load_table(f"{lake.namespace}.gauges_1m").scan().to_arrow()
    columns = ("window_start", "metric_name", "client_id", "node_id", "count", "max")
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def test_incremental_equals_a_full_recompute_across_late_points_and_compaction(
    spark: SparkSession, lake: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = two_hours()
    split = at(30, hour=5)
    append_rows(lake, [r for r in rows if r["time"] < split])
    append_rows(lake, [counter(40, 10.0, 4), counter(20, 30.0, 5)])
    assert main([*lake_args(lake), *RANGE]) == 0

    # More lands: the rest of 05:xx, and late points for the closed hour 04:xx (a gauge,
    # and a counter point between two already rolled up: it changes 05:20's delta).
    append_rows(lake, [r for r in rows if r["time"] >= split])
    late = point(time=at(30, 30), received_time=at(50, hour=5), metric_name=QUEUE, value=100.0,
                 client_id="p1", client_instance_id="p1-i", push_offset=99)  # fmt: skip
    append_rows(lake, [late, counter(55, 25.0, 4, received_time=at(50, hour=5))])
    # Compaction commits a replace snapshot: no new rows, so nothing for the next run.
    spark.sql(f"CALL kip714.system.rewrite_data_files(table => '{lake.namespace}.metrics', "
              "options => map('min-input-files', '2'))").collect()  # fmt: skip
    capsys.readouterr()

    before = gauges_1m_rows(lake)
    seen: list[list[tuple[Any, ...]]] = []
    stop = threading.Event()

    def reader() -> None:
        for _ in range(10_000):
            if stop.is_set():
                return
            seen.append(gauges_1m_rows(lake))
            stop.wait(0.02)

    # The pre-flight sizes the run from the appended files' statistics: a small run.
    estimate = plan(parse_args([*lake_args(lake), "--incremental"]), datetime.now(UTC))
    assert estimate.small_input

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        assert main([*lake_args(lake), "--incremental"]) == 0
    finally:
        stop.set()
        thread.join(timeout=60)
    after = gauges_1m_rows(lake)
    out = capsys.readouterr().out
    assert "appends after snapshot" in out
    read = re.search(r"([\d,]+) data points read", out)
    assert read is not None
    assert estimate.estimated_rows is not None
    assert 0 < int(read[1].replace(",", "")) <= estimate.estimated_rows  # an upper bound
    # 04:xx and 05:xx were touched, each with the hour after it (a successor's delta).
    assert "2026-11-21T04:00Z .. 2026-11-21T07:00Z" in out

    # A reader never saw a mix of the old and the new windows.
    assert before != after
    assert seen, "the reader ran during the job"
    assert all(state in (before, after) for state in seen)

    # Every output equals a full recompute over the current landing.
    full = [(at(0), at(0, hour=6))]
    landing = prepare_points(read_landing(spark, lake, [(at(0, hour=3), at(0, hour=6))], None))
    expected = plan_rollups(landing, full, [60, 3600]).outputs
    for name, frame in expected.items():
        assertDataFrameEqual(spark.table(lake.table(name)), frame, rtol=1e-9)
    sums = spark.table(lake.table("sums_1h")).where("metric_name = 's'").orderBy("window_start")
    assert [r["delta"] for r in sums.collect()] == [25.0, 5.0]

    # Nothing appended since: refused from metadata, no Spark work.
    assert main([*lake_args(lake), "--incremental"]) == 0
    assert "nothing appended to the landing since snapshot" in capsys.readouterr().out


def test_incremental_without_a_record_recomputes_the_default_range(
    spark: SparkSession, lake: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    append_rows(lake, [point(time=at(1), value=1.0)])
    # No output table yet: an --incremental run is a batch run over its range.
    assert main([*lake_args(lake), "--incremental", *RANGE, "--windows", "1h"]) == 0
    assert "(landing snapshot" in capsys.readouterr().out
    assert spark.table(lake.table("gauges_1h")).count() == 1
