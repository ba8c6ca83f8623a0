"""The lake's settings: where it is and its maintenance schedule, parsed without opening it.

Pure Python on purpose: the serving process parses ``[lake]`` and reports
maintenance on ``/metrics`` with these, and never imports pyiceberg or
pyarrow (the landing's worker processes open the catalog, docs/architecture.md
"Processes"). ``lake`` and ``maintenance`` re-export them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CATALOG_NAME",
    "DEFAULT_NAMESPACE",
    "S3_KEYS",
    "LakeLocation",
    "MaintenanceSettings",
    "MaintenanceStats",
    "lake_location",
]

CATALOG_NAME: Final = "kip714"
DEFAULT_NAMESPACE: Final = "kip714"
#: ``[lake]`` keys that configure object storage, and the pyiceberg property each sets.
S3_KEYS: Final = {
    "s3_endpoint": "s3.endpoint",
    "s3_region": "s3.region",
    "s3_access_key_id": "s3.access-key-id",
    "s3_secret_access_key": "s3.secret-access-key",
}
_CATALOG_TYPES: Final = ("sql", "rest")
_KEYS: Final = (
    "compact_after_hours",
    "expire_snapshots_after_hours",
    "retention_hours",
    "orphan_files_after_hours",
)


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


@dataclass(frozen=True, slots=True)
class MaintenanceSettings:
    """The ``[lake]`` schedule: each step is off (``None``) or a number of hours."""

    compact_after_hours: int | None = None
    expire_snapshots_after_hours: int | None = None
    retention_hours: int | None = None
    orphan_files_after_hours: int | None = None
    interval_s: float = 600.0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> MaintenanceSettings:
        """Read the four ``*_hours`` keys and ``maintenance_interval_s``.

        Raises:
            ValueError: A value that is not a whole number of hours >= 1
                (>= 0 for compaction: an hour is closed once it ended).
        """
        values: dict[str, int | None] = {}
        for key in _KEYS:
            value = options.get(key)
            low = 0 if key == "compact_after_hours" else 1
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < low
            ):
                raise ValueError(
                    f"option {key!r} must be a whole number of hours >= {low}: {value!r}"
                )
            values[key] = value
        interval = options.get("maintenance_interval_s", 600.0)
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
            raise ValueError(
                f"option 'maintenance_interval_s' must be a positive number: {interval!r}"
            )
        return cls(**values, interval_s=float(interval))

    @property
    def enabled(self) -> bool:
        return any(getattr(self, key) is not None for key in _KEYS)


@dataclass(slots=True)
class MaintenanceStats:
    """What maintenance did since start, for ``/metrics``."""

    passes: int = 0
    hours_compacted: int = 0
    files_compacted: int = 0
    snapshots_expired: int = 0
    hours_deleted: int = 0
    orphan_files_deleted: int = 0
    conflicts: int = 0
    failures: int = 0
