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

A failed pass is logged when it happens, counted, and retried after
``RETRY_S`` (doubling up to the interval), like the Parquet retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pyiceberg.exceptions import NoSuchTableError

from durable.cancellation import run_to_completion
from exporters.iceberg.lake import LakeLocation, lake_location, open_catalog
from exporters.iceberg.maintenance import MaintenanceSettings, expire_snapshots, remove_orphan_files
from exporters.iceberg.schema import METRICS_TABLE, PUSHES_TABLE
from exporters.retention import HOUR_MS, RETENTION_INTERVAL_S, RETRY_S, RetentionStats
from spark_jobs.lake import LANDING_SNAPSHOT_PROPERTY
from telemetry.server.lake_settings import LAKE_EXPORTER_TYPE

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from telemetry.server.config import Settings

__all__ = [
    "DATASET",
    "LakeRollupRetention",
    "delete_expired_windows",
    "lake_rollup_retention",
    "rollup_tables",
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


def delete_expired_windows(table: Table, retention_hours: int, now_ms: int) -> tuple[int, int]:
    """Delete every window that ended ``retention_hours`` or more ago (hour-aligned).

    Returns (hour partitions, bytes) deleted; one commit, only if there is
    something to delete. ``window_end`` decides where the table has it, so a
    ``1d`` window goes only once all of it is old; a table of hourly windows
    without it (none today) is filtered on ``window_start``.
    """
    cutoff_hour = (now_ms - retention_hours * HOUR_MS) // HOUR_MS
    cutoff = time.strftime("%Y-%m-%dT%H:00:00+00:00", time.gmtime(cutoff_hour * 3600))
    if "window_end" in {f.name for f in table.schema().fields}:
        row_filter = f"window_end <= '{cutoff}'"
    else:
        row_filter = f"window_start < '{cutoff}'"
    if not any(True for _ in table.scan(row_filter=row_filter).plan_files()):
        return 0, 0
    recorded = _recorded(table)
    properties = {} if recorded is None else {LANDING_SNAPSHOT_PROPERTY: recorded}
    table.delete(delete_filter=row_filter, snapshot_properties=properties)
    snapshot = table.current_snapshot()
    summary = {} if snapshot is None or snapshot.summary is None else snapshot.summary
    partitions = int(summary.get("changed-partition-count", 0))
    size = int(summary.get("removed-files-size", 0))
    _log.info(
        "retention deleted %d hour(s) (%d bytes) of lake table %s: older than %d h",
        partitions,
        size,
        table.name(),
        retention_hours,
    )
    return partitions, size


def run_pass(
    location: LakeLocation,
    retention_hours: int,
    maintenance: MaintenanceSettings,
    stats: RetentionStats,
    now_ms: int,
) -> None:
    """One pass over every rollup table of the lake (blocking)."""
    catalog = open_catalog(location)
    for table in rollup_tables(catalog, location.namespace):
        partitions, size = delete_expired_windows(table, retention_hours, now_ms)
        stats.partitions_deleted += partitions
        stats.bytes_deleted += size
        if maintenance.expire_snapshots_after_hours is not None:
            expire_snapshots(table.refresh(), maintenance.expire_snapshots_after_hours, now_ms)
        if maintenance.orphan_files_after_hours is not None:
            remove_orphan_files(table.refresh(), maintenance.orphan_files_after_hours, now_ms)
    stats.passes += 1


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LakeRollupRetention:
    """Runs ``run_pass`` at start and every ``interval_s`` in a background task."""

    def __init__(
        self,
        location: LakeLocation,
        retention_hours: int,
        maintenance: MaintenanceSettings,
        *,
        interval_s: float = RETENTION_INTERVAL_S,
        retry_s: float = RETRY_S,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.name = DATASET
        self.location = location
        self.retention_hours = retention_hours
        self.maintenance = maintenance
        self.stats = RetentionStats()
        self._interval_s = interval_s
        self._retry_s = retry_s
        self._clock_ms = clock_ms
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="retention:lake-rollups")

    async def stop(self) -> None:
        """Let a pass in progress finish (a commit is never cut short), then end. Idempotent."""
        self._stopping.set()
        if self._task is not None:
            await asyncio.shield(self._task)

    async def run_once(self) -> None:
        """One pass now, to its end even if the caller is cancelled meanwhile."""
        await run_to_completion(
            asyncio.to_thread(
                run_pass,
                self.location,
                self.retention_hours,
                self.maintenance,
                self.stats,
                self._clock_ms(),
            )
        )

    async def _run(self) -> None:
        delay_s = self._retry_s
        while not self._stopping.is_set():
            try:
                await self.run_once()
            except Exception as error:
                self.stats.failures += 1
                _log.error(
                    "retention of the lake's rollup tables failed, retrying in %.0f s: %s",
                    delay_s,
                    error,
                )
                wait_s, delay_s = delay_s, min(delay_s * 2, self._interval_s)
            else:
                wait_s, delay_s = self._interval_s, self._retry_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait_s)


def lake_rollup_retention(settings: Settings) -> LakeRollupRetention | None:
    """The task for ``[rollups] retention_hours`` on the lake the ``iceberg`` landing names.

    None without retention or without an Iceberg landing (no lake, no rollup tables).
    """
    hours = settings.rollups_retention_hours
    landing = next((e for e in settings.exporters if e.type == LAKE_EXPORTER_TYPE), None)
    if hours is None or landing is None:
        return None
    path = landing.options.get("path")
    location = lake_location(landing.options, None if path is None else Path(path))
    return LakeRollupRetention(location, hours, MaintenanceSettings.from_options(landing.options))
