"""A stand-in for the server's Iceberg landing: the table contract, written through pyiceberg.

The contract (issue 18's landing, shared/design.md §4.6): catalog ``kip714``
(SQL catalog on SQLite), table ``<namespace>.metrics`` with today's landing
columns in today's order, times as ``timestamptz`` (µs), unsigned counts as
``long``, then ``node_id`` (decoded from the attributes) and ``ingest_node``;
partitioned by ``hour(received_time)``. The tests and the benchmark write
through this module only, so the integrator can point it at the landing's
own writer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.transforms import HourTransform

from exporters.otlp_rows import arrow_schema
from spark_jobs.lake import CATALOG_NAME, LANDING_TABLE, Lake
from telemetry.demo_lake import contract_type

NODE_ID_ATTRIBUTES = ("node.id", "node_id", "node-id")
"""How clients spell the broker attribute; the landing decodes the first present into node_id."""


def landing_arrow_schema() -> pa.Schema:
    """The landing's columns in Iceberg's types (as pyarrow), in the writer's order."""
    fields = [pa.field(field.name, contract_type(field.type)) for field in arrow_schema()]
    fields += [pa.field("node_id", pa.string()), pa.field("ingest_node", pa.string())]
    return pa.schema(fields)


def catalog(lake: Lake) -> SqlCatalog:
    lake.catalog_file.parent.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(CATALOG_NAME, uri=lake.sqlalchemy_uri, warehouse=lake.warehouse_uri)


def landing_table(lake: Lake) -> Table:
    """The landing table, created (partitioned by ``hour(received_time)``) if absent."""
    cat = catalog(lake)
    identifier = f"{lake.namespace}.{LANDING_TABLE}"
    try:
        return cat.load_table(identifier)
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        cat.create_namespace(lake.namespace)
    table = cat.create_table(identifier, schema=landing_arrow_schema())
    with table.update_spec() as spec:
        spec.add_field("received_time", HourTransform(), "received_time_hour")
    return table


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


def append_parquet_landing(lake: Lake, metrics_dir: Path, *, ingest_node: str = "node-1") -> int:
    """Append the Parquet landing's rows (``<data>/metrics/``) to the landing table, in one commit.

    What the Iceberg landing will write itself: the same rows, with times in
    µs, counts as long and ``node_id`` decoded from the attributes.
    """
    rows = ds.dataset(metrics_dir, format="parquet", partitioning="hive").to_table().to_pylist()
    for row in rows:
        row.pop("date", None)
        row.pop("hour", None)
        attributes = row.get("attributes")
        row["attributes"] = dict(attributes) if isinstance(attributes, list) else attributes
        resource = row.get("resource_attributes")
        row["resource_attributes"] = dict(resource) if isinstance(resource, list) else resource
    return append_rows(lake, rows, ingest_node=ingest_node)
