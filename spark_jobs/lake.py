"""Where the lake is: the Iceberg catalog, warehouse and namespace, for Spark and pyiceberg.

The embedded catalog is a SQL catalog on SQLite (shared/design.md §4.6): the
server appends to ``<namespace>.metrics`` through pyiceberg's ``SqlCatalog``
and the jobs read it, and write their rollup tables next to it, through
Iceberg's JDBC catalog in Spark. Both name the catalog ``kip714``: that name
is stored in every catalog row, so Spark must use the same one to see
pyiceberg's tables. ``jdbc.schema-version=V1`` lets Spark share the catalog
database with pyiceberg's schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CATALOG_NAME",
    "DEFAULT_NAMESPACE",
    "LANDING_SNAPSHOT_PROPERTY",
    "LANDING_TABLE",
    "Lake",
    "NoDataError",
]

CATALOG_NAME = "kip714"
DEFAULT_NAMESPACE = "kip714"
LANDING_TABLE = "metrics"
LANDING_SNAPSHOT_PROPERTY = "kip714.landing-snapshot-id"
"""Snapshot property of every output commit: the landing snapshot it was computed from."""


class NoDataError(LookupError):
    """The landing holds nothing the run could roll up (no table, no points in the range)."""


def _local_path(uri: str) -> Path | None:
    """The file a local URI or plain path names (None for a remote URI)."""
    for prefix in ("jdbc:sqlite:", "sqlite:///", "file://"):
        if uri.startswith(prefix):
            uri = ("/" if prefix == "sqlite:///" else "") + uri.removeprefix(prefix)
            break
    else:
        if "://" in uri:
            return None
    return Path(uri).expanduser().resolve()


@dataclass(frozen=True, slots=True)
class Lake:
    """One catalog (a SQLite file), its warehouse and the namespace of the kip714 tables.

    ``catalog_uri`` is a path to the SQLite file, or ``sqlite:///…`` /
    ``jdbc:sqlite:…``; ``warehouse`` a local path or a Hadoop URI
    (``file://``, ``s3a://``, …) every executor can reach.
    """

    catalog_uri: str
    warehouse: str
    namespace: str = DEFAULT_NAMESPACE

    @classmethod
    def under(cls, data_dir: str | Path, namespace: str = DEFAULT_NAMESPACE) -> Lake:
        """The embedded default: ``<data_dir>/lake/catalog.db`` and ``.../lake/warehouse``."""
        lake = Path(data_dir).expanduser().resolve() / "lake"
        return cls(str(lake / "catalog.db"), str(lake / "warehouse"), namespace)

    @property
    def catalog_file(self) -> Path:
        path = _local_path(self.catalog_uri)
        if path is None:
            raise ValueError(f"catalog {self.catalog_uri!r}: only a SQLite file is supported")
        return path

    @property
    def sqlalchemy_uri(self) -> str:
        """pyiceberg's ``SqlCatalog`` form."""
        return f"sqlite:///{self.catalog_file}"

    @property
    def jdbc_uri(self) -> str:
        """Iceberg's ``JdbcCatalog`` form."""
        return f"jdbc:sqlite:{self.catalog_file}"

    @property
    def warehouse_uri(self) -> str:
        path = _local_path(self.warehouse)
        return self.warehouse if path is None else f"file://{path}"

    def table(self, name: str) -> str:
        """A table's identifier in Spark: ``kip714.<namespace>.<name>``."""
        return f"{CATALOG_NAME}.{self.namespace}.{name}"

    @property
    def landing(self) -> str:
        return self.table(LANDING_TABLE)

    def spark_conf(self) -> dict[str, str]:
        """The session settings that make Spark's ``kip714`` catalog this lake."""
        prefix = f"spark.sql.catalog.{CATALOG_NAME}"
        return {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": self.jdbc_uri,
            f"{prefix}.warehouse": self.warehouse_uri,
            f"{prefix}.jdbc.schema-version": "V1",
            # Other processes (the server) commit to the landing: never serve a cached
            # table state, or a run would miss the snapshots committed since the last.
            f"{prefix}.cache-enabled": "false",
        }
