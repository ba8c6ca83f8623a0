"""Helpers for the Parquet landing tests: run an exporter synchronously, read the landing back."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from exporters.parquet import ParquetExporter
from tests.exporters.support import run_exporter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import LoggedPush

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


async def land_async(
    root: Path, batches: Sequence[Sequence[LoggedPush]], **options: Any
) -> ParquetExporter:
    return await run_exporter(ParquetExporter({"path": str(root), **options}), batches)


def land(root: Path, batches: Sequence[Sequence[LoggedPush]], **options: Any) -> ParquetExporter:
    """Start an exporter on ``root``, export ``batches``, flush and close it."""
    return asyncio.run(land_async(root, batches, **options))


def parquet_files(root: Path, table: str = "metrics") -> list[Path]:
    return sorted((root / table).rglob("*.parquet")) if (root / table).exists() else []


def read_table(root: Path, table: str = "metrics") -> pa.Table:
    """Every published file of ``table``, with the Hive partition columns, in offset order."""
    dataset = ds.dataset(root / table, format="parquet", partitioning="hive")
    result = dataset.to_table()
    return result.sort_by([("push_offset", "ascending")]) if result.num_rows else result


MAP_COLUMNS = frozenset({"attributes", "resource_attributes"})


def normalise(name: str, value: Any) -> Any:
    """Arrow's Python values in the flattener's shape: times as int µs, maps as dicts."""
    if isinstance(value, dt.datetime):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    if name in MAP_COLUMNS and value is not None:
        return dict(value)
    return value


def read_rows(root: Path, table: str = "metrics") -> list[dict[str, Any]]:
    rows = read_table(root, table).to_pylist()
    return [{k: normalise(k, v) for k, v in r.items()} for r in rows]


def every_file_reads(root: Path) -> int:
    """Open every published Parquet file fully; returns their total row count."""
    total = 0
    for path in sorted(root.rglob("*.parquet")):
        assert "_landing" not in path.parts, path
        total += pq.read_table(path).num_rows
    return total
