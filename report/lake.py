"""The one place the report reads rollup tables: ``read_rollup``; and ``table_view``.

The rollups are Iceberg tables ``<namespace>.<name>`` in the SQL catalog
``kip714``: by default on SQLite at ``<data_dir>/lake/catalog.db``
(warehouse ``<data_dir>/lake/warehouse``), or the catalog the server's
``[lake]`` names (``RollupLake``: a SQLite file or a PostgreSQL database
several machines share). They are read through ``table_view``: a
``pyarrow.dataset`` over the data files the Iceberg scan plans, so the range
and the columns are pushed down into the Parquet reads instead of loading
the whole table first (``kip714 lake query`` reads every table so). A data
directory from before the lake keeps them as Parquet under
``<data_dir>/rollups/<name>/date=…/hour=…/``; those are read when the
catalog has no such table, so older data directories still get a report.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

__all__ = [
    "CATALOG_NAME",
    "NAMESPACE",
    "RollupLake",
    "gauge_tables",
    "read_rollup",
    "rollup_tables",
    "table_view",
    "window_seconds",
]

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
    lake = _lake(data_dir, lake)
    table = _from_iceberg(lake, name, start, end)
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


def _lake(data_dir: Path | None, lake: RollupLake | None) -> RollupLake:
    if lake is not None:
        return lake
    if data_dir is None:
        raise ValueError("the rollups are read from a data directory or a lake")
    return RollupLake.under(data_dir)


def _catalog(lake: RollupLake) -> SqlCatalog | None:
    """The lake's catalog; ``None`` when its SQLite file does not exist (nothing is created)."""
    database = lake.sqlite_file
    if database is not None and not database.is_file():
        return None
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415 -- only when a lake exists

    uri = lake.catalog_uri if database is None else f"sqlite:///{database}"
    warehouse = (
        lake.warehouse if "://" in lake.warehouse else Path(lake.warehouse).resolve().as_uri()
    )
    return SqlCatalog(CATALOG_NAME, uri=uri, warehouse=warehouse)


def rollup_tables(
    data_dir: Path | None, names: Sequence[str], lake: RollupLake | None = None
) -> list[str]:
    """Which of ``names`` exist, in the lake or as Parquet rollups of an older data directory."""
    lake = _lake(data_dir, lake)
    found = []
    catalog = _catalog(lake)
    for name in names:
        in_lake = catalog is not None and catalog.table_exists((lake.namespace, name))
        old = data_dir is not None and (data_dir / "rollups" / name).is_dir()
        if in_lake or old:
            found.append(name)
    return found


_WINDOW = re.compile(r"gauges_(\d+)([smhd])")
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def window_seconds(name: str) -> int | None:
    """The window length of a ``gauges_<n><s|m|h|d>`` table name (the rollups' labels)."""
    match = _WINDOW.fullmatch(name)
    return int(match[1]) * _UNIT_S[match[2]] if match else None


def gauge_tables(data_dir: Path | None, lake: RollupLake | None = None) -> list[str]:
    """The gauge rollup tables there are, finest window first."""
    lake = _lake(data_dir, lake)
    names: set[str] = set()
    catalog = _catalog(lake)
    if catalog is not None and lake.namespace in {ns[-1] for ns in catalog.list_namespaces()}:
        names.update(ident[-1] for ident in catalog.list_tables(lake.namespace))
    if data_dir is not None and (data_dir / "rollups").is_dir():
        names.update(path.name for path in (data_dir / "rollups").iterdir() if path.is_dir())
    found = [(seconds, name) for name in names if (seconds := window_seconds(name)) is not None]
    return [name for _, name in sorted(found)]


def _from_iceberg(
    lake: RollupLake, name: str, start: dt.datetime | None, end: dt.datetime | None
) -> pa.Table | None:
    catalog = _catalog(lake)
    if catalog is None:
        return None
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError  # noqa: PLC0415

    try:
        table = catalog.load_table((lake.namespace, name))
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
    bounds = []
    if start is not None:
        bounds.append(f"window_start >= '{_iso(start)}'")
    if end is not None:
        bounds.append(f"window_start < '{_iso(end)}'")
    window = " and ".join(bounds) or None
    view = table_view(table, window)
    if isinstance(view, pa.RecordBatchReader):
        return view.read_all()
    return view.to_table()


def _iso(moment: dt.datetime) -> str:
    """An Iceberg timestamp literal in UTC (the rollups' ``window_start`` is UTC)."""
    utc = moment.astimezone(dt.UTC) if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
    return utc.isoformat()


def table_view(
    table: Table, row_filter: BooleanExpression | str | None = None
) -> ds.Dataset | pa.RecordBatchReader:
    """The rows of ``table`` (matching ``row_filter``) without reading any of them yet.

    A ``pyarrow.dataset`` over the data files the Iceberg scan plans, with
    the filter applied to rows too, so a reader (DuckDB, ``to_table``)
    opens only the files, columns and row groups it needs: ``select 1``
    opens none. A task with delete files cannot be read file by file; then
    the scan's own batch reader (still streamed, read only when pulled).
    """
    from pyiceberg.expressions import AlwaysTrue  # noqa: PLC0415
    from pyiceberg.io.pyarrow import (  # noqa: PLC0415
        PyArrowFileIO,
        expression_to_pyarrow,
        schema_to_pyarrow,
    )

    expression = AlwaysTrue() if row_filter is None else row_filter
    scan = table.scan(row_filter=expression)
    tasks = list(scan.plan_files())
    if any(task.delete_files for task in tasks):
        return scan.to_arrow_batch_reader()
    schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
    if not tasks:
        return ds.dataset(schema.empty_table())
    io = table.io
    by_filesystem: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        scheme, netloc, path = PyArrowFileIO.parse_location(task.file.file_path)
        by_filesystem.setdefault((scheme, netloc), []).append(path)
    parts = []
    for (scheme, netloc), paths in by_filesystem.items():
        filesystem = io.fs_by_scheme(scheme, netloc) if isinstance(io, PyArrowFileIO) else None
        parts.append(ds.dataset(paths, schema=schema, format="parquet", filesystem=filesystem))
    dataset = parts[0] if len(parts) == 1 else ds.dataset(parts)
    bound = scan.row_filter
    if isinstance(bound, AlwaysTrue):
        return dataset
    from pyiceberg.expressions.visitors import bind  # noqa: PLC0415

    return dataset.filter(expression_to_pyarrow(bind(table.schema(), bound, case_sensitive=True)))


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
