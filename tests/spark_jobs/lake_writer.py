"""A stand-in for the server's Iceberg landing: the table contract, written through pyiceberg.

The contract (the Iceberg landing, shared/design.md §4.6; the schema is the
landing writer's own, ``exporters.iceberg.schema``): catalog ``kip714``
(SQL catalog on SQLite), table ``<namespace>.metrics`` with today's landing
columns in today's order, times as ``timestamptz`` (µs), unsigned counts as
``long``, then ``node_id`` (decoded from the attributes) and ``ingest_node``;
created by the landing's own ``open_table``, so partitioned as the landing
partitions it (``hour(received_time)``, then ``metric_type``). The tests and
the benchmark write through this module only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError
from pyiceberg.table import Table

from exporters.iceberg.lake import open_table
from exporters.iceberg.schema import lake_metrics_schema
from spark_jobs.lake import CATALOG_NAME, LANDING_TABLE, Lake

NODE_ID_ATTRIBUTES = ("node.id", "node_id", "node-id")
"""How clients spell the broker attribute; the landing decodes the first present into node_id."""


def landing_arrow_schema() -> pa.Schema:
    """The landing table's columns as the Iceberg landing writes them (its own schema)."""
    schema: pa.Schema = lake_metrics_schema()
    return schema


def catalog(lake: Lake) -> SqlCatalog:
    lake.catalog_file.parent.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(CATALOG_NAME, uri=lake.sqlalchemy_uri, warehouse=lake.warehouse_uri)


def landing_table(lake: Lake) -> Table:
    """The landing table, created as the landing creates it if absent."""
    cat = catalog(lake)
    with contextlib.suppress(NamespaceAlreadyExistsError):
        cat.create_namespace(lake.namespace)
    return open_table(cat, lake.namespace, LANDING_TABLE)


def decoded_node_id(attributes: Mapping[str, str] | None) -> str | None:
    for key in NODE_ID_ATTRIBUTES:
        if attributes and key in attributes:
            return attributes[key]
    return None


def _landing_row(row: Mapping[str, Any], ingest_node: str) -> dict[str, Any]:
    out = dict(row)
    received: datetime | None = out.get("received_time")
    out["received_time"] = received if received is not None else out.get("time")
    if "node_id" not in row:
        out["node_id"] = decoded_node_id(out.get("attributes"))
    out.setdefault("ingest_node", ingest_node)
    return out


def append_rows(
    lake: Lake,
    rows: Iterable[Mapping[str, Any]],
    *,
    ingest_node: str = "node-1",
    properties: Mapping[str, str] | None = None,
) -> int:
    """Append landing rows (``support.point`` dicts) in one commit; returns its snapshot id.

    ``received_time`` defaults to the point's ``time`` (a point landed on time);
    a late point names its own.
    """
    schema = landing_arrow_schema()
    table = pa.Table.from_pylist([_landing_row(r, ingest_node) for r in rows], schema=schema)
    return append_arrow(lake, table, properties=properties)


def append_arrow(
    lake: Lake, table: pa.Table, *, properties: Mapping[str, str] | None = None
) -> int:
    """Append an Arrow table in the landing schema as one commit; its snapshot id."""
    landing = landing_table(lake)
    landing.append(table, snapshot_properties=dict(properties or {"kip714.writer": "tests"}))
    snapshot = landing.current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id
