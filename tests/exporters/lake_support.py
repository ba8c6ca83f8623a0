"""Helpers for the landing tests: land pushes synchronously, read the lake's table back."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.catalog import load_catalog

from exporters.iceberg import IcebergExporter
from exporters.otlp_rows import COLUMNS
from tests.exporters.support import run_exporter

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from exporters.api import LoggedPush

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MAP_COLUMNS = frozenset({"attributes", "resource_attributes"})


async def land_async(
    root: Path, batches: Sequence[Sequence[LoggedPush]], **options: Any
) -> IcebergExporter:
    """Land ``batches`` into the default lake under ``root`` (a thread lane unless told)."""
    exporter = IcebergExporter({"path": str(root), "workers": 0, **options})
    return await run_exporter(exporter, batches)


def land(root: Path, batches: Sequence[Sequence[LoggedPush]], **options: Any) -> IcebergExporter:
    """Start an exporter on ``root``, export ``batches``, flush and close it."""
    return asyncio.run(land_async(root, batches, **options))


def read_table(data_dir: Path, table: str = "metrics") -> pa.Table:
    """Every committed row of ``table`` in the default lake under ``data_dir``, in offset order.

    What any reader of the table sees (pyiceberg's SQL catalog, the committed
    snapshot); an empty table when nothing was committed yet.
    """
    lake = data_dir / "lake"
    if not (lake / "catalog.db").exists():
        return pa.table({})
    catalog = load_catalog("kip714", type="sql", uri=f"sqlite:///{lake}/catalog.db")
    if not catalog.table_exists(("kip714", table)):
        return pa.table({})
    result = catalog.load_table(("kip714", table)).scan().to_arrow()
    return result.sort_by([("push_offset", "ascending")]) if result.num_rows else result


def normalise(name: str, value: Any) -> Any:
    """Arrow's Python values in the flattener's shape: times as int µs, maps as dicts."""
    if isinstance(value, dt.datetime):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    if name in MAP_COLUMNS and value is not None:
        return dict(value)
    return value


def read_rows(data_dir: Path, table: str = "metrics") -> list[dict[str, Any]]:
    """The committed rows of ``table``, normalised; ``metrics`` rows in ``COLUMNS`` only."""
    arrow = read_table(data_dir, table)
    if table == "metrics" and arrow.num_columns:
        arrow = arrow.select(list(COLUMNS))
    return [{k: normalise(k, v) for k, v in r.items()} for r in arrow.to_pylist()]


def table_rows(
    data_dir: Path, columns: Sequence[str], table: str = "metrics"
) -> list[dict[str, Any]]:
    """``columns`` of every committed row of ``table`` (none before the first commit)."""
    arrow = read_table(data_dir, table)
    if not arrow.num_columns:
        return []
    rows: list[dict[str, Any]] = arrow.select(list(columns)).to_pylist()
    return rows
