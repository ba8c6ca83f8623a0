"""The landing's ``retention_hours``: expired hours of ``metrics/`` (and ``pushes/``) are deleted.

Two rules keep retention from ever looking like damage to the landing
itself:

* A pass holds the exporter's generation lock, the lock publication runs
  under, so a deletion never races a file being renamed into its partition.
* A partition that a manifest on disk names is kept until a newer
  publication replaces that manifest. Recovery reads only the manifests on
  disk and reports a file one names that is neither staged nor published as
  missing (``publish.recover``), so it never meets a file retention deleted.
  In practice this holds back only late data that landed in an expired
  hour, for one generation.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from exporters.parquet import publish as publishing
from exporters.parquet.schema import METRICS_TABLE, PUSHES_TABLE
from exporters.retention import PeriodicRetention

if TYPE_CHECKING:
    import asyncio

__all__ = ["landing_retention", "partitions_named_by_manifests"]


def partitions_named_by_manifests(root: Path) -> frozenset[Path]:
    """The partition directories the manifests under ``root`` name (blocking)."""
    named: set[Path] = set()
    for path in publishing.manifest_dir(root).glob("*.json"):
        manifest = publishing.Manifest.from_json(path.read_bytes())
        named.update((root / file.final).parent for file in manifest.files)
    return frozenset(named)


def landing_retention(root: Path, retention_hours: int, guard: asyncio.Lock) -> PeriodicRetention:
    """The retention task of the landing at ``root``; start it once the landing has recovered."""
    return PeriodicRetention(
        f"landing {root}",
        lambda: (root / METRICS_TABLE, root / PUSHES_TABLE),
        retention_hours,
        keep=lambda: partitions_named_by_manifests(root),
        guard=guard,
    )
