"""The lake side of ``kip714 demo``: what landed, and the health view from the rollup table.

The demo lands through the Iceberg exporter when it is installed. Where it
is not (a tree without the Iceberg landing), the demo lands Parquet and
appends those rows to the lake's landing table itself, in the table's
contract (µs times, counts as long, ``node_id`` decoded from the
attributes), so the rollups still read the Iceberg path end to end.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

__all__ = [
    "contract_type",
    "health_rows",
    "land_parquet_in_lake",
    "landed_points",
    "landing_type",
]

_CATALOG = "kip714"
_NAMESPACE = "kip714"
_NODE_ID_KEYS = ("node.id", "node_id", "node-id")


def landing_type() -> str:
    """``iceberg`` when that exporter is installed, else ``parquet`` (bridged by the demo)."""
    names = {ep.name for ep in entry_points(group="kip714.exporters")}
    return "iceberg" if "iceberg" in names else "parquet"


def _catalog(data_dir: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415

    lake = data_dir / "lake"
    lake.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        _CATALOG, uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=f"file://{lake / 'warehouse'}"
    )


def contract_type(kind: Any) -> Any:
    """The landing table's type for a Parquet landing column of pyarrow type ``kind``."""
    import pyarrow as pa  # noqa: PLC0415

    if pa.types.is_timestamp(kind):
        return pa.timestamp("us", tz="UTC")
    if kind == pa.uint64():
        return pa.int64()
    if pa.types.is_list(kind) and kind.value_type == pa.uint64():
        return pa.list_(pa.int64())
    return kind


def _contract(table: Any) -> Any:
    """The Parquet landing's rows in the Iceberg landing's types, with node_id and ingest_node."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    columns, fields = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        kind = contract_type(field.type)
        columns.append(column.cast(kind))
        fields.append(pa.field(field.name, kind))
    attributes = table.column("attributes")
    lookups = [pc.map_lookup(attributes, key, "first") for key in _NODE_ID_KEYS]
    columns += [pc.coalesce(*lookups), pa.array(["demo"] * table.num_rows, pa.string())]
    fields += [pa.field("node_id", pa.string()), pa.field("ingest_node", pa.string())]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def land_parquet_in_lake(data_dir: Path) -> None:
    """Append the Parquet landing under ``data_dir/metrics`` to ``kip714.metrics``, once."""
    import pyarrow.dataset as ds  # noqa: PLC0415
    from pyiceberg.transforms import HourTransform  # noqa: PLC0415

    metrics = data_dir / "metrics"
    if not metrics.exists():
        return
    rows = ds.dataset(metrics, format="parquet").to_table()
    landing = _contract(rows)
    catalog = _catalog(data_dir)
    catalog.create_namespace_if_not_exists(_NAMESPACE)
    table = catalog.create_table_if_not_exists(f"{_NAMESPACE}.metrics", schema=landing.schema)
    if table.current_snapshot() is not None:
        return
    with table.update_spec() as spec:
        spec.add_field("received_time", HourTransform(), "received_time_hour")
    table.append(landing, snapshot_properties={"kip714.writer": "kip714 demo"})


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
