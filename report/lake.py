"""The one place the report reads rollup tables: ``read_rollup``.

The rollups are Iceberg tables ``<namespace>.<name>`` in the SQL catalog
``kip714``, read with a pyiceberg scan: by default on SQLite at
``<data_dir>/lake/catalog.db`` (warehouse ``<data_dir>/lake/warehouse``), or
the catalog the server's ``[lake]`` names (``RollupLake``: a SQLite file or
a PostgreSQL database several machines share). A data directory from before
the lake keeps them as Parquet under
``<data_dir>/rollups/<name>/date=…/hour=…/``; those are read when the
catalog has no such table, so older data directories still get a report.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["CATALOG_NAME", "NAMESPACE", "RollupLake", "read_rollup"]

CATALOG_NAME: Final = "kip714"
NAMESPACE: Final = "kip714"


@dataclass(frozen=True, slots=True)
class RollupLake:
    """The catalog holding the rollup tables: a SQLAlchemy URL, its warehouse, the namespace.

    ``catalog_uri`` is ``sqlite:///…`` (or a plain path to the file) or a
    PostgreSQL URL (``postgresql+psycopg://user:password@host:port/db``).
    """

    catalog_uri: str
    warehouse: str
    namespace: str = NAMESPACE

    @classmethod
    def under(cls, data_dir: Path, namespace: str = NAMESPACE) -> RollupLake:
        """The embedded default: ``<data_dir>/lake/catalog.db`` and its warehouse beside it."""
        lake = data_dir.resolve() / "lake"
        return cls(f"sqlite:///{lake / 'catalog.db'}", (lake / "warehouse").as_uri(), namespace)

    @property
    def sqlite_file(self) -> Path | None:
        """The catalog's SQLite file; ``None`` for a database server."""
        if self.catalog_uri.startswith("sqlite:///"):
            return Path("/" + self.catalog_uri.removeprefix("sqlite:///").lstrip("/"))
        if "://" in self.catalog_uri:
            return None
        return Path(self.catalog_uri).resolve()


def read_rollup(
    data_dir: Path | None,
    name: str,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    metric_names: Sequence[str] | None = None,
    lake: RollupLake | None = None,
) -> pa.Table | None:
    """Rows of rollup ``name`` with ``start <= window_start < end``; ``None`` if there is none.

    ``metric_names`` keeps only those metrics (for the per-metric rollups).
    ``window_start`` comes back as ``timestamp[us, UTC]`` whichever store held it.
    ``lake`` defaults to the one under ``data_dir``; the Parquet rollups of an
    older data directory are read only when there is a ``data_dir``.
    """
    if lake is None:
        if data_dir is None:
            raise ValueError("read_rollup needs a data directory or a lake")
        lake = RollupLake.under(data_dir)
    table = _from_iceberg(lake, name)
    if table is None and data_dir is not None:
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


def _from_iceberg(lake: RollupLake, name: str) -> pa.Table | None:
    database = lake.sqlite_file
    if database is not None and not database.is_file():
        return None
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415 -- only when a lake exists
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError  # noqa: PLC0415

    uri = lake.catalog_uri if database is None else f"sqlite:///{database}"
    warehouse = (
        lake.warehouse if "://" in lake.warehouse else Path(lake.warehouse).resolve().as_uri()
    )
    catalog = SqlCatalog(CATALOG_NAME, uri=uri, warehouse=warehouse)
    try:
        table = catalog.load_table((lake.namespace, name))
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
