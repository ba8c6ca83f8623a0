"""The one place the report reads rollup tables: ``read_rollup``.

The rollups are Iceberg tables ``kip714.<name>`` in the SQL catalog
``kip714`` at ``<data_dir>/lake/catalog.db`` (warehouse
``<data_dir>/lake/warehouse``), read with a pyiceberg scan. A data
directory from before the lake keeps them as Parquet under
``<data_dir>/rollups/<name>/date=…/hour=…/``; those are read when the
catalog has no such table, so older data directories still get a report.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["CATALOG_NAME", "NAMESPACE", "read_rollup"]

CATALOG_NAME: Final = "kip714"
NAMESPACE: Final = "kip714"


def read_rollup(
    data_dir: Path,
    name: str,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    metric_names: Sequence[str] | None = None,
) -> pa.Table | None:
    """Rows of rollup ``name`` with ``start <= window_start < end``; ``None`` if there is none.

    ``metric_names`` keeps only those metrics (for the per-metric rollups).
    ``window_start`` comes back as ``timestamp[us, UTC]`` whichever store held it.
    """
    table = _from_iceberg(data_dir, name)
    if table is None:
        table = _from_parquet(data_dir, name)
    if table is None:
        return None
    window = pc.cast(_utc(table["window_start"]), pa.timestamp("us", tz="UTC"))
    table = table.set_column(table.schema.get_field_index("window_start"), "window_start", window)
    keep = pc.is_valid(window)
    if start is not None:
        keep = pc.and_(keep, pc.greater_equal(window, pa.scalar(start, pa.timestamp("us", "UTC"))))
    if end is not None:
        keep = pc.and_(keep, pc.less(window, pa.scalar(end, pa.timestamp("us", "UTC"))))
    if metric_names is not None and "metric_name" in table.column_names:
        keep = pc.and_(keep, pc.is_in(table["metric_name"], pa.array(list(metric_names))))
    return table.filter(keep)


def _from_iceberg(data_dir: Path, name: str) -> pa.Table | None:
    database = data_dir / "lake" / "catalog.db"
    if not database.is_file():
        return None
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415 -- only when a lake exists
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError  # noqa: PLC0415

    catalog = SqlCatalog(
        CATALOG_NAME,
        uri=f"sqlite:///{database.resolve()}",
        warehouse=(data_dir / "lake" / "warehouse").resolve().as_uri(),
    )
    try:
        table = catalog.load_table((NAMESPACE, name))
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
    arrow: pa.Table = table.scan().to_arrow()
    return arrow


def _from_parquet(data_dir: Path, name: str) -> pa.Table | None:
    path = data_dir / "rollups" / name
    if not path.is_dir() or not any(path.rglob("*.parquet")):
        return None
    dataset = ds.dataset(path, format="parquet", partitioning="hive", exclude_invalid_files=True)
    columns = [n for n in dataset.schema.names if n not in {"date", "hour"}]
    return dataset.to_table(columns=columns)


def _utc(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Timestamps without a zone are UTC (Spark writes them so with the session zone UTC)."""
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is None:
        return pc.assume_timezone(column, "UTC")
    return column
