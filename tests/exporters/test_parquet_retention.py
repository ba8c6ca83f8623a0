"""The landing's ``retention_hours``: old hours go, and recovery never mistakes that for loss."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint

from exporters.parquet import ParquetExporter
from exporters.retention import HOUR_MS
from tests.exporters.parquet_support import read_table
from tests.exporters.support import payload, push

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

NOW_NS = time.time_ns()
OLD_NS = NOW_NS - 72 * HOUR_MS * 1_000_000


def gauge_push(offset: int, time_ns: int) -> Any:
    metric = Metric(
        name=f"probe.m{offset}",
        gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=time_ns, as_double=1.0)]),
    )
    # Received when measured: a point more than a day from its receive time
    # would be filed under the receive hour (docs/parquet.md, skewed clocks).
    return push(payload(metric), offset=offset, received_time_ms=time_ns // 1_000_000)


def partitions(root: Path) -> set[str]:
    return {
        f"{p.parent.name}/{p.name}" for p in (root / "metrics").glob("date=*/hour=*") if p.is_dir()
    }


async def land_generations(root: Path, generations: Sequence[Sequence[Any]]) -> None:
    """One published generation (and manifest) per entry, in order."""
    exporter = ParquetExporter({"path": str(root), "workers": 1})
    await exporter.start()
    try:
        for batch in generations:
            await exporter.export(batch)
            await exporter.flush()
    finally:
        await exporter.close()


async def run_retention(root: Path, hours: int = 24) -> ParquetExporter:
    """Start a landing with ``retention_hours``, wait for its first pass, close it."""
    exporter = ParquetExporter({"path": str(root), "workers": 1, "retention_hours": hours})
    await exporter.start()
    try:
        deadline = time.monotonic() + 30
        while (stats := exporter.retention_stats) is None or stats.passes < 1:
            assert time.monotonic() < deadline, "no retention pass"
            await asyncio.sleep(0.01)
    finally:
        await exporter.close()
    return exporter


async def recover(root: Path) -> ParquetExporter:
    exporter = ParquetExporter({"path": str(root), "workers": 1})
    await exporter.start()
    await exporter.close()
    return exporter


async def test_expired_hours_are_deleted_and_a_restart_sees_no_missing_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "landing"
    await land_generations(
        root, [[gauge_push(0, OLD_NS), gauge_push(1, OLD_NS)], [gauge_push(2, NOW_NS)]]
    )
    before = partitions(root)
    assert len(before) == 2

    pruned = await run_retention(root)
    stats = pruned.retention_stats
    assert stats is not None
    assert stats.partitions_deleted == 1
    assert stats.bytes_deleted > 0
    assert len(partitions(root)) == 1
    assert sorted(read_table(root).column("push_offset").to_pylist()) == [2]

    with caplog.at_level(logging.INFO):
        restarted = await recover(root)
    assert restarted.stats.missing_files == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert restarted.durable_offset() == 3


async def test_a_partition_the_newest_manifest_names_waits_for_the_next_publication(
    tmp_path: Path,
) -> None:
    root = tmp_path / "landing"
    # Late data: the newest generation landed in an hour that has already expired.
    await land_generations(root, [[gauge_push(0, NOW_NS)], [gauge_push(1, OLD_NS)]])
    pruned = await run_retention(root)
    assert pruned.retention_stats is not None
    assert pruned.retention_stats.partitions_deleted == 0
    assert len(partitions(root)) == 2
    # Recovery rolls that manifest forward and finds every file it names.
    assert (await recover(root)).stats.missing_files == 0

    # Once a newer publication replaces the manifest, the old hour goes.
    await land_generations(root, [[gauge_push(2, NOW_NS)]])
    pruned = await run_retention(root)
    assert pruned.retention_stats is not None
    assert pruned.retention_stats.partitions_deleted == 1
    assert sorted(read_table(root).column("push_offset").to_pylist()) == [0, 2]
    assert (await recover(root)).stats.missing_files == 0


@pytest.mark.parametrize("value", [0, -1, 1.5, "24", True])
def test_retention_hours_must_be_a_whole_number_of_hours(tmp_path: Path, value: object) -> None:
    with pytest.raises(ValueError, match="retention_hours"):
        ParquetExporter({"path": str(tmp_path), "retention_hours": value})


def test_retention_is_off_by_default(tmp_path: Path) -> None:
    exporter = ParquetExporter({"path": str(tmp_path)})
    assert exporter.retention_hours is None
    assert exporter.retention_stats is None
