"""Where the lake is (catalog, warehouse, namespace) and its tables, created or evolved once.

Several kip714 nodes share a table by naming the same catalog and warehouse.
The default is a SQL catalog on SQLite beside a local warehouse under
``<data_dir>/lake/``; ``type = "rest"`` names an Iceberg REST catalog. The
catalog is always called ``kip714`` (Spark's JDBC catalog must use the same
name to see the tables: it is the ``catalog_name`` column of the SQL catalog).

Tables are created on first start with their partition spec and sort order:

* ``hour(received_time)``: the server's receive clock, not a client's,
  decides how many files a push opens;
* then, for ``metrics``, ``metric_type`` (identity): every rollup reads one
  kind of point (gauges, sums, histograms), and with the kinds in separate
  files a scan of one kind skips the others' files at planning instead of
  decoding and filtering their rows (4-7 s of the Spark rollups' 40-45 s
  at 10M points, docs/rollups.md "Round 5");
* sort order ``time``: compaction writes files sorted on it, so filters on a
  data point's own time prune through the file statistics;
* for ``metrics``, column metrics (Iceberg's ``write.metadata.metrics.*``)
  only for ``schema.METRICS_STATISTICS``, the columns whose data files carry
  statistics (``rows.landing_writer``); without the property pyiceberg
  would warn for every other column of every file it adds. A table created
  by an earlier version gets the properties when a node of this one opens
  it (a node of the earlier version still writes every statistic; the
  table's metrics ignore the extra ones).

Two nodes starting at once may both try to create a table; the loser loads
the winner's. A later version that adds columns evolves the schema by name
(Iceberg schema update), never by rewriting data. The partition spec of an
existing table is left as it is (``split_by_kind`` tells the writers which it
is): a node of an older version, sharing the table, could not commit files
under a spec it does not write.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import TableProperties
from pyiceberg.transforms import HourTransform, IdentityTransform

from exporters.iceberg.schema import (
    METRICS_STATISTICS,
    METRICS_TABLE,
    lake_metrics_schema,
    lake_pushes_schema,
)
from exporters.iceberg.settings import (
    CATALOG_NAME,
    DEFAULT_NAMESPACE,
    LakeLocation,
    lake_location,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

__all__ = [
    "CATALOG_NAME",
    "DEFAULT_NAMESPACE",
    "LakeLocation",
    "lake_location",
    "open_catalog",
    "open_table",
    "split_by_kind",
]

_log = logging.getLogger(__name__)

#: The ``metrics`` table's second partition field (identity of the column of the same name).
KIND_FIELD: Final = "metric_type"
_TABLE_PROPERTIES: Final = {
    TableProperties.PARQUET_COMPRESSION: "zstd",
    "format-version": "2",
    # A compaction (overwrite) or retention (delete) fails, rather than drops
    # it, when an append added a file to its hour meanwhile.
    "write.delete.isolation-level": "serializable",
    "write.update.isolation-level": "serializable",
    "write.merge.isolation-level": "serializable",
}
#: The ``metrics`` table's column metrics: none but for the columns the landing's
#: data files carry statistics for (``truncate(16)``, Iceberg's default mode).
METRICS_PROPERTIES: Final = {
    TableProperties.DEFAULT_WRITE_METRICS_MODE: "none",
    # No retry inside pyiceberg's commit: it would apply the same snapshot
    # properties on a newer table. The landing retries itself
    # (``commits.py``), checking each partition's offsets against the
    # refreshed table first (fencing by contiguity).
    TableProperties.COMMIT_NUM_RETRIES: "0",
    **{
        f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}.{name}": "truncate(16)"
        for name in METRICS_STATISTICS
    },
}


def open_catalog(location: LakeLocation) -> Catalog:
    """Load the catalog (blocking), creating the SQLite file's directory and the namespace."""
    uri = location.catalog.get("uri", "")
    if location.catalog.get("type") == "sql" and uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    if location.warehouse.startswith("file://"):
        Path(location.warehouse.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    catalog = load_catalog(CATALOG_NAME, **location.catalog_properties())
    with contextlib.suppress(NamespaceAlreadyExistsError):  # created by another node meanwhile
        catalog.create_namespace_if_not_exists(location.namespace)
    return catalog


def open_table(catalog: Catalog, namespace: str, name: str) -> Table:
    """The lake table ``name`` (``metrics`` or ``pushes``), created or evolved to today's schema."""
    schema = lake_metrics_schema() if name == METRICS_TABLE else lake_pushes_schema()
    identifier = (namespace, name)
    properties = METRICS_PROPERTIES if name == METRICS_TABLE else {}
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            return _create(catalog, identifier, schema, properties)
        except (TableAlreadyExistsError, CommitFailedException):
            # Another node created it meanwhile: pyiceberg's SQL catalog says so with
            # either, depending on where the race was lost. (A commit that failed for
            # another reason leaves no table: loading it raises NoSuchTableError.)
            table = catalog.load_table(identifier)
    return _with_properties(_evolve(table, schema), properties)


def _create(
    catalog: Catalog, identifier: tuple[str, str], schema: pa.Schema, properties: dict[str, str]
) -> Table:
    with catalog.create_table_transaction(
        identifier, schema=schema, properties={**_TABLE_PROPERTIES, **properties}
    ) as create:
        iceberg_schema = create.table_metadata.schema()
        with create.update_spec() as update:
            update.add_field("received_time", HourTransform(), "received_time_hour")
            if identifier[1] == METRICS_TABLE:
                update.add_identity(KIND_FIELD)
        sort_column = "time" if identifier[1] == METRICS_TABLE else "received_time"
        with create.update_sort_order() as order:
            order.asc(sort_column, IdentityTransform())
        create.set_properties(
            {TableProperties.DEFAULT_NAME_MAPPING: iceberg_schema.name_mapping.model_dump_json()}
        )
    _log.debug("created lake table %s.%s", *identifier)
    return catalog.load_table(identifier)


def split_by_kind(table: Table) -> bool:
    """Whether ``table``'s spec partitions by ``metric_type`` (each data file holds one kind)."""
    schema = table.schema()
    return any(
        isinstance(f.transform, IdentityTransform)
        and schema.find_column_name(f.source_id) == KIND_FIELD
        for f in table.spec().fields
    )


def _with_properties(table: Table, properties: dict[str, str]) -> Table:
    """``table`` with ``properties`` set (a table an earlier version created lacks them)."""
    for _attempt in range(10):
        if all(table.properties.get(k) == v for k, v in properties.items()):
            return table
        try:
            with table.transaction() as transaction:
                transaction.set_properties(properties)
            _log.info("lake table %s: set %s", table.name(), ", ".join(sorted(properties)))
        except CommitFailedException:  # another node changed the table meanwhile
            pass
        table = table.refresh()
    return table


def _evolve(table: Table, schema: pa.Schema) -> Table:
    """Add the columns of ``schema`` that ``table`` lacks (a newer kip714 version's)."""
    present = {f.name for f in table.schema().fields}
    missing = [f.name for f in schema if f.name not in present]
    if not missing:
        return table
    for _attempt in range(10):
        try:
            with table.update_schema() as update:
                update.union_by_name(schema)
            break
        except CommitFailedException:
            table = table.refresh()
    _log.info("lake table %s: added columns %s", table.name(), ", ".join(missing))
    return table.refresh()
