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
  data point's own time prune through the file statistics.

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
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

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
    METRICS_TABLE,
    lake_metrics_schema,
    lake_pushes_schema,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

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

CATALOG_NAME: Final = "kip714"
#: The ``metrics`` table's second partition field (identity of the column of the same name).
KIND_FIELD: Final = "metric_type"
DEFAULT_NAMESPACE: Final = "kip714"
#: ``[lake]`` keys that configure object storage, and the pyiceberg property each sets.
S3_KEYS: Final = {
    "s3_endpoint": "s3.endpoint",
    "s3_region": "s3.region",
    "s3_access_key_id": "s3.access-key-id",
    "s3_secret_access_key": "s3.secret-access-key",
}
_CATALOG_TYPES: Final = ("sql", "rest")
_TABLE_PROPERTIES: Final = {
    TableProperties.PARQUET_COMPRESSION: "zstd",
    "format-version": "2",
    # A compaction (overwrite) or retention (delete) fails, rather than drops
    # it, when an append added a file to its hour meanwhile.
    "write.delete.isolation-level": "serializable",
    "write.update.isolation-level": "serializable",
    "write.merge.isolation-level": "serializable",
}


@dataclass(frozen=True, slots=True)
class LakeLocation:
    """Everything needed to open the lake's catalog: the ``[lake]`` keys, checked."""

    catalog: Mapping[str, str]
    warehouse: str
    namespace: str = DEFAULT_NAMESPACE
    storage: Mapping[str, str] = field(default_factory=dict)

    def catalog_properties(self) -> dict[str, str]:
        """pyiceberg's properties for ``load_catalog``."""
        properties = {**self.catalog, "warehouse": self.warehouse, **self.storage}
        if self.warehouse.startswith("s3://"):
            # S3-compatible servers (MinIO, S3Proxy, Ceph) address buckets by path.
            properties.setdefault("s3.force-virtual-addressing", "false")
        return properties


def lake_location(options: Mapping[str, Any], data_dir: Path | None) -> LakeLocation:
    """The lake named by ``options`` (``catalog``, ``warehouse``, ``namespace``, ``s3_*``).

    Without a catalog or a warehouse, they default to ``<data_dir>/lake/``.

    Raises:
        ValueError: A key has an invalid value, or a default is needed but
            there is no ``data_dir``.
    """
    lake_dir = None if data_dir is None else data_dir.absolute() / "lake"
    catalog = _catalog(options.get("catalog"), lake_dir)
    warehouse = options.get("warehouse")
    if warehouse is None:
        if lake_dir is None:
            raise ValueError("option 'warehouse' is required when 'path' is not given")
        warehouse = str(lake_dir / "warehouse")
    if not isinstance(warehouse, str | os.PathLike) or not os.fspath(warehouse):
        raise ValueError(f"option 'warehouse' must be a path or a URI: {warehouse!r}")
    warehouse = os.fspath(warehouse)
    if "://" not in warehouse:
        warehouse = f"file://{Path(warehouse).absolute()}"
    namespace = options.get("namespace", DEFAULT_NAMESPACE)
    if not isinstance(namespace, str) or not namespace.isidentifier():
        raise ValueError(f"option 'namespace' must be a plain name: {namespace!r}")
    storage: dict[str, str] = {}
    for key, prop in S3_KEYS.items():
        value = options.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise ValueError(f"option {key!r} must be a string")
            storage[prop] = value
    return LakeLocation(catalog, warehouse, namespace, storage)


def _catalog(raw: object, lake_dir: Path | None) -> dict[str, str]:
    if raw is None:
        if lake_dir is None:
            raise ValueError("option 'catalog' is required when 'path' is not given")
        return {"type": "sql", "uri": f"sqlite:///{lake_dir / 'catalog.db'}"}
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | bool) for k, v in raw.items()
    ):
        raise ValueError(f"option 'catalog' must be a table of strings: {raw!r}")
    catalog = {k: str(v) for k, v in raw.items()}
    if catalog.get("type") not in _CATALOG_TYPES:
        raise ValueError(
            f"option 'catalog' needs type = one of {', '.join(_CATALOG_TYPES)}: {raw!r}"
        )
    if "uri" not in catalog:
        raise ValueError(f"option 'catalog' needs a uri: {raw!r}")
    return catalog


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
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            return _create(catalog, identifier, schema)
        except TableAlreadyExistsError:
            table = catalog.load_table(identifier)
    return _evolve(table, schema)


def _create(catalog: Catalog, identifier: tuple[str, str], schema: pa.Schema) -> Table:
    with catalog.create_table_transaction(
        identifier, schema=schema, properties=_TABLE_PROPERTIES
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
