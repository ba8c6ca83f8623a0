"""``[rollups] retention_hours`` on the lake's Iceberg rollup tables, through a served lake."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.transforms import HourTransform

from exporters.iceberg.lake import lake_location
from exporters.iceberg.maintenance import MaintenanceSettings
from spark_jobs.lake import LANDING_SNAPSHOT_PROPERTY
from telemetry.server.lake_rollups import lake_retention
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.table import Table

CONFIG = """
rollups = {{ retention_hours = 24 }}
exporters.landing = {{ type = "iceberg", options = {{ path = "{data}" }} }}
"""
RECORDED = "4242"
HOUR = dt.timedelta(hours=1)
NOW_HOUR = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
"""The hours of a test are counted back from here (the margins to 24 h are hours wide)."""
SCHEMA = pa.schema(
    [
        pa.field("window_start", pa.timestamp("us", tz="UTC")),
        pa.field("window_end", pa.timestamp("us", tz="UTC")),
        pa.field("client_id", pa.string()),
        pa.field("count", pa.int64()),
    ]
)


def catalog(data_dir: Path) -> SqlCatalog:
    lake = data_dir / "lake"
    (lake / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        "kip714", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=f"file://{lake / 'warehouse'}"
    )


def rollup_table(data_dir: Path, name: str, hours_ago: list[int], *, recorded: bool) -> Table:
    """A table as the rollup job leaves it: 1-minute windows of two clients per hour."""
    cat = catalog(data_dir)
    cat.create_namespace_if_not_exists("kip714")
    table = cat.create_table(f"kip714.{name}", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("window_start", HourTransform(), "window_start_hour")
    properties = {LANDING_SNAPSHOT_PROPERTY: RECORDED} if recorded else {}
    for ago in hours_ago:
        starts = [NOW_HOUR - ago * HOUR + dt.timedelta(minutes=m) for m in range(0, 60, 15)]
        rows = [
            {"window_start": s, "window_end": s + dt.timedelta(minutes=1), "client_id": c,
             "count": 1}
            for s in starts for c in ("p1", "p2")
        ]  # fmt: skip
        table.append(pa.Table.from_pylist(rows, SCHEMA), snapshot_properties=properties)
    return table


def hours_ago(table: Table, snapshot_id: int | None = None) -> list[int]:
    starts = table.scan(snapshot_id=snapshot_id).to_arrow().column("window_start").to_pylist()
    return sorted({(NOW_HOUR - s.replace(minute=0)) // HOUR for s in starts}, reverse=True)


def assert_no_snapshot_holds_a_partial_window(table: Table) -> None:
    """Every state a reader could have seen holds each window whole (both clients) or not at all."""
    for snapshot in table.metadata.snapshots:
        arrow = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        per_window = collections.Counter(arrow.column("window_start").to_pylist())
        assert set(per_window.values()) <= {2}, snapshot.snapshot_id


def metric(metrics: str, sample: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return None


def test_serve_deletes_expired_windows_from_the_lake_rollup_tables(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    gauges = rollup_table(data_dir, "gauges_1m", [50, 30, 2, 0], recorded=True)
    health = rollup_table(data_dir, "client_health_1h", [26, 1], recorded=True)
    other = rollup_table(data_dir, "someone_elses", [50], recorded=False)

    server = ServeProcess(data_dir, CONFIG.format(data=data_dir)).start()
    sample = 'kip714_retention_deleted_partitions_total{dataset="lake_rollups"}'
    try:
        deadline = time.monotonic() + 60
        metrics = ""
        while time.monotonic() < deadline and metric(metrics, sample) != 3:
            time.sleep(0.1)
            with urllib.request.urlopen(
                f"http://{server.http[0]}:{server.http[1]}/metrics", timeout=10
            ) as response:
                metrics = response.read().decode()
        assert server.stop() == 0
    finally:
        server.kill()
    assert metric(metrics, sample) == 3, metrics
    bytes_sample = 'kip714_retention_deleted_bytes_total{dataset="lake_rollups"}'
    assert (metric(metrics, bytes_sample) or 0) > 0
    assert metric(metrics, 'kip714_retention_failures_total{dataset="lake_rollups"}') == 0

    gauges, health, other = (t.refresh() for t in (gauges, health, other))
    assert hours_ago(gauges) == [2, 0]
    assert hours_ago(health) == [1]
    assert hours_ago(other) == [50]  # not a rollup table: its commits record no landing snapshot
    for table in (gauges, health):
        current = table.current_snapshot()
        assert current is not None and current.summary is not None
        assert current.summary.operation.value == "delete"  # whole files: nothing rewritten
        # The next --incremental run still finds where the last one stopped.
        assert current.summary[LANDING_SNAPSHOT_PROPERTY] == RECORDED
        assert_no_snapshot_holds_a_partial_window(table)
    deleted = [e for e in server.events() if "retention deleted" in e.get("event", "")]
    assert len(deleted) == 2
    assert all(e["level"] == "info" for e in deleted)


async def test_a_pass_cancelled_meanwhile_still_finishes_its_commit(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    gauges = rollup_table(data_dir, "gauges_1m", [50, 0], recorded=True)
    options: dict[str, Any] = {"path": str(data_dir)}
    retention = lake_retention(
        lake_location(options, data_dir), 24, MaintenanceSettings.from_options(options)
    )
    task = asyncio.ensure_future(retention.run_once())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task})
    assert task.cancelled()
    assert hours_ago(gauges.refresh()) == [0]
    assert_no_snapshot_holds_a_partial_window(gauges)
    assert await retention.run_once() == []  # the cancelled pass had committed its delete


async def test_a_failed_pass_is_logged_counted_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options: dict[str, Any] = {"catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/nope/x.db"}}
    (tmp_path / "nope").write_text("a file where the catalog's directory should be")
    location = lake_location({**options, "warehouse": str(tmp_path / "w")}, None)
    retention = lake_retention(
        location, 24, MaintenanceSettings.from_options({}), retry_s=0.01, interval_s=0.02
    )
    retention.start()
    deadline = time.monotonic() + 10
    while retention.stats.failures < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await retention.stop()
    assert retention.stats.failures >= 2
    assert retention.stats.passes == 0
    failed = [r for r in caplog.records if "retention of lake_rollups failed" in r.getMessage()]
    assert len(failed) == retention.stats.failures
    assert all(r.levelname == "ERROR" for r in failed)
