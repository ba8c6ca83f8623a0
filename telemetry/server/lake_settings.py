"""``[lake]`` and ``[server] node_id``: where the Iceberg landing lands, handed to it as options.

The server does not interpret the lake itself: every ``iceberg`` exporter
gets the ``[lake]`` keys (and ``[server] node_id``) as options, under those
its own ``options`` table states explicitly. The keys are checked here so
that a typo is refused at start naming ``lake.KEY``, like every other
setting, rather than as an exporter option the operator never wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from exporters.iceberg.settings import S3_KEYS, MaintenanceSettings, lake_location
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["LAKE_EXPORTER_TYPE", "LAKE_KEYS", "SERVER_KEYS", "lake_options"]

LAKE_EXPORTER_TYPE: Final = "iceberg"
LAKE_KEYS: Final = frozenset(
    {
        "catalog",
        "warehouse",
        "namespace",
        *S3_KEYS,
        "compact_after_hours",
        "expire_snapshots_after_hours",
        "retention_hours",
        "orphan_files_after_hours",
        "maintenance_interval_s",
    }
)
SERVER_KEYS: Final = frozenset({"node_id"})


def lake_options(document: Mapping[str, Any]) -> dict[str, Any]:
    """The options ``[lake]`` and ``[server]`` give every ``iceberg`` exporter.

    Raises:
        ConfigError: An unknown key or an invalid value, named ``lake.KEY``
            or ``server.KEY``.
    """
    lake = _table("lake", document.get("lake", {}))
    server = _table("server", document.get("server", {}))
    for prefix, section, known in (("lake", lake, LAKE_KEYS), ("server", server, SERVER_KEYS)):
        for key in section:
            if key not in known:
                raise ConfigError(
                    f"{prefix}.{key}",
                    section[key],
                    f"unknown key (known: {', '.join(sorted(known))})",
                )
    options = dict(lake)
    try:
        lake_location(options, Path("."))
        MaintenanceSettings.from_options(options)
    except ValueError as error:
        key = next((k for k in options if f"'{k}'" in str(error)), "lake")
        raise ConfigError(
            f"lake.{key}" if key != "lake" else key, options.get(key), str(error)
        ) from error
    if "node_id" in server:
        node_id = server["node_id"]
        if not isinstance(node_id, str) or not node_id.strip():
            raise ConfigError("server.node_id", node_id, "expected a non-empty string")
        options["node_id"] = node_id
    return options


def _table(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, value, "expected a table")
    return value
