"""Table maintenance through Iceberg commits: compaction, snapshot expiry, retention, orphans.

Every step that changes what a reader sees is one Iceberg commit, so a
reader (Spark, pyiceberg, DuckDB over a pyiceberg scan) sees each row
exactly once at every moment, whatever runs concurrently:

* **Compaction** of a closed hour (its end ``compact_after_hours`` in the
  past) replaces the hour's files by their rows sorted on ``time`` in one
  transaction (pyiceberg's overwrite with the hour as filter), written under
  the table's spec: one file per kind where the table is partitioned by
  ``metric_type``. An hour is compacted when one of its partitions holds
  several files, or its files were written under several specs. The
  transaction is based on the snapshot the rows were read from and asserts
  it is still current, so an append that slipped into the hour (a replay
  after an outage) makes the commit fail and the hour is read again on the
  next pass, never rewritten without it. pyiceberg has no compaction
  procedure; Spark's ``CALL system.rewrite_data_files`` is the other way.
* **Snapshot expiry** drops snapshots older than
  ``expire_snapshots_after_hours``, except the current one and each node's
  newest: that one tells the node where to resume (``commits``).
* **Retention** deletes, by filter, every hour whose end is more than
  ``retention_hours`` in the past (whole partitions: no rewrite).
* **Orphan cleanup** deletes data and manifest files that no retained
  snapshot references and that are older than ``orphan_files_after_hours``:
  files of a commit that crashed or lost, and those expiry released.

Several nodes may run maintenance on one table: conflicting commits fail
and are retried on the next pass.
"""

from __future__ import annotations

import datetime as dt
import logging
import traceback
from typing import TYPE_CHECKING, Any, Final

import pyarrow.compute as pc
from pyarrow import fs as pafs
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationException

from exporters.iceberg import commits, data_files
from exporters.iceberg.lake import open_catalog
from exporters.iceberg.schema import METRICS_TABLE, PUSHES_TABLE
from exporters.iceberg.settings import MaintenanceSettings, MaintenanceStats

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from exporters.iceberg.lake import LakeLocation

__all__ = [
    "MaintenanceSettings",
    "MaintenanceStats",
    "compact",
    "compact_hour",
    "expire_snapshots",
    "maintenance_pass",
    "remove_orphan_files",
    "retain",
]

_log = logging.getLogger(__name__)

US_PER_HOUR: Final = 3_600_000_000
MS_PER_HOUR: Final = 3_600_000
COMPACTION: Final = "kip714.compaction-hour"


def _iso(hour: int) -> str:
    return dt.datetime.fromtimestamp(hour * 3600, dt.UTC).isoformat()


def _hour_filter(hour: int) -> str:
    return f"received_time >= '{_iso(hour)}' AND received_time < '{_iso(hour + 1)}'"


def _files_per_hour(table: Table) -> dict[int, list[DataFile]]:
    """Data files of the current snapshot, per receive hour (the first partition field)."""
    files: dict[int, list[DataFile]] = {}
    for task in table.scan().plan_files():
        hour = task.file.partition[0]
        if hour is not None:
            files.setdefault(int(hour), []).append(task.file)
    return files


def _fragmented(files: list[DataFile]) -> bool:
    """Whether an hour's files are more than one per partition (spec and partition values)."""
    partitions = {
        (f.spec_id, tuple(f.partition[i] for i in range(len(f.partition)))) for f in files
    }
    specs = {spec for spec, _ in partitions}
    return len(files) > len(partitions) or len(specs) > 1


def compact_hour(table: Table, hour: int) -> int:
    """Rewrite one receive hour's files sorted, one per partition, in one transaction.

    Returns the number of files replaced (0: the hour was not fragmented).

    Raises:
        CommitFailedException, ValidationException: The table changed since
            it was read (a file added to the hour); nothing was changed.
    """
    row_filter = _hour_filter(hour)
    files = [
        t.file
        for t in table.scan(row_filter=row_filter).plan_files()
        if t.file.partition[0] == hour
    ]
    if not _fragmented(files):
        return 0
    rows = table.scan(row_filter=row_filter).to_arrow()
    sort_column = "time" if "time" in rows.column_names else "received_time"
    rows = rows.take(pc.sort_indices(rows, [(sort_column, "ascending")]))
    # One transaction, based on the metadata the rows were read from: the
    # commit asserts that snapshot is still current.
    with data_files.transaction(table) as transaction:
        transaction.overwrite(
            rows, overwrite_filter=row_filter, snapshot_properties={COMPACTION: str(hour)}
        )
    return len(files)


def compact(table: Table, after_hours: int, now_ms: int, stats: MaintenanceStats) -> Table:
    """Compact every closed hour (ended ``after_hours`` before ``now_ms``) with several files."""
    newest_closed = now_ms // MS_PER_HOUR - 1 - after_hours
    for hour, files in sorted(_files_per_hour(table).items()):
        if hour > newest_closed or not _fragmented(files):
            continue
        try:
            replaced = compact_hour(table, hour)
        except (CommitFailedException, ValidationException):  # an append meanwhile: next pass
            stats.conflicts += 1
            table = table.refresh()
            continue
        if replaced:
            stats.hours_compacted += 1
            stats.files_compacted += replaced
            _log.info("lake table %s: hour %d compacted (%d files)", table.name(), hour, replaced)
    return table


