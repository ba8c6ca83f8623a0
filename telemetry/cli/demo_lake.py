"""The lake side of ``kip714 demo``: what landed, and the health view from the rollup table.

The demo lands through the Iceberg exporter (the default landing), into the
SQLite catalog under ``<data_dir>/lake`` that the Spark rollups read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["health_rows", "landed_points"]

_CATALOG = "kip714"
_NAMESPACE = "kip714"


def _catalog(data_dir: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415

    lake = data_dir / "lake"
    lake.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        _CATALOG, uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=f"file://{lake / 'warehouse'}"
    )


def landed_points(data_dir: Path) -> int:
    """Rows in the landing table's current snapshot (0 when nothing landed)."""
    from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415

    if not (data_dir / "lake" / "catalog.db").exists():
        return 0
    try:
        table = _catalog(data_dir).load_table(f"{_NAMESPACE}.metrics")
    except NoSuchTableError:
        return 0
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("total-records", 0))


def health_rows(data_dir: Path) -> list[dict[str, Any]] | None:
    """The rows of ``client_health_1h`` (None when the table does not exist)."""
    from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415

    try:
        table = _catalog(data_dir).load_table(f"{_NAMESPACE}.client_health_1h")
    except NoSuchTableError:
        return None
    rows: list[dict[str, Any]] = table.scan().to_arrow().to_pylist()
    return rows
