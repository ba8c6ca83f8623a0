"""What the lake's metadata says before any JVM starts: is there anything to roll up?

pyiceberg reads the catalog and the table metadata (manifests included) in a
fraction of a second, while a Spark session takes seconds to start: so an
empty range, a missing table, or an incremental run with nothing new is
answered here, and Spark starts only when there is work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.types import PrimitiveType

from spark_jobs.lake import (
    CATALOG_NAME,
    LANDING_SNAPSHOT_PROPERTY,
    LANDING_TABLE,
    Lake,
    NoDataError,
)
from spark_jobs.spans import Range

__all__ = ["LakeState", "appended_reach", "lake_state", "output_written_rows", "rows_in"]


@dataclass(frozen=True, slots=True)
class LakeState:
    """The landing's newest snapshot; per output, the landing snapshot it was computed from."""

    landing_snapshot_id: int
    recorded: dict[str, int | None]
    """Output name → recorded landing snapshot id (None: no such table or no record)."""
    appended_since: list[int] | None
    """Append snapshots after the common recorded one (None: no common record in the history)."""
    existing: frozenset[str] = frozenset()
    """The outputs that exist as tables (the run creates the others with their first commit)."""


def _catalog(lake: Lake) -> SqlCatalog:
    if not lake.is_postgres and not lake.catalog_file.is_file():
        raise NoDataError(f"no lake catalog at {lake.catalog_file}")
    return SqlCatalog(CATALOG_NAME, uri=lake.sqlalchemy_uri, warehouse=lake.warehouse_uri)


def _load(catalog: SqlCatalog, lake: Lake, name: str) -> Table | None:
    try:
        return catalog.load_table(f"{lake.namespace}.{name}")
    except NoSuchTableError:
        return None


def _recorded(table: Table | None) -> int | None:
    snapshot = None if table is None else table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    value = snapshot.summary.additional_properties.get(LANDING_SNAPSHOT_PROPERTY)
    return None if value is None else int(value)


def _appends_after(landing: Table, current: int, recorded: int) -> list[int] | None:
    """Append snapshots from ``current`` back to ``recorded`` (excluded); None: not an ancestor."""
    appends: list[int] = []
    snapshot = landing.snapshot_by_id(current)
    while snapshot is not None:
        if snapshot.snapshot_id == recorded:
            return appends
        operation = None if snapshot.summary is None else snapshot.summary.operation.value
        if operation == "append":
            appends.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else landing.snapshot_by_id(parent)
    return None


def lake_state(lake: Lake, outputs: Iterable[str]) -> LakeState:
    """The landing's current snapshot and what each output recorded.

    Raises:
        NoDataError: no catalog, no landing table, or a landing without a snapshot.
    """
    catalog = _catalog(lake)
    landing = _load(catalog, lake, LANDING_TABLE)
    if landing is None:
        raise NoDataError(f"no landing table {lake.namespace}.{LANDING_TABLE} in {lake.where}")
    snapshot = landing.current_snapshot()
    if snapshot is None:
        raise NoDataError(f"the landing table {lake.namespace}.{LANDING_TABLE} is empty")
    tables = {name: _load(catalog, lake, name) for name in outputs}
    recorded = {name: _recorded(table) for name, table in tables.items()}
    common = set(recorded.values())
    appended = None
    if len(common) == 1 and None not in common:
        appended = _appends_after(landing, snapshot.snapshot_id, common.pop())  # type: ignore[arg-type]
    existing = frozenset(name for name, table in tables.items() if table is not None)
    return LakeState(snapshot.snapshot_id, recorded, appended, existing)


def _time_filter(ranges: Iterable[Range]) -> str:
    """pyiceberg's row filter for ``time`` in ``ranges`` (ISO literals bind to timestamptz)."""
    return " OR ".join(
        f"(time >= '{start.isoformat()}' AND time < '{end.isoformat()}')" for start, end in ranges
    )


def rows_in(lake: Lake, snapshot_id: int, ranges: list[Range]) -> int:
    """Rows of the data files of ``snapshot_id`` that may hold a point in ``ranges``.

    An upper bound from file statistics (a file overlapping a range counts
    whole): 0 means there is certainly nothing to roll up.
    """
    landing = _load(_catalog(lake), lake, LANDING_TABLE)
    if landing is None or not ranges:
        return 0
    scan = landing.scan(row_filter=_time_filter(ranges), snapshot_id=snapshot_id)
    return sum(task.file.record_count for task in scan.plan_files())


def appended_reach(lake: Lake, snapshot_ids: Iterable[int]) -> Range | None:
    """The span of ``time`` over the data files the given append snapshots added.

    From the files' column statistics (no data read); None if a file has
    none. An incremental run reads the hours this span touches (and their
    neighbours), so ``rows_in`` over it sizes the run before Spark starts.
    """
    landing = _load(_catalog(lake), lake, LANDING_TABLE)
    if landing is None:
        return None
    field = landing.schema().find_field("time")
    kind = field.field_type
    if not isinstance(kind, PrimitiveType):
        return None
    low: int | None = None
    high: int | None = None
    for snapshot_id in snapshot_ids:
        snapshot = landing.snapshot_by_id(snapshot_id)
        if snapshot is None:
            return None
        for manifest in snapshot.manifests(landing.io):
            if manifest.added_snapshot_id != snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(landing.io, discard_deleted=True):
                lower = (entry.data_file.lower_bounds or {}).get(field.field_id)
                upper = (entry.data_file.upper_bounds or {}).get(field.field_id)
                if lower is None or upper is None:
                    return None
                first = _micros(from_bytes(kind, lower))
                last = _micros(from_bytes(kind, upper))
                low = first if low is None else min(low, first)
                high = last if high is None else max(high, last)
    if low is None or high is None:
        return None
    return (datetime.fromtimestamp(low / 1e6, UTC), datetime.fromtimestamp(high / 1e6, UTC))


def _micros(value: object) -> int:
    """A ``timestamptz`` bound: microseconds since the epoch."""
    if not isinstance(value, int):
        raise TypeError(f"not a timestamp bound: {value!r}")
    return value


def output_written_rows(lake: Lake, name: str) -> int:
    """Rows the newest commit of output ``name`` added (its snapshot summary)."""
    table = _load(_catalog(lake), lake, name)
    snapshot = None if table is None else table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("added-records", 0))
