"""The pass of ``[rollups] retention_hours`` over the lake's Iceberg rollup tables (pyiceberg).

``telemetry.server.lake_rollups`` schedules it; it runs in a process of its
own (``exporters.landing.pool.call_in_process``), so the serving process
never loads pyiceberg, or on a thread when the landing runs with
``workers = 0``. What it returns crosses the pipe in pure Python
(``DeletedPartition``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import NoSuchTableError

from exporters.iceberg.data_files import transaction
from exporters.iceberg.lake import open_catalog
from exporters.iceberg.maintenance import expire_snapshots, remove_orphan_files
from exporters.iceberg.retention import HOUR_MS, DeletedPartition, HourPartition
from exporters.iceberg.schema import METRICS_TABLE, PUSHES_TABLE
from spark_jobs.lake import LANDING_SNAPSHOT_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from exporters.iceberg.settings import LakeLocation, MaintenanceSettings

__all__ = ["delete_expired_windows", "rollup_tables", "run_pass"]

_log = logging.getLogger(__name__)


def _recorded(table: Table) -> str | None:
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    return snapshot.summary.additional_properties.get(LANDING_SNAPSHOT_PROPERTY)


def rollup_tables(catalog: Catalog, namespace: str) -> list[Table]:
    """The namespace's tables the rollup job wrote (their commits record a landing snapshot)."""
    found = []
    for identifier in catalog.list_tables(namespace):
        if identifier[-1] in (METRICS_TABLE, PUSHES_TABLE):
            continue
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:  # dropped meanwhile
            continue
        fields = {f.name for f in table.schema().fields}
        if _recorded(table) is not None and "window_start" in fields:
            found.append(table)
    return found


def _hour(hour: int) -> HourPartition:
    start = time.gmtime(hour * 3600)
    return HourPartition(hour * HOUR_MS, time.strftime("%Y-%m-%d", start), f"{start.tm_hour:02d}")


def delete_expired_windows(
    table: Table, retention_hours: int, now_ms: int
) -> list[DeletedPartition]:
    """Delete every window that ended ``retention_hours`` or more ago (hour-aligned).

    One commit, only if there is something to delete; returns the hour
    partitions (of ``hours(window_start)``) it emptied. ``window_end``
    decides where the table has it, so a ``1d`` window goes only once all of
    it is old; a table without it (none today) is filtered on ``window_start``.
    """
    cutoff_hour = (now_ms - retention_hours * HOUR_MS) // HOUR_MS
    cutoff = time.strftime("%Y-%m-%dT%H:00:00+00:00", time.gmtime(cutoff_hour * 3600))
    if "window_end" in {f.name for f in table.schema().fields}:
        row_filter = f"window_end <= '{cutoff}'"
    else:
        row_filter = f"window_start < '{cutoff}'"
    sizes: dict[int, int] = {}
    for task in table.scan(row_filter=row_filter).plan_files():
        value: Any = task.file.partition[0] if len(task.file.partition) else None
        hour = value if isinstance(value, int) else cutoff_hour - 1
        sizes[hour] = sizes.get(hour, 0) + task.file.file_size_in_bytes
    if not sizes:
        return []
    recorded = _recorded(table)
    properties = {} if recorded is None else {LANDING_SNAPSHOT_PROPERTY: recorded}
    with transaction(table) as deleting:  # (pyiceberg's ``table.delete``, fewer copies)
        deleting.delete(delete_filter=row_filter, snapshot_properties=properties)
    name = ".".join(table.name())
    _log.info(
        "retention deleted %d hour(s) (%d bytes) of lake table %s: older than %d h",
        len(sizes),
        sum(sizes.values()),
        name,
        retention_hours,
    )
    return [DeletedPartition(Path(name), _hour(h), size) for h, size in sorted(sizes.items())]


def run_pass(
    location: LakeLocation, retention_hours: int, maintenance: MaintenanceSettings, now_ms: int
) -> list[DeletedPartition]:
    """One pass over every rollup table of the lake (blocking)."""
    catalog = open_catalog(location)
    deleted = []
    for table in rollup_tables(catalog, location.namespace):
        deleted += delete_expired_windows(table, retention_hours, now_ms)
        if maintenance.expire_snapshots_after_hours is not None:
            expire_snapshots(table.refresh(), maintenance.expire_snapshots_after_hours, now_ms)
        if maintenance.orphan_files_after_hours is not None:
            remove_orphan_files(table.refresh(), maintenance.orphan_files_after_hours, now_ms)
    return deleted
