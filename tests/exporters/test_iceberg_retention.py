"""Hour-partition retention: the pure decision, atomic deletion on disk, the background task."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from exporters.iceberg.retention import (
    HOUR_MS,
    TRASH_DIR,
    HourPartition,
    PeriodicRetention,
    expired_partitions,
    list_partitions,
    prune,
)

if TYPE_CHECKING:
    from pathlib import Path

# 2026-11-21T10:00:00Z
NOW_MS = int(dt.datetime(2026, 11, 21, 10, tzinfo=dt.UTC).timestamp()) * 1000
FILES_PER_HOUR = 4


def hour(day: str, hh: int) -> HourPartition:
    partition = HourPartition.parse(f"date={day}", f"hour={hh:02d}")
    assert partition is not None
    return partition


def make_hour(table: Path, start_ms: int, files: int = FILES_PER_HOUR) -> Path:
    """A real partition of ``files`` Parquet files for the hour starting at ``start_ms``."""
    when = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC)
    directory = table / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        rows = pa.table({"value": [float(index)] * 10, "at_ms": [start_ms] * 10})
        pq.write_table(rows, directory / f"part-{index}.parquet")
    return directory


def test_an_hour_expires_only_once_all_of_it_is_older_than_the_limit() -> None:
    ten = hour("2026-11-21", 10)
    assert ten.start_ms == NOW_MS
    # 24 h of retention: the hour 09:00-10:00 on the 20th ends exactly at the cutoff.
    boundary = hour("2026-11-20", 9)
    later = hour("2026-11-20", 10)
    old = hour("2026-11-19", 23)
    partitions = [later, boundary, old, ten]
    assert expired_partitions(partitions, now_ms=NOW_MS, retention_hours=24) == [old, boundary]
    # One millisecond earlier, the boundary hour still has a moment inside the limit.
    assert expired_partitions(partitions, now_ms=NOW_MS - 1, retention_hours=24) == [old]
    assert expired_partitions(partitions, now_ms=NOW_MS, retention_hours=10_000) == []
    assert expired_partitions([], now_ms=NOW_MS, retention_hours=1) == []


@pytest.mark.parametrize(
    ("date_name", "hour_name"),
    [
        ("date=2026-11-21", "hour=24"),
        ("date=2026-13-01", "hour=01"),
        ("date=20261121", "hour=01"),
        ("day=2026-11-21", "hour=01"),
        ("date=2026-11-21", "minute=01"),
        ("date=2026-11-21", "hour=x"),
    ],
)
def test_names_that_are_not_hour_partitions_are_ignored(date_name: str, hour_name: str) -> None:
    assert HourPartition.parse(date_name, hour_name) is None


def test_prune_deletes_expired_hours_and_keeps_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "metrics"
    old = [make_hour(table, NOW_MS - h * HOUR_MS) for h in (30, 29, 48)]
    recent = [make_hour(table, NOW_MS - h * HOUR_MS) for h in (0, 1, 23)]
    kept_by_writer = make_hour(table, NOW_MS - 100 * HOUR_MS)
    hidden = table / "_compaction" / "date=2020-01-01" / "hour=00"
    hidden.mkdir(parents=True)
    sizes = {path: sum(f.stat().st_size for f in path.iterdir()) for path in old}

    with caplog.at_level(logging.INFO, logger="exporters.iceberg.retention"):
        deleted = prune(
            [table, tmp_path / "absent"],
            now_ms=NOW_MS,
            retention_hours=24,
            keep=frozenset({kept_by_writer}),
        )

    assert sorted(table / d.partition.relative for d in deleted) == sorted(old)
    assert {table / d.partition.relative: d.size_bytes for d in deleted} == sizes
    assert not any(path.exists() for path in old)
    assert all(path.exists() for path in [*recent, kept_by_writer, hidden])
    assert list((table / TRASH_DIR).iterdir()) == []
    # A day with no hour left is removed too; the hidden trash never lists as data.
    assert not (table / "date=2026-11-19").exists()
    lines = [r.getMessage() for r in caplog.records if "retention deleted" in r.getMessage()]
    assert len(lines) == 3
    assert all("older than 24 h" in line for line in lines)
    dataset = ds.dataset(table, format="parquet", partitioning="hive")
    assert len(dataset.files) == FILES_PER_HOUR * 4


def test_an_interrupted_deletion_is_finished_by_the_next_pass(tmp_path: Path) -> None:
    table = tmp_path / "metrics"
    make_hour(table, NOW_MS)
    leftover = table / TRASH_DIR / "date=2026-01-01-hour=00-abc"
    leftover.mkdir(parents=True)
    (leftover / "part-0.parquet").write_bytes(b"x" * 100)
    assert prune([table], now_ms=NOW_MS, retention_hours=1) == []
    assert list((table / TRASH_DIR).iterdir()) == []


def test_readers_see_a_partition_whole_or_not_at_all(tmp_path: Path) -> None:
    """A pyarrow dataset listed while retention runs holds every file of an hour or none."""
    table = tmp_path / "metrics"
    hours = 60
    for h in range(hours):
        make_hour(table, NOW_MS - (100 + h) * HOUR_MS)
    make_hour(table, NOW_MS)
    partial: list[dict[str, int]] = []
    listings: list[int] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline and len(listings) < 10_000:
            try:
                dataset = ds.dataset(table, format="parquet", partitioning="hive")
            except (FileNotFoundError, OSError) as error:
                # The walk can find an hour renamed away between two readdirs.
                failures.append(error)
                continue
            per_hour: dict[str, int] = {}
            for path in dataset.files:
                assert TRASH_DIR not in path
                key = path.rsplit("/", 1)[0]
                per_hour[key] = per_hour.get(key, 0) + 1
            if any(count != FILES_PER_HOUR for count in per_hour.values()):
                partial.append(per_hour)
            listings.append(len(per_hour))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        while not listings:
            time.sleep(0.001)
        deleted = prune([table], now_ms=NOW_MS, retention_hours=24)
    finally:
        done.set()
        reader.join(60)
    assert len(deleted) == hours
    assert partial == []
    assert listings, "the reader never listed the table"
    assert ds.dataset(table, format="parquet", partitioning="hive").count_rows() == (
        FILES_PER_HOUR * 10
    )
    assert all(isinstance(error, FileNotFoundError | OSError) for error in failures)


async def _until(condition: object, timeout_s: float = 20.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_failed_pass_is_logged_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "rollup"
    old = make_hour(table, NOW_MS - 48 * HOUR_MS)
    (table / TRASH_DIR).write_bytes(b"not a directory")  # every rename into it fails
    retention = PeriodicRetention(
        "test", lambda: [table], 24, interval_s=60, retry_s=0.05, clock_ms=lambda: NOW_MS
    )
    with caplog.at_level(logging.INFO, logger="exporters.iceberg.retention"):
        retention.start()
        try:
            await _until(lambda: retention.stats.failures >= 1)
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert errors
            assert "retention of test failed, retrying in" in errors[0].getMessage()
            assert old.exists()
            (table / TRASH_DIR).unlink()  # the cause goes away; the next retry succeeds
            await _until(lambda: not old.exists())
        finally:
            await retention.stop()
    assert retention.stats.partitions_deleted == 1
    assert retention.stats.bytes_deleted > 0
    assert any("works again" in r.getMessage() for r in caplog.records)


def _blocking_tables(table: Path, entered: threading.Event, release: threading.Event) -> object:
    def tables() -> list[Path]:
        entered.set()
        assert release.wait(30)
        return [table]

    return tables


async def test_a_cancelled_pass_keeps_the_guard_until_its_thread_is_done(tmp_path: Path) -> None:
    table = tmp_path / "metrics"
    old = make_hour(table, NOW_MS - 48 * HOUR_MS)
    entered, release = threading.Event(), threading.Event()
    guard = asyncio.Lock()
    retention = PeriodicRetention(
        "test",
        _blocking_tables(table, entered, release),  # type: ignore[arg-type]
        24,
        guard=guard,
        clock_ms=lambda: NOW_MS,
    )
    task = asyncio.create_task(retention.run_once())
    await _until(entered.is_set)
    task.cancel()
    await asyncio.sleep(0.05)
    # The thread is still deleting: a publisher must not get in yet.
    assert guard.locked()
    assert not task.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not guard.locked()
    assert not old.exists()


async def test_stop_lets_the_pass_in_progress_finish(tmp_path: Path) -> None:
    table = tmp_path / "metrics"
    old = make_hour(table, NOW_MS - 48 * HOUR_MS)
    entered, release = threading.Event(), threading.Event()
    guard = asyncio.Lock()
    retention = PeriodicRetention(
        "test",
        _blocking_tables(table, entered, release),  # type: ignore[arg-type]
        24,
        guard=guard,
        clock_ms=lambda: NOW_MS,
    )
    retention.start()
    await _until(entered.is_set)
    stopping = asyncio.create_task(retention.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()
    # Cancelling the caller of stop() does not abandon the pass either.
    stopping.cancel()
    await asyncio.sleep(0.05)
    assert guard.locked()
    release.set()
    async with asyncio.timeout(30):
        async with guard:
            pass
    await _until(lambda: retention.stats.passes == 1)
    await retention.stop()
    assert not old.exists()
    assert retention.stats.partitions_deleted == 1


def test_retention_needs_at_least_an_hour(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retention_hours must be at least 1"):
        PeriodicRetention("test", lambda: [tmp_path], 0)


def test_listing_ignores_files_and_foreign_directories(tmp_path: Path) -> None:
    table = tmp_path / "t"
    make_hour(table, NOW_MS, files=1)
    (table / "date=2026-11-21" / "hour=11").write_text("a file, not a partition")
    (table / "notes.txt").write_text("x")
    (table / "date=2026-11-21" / "other").mkdir()
    assert list_partitions(table) == [hour("2026-11-21", 10)]
