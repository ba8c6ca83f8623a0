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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from exporters.iceberg.retention import PeriodicRetention
from exporters.iceberg.settings import LakeLocation, MaintenanceSettings, lake_location
from exporters.landing.pool import call_in_process
from telemetry.server.lake_settings import LAKE_EXPORTER_TYPE

if TYPE_CHECKING:
    from exporters.iceberg.retention import DeletedPartition
    from telemetry.server.config import Settings

__all__ = ["DATASET", "PASS_TARGET", "lake_retention", "lake_rollup_retention"]

DATASET: Final = "lake_rollups"
"""The ``dataset`` label of this retention's counters on ``/metrics``."""
#: The pass, named (pickling the function would import pyiceberg here).
PASS_TARGET: Final = "telemetry.server.lake_rollup_pass:run_pass"


def _pass_in_process(
    location: LakeLocation, retention_hours: int, maintenance: MaintenanceSettings, now_ms: int
) -> list[DeletedPartition]:
    deleted: list[DeletedPartition] = call_in_process(
        PASS_TARGET, location, retention_hours, maintenance, now_ms, name="kip714-lake-retention"
    )
    return deleted


def _pass_here(
    location: LakeLocation, retention_hours: int, maintenance: MaintenanceSettings, now_ms: int
) -> list[DeletedPartition]:
    from telemetry.server.lake_rollup_pass import run_pass  # noqa: PLC0415  (workers = 0)

    return run_pass(location, retention_hours, maintenance, now_ms)


def lake_retention(
    location: LakeLocation,
    retention_hours: int,
    maintenance: MaintenanceSettings,
    *,
    in_process: bool = False,
    **kwargs: Any,
) -> PeriodicRetention:
    """The background task (``kwargs``: ``PeriodicRetention``'s interval, retry and clock).

    Each pass runs in a process of its own, or on a thread here with ``in_process``.
    """
    run = _pass_here if in_process else _pass_in_process
    prune_pass = functools.partial(run, location, retention_hours, maintenance)
    return PeriodicRetention(DATASET, list, retention_hours, prune_pass=prune_pass, **kwargs)


def lake_rollup_retention(settings: Settings) -> PeriodicRetention | None:
    """``[rollups] retention_hours`` on the lake the ``iceberg`` landing names.

    None without retention or without an Iceberg landing (no lake, no rollup
    tables). Its passes run where the landing's catalog work does: in a
    process, or on a thread with the landing's ``workers = 0``.
    """
    hours = settings.rollups_retention_hours
    landing = next((e for e in settings.exporters if e.type == LAKE_EXPORTER_TYPE), None)
    if hours is None or landing is None:
        return None
    path = landing.options.get("path")
    location = lake_location(landing.options, None if path is None else Path(path))
    return lake_retention(
        location,
        hours,
        MaintenanceSettings.from_options(landing.options),
        in_process=landing.options.get("workers") == 0,
    )
