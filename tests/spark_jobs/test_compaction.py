"""Compaction: small files of closed hours become one, atomically for spark_jobs readers."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_jobs.compaction import compact_closed_hours, compact_hour, recover
from spark_jobs.io import landing_files
from tests.spark_jobs.support import at, point, write_landing

NOW = at(20, hour=8)


def small_files(tmp_path: Path) -> int:
    rows = 0
    for hour in (4, 5, 6, 7, 8):
        for k in range(12):
            batch = [point(time=at(k * 5, s, hour=hour), value=float(s), push_offset=k)
                     for s in range(3)]  # fmt: skip
            write_landing(tmp_path, batch, f"part-{k:03d}")
            rows += len(batch)
    return rows


def rows_of(directory: Path) -> list[tuple[object, ...]]:
    table = ds.dataset(directory, format="parquet").to_table()
    return sorted(
        zip(*(table.column(c).to_pylist() for c in ("time", "push_offset", "value")), strict=True)
    )


def test_closed_hours_compact_atomically_under_a_reader_loop(
    spark: SparkSession, tmp_path: Path
) -> None:
    total = small_files(tmp_path)
    hours = tmp_path / "metrics" / "date=2026-11-21"
    before = {h: rows_of(hours / f"hour={h:02d}") for h in (4, 5, 6)}
    open_hour = {p.name: p.stat().st_mtime_ns for p in (hours / "hour=08").iterdir()}
    seen: list[int] = []
    missing = [0]
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            files = landing_files(spark, str(tmp_path), at(0), at(0, hour=9))
            try:
                seen.append(sum(pq.read_metadata(f.removeprefix("file:")).num_rows for f in files))
            except FileNotFoundError:
                missing[0] += 1  # listed before a swap, opened after: the job retries these

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        while not seen:  # the reader is up before the first swap
            time.sleep(0.01)
        results = compact_closed_hours(str(tmp_path), now=NOW, grace=timedelta(minutes=10))
        reads = len(seen)
        while len(seen) < reads + 2:  # and reads the compacted landing after the last one
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(60)
    # 07:00 closes at 08:00 + 10 min grace, so it is compacted at 08:20; 08:00 is open.
    assert [(r.hour.hour, r.files_before, r.files_after, r.rows) for r in results] == [
        (h, 12, 1, 36) for h in (4, 5, 6, 7)
    ]
    assert seen and set(seen) == {total}, (set(seen), missing)
    for h in (4, 5, 6):
        names = [p.name for p in (hours / f"hour={h:02d}").iterdir()]
        assert len(names) == 1 and names[0].startswith("compacted-")
        assert rows_of(hours / f"hour={h:02d}") == before[h]
        assert pq.read_schema(hours / f"hour={h:02d}" / names[0]).field("count").type == "uint64"
    assert {p.name: p.stat().st_mtime_ns for p in (hours / "hour=08").iterdir()} == open_hour
    assert not any((tmp_path / "metrics" / "_compaction").iterdir())
    with pytest.raises(ValueError, match="not closed"):
        compact_hour(str(tmp_path), at(0, hour=8), now=NOW)


def test_recovery_rolls_a_committed_swap_forward_and_drops_an_uncommitted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_files(tmp_path)
    hour = tmp_path / "metrics" / "date=2026-11-21" / "hour=04"
    before = rows_of(hour)

    def crash(*_args: object) -> None:
        raise KeyboardInterrupt  # killed between the commit and the swap

    monkeypatch.setattr("spark_jobs.compaction._finish", crash)
    with pytest.raises(KeyboardInterrupt):
        compact_hour(str(tmp_path), at(0, hour=4), now=NOW)
    monkeypatch.undo()
    orphan = tmp_path / "metrics" / "_compaction" / "orphan"
    orphan.mkdir()
    assert recover(str(tmp_path)) == 2
    assert [p.name.startswith("compacted-") for p in hour.iterdir()] == [True]
    assert rows_of(hour) == before
    assert not orphan.exists()
