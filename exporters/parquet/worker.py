"""The worker process: flattens logged pushes and writes them to staged Parquet files.

A worker is stateful: it keeps one open ``ParquetWriter`` per table and hour
of the current generation, appends row groups as batches arrive, and on
``seal`` closes, fsyncs and reports its files. Flattening and encoding (the
costly steps) therefore never run in the server process, and files can be
large while memory stays bounded by one row group per open file.

At most ``max_open_files`` writers are open at once, whatever the data: a
batch needing another one first closes the least recently used writer (its
file stays part of the generation, and a later row for that hour starts a
new part file), so no push can exhaust file descriptors. The exporter seals
the generation early once a worker reports that many open files.

Messages, in order, over a ``multiprocessing`` pipe (the parent keeps a FIFO
of futures, so every request gets exactly one reply, in order):

* ``("batch", [LoggedPush fields as a tuple, ...])`` → ``("done", BatchReport)``
* ``("seal", first, last)`` → ``("sealed", [PublishedFile, ...])``
* ``("stop",)`` → ``("stopped",)``, then the process exits
* anything that fails → ``("error", traceback)``; the worker is then
  poisoned and refuses to seal, so a generation missing a batch is never
  published.

A worker whose parent dies sees EOF on the pipe and exits, discarding its
staged files (recovery deletes them; no manifest names them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from durable.fs import fsync_dir
from exporters.api import LoggedPush
from exporters.otlp_rows import FlattenStats
from exporters.parquet.flatten import flatten_to_table
from exporters.parquet.publish import STAGED_SUFFIX, PublishedFile, staging_dir
from exporters.parquet.schema import (
    METRICS_TABLE,
    PUSHES_TABLE,
    SCHEMA_VERSION,
    hours_of,
    metrics_partition_hours,
    metrics_schema,
    partition_name,
    pushes_schema,
    pushes_table,
    split_by_hour,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from multiprocessing.connection import Connection

__all__ = [
    "MAX_OPEN_FILES",
    "BatchReport",
    "OpenFile",
    "WorkerConfig",
    "WorkerLanding",
    "landing_writer",
    "serve_requests",
    "worker_main",
    "write_pending",
]

_log = logging.getLogger(__name__)
_FLOAT_COLUMNS: Final = ("value", "sum", "min", "max")
#: Writers (one per table and hour) a worker keeps open at once; each holds a
#: file descriptor and a row group's buffer.
MAX_OPEN_FILES: Final = 128


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    root: str
    worker_id: int
    token: str  # unique per exporter start, so staged names never collide
    raw: bool
    compression_level: int | None
    row_group_rows: int
    epoch: int = 0  # the landing's offset epoch; after 0 it is part of every file name
    max_open_files: int = MAX_OPEN_FILES


@dataclass(slots=True)
class BatchReport:
    """What one batch did, for the exporter's counters and its file-size decisions."""

    stats: FlattenStats
    rows: int
    raw_rows: int
    unlandable: list[int] = field(default_factory=list)  # offsets of pushes that failed to convert
    buffered_rows: int = 0
    open_files: int = 0
    skewed_times: int = 0  # rows partitioned by received_time (time too far from it)
    spilled_files: int = 0  # writers closed early to stay within max_open_files


@dataclass(slots=True)
class OpenFile:
    table: str
    hour: int
    part: int  # 0 for the first file of (table, hour) in a generation, then 1, 2, ...
    staged: str
    writer: pq.ParquetWriter
    rows: int = 0
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0
    first_offset: int | None = None  # push offsets of the rows it holds
    last_offset: int | None = None


