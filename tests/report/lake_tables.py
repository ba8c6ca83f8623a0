"""Rollup tables written with pyiceberg, in the catalog and namespace the rollups use."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

if TYPE_CHECKING:
    from pathlib import Path

T0 = dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.UTC)
_CLIENT = [
    ("client_id", pa.string()),
    ("client_instance_id", pa.string()),
    ("client_software_name", pa.string()),
    ("client_software_version", pa.string()),
]
HEALTH_SCHEMA = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        *_CLIENT,
        ("client_type", pa.string()),
        *[
            (name, pa.float64())
            for name in (
                "request_latency_avg_ms",
                "request_latency_p99_ms",
                "request_latency_max_ms",
                "queue_time_avg_ms",
                "queue_time_max_ms",
                "throttle_time_avg_ms",
                "throttle_time_max_ms",
                "connection_creation_rate",
                "connections_created",
            )
        ],
    ]
)
GAUGES_SCHEMA = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("metric_name", pa.string()),
        *_CLIENT,
        ("node_id", pa.string()),
        ("count", pa.int64()),
        *[(n, pa.float64()) for n in ("min", "max", "avg", "last", "p50", "p95", "p99")],
    ]
)
_WINDOW = [
    ("window_start", pa.timestamp("us", tz="UTC")),
    ("window_end", pa.timestamp("us", tz="UTC")),
]
INVENTORY_SCHEMA = pa.schema(
    [
        *_WINDOW,
        *_CLIENT,
        ("client_type", pa.string()),
        ("principal", pa.string()),
        ("ingest_node", pa.string()),
        ("pushes", pa.int64()),
        ("points", pa.int64()),
        ("first_seen", pa.timestamp("us", tz="UTC")),
        ("last_seen", pa.timestamp("us", tz="UTC")),
    ]
)
ALERTS_SCHEMA = pa.schema(
    [
        *_WINDOW,
        *_CLIENT,
        ("rule", pa.string()),
        ("severity", pa.string()),
        ("first_fired", pa.timestamp("us", tz="UTC")),
        ("last_fired", pa.timestamp("us", tz="UTC")),
        ("value", pa.float64()),
        ("threshold", pa.float64()),
    ]
)


QUOTA_ADVICE_SCHEMA = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("quota", pa.string()),
        ("user", pa.string()),
        ("client_id", pa.string()),
        ("instances", pa.int32()),
        ("minutes", pa.int64()),
        ("peak_byte_rate", pa.float64()),
        ("mean_byte_rate", pa.float64()),
        ("headroom", pa.float64()),
        ("proposal_byte_rate", pa.float64()),
    ]
)


def write_tables(
    data_dir: Path,
    health: list[dict[str, Any]],
    gauges: list[dict[str, Any]],
    *,
    existing_lake: bool = False,
    inventory: list[dict[str, Any]] | None = None,
    alerts: list[dict[str, Any]] | None = None,
    quota_advice: list[dict[str, Any]] | None = None,
) -> None:
    """The rollups in ``data_dir``'s lake (made here unless ``existing_lake``).

    ``inventory``, ``alerts`` and ``quota_advice``: ``client_inventory_1h``,
    ``client_alerts_1h`` and ``quota_advice_1h`` too.
    """
    lake = data_dir / "lake"
    (lake / "warehouse").mkdir(parents=True, exist_ok=existing_lake)
    catalog = SqlCatalog(
        "kip714",
        uri=f"sqlite:///{lake / 'catalog.db'}",
        warehouse=(lake / "warehouse").as_uri(),
    )
    if not existing_lake:
        catalog.create_namespace("kip714")
    tables: list[tuple[str, pa.Schema, list[dict[str, Any]]]] = [
        ("client_health_1h", HEALTH_SCHEMA, health),
        ("gauges_1m", GAUGES_SCHEMA, gauges),
    ]
    if inventory is not None:
        tables.append(("client_inventory_1h", INVENTORY_SCHEMA, inventory))
    if alerts is not None:
        tables.append(("client_alerts_1h", ALERTS_SCHEMA, alerts))
    if quota_advice is not None:
        tables.append(("quota_advice_1h", QUOTA_ADVICE_SCHEMA, quota_advice))
    for name, schema, rows in tables:
        table = catalog.create_table(("kip714", name), schema=schema)
        table.append(pa.Table.from_pylist(rows, schema=schema))
