"""``[rollups] retention_hours`` over the Iceberg rollup tables in the lake.

The Spark job (``kip714 rollup``) writes its outputs (``gauges_1m`` …
``client_health_1h``, named after the windows it was given) as Iceberg
tables beside the landing, and every commit of theirs records the landing
snapshot it was computed from (``spark_jobs.lake.LANDING_SNAPSHOT_PROPERTY``):
that record is how a pass finds them, whatever the windows.

A pass deletes, per table in one commit (pyiceberg's delete by filter on
``window_end``), every window that ended ``retention_hours`` or more before
the current hour, as the Parquet rollup retention does with hour directories. Readers see
the table before or after that commit, never a window half deleted; the
filter is hour-aligned and the tables are partitioned by hour, so whole files
go without a rewrite. The commit carries the recorded landing snapshot
forward, so the next ``--incremental`` run still knows where it stopped.
Then the lake's own snapshot expiry and orphan cleanup
(``[lake] expire_snapshots_after_hours``, ``orphan_files_after_hours``, when
set) run on these tables too, which is what frees the deleted files.

The schedule, the counting, the retries of a failed pass (logged when it
happens) and a stop that lets a commit finish are ``PeriodicRetention``'s,
as for the Parquet rollups: only the pass differs.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pyiceberg.exceptions import NoSuchTableError

from exporters.iceberg.lake import LakeLocation, lake_location, open_catalog
from exporters.iceberg.maintenance import MaintenanceSettings, expire_snapshots, remove_orphan_files
from exporters.iceberg.retention import HOUR_MS, DeletedPartition, HourPartition, PeriodicRetention
from exporters.iceberg.schema import METRICS_TABLE, PUSHES_TABLE
from spark_jobs.lake import LANDING_SNAPSHOT_PROPERTY
from telemetry.server.lake_settings import LAKE_EXPORTER_TYPE

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from telemetry.server.config import Settings

__all__ = [
    "DATASET",
    "delete_expired_windows",
    "lake_retention",
    "lake_rollup_retention",
    "rollup_tables",
    "run_pass",
]

_log = logging.getLogger(__name__)

DATASET: Final = "lake_rollups"
"""The ``dataset`` label of this retention's counters on ``/metrics``."""


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
    table.delete(delete_filter=row_filter, snapshot_properties=properties)
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


def lake_retention(
    location: LakeLocation, retention_hours: int, maintenance: MaintenanceSettings, **kwargs: Any
) -> PeriodicRetention:
    """The background task (``kwargs``: ``PeriodicRetention``'s interval, retry and clock)."""
    prune_pass = functools.partial(run_pass, location, retention_hours, maintenance)
    return PeriodicRetention(DATASET, list, retention_hours, prune_pass=prune_pass, **kwargs)


def lake_rollup_retention(settings: Settings) -> PeriodicRetention | None:
    """``[rollups] retention_hours`` on the lake the ``iceberg`` landing names.

    None without retention or without an Iceberg landing (no lake, no rollup tables).
    """
    hours = settings.rollups_retention_hours
    landing = next((e for e in settings.exporters if e.type == LAKE_EXPORTER_TYPE), None)
    if hours is None or landing is None:
        return None
    path = landing.options.get("path")
    location = lake_location(landing.options, None if path is None else Path(path))
    return lake_retention(location, hours, MaintenanceSettings.from_options(landing.options))
