"""Lake maintenance through Iceberg commits: a reader never sees a row twice or misses one."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.transforms import HourTransform

from exporters.iceberg import IcebergExporter, commits
from exporters.iceberg.lake import open_catalog
from exporters.iceberg.maintenance import (
    MS_PER_HOUR,
    MaintenanceStats,
    compact,
    compact_hour,
    expire_snapshots,
    remove_orphan_files,
    retain,
)
from exporters.iceberg.rows import write_data_file
from exporters.iceberg.schema import lake_metrics_schema
from tests.exporters.support import CONSUMER_PUSH, PRODUCER_PUSH, push

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.table import Table

HOURS_BACK = (5, 4, 3)  # receive hours of the data, in hours before now
GENERATIONS_PER_HOUR = 3
PUSHES_PER_GENERATION = 20


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["push_offset"],
        row["metric_name"],
        row["time"],
        row["value"],
        tuple(sorted(row["attributes"] or [])),
    )


def _rows(table: Table) -> collections.Counter[tuple[Any, ...]]:
    columns = ("push_offset", "metric_name", "time", "value", "attributes")
    rows = table.refresh().scan(selected_fields=columns).to_arrow().to_pylist()
    return collections.Counter(_key(r) for r in rows)


def _kinds_in(table: Table, path: str) -> set[str]:
    with table.io.new_input(path).open() as stream:
        return set(pq.read_table(stream, columns=["metric_type"]).column(0).to_pylist())


async def _fill(path: Path, now_ms: int) -> IcebergExporter:
    """Several commits (so several files) into each of three old receive hours."""
    payloads = (PRODUCER_PUSH.read_bytes(), CONSUMER_PUSH.read_bytes())
    exporter = IcebergExporter({"path": str(path)})
    exporter.bind_log("log-1")
    await exporter.start()
    offset = 0
    for back in HOURS_BACK:
        received = (now_ms // MS_PER_HOUR - back) * MS_PER_HOUR + 60_000
        for _ in range(GENERATIONS_PER_HOUR):
            batch = [
                push(payloads[i % 2], offset=offset + i, received_time_ms=received + i)
                for i in range(PUSHES_PER_GENERATION)
            ]
            offset += PUSHES_PER_GENERATION
            await exporter.export(batch)
            await exporter.flush()
    await exporter.close()
    return exporter


def test_compaction_expiry_and_retention_never_show_a_row_twice_or_miss_one(
    tmp_path: Path,
) -> None:
    now_ms = int(time.time() * 1000)
    exporter = asyncio.run(_fill(tmp_path, now_ms))
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    full = _rows(table)
    oldest = now_ms // MS_PER_HOUR - HOURS_BACK[0]
    kept = collections.Counter(
        {
            k: n
            for k, n in full.items()
            if k[0] >= GENERATIONS_PER_HOUR * PUSHES_PER_GENERATION  # offsets of newer hours
        }
    )
    assert sum(full.values()) == exporter.stats.rows_landed > 0
    kinds = set(table.scan(selected_fields=("metric_type",)).to_arrow()["metric_type"].to_pylist())
    assert kinds == {"gauge", "sum"}  # what the recorded librdkafka pushes carry
    landed = list(table.scan().plan_files())
    assert len(landed) == len(HOURS_BACK) * GENERATIONS_PER_HOUR * len(kinds)
    for task in landed:  # one kind per file: its partition value
        assert _kinds_in(table, task.file.file_path) == {task.file.partition[1]}

    seen: list[str] = []
    scans = 0
    stop = threading.Event()

    def read_in_a_loop() -> None:
        nonlocal scans
        reader = open_catalog(exporter.location).load_table(("kip714", "metrics"))
        while not stop.is_set() and scans < 10_000:
            rows = _rows(reader)
            scans += 1
            if rows not in (full, kept):
                seen.append(f"scan {scans}: {sum(rows.values())} rows")

    reader = threading.Thread(target=read_in_a_loop, daemon=True)
    reader.start()
    try:
        stats = MaintenanceStats()
        table = compact(table, 1, now_ms, stats)
        assert stats.hours_compacted == len(HOURS_BACK)
        assert stats.files_compacted == len(HOURS_BACK) * GENERATIONS_PER_HOUR * len(kinds)
        table = compact(table.refresh(), 1, now_ms, stats)  # one file per partition: done
        assert stats.hours_compacted == len(HOURS_BACK)
        table = table.refresh()
        assert retain(table, HOURS_BACK[0] - 1, now_ms) == 1
        table = table.refresh()
        expired = expire_snapshots(table, 1, now_ms + 2 * MS_PER_HOUR)
        assert expired > 0
        time.sleep(0.5)  # a few more scans after the last commit
    finally:
        stop.set()
        reader.join(60)
    assert scans >= 3
    assert seen == []
    table = table.refresh()
    assert _rows(table) == kept
    files = list(table.scan().plan_files())
    assert len(files) == (len(HOURS_BACK) - 1) * len(kinds)  # one sorted file per partition
    assert oldest not in {t.file.partition[0] for t in files}
    for task in files:
        with table.io.new_input(task.file.file_path).open() as stream:
            column = pq.read_table(stream, columns=["time"]).column("time")
        assert column.to_pylist() == sorted(column.to_pylist())
        assert _kinds_in(table, task.file.file_path) == {task.file.partition[1]}
    # The node's newest append is kept by expiry: it says where the node resumes.
    position = commits.committed_position(table, exporter.node_id)
    assert position is not None
    assert position.offset_end == len(HOURS_BACK) * GENERATIONS_PER_HOUR * PUSHES_PER_GENERATION - 1


def test_orphan_cleanup_removes_uncommitted_files_only(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000)
    exporter = asyncio.run(_fill(tmp_path, now_ms))
    table = open_catalog(exporter.location).load_table(("kip714", "metrics"))
    before = _rows(table)
    # What a node killed between writing a data file and committing it leaves behind.
    orphan = write_data_file(
        table.io, table.location(), pa.table({"push_offset": [1]}), now_ms // MS_PER_HOUR, "crashed"
    )
    assert table.io.new_input(orphan).exists()
    assert remove_orphan_files(table, 1, now_ms) == 0  # too young
    removed = remove_orphan_files(table, 1, now_ms + 2 * MS_PER_HOUR)
    assert removed == 1
    assert not table.io.new_input(orphan).exists()
    assert _rows(table) == before


@pytest.mark.parametrize("bad", [{"compact_after_hours": -1}, {"retention_hours": 0}])
def test_maintenance_hours_are_checked(tmp_path: Path, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        IcebergExporter({"path": str(tmp_path), **bad})


def test_compaction_raced_by_an_append_into_its_hour_changes_nothing(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000)
    exporter = asyncio.run(_fill(tmp_path, now_ms))
    catalog = open_catalog(exporter.location)
    stale = catalog.load_table(("kip714", "metrics"))
    hour = now_ms // MS_PER_HOUR - HOURS_BACK[0]
    # A replay after an outage lands in the old hour after compaction read it.
    late = [
        push(PRODUCER_PUSH.read_bytes(), offset=10_000, received_time_ms=hour * MS_PER_HOUR + 5)
    ]

    async def append_late() -> None:
        other = IcebergExporter({"path": str(tmp_path), "node_id": "late-node"})
        await other.start()
        await other.export(late)
        await other.close()

    asyncio.run(append_late())
    before = _rows(catalog.load_table(("kip714", "metrics")))
    with pytest.raises((CommitFailedException, ValidationException)):
        compact_hour(stale, hour)
    assert _rows(catalog.load_table(("kip714", "metrics"))) == before
    stats = MaintenanceStats()
    table = compact(catalog.load_table(("kip714", "metrics")), 1, now_ms, stats)
    assert stats.hours_compacted == len(HOURS_BACK)
    assert _rows(table) == before


def test_a_table_partitioned_by_hour_only_keeps_its_spec_until_moved_over(
    tmp_path: Path,
) -> None:
    """A table an earlier version created (hour only) is written and compacted as it is."""
    location = IcebergExporter({"path": str(tmp_path)}).location
    catalog = open_catalog(location)
    old = catalog.create_table(("kip714", "metrics"), schema=lake_metrics_schema())
    with old.update_spec() as spec:
        spec.add_field("received_time", HourTransform(), "received_time_hour")
    now_ms = int(time.time() * 1000)
    exporter = asyncio.run(_fill(tmp_path, now_ms))
    table = catalog.load_table(("kip714", "metrics"))
    assert [f.name for f in table.spec().fields] == ["received_time_hour"]
    landed = list(table.scan().plan_files())
    assert len(landed) == len(HOURS_BACK) * GENERATIONS_PER_HOUR  # kinds share a file
    assert all(_kinds_in(table, t.file.file_path) == {"gauge", "sum"} for t in landed)
    full = _rows(table)
    assert sum(full.values()) == exporter.stats.rows_landed > 0
    stats = MaintenanceStats()
    table = compact(table, 1, now_ms, stats)
    assert stats.files_compacted == len(landed)
    assert len(list(table.refresh().scan().plan_files())) == len(HOURS_BACK)
    assert _rows(table) == full

    # Moved over (what Spark's ALTER TABLE ... ADD PARTITION FIELD does), then restarted:
    # new files hold one kind, and compaction rewrites the hour of two specs under the new one.
    with table.refresh().update_spec() as spec:
        spec.add_identity("metric_type")
    hour = now_ms // MS_PER_HOUR - HOURS_BACK[0]
    late = [
        push(PRODUCER_PUSH.read_bytes(), offset=10_000 + i, received_time_ms=hour * MS_PER_HOUR + i)
        for i in range(3)
    ]

    async def append_late() -> int:
        restarted = IcebergExporter({"path": str(tmp_path)})
        restarted.bind_log("log-1")
        await restarted.start()
        await restarted.export(late)
        await restarted.close()
        return restarted.stats.rows_landed

    added = asyncio.run(append_late())
    table = table.refresh()
    in_hour = [t.file for t in table.scan().plan_files() if t.file.partition[0] == hour]
    assert sorted(len(f.partition) for f in in_hour) == [1, 2, 2]  # the old file, a file per kind
    stats = MaintenanceStats()
    table = compact(table, 1, now_ms, stats)
    assert stats.hours_compacted == 1
    in_hour = [t.file for t in table.refresh().scan().plan_files() if t.file.partition[0] == hour]
    assert sorted(f.partition[1] for f in in_hour) == ["gauge", "sum"]
    assert sum(_rows(table).values()) == sum(full.values()) + added
