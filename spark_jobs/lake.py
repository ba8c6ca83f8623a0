"""Where the lake is: the Iceberg catalog, warehouse and namespace, for Spark and pyiceberg.

The catalog is a SQL catalog: on SQLite (the embedded default) or on
PostgreSQL (several machines share it; shared/design.md §4.6). The server
appends to ``<namespace>.metrics`` through pyiceberg's ``SqlCatalog`` and
the jobs read it, and write their rollup tables next to it, through
Iceberg's JDBC catalog in Spark (``jdbc:sqlite:`` or ``jdbc:postgresql:``
with ``jdbc.user``/``jdbc.password``, derived from the SQLAlchemy URL). Both
name the catalog ``kip714``: that name is stored in every catalog row, so
Spark must use the same one to see pyiceberg's tables.
``jdbc.schema-version=V1`` lets Spark share the catalog database with
pyiceberg's schema.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CATALOG_NAME",
    "DEFAULT_NAMESPACE",
    "LANDING_SNAPSHOT_PROPERTY",
    "LANDING_TABLE",
    "Lake",
    "NoDataError",
    "postgres_url",
]

CATALOG_NAME = "kip714"
DEFAULT_NAMESPACE = "kip714"
LANDING_TABLE = "metrics"
LANDING_SNAPSHOT_PROPERTY = "kip714.landing-snapshot-id"
"""Snapshot property of every output commit: the landing snapshot it was computed from."""


class NoDataError(LookupError):
    """The landing holds nothing the run could roll up (no table, no points in the range)."""


def postgres_url(uri: str) -> urllib.parse.SplitResult | None:
    """The parts of a SQLAlchemy PostgreSQL URL (``postgresql[+driver]://…``); None otherwise."""
    scheme, separator, _ = uri.partition("://")
    if not separator or not (scheme == "postgresql" or scheme.startswith("postgresql+")):
        return None
    return urllib.parse.urlsplit(uri)


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
    """One catalog, its warehouse and the namespace of the kip714 tables.

    ``catalog_uri`` is a path to the SQLite file, ``sqlite:///…`` /
    ``jdbc:sqlite:…``, or a SQLAlchemy PostgreSQL URL
    (``postgresql+psycopg://user:password@host:port/db``); ``warehouse`` a
    local path or a Hadoop URI (``file://``, ``s3a://``, …) every executor
    can reach.
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
    def is_postgres(self) -> bool:
        """Whether the catalog is a PostgreSQL database (else a SQLite file)."""
        return postgres_url(self.catalog_uri) is not None

    @property
    def catalog_file(self) -> Path:
        """The SQLite file of the catalog.

        Raises:
            ValueError: The catalog is not a local SQLite file.
        """
        path = None if self.is_postgres else _local_path(self.catalog_uri)
        if path is None:
            raise ValueError(f"catalog {self.where}: not a SQLite file")
        return path

    @property
    def where(self) -> str:
        """The catalog for messages: its file, or its URL without the password."""
        parts = postgres_url(self.catalog_uri)
        if parts is None:
            return str(self.catalog_file)
        host = parts.hostname or ""
        user = f"{parts.username}@" if parts.username else ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{user}{host}{port}{parts.path}"

    @property
    def sqlalchemy_uri(self) -> str:
        """pyiceberg's ``SqlCatalog`` form."""
        if self.is_postgres:
            return self.catalog_uri
        return f"sqlite:///{self.catalog_file}"

    @property
    def jdbc_uri(self) -> str:
        """Iceberg's ``JdbcCatalog`` form (user and password go in ``jdbc_properties``)."""
        parts = postgres_url(self.catalog_uri)
        if parts is None:
            return f"jdbc:sqlite:{self.catalog_file}"
        host = parts.hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"
        query = f"?{parts.query}" if parts.query else ""
        return f"jdbc:postgresql://{host}:{parts.port or 5432}{parts.path}{query}"

    @property
    def jdbc_properties(self) -> dict[str, str]:
        """``jdbc.user`` and ``jdbc.password`` of a PostgreSQL catalog (none for SQLite)."""
        parts = postgres_url(self.catalog_uri)
        if parts is None:
            return {}
        found = {"jdbc.user": parts.username, "jdbc.password": parts.password}
        return {k: urllib.parse.unquote(v) for k, v in found.items() if v is not None}

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
            **{f"{prefix}.{key}": value for key, value in self.jdbc_properties.items()},
            # Other processes (the server) commit to the landing: never serve a cached
            # table state, or a run would miss the snapshots committed since the last.
            f"{prefix}.cache-enabled": "false",
        }
