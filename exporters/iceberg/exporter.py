"""``IcebergExporter``: the landing as an Apache Iceberg table that several nodes share.

How exactly-once works with the host (``exporters.api.BufferingExporter``):
``export`` flattens each batch (``exporters.parquet.flatten``, in a thread)
and buffers the rows of the current *generation*, a contiguous run of log
offsets. Past ``max_pending_rows`` the buffered rows are written out as data
files (not yet committed); once the generation is ``max_file_age_s`` old
(and on ``flush``) its files are committed in one snapshot whose properties
name this node, its ingest log and the offsets covered (``commits.py``).
``durable_offset`` is the first offset of the uncommitted generation, so the
host never commits past data that is not in a committed snapshot; after a
restart the exporter resumes after the newest snapshot this node wrote (and
skips replayed offsets below it), so every push lands once even after
SIGKILL between the Iceberg commit and the host's.

A failed write or a commit that keeps losing the race stops the landing
(fail-stop, as the Parquet landing): later ``export`` calls raise
``TransientExportError`` and a restart resumes from the table. A commit in
progress is finished before a cancellation is delivered
(``run_to_completion``), so the exporter always knows whether it happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import pyarrow as pa

from exporters.api import LoggedPush, TransientExportError
from exporters.cancellation import run_to_completion
from exporters.iceberg import commits
from exporters.iceberg.lake import lake_location, open_catalog, open_table
from exporters.iceberg.maintenance import Maintenance, MaintenanceSettings, MaintenanceStats
from exporters.iceberg.resume import parquet_landing_position
from exporters.iceberg.schema import (
    METRICS_TABLE,
    PUSHES_TABLE,
    concat,
    lake_metrics_schema,
    lake_pushes_schema,
    to_lake_pushes,
    to_lake_rows,
)
from exporters.options import bool_option, int_option, number_option
from exporters.otlp_rows import FlattenStats
from exporters.parquet.flatten import flatten_to_table
from exporters.parquet.schema import hours_of, pushes_table, split_by_hour

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyiceberg.table import Table

__all__ = ["DEFAULTS", "IcebergExporter", "IcebergStats"]

_log = logging.getLogger(__name__)

DEFAULTS: Final[Mapping[str, Any]] = {
    "max_file_age_s": 5.0,
    "max_pending_rows": 2_000_000,
    "raw": False,
    "node_id": None,
    "compact_after_hours": None,
    "expire_snapshots_after_hours": None,
    "retention_hours": None,
    "orphan_files_after_hours": None,
    "maintenance_interval_s": 600.0,
}
_LAKE_KEYS: Final = frozenset(
    {
        "path",
        "catalog",
        "warehouse",
        "namespace",
        "s3_endpoint",
        "s3_region",
        "s3_access_key_id",
        "s3_secret_access_key",
    }
)
_OPTIONS: Final = frozenset({*_LAKE_KEYS, *DEFAULTS})
NODE_ID_FILE: Final = "node_id"


@dataclass(slots=True)
class IcebergStats(FlattenStats):
    """Running totals: the flattening counters plus the lake's own.

    ``refused_counts`` counts data points left out because a count exceeded
    2^63−1 (Iceberg's ``long``).
    """

    rows_landed: int = 0
    raw_rows_landed: int = 0
    files_written: int = 0
    commits: int = 0
    commit_conflicts: int = 0
    refused_counts: int = 0
    unlandable_pushes: int = 0
    replayed_pushes_skipped: int = 0
    failures: int = 0
    durable_offset: int = 0
    pending_rows: int = 0


@dataclass(slots=True)
class _Generation:
    first: int
    started: float
    last: int = -1
    rows: dict[str, list[pa.Table]] | None = None
    buffered: int = 0
    files: dict[str, list[str]] | None = None
    landed: dict[str, int] | None = None


def node_id_in(data_dir: Path) -> str:
    """This node's id kept in ``data_dir`` (a UUID created on first use)."""
    path = data_dir / NODE_ID_FILE
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if text:
            return text
    data_dir.mkdir(parents=True, exist_ok=True)
    fresh = str(uuid.uuid4())
    temp = path.with_suffix(".tmp")
    temp.write_text(fresh + "\n")
    os.replace(temp, path)
    return path.read_text().strip()


@final
class IcebergExporter:
    """Lands every data point in ``<namespace>.metrics`` (and ``pushes`` with ``raw``).

    Raises (at construction):
        TypeError: An unknown option.
        ValueError: An option with an invalid value.
    """

    def __init__(self, config: Mapping[str, Any], /) -> None:
        unknown = sorted(set(config) - _OPTIONS)
        if unknown:
            raise TypeError(
                f"unknown option {unknown[0]!r} for the iceberg exporter "
                f"(known: {', '.join(sorted(_OPTIONS))})"
            )
        options = {**DEFAULTS, **config}
        path = config.get("path")
        self.data_dir = None if path is None else Path(os.fspath(path))
        self.location = lake_location(config, self.data_dir)
        self.max_file_age_s = number_option(options, "max_file_age_s", 0.01)
        self.max_pending_rows = int_option(options, "max_pending_rows", 1)
        self.raw = bool_option(options, "raw")
        node_id = options["node_id"]
        if node_id is not None and (not isinstance(node_id, str) or not node_id.strip()):
            raise ValueError(f"option 'node_id' must be a non-empty string: {node_id!r}")
        if node_id is None and self.data_dir is None:
            raise ValueError("option 'node_id' is required when 'path' is not given")
        self._node_id: str | None = node_id
        self.maintenance_settings = MaintenanceSettings.from_options(options)
        self.stats = IcebergStats()
        """Running counters for the server's metrics; see ``IcebergStats``."""
        self._log_id: str | None = None
        self._tables: dict[str, Table] = {}
        self._next: dict[str, int] = {}
        self._gen: _Generation | None = None
        self._gen_lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self._maintenance: Maintenance | None = None
        self._started = False
        self._closed = False
        self._failure: str | None = None
        self._durable = 0

    @property
    def node_id(self) -> str:
        """The id naming this node in commits and in ``ingest_node`` (known after ``start``)."""
        if self._node_id is None:
            raise RuntimeError("node_id is known after start()")
        return self._node_id

    @property
    def maintenance_stats(self) -> MaintenanceStats | None:
        """What the scheduled maintenance did; ``None`` when none is configured."""
        return None if self._maintenance is None else self._maintenance.stats

    # -- the Exporter contract ----------------------------------------------------------------

    def bind_log(self, log_id: str, /) -> None:
        """The id of the ingest log feeding the lake (``LogBoundExporter``)."""
        self._log_id = log_id

    async def start(self) -> None:
        """Open (or create) the tables, find where this node stands, start the timers."""
        if self._closed:
            raise RuntimeError("iceberg exporter is closed")
        if self._started:
            return
        await asyncio.to_thread(self._open)
        self._started = True
        self._timer = asyncio.create_task(self._age_timer(), name="iceberg-age")
        if self.maintenance_settings.enabled:
            self._maintenance = Maintenance(
                self.location, self.maintenance_settings, self._gen_lock
            )
            self._maintenance.start()

    def _open(self) -> None:
        if self._node_id is None:
            assert self.data_dir is not None
            self._node_id = node_id_in(self.data_dir)
        catalog = open_catalog(self.location)
        names = [METRICS_TABLE, PUSHES_TABLE] if self.raw else [METRICS_TABLE]
        floor = 0
        if self.data_dir is not None and self._log_id is not None:
            floor = parquet_landing_position(self.data_dir, self._log_id)
        for name in names:
            table = open_table(catalog, self.location.namespace, name)
            self._tables[name] = table
            position = commits.committed_position(table, self.node_id)
            start = floor
            if position is not None and position.log_id in (None, self._log_id):
                start = max(start, position.offset_end + 1)
            elif position is not None:
                _log.warning(
                    "lake table %s: node %s last landed ingest log %s; ingest log %s feeds it "
                    "now, landed from its offset %d (was the log directory replaced?)",
                    table.name(),
                    self.node_id,
                    position.log_id,
                    self._log_id,
                    start,
                )
            self._next[name] = start
        self._durable = min(self._next.values())
        self.stats.durable_offset = self._durable
        _log.debug(
            "iceberg landing %s.%s on node %s resumes at offset %d",
            self.location.namespace,
            METRICS_TABLE,
            self.node_id,
            self._durable,
        )

    @property
    def failure(self) -> str | None:
        """Why the landing stopped (fail-stop, until a restart), or ``None`` while it works."""
        return self._failure

    def durable_offset(self) -> int:
        """The first offset not yet in a committed snapshot (see the module docstring)."""
        if self._gen is not None:
            return self._gen.first
        return self._durable

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        """Flatten ``batch`` into the generation; write or commit it when due.

        Raises:
            TransientExportError: The landing has failed and needs a restart.
        """
        if not self._started or self._closed:
            raise RuntimeError("iceberg exporter used before start() or after close()")
        self._raise_if_failed()
        low = min(self._next.values())
        start = 0
        while start < len(batch) and batch[start].offset < low:
            start += 1
        self.stats.replayed_pushes_skipped += start
        if start == len(batch):
            return
        pushes = list(batch[start:])
        async with self._gen_lock:
            self._raise_if_failed()
            rows = await asyncio.to_thread(self._convert, pushes)
            gen = self._gen
            if gen is None:
                gen = self._gen = _Generation(pushes[0].offset, time.monotonic(), rows={}, files={})
                gen.landed = {}
            gen.last = pushes[-1].offset
            assert gen.rows is not None
            for name, table in rows.items():
                if table.num_rows:
                    gen.rows.setdefault(name, []).append(table)
                    gen.buffered += table.num_rows
            for name in self._next:
                self._next[name] = max(self._next[name], gen.last + 1)
            self.stats.pending_rows = gen.buffered
            if gen.buffered >= self.max_pending_rows:
                await run_to_completion(self._write(gen))
            if time.monotonic() - gen.started >= self.max_file_age_s:
                await self._commit()

    def _convert(self, pushes: list[LoggedPush]) -> dict[str, pa.Table]:
        """The rows ``pushes`` add to each table (blocking: flattening and encoding)."""
        out: dict[str, pa.Table] = {}
        metrics_from = self._next[METRICS_TABLE]
        fresh = [p for p in pushes if p.offset >= metrics_from]
        if fresh:
            flat, stats, unlandable = flatten_to_table(fresh)
            self.stats.merge(stats)
            self.stats.unlandable_pushes += len(unlandable)
            table, refused = to_lake_rows(flat, self.node_id)
            self.stats.refused_counts += refused
            out[METRICS_TABLE] = table
        if self.raw:
            raw = [p for p in pushes if p.offset >= self._next[PUSHES_TABLE]]
            if raw:
                out[PUSHES_TABLE] = to_lake_pushes(pushes_table(raw), self.node_id)
        return out

    async def flush(self) -> None:
        """Commit the current generation (everything exported so far)."""
        if not self._started or self._closed:
            return
        async with self._gen_lock:
            self._raise_if_failed()
            await self._commit()

    async def close(self) -> None:
        """Commit what is pending (unless failed), stop the timers; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._maintenance is not None:
                await self._maintenance.stop()
            if self._started:
                async with self._gen_lock:
                    await self._stop_timer()
                    if self._failure is None:
                        try:
                            await self._commit()
                        except TransientExportError:
                            _log.error("iceberg landing could not commit its last generation")
        finally:
            await self._stop_timer()

    async def _stop_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            await asyncio.wait({timer})

    # -- generations ---------------------------------------------------------------------------

    async def _write(self, gen: _Generation) -> None:
        """Write the buffered rows of ``gen`` as data files (not yet committed)."""
        try:
            await asyncio.to_thread(self._write_files, gen)
        except Exception as error:
            self._fail(f"writing data files of offsets {gen.first}..{gen.last} failed: {error!r}")
            raise TransientExportError(self._failure) from error

    def _write_files(self, gen: _Generation) -> None:
        assert gen.rows is not None
        assert gen.files is not None
        assert gen.landed is not None
        token = uuid.uuid4().hex[:8]
        for name, tables in gen.rows.items():
            schema = lake_metrics_schema() if name == METRICS_TABLE else lake_pushes_schema()
            rows = concat(tables, schema)
            if rows.num_rows == 0:
                continue
            table = self._tables[name]
            hours = hours_of(rows.column("received_time"))
            for hour, part in split_by_hour(rows, hours):
                file_name = f"{self.node_id}-{gen.first:020d}-{gen.last:020d}-{token}-h{hour}"
                location = commits.write_data_file(table, part, hour, file_name)
                gen.files.setdefault(name, []).append(location)
                gen.landed[name] = gen.landed.get(name, 0) + part.num_rows
                self.stats.files_written += 1
        gen.rows = {}
        gen.buffered = 0

    async def _commit(self) -> None:
        """Write what is buffered and commit the generation: one snapshot per table."""
        gen = self._gen
        if gen is None:
            return
        await run_to_completion(self._write(gen))
        await run_to_completion(self._commit_generation(gen))

    async def _commit_generation(self, gen: _Generation) -> None:
        properties = {
            commits.NODE_ID: self.node_id,
            commits.LOG_ID: self._log_id or "",
            commits.OFFSET_START: str(gen.first),
            commits.OFFSET_END: str(gen.last),
        }
        if not self._log_id:
            del properties[commits.LOG_ID]
        assert gen.files is not None
        assert gen.landed is not None
        for name, files in gen.files.items():
            conflicts: list[int] = []
            try:
                self._tables[name] = await asyncio.to_thread(
                    commits.commit_files, self._tables[name], files, properties, conflicts
                )
            except Exception as error:
                self.stats.commit_conflicts += len(conflicts)
                self._fail(f"committing offsets {gen.first}..{gen.last} failed: {error!r}")
                raise TransientExportError(self._failure) from error
            self.stats.commit_conflicts += len(conflicts)
            self.stats.commits += 1
            if name == METRICS_TABLE:
                self.stats.rows_landed += gen.landed.get(name, 0)
            else:
                self.stats.raw_rows_landed += gen.landed.get(name, 0)
        self._durable = gen.last + 1
        self.stats.durable_offset = self._durable
        self.stats.pending_rows = 0
        self._gen = None

    async def _age_timer(self) -> None:
        """Commit a generation once it is ``max_file_age_s`` old, however quiet the traffic."""
        tick = min(1.0, self.max_file_age_s / 4)
        while True:
            await asyncio.sleep(tick)
            gen = self._gen
            if gen is None or self._failure is not None:
                continue
            if time.monotonic() - gen.started < self.max_file_age_s:
                continue
            async with self._gen_lock:
                if self._closed:
                    return
                with contextlib.suppress(TransientExportError):
                    await self._commit()

    # -- failure -------------------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        if self._failure is None:
            self._failure = (
                f"iceberg landing stopped: {reason}; restart kip714 to resume "
                f"from offset {self.durable_offset()}"
            )
            self.stats.failures += 1
            _log.error("%s", self._failure)

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise TransientExportError(self._failure)