def expire_snapshots(table: Table, after_hours: int, now_ms: int) -> int:
    """Expire snapshots older than ``after_hours``, keeping the current and the resume points.

    Kept: each node's newest snapshot, and the newest of each topic id and
    control topic id (``commits``), from which nodes and the committer resume.
    """
    cutoff = now_ms - after_hours * MS_PER_HOUR
    current = table.current_snapshot()
    keep = {current.snapshot_id} if current is not None else set()
    newest: dict[tuple[str, str], tuple[int, int]] = {}
    for snapshot in table.metadata.snapshots:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        seq = snapshot.sequence_number or 0
        # Each node's newest, and each topic id's and control topic id's newest: where a
        # node, a partition of the pushes topic and the committer resume.
        for key in (commits.NODE_ID, commits.TOPIC_ID, commits.CONTROL_TOPIC_ID):
            value = props.get(key)
            if value is not None and newest.get((key, value), (-1, 0))[0] < seq:
                newest[key, value] = (seq, snapshot.snapshot_id)
    keep |= {snapshot_id for _, snapshot_id in newest.values()}
    expired = [
        s.snapshot_id
        for s in table.metadata.snapshots
        if s.timestamp_ms < cutoff and s.snapshot_id not in keep
    ]
    if expired:
        table.maintenance.expire_snapshots().by_ids(expired).commit()
    return len(expired)


def retain(table: Table, hours: int, now_ms: int) -> int:
    """Delete every receive hour whose end is more than ``hours`` ago; how many hours went."""
    cutoff_hour = now_ms // MS_PER_HOUR - hours
    old = [h for h in _files_per_hour(table) if h < cutoff_hour]
    if not old:
        return 0
    table.delete(delete_filter=f"received_time < '{_iso(cutoff_hour)}'")
    return len(old)


def _referenced(table: Table) -> set[str]:
    """Every live data file, manifest and manifest list of a retained snapshot (no scheme)."""
    io = table.io
    found: set[str] = set()
    read: set[str] = set()
    for snapshot in table.metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            found.add(manifest.manifest_path)
            if manifest.manifest_path in read:
                continue
            read.add(manifest.manifest_path)
            # Live entries only: a file a snapshot deleted is live in its parent
            # as long as the parent is retained.
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                found.add(entry.data_file.file_path)
    return {_strip_scheme(p) for p in found}


def _strip_scheme(location: str) -> str:
    return location.split("://", 1)[1] if "://" in location else location


def _table_fs(table: Table) -> pafs.FileSystem:
    """The pyarrow filesystem pyiceberg itself uses for the table (local or S3, configured)."""
    scheme, rest = table.location().split("://", 1)
    io: Any = table.io
    filesystem: pafs.FileSystem = io.fs_by_scheme(scheme, rest.split("/", 1)[0])
    return filesystem


def remove_orphan_files(table: Table, after_hours: int, now_ms: int) -> int:
    """Delete unreferenced data and manifest files older than ``after_hours``; how many."""
    filesystem, root = _table_fs(table), _strip_scheme(table.location())
    referenced = _referenced(table)
    cutoff_s = now_ms / 1000 - after_hours * 3600
    removed = 0
    for sub in ("data", "metadata"):
        selector = pafs.FileSelector(f"{root}/{sub}", recursive=True, allow_not_found=True)
        for info in filesystem.get_file_info(selector):
            if info.type != pafs.FileType.File or info.path in referenced:
                continue
            if sub == "metadata" and not info.path.endswith(".avro"):
                continue  # table metadata files belong to the catalog's history
            if info.mtime is None or info.mtime.timestamp() > cutoff_s:
                continue
            filesystem.delete_file(info.path)
            removed += 1
    return removed


def run_pass(
    location: LakeLocation, settings: MaintenanceSettings, stats: MaintenanceStats, now_ms: int
) -> None:
    """One maintenance pass over the lake's tables (blocking)."""
    catalog = open_catalog(location)
    for name in (METRICS_TABLE, PUSHES_TABLE):
        try:
            table = catalog.load_table((location.namespace, name))
        except NoSuchTableError:
            continue
        if settings.retention_hours is not None:
            stats.hours_deleted += retain(table, settings.retention_hours, now_ms)
            table = table.refresh()
        if settings.compact_after_hours is not None:
            table = compact(table, settings.compact_after_hours, now_ms, stats)
        if settings.expire_snapshots_after_hours is not None:
            table = table.refresh()
            stats.snapshots_expired += expire_snapshots(
                table, settings.expire_snapshots_after_hours, now_ms
            )
        if settings.orphan_files_after_hours is not None:
            table = table.refresh()
            stats.orphan_files_deleted += remove_orphan_files(
                table, settings.orphan_files_after_hours, now_ms
            )
    stats.passes += 1


def maintenance_pass(
    location: LakeLocation, settings: MaintenanceSettings, now_ms: int
) -> tuple[MaintenanceStats, str | None]:
    """One pass and what it did, even when it failed half-way (then with the traceback).

    What ``maintenance_schedule.Maintenance`` runs in a worker process: a
    failure is returned as text, since pickling pyiceberg's exception would
    import pyiceberg in the serving process.
    """
    stats = MaintenanceStats()
    try:
        run_pass(location, settings, stats, now_ms)
    except Exception:
        return stats, traceback.format_exc(limit=8)
    return stats, None