class WorkerLanding:
    """One worker's files of the current generation (usable in-process, for tests)."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.staging = staging_dir(Path(config.root))
        self.files: dict[tuple[str, int], OpenFile] = {}  # least recently appended first
        self.closed: list[OpenFile] = []  # spilled to honour max_open_files, sealed with the rest
        self.parts: dict[tuple[str, int], int] = {}  # files started per key this generation
        self.generation = 0
        self.poisoned: str | None = None
        self._schemas = {METRICS_TABLE: metrics_schema(), PUSHES_TABLE: pushes_schema()}

    def batch(self, pushes: Sequence[LoggedPush]) -> BatchReport:
        table, stats, unlandable = flatten_to_table(pushes)
        report = BatchReport(stats=stats, rows=table.num_rows, raw_rows=0, unlandable=unlandable)
        spilled = len(self.closed)
        if table.num_rows:
            hours, report.skewed_times = metrics_partition_hours(table)
            for hour, part in split_by_hour(table, hours):
                self._append(METRICS_TABLE, hour, part)
        if self.config.raw:
            raw = pushes_table(pushes)
            report.raw_rows = raw.num_rows
            for hour, part in split_by_hour(raw, hours_of(raw.column("received_time"))):
                self._append(PUSHES_TABLE, hour, part)
        self._bound_memory()
        report.buffered_rows = sum(f.pending_rows for f in self.files.values())
        report.open_files = len(self.files)
        report.spilled_files = len(self.closed) - spilled
        return report

    def seal(self, first: int, last: int) -> list[PublishedFile]:
        """Close every open file as part of generation ``first..last``; fsync them."""
        if self.poisoned is not None:
            raise RuntimeError(f"worker refuses to seal after a failure: {self.poisoned}")
        sealed: list[PublishedFile] = []
        metadata = {
            "kip714.first_offset": str(first),
            "kip714.last_offset": str(last),
            "kip714.schema_version": SCHEMA_VERSION,
        }
        for key in sorted(self.files):
            open_file = self.files[key]
            self._write_pending(open_file)
            open_file.writer.add_key_value_metadata({**metadata, "kip714.table": open_file.table})
            open_file.writer.close()
        for open_file in [*self.closed, *(self.files[key] for key in sorted(self.files))]:
            path = self.staging / open_file.staged
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            epoch = f"e{self.config.epoch:06d}-" if self.config.epoch else ""
            suffix = f"-p{open_file.part}" if open_file.part else ""
            final = (
                f"{open_file.table}/{partition_name(open_file.hour)}/"
                f"part-{epoch}{first:020d}-{last:020d}-w{self.config.worker_id}{suffix}.parquet"
            )
            size = path.stat().st_size
            sealed.append(PublishedFile(open_file.staged, final, open_file.rows, size))
        if sealed:
            fsync_dir(self.staging)
        self.files.clear()
        self.closed.clear()
        self.parts.clear()
        self.generation += 1
        return sealed

    def abort(self) -> None:
        """Close and delete every staged file of the generation (shutdown without a seal)."""
        for open_file in [*self.files.values(), *self.closed]:
            with contextlib.suppress(Exception):
                open_file.writer.close()
            (self.staging / open_file.staged).unlink(missing_ok=True)
        self.files.clear()
        self.closed.clear()
        self.parts.clear()

    def _spill(self) -> None:
        """Close the least recently appended file to make room for another writer.

        Its metadata names the offsets of the rows it holds (the generation's
        range is not known before ``seal``); it is published with the rest.
        """
        key = next(iter(self.files))
        open_file = self.files.pop(key)
        self._write_pending(open_file)
        open_file.writer.add_key_value_metadata(
            {
                "kip714.first_offset": str(open_file.first_offset),
                "kip714.last_offset": str(open_file.last_offset),
                "kip714.schema_version": SCHEMA_VERSION,
                "kip714.table": open_file.table,
            }
        )
        open_file.writer.close()
        self.closed.append(open_file)

    def _append(self, table: str, hour: int, rows: pa.Table) -> None:
        key = (table, hour)
        open_file = self.files.pop(key, None)
        if open_file is None:
            if len(self.files) >= self.config.max_open_files:
                self._spill()
            part = self.parts.get(key, 0)
            self.parts[key] = part + 1
            staged = (
                f"{self.config.token}-g{self.generation:06d}-w{self.config.worker_id}"
                f"-{table}-{hour}-p{part}{STAGED_SUFFIX}"
            )
            writer = landing_writer(
                self.staging / staged, self._schemas[table], self.config.compression_level
            )
            open_file = OpenFile(table, hour, part, staged, writer)
        self.files[key] = open_file  # (re)inserted last: the most recently appended
        offsets = pc.min_max(rows.column("push_offset"))
        low, high = offsets["min"].as_py(), offsets["max"].as_py()
        open_file.first_offset = low if open_file.first_offset is None else open_file.first_offset
        open_file.last_offset = (
            high if open_file.last_offset is None else max(open_file.last_offset, high)
        )
        open_file.pending.append(rows)
        open_file.pending_rows += rows.num_rows
        if open_file.pending_rows >= self.config.row_group_rows:
            self._write_pending(open_file)

    def _bound_memory(self) -> None:
        # Many partitions at once (skewed client clocks) must not each hold a
        # row group's worth of rows: past twice one row group in total, the
        # biggest buffers are written out as smaller row groups.
        limit = 2 * self.config.row_group_rows
        buffered = sum(f.pending_rows for f in self.files.values())
        for open_file in sorted(self.files.values(), key=lambda f: -f.pending_rows):
            if buffered <= limit:
                break
            buffered -= open_file.pending_rows
            self._write_pending(open_file)

    def _write_pending(self, open_file: OpenFile) -> None:
        write_pending(open_file)


def write_pending(open_file: OpenFile) -> None:
    """Write the rows ``open_file`` buffers as one row group."""
    if not open_file.pending:
        return
    rows = pa.concat_tables(open_file.pending)
    open_file.writer.write_table(rows, row_group_size=max(rows.num_rows, 1))
    open_file.rows += rows.num_rows
    open_file.pending.clear()
    open_file.pending_rows = 0


def landing_writer(
    where: Any, schema: pa.Schema, compression_level: int | None
) -> pq.ParquetWriter:
    """A Parquet writer with the landing's encodings, for a path or a writable stream.

    zstd; byte-stream split for the measured values (``value``, ``sum``,
    ``min``, ``max``) and dictionaries for every other column except a raw
    ``payload``: byte-stream split and dictionaries exclude each other, and
    measured values rarely repeat while everything else does.
    """
    split = [c for c in _FLOAT_COLUMNS if c in schema.names]
    return pq.ParquetWriter(
        where,
        schema,
        compression="zstd",
        compression_level=compression_level,
        use_byte_stream_split=split or False,
        use_dictionary=[c for c in schema.names if c not in split and c != "payload"],
    )


def worker_main(conn: Connection, config: WorkerConfig) -> None:
    """Entry point of a worker process; serves requests until ``stop`` or EOF."""
    landing = WorkerLanding(config)

    def poison(reason: str) -> None:
        landing.poisoned = landing.poisoned or reason

    serve_requests(
        conn,
        {
            "batch": lambda m: ("done", landing.batch([LoggedPush(*f) for f in m[1]])),
            "seal": lambda m: ("sealed", landing.seal(m[1], m[2])),
        },
        poison,
        landing.abort,
    )


def serve_requests(
    conn: Connection,
    handlers: Mapping[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]],
    poison: Callable[[str], None],
    cleanup: Callable[[], None],
) -> None:
    """A worker process's loop: one reply per request, in order, until ``stop`` or EOF.

    A request that fails is answered ``("error", traceback)`` and poisons the
    worker: every later request but ``stop`` is refused, so work missing a
    batch is never sealed. ``cleanup`` runs on ``stop`` and when the parent
    is gone (EOF): unsealed work is discarded.
    """
    # The server handles SIGINT/SIGTERM and tells us when to stop; a Ctrl-C
    # sent to the whole process group must not kill us before the final seal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The system allocator hands freed batches back to the OS; mimalloc kept
    # about 40 MiB more resident here, for no measurable speed difference.
    pa.set_memory_pool(pa.system_memory_pool())
    poisoned: str | None = None
    try:
        while True:
            try:
                message: tuple[Any, ...] = conn.recv()
            except (EOFError, OSError):
                return  # the parent is gone
            kind = message[0]
            if kind == "stop":
                cleanup()
                conn.send(("stopped",))
                return
            try:
                if poisoned is not None:
                    raise RuntimeError(f"worker is poisoned: {poisoned}")
                if kind not in handlers:
                    raise ValueError(f"unknown request {kind!r}")
                reply = handlers[kind](message)
            except Exception:
                poisoned = poisoned or traceback.format_exc(limit=8)
                poison(poisoned)
                reply = ("error", poisoned)
            conn.send(reply)
    finally:
        cleanup()
        conn.close()
