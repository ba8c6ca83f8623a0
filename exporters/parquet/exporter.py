"""``ParquetExporter``: the Parquet landing, exactly once, flattened in worker processes.

How exactly-once works with the host (``exporters.api.BufferingExporter``):
``export`` hands each batch to a worker and returns; rows gather in staged
files of the current *generation* (a contiguous run of log offsets). A
generation is sealed and published (``publish.py``) when it holds
``max_rows_per_file`` rows per worker, ``max_pending_bytes`` of payloads,
or is ``max_file_age_s`` old, and on ``flush``. ``durable_offset`` is the
first offset of the oldest unpublished generation, so the host never commits
past data that is not in a published file; after a restart the host replays
from its committed position and ``export`` skips every offset below the one
the newest manifest covers. Hence each push lands once, even after SIGKILL
between publishing a generation and the host's commit.

A worker that dies or fails, or a publication that fails, stops the landing
(fail-stop, as the ingest log does after a failed fsync): the generation in
progress is not published, every later ``export`` raises
``TransientExportError``, ``failure`` says why, and a restart resumes from
the last manifest. Nothing is lost or duplicated; the log keeps the data
until then.

Cancellation (a shutdown whose drain timed out) is safe at every await: a
seal that is cancelled *abandons* its generation (the workers' replies are
no longer awaited, so what they staged can never be named by a manifest);
``durable_offset`` then stays at the generation's first offset for good and
the landing refuses further work, so the host never commits past it and the
next start replays the generation. A publication already under way is
finished first (it is a few renames and fsyncs), so a manifest is either
written and accounted for, or not written at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import logging
import operator
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, final

from durable.cancellation import run_to_completion
from durable.fs import make_dirs
from exporters.api import LoggedPush, TransientExportError
from exporters.generations import GenerationLanding, age_timer, free_worker
from exporters.options import bool_option, check_keys, int_option, number_option, path_option
from exporters.otlp_rows import FlattenStats
from exporters.parquet import publish as publishing
from exporters.parquet.log_epoch import LogEpoch, open_landing
from exporters.parquet.pool import WorkerFailedError, WorkerHandle
from exporters.parquet.retention import landing_retention
from exporters.parquet.worker import MAX_OPEN_FILES, BatchReport, WorkerConfig
from exporters.retention import PeriodicRetention, RetentionStats

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exporters.parquet.publish import PublishedFile

__all__ = ["DEFAULTS", "ParquetExporter", "ParquetStats"]

_log = logging.getLogger(__name__)

DEFAULTS: Final[Mapping[str, Any]] = {
    "max_rows_per_file": 2_000_000,
    "max_file_age_s": 5.0,
    "workers": max(1, (os.cpu_count() or 2) - 1),
    "raw": False,
    "compression_level": None,
    "row_group_rows": 131_072,
    "max_pending_bytes": 256 * 1024 * 1024,
    "new_log_epoch": False,
    "retention_hours": None,
}
_OPTIONS: Final = frozenset({"path", *DEFAULTS})
#: Batches queued per worker beyond the one it is flattening; bounds memory.
IN_FLIGHT_PER_WORKER: Final = 2


@dataclass(slots=True)
class ParquetStats(FlattenStats):
    """Running totals: the flattening counters (``FlattenStats``) plus the landing's own.

    ``data_points`` counts rows flattened; ``rows_landed`` the rows in
    published files, which trails it by the unpublished generation.
    """

    rows_landed: int = 0
    raw_rows_landed: int = 0
    files_published: int = 0
    bytes_published: int = 0
    generations_published: int = 0
    unlandable_pushes: int = 0
    replayed_pushes_skipped: int = 0
    recovered_files: int = 0
    discarded_staged_files: int = 0
    missing_files: int = 0
    failures: int = 0
    durable_offset: int = 0
    pending_rows: int = 0
    skewed_times: int = 0
    spilled_files: int = 0


@final
class ParquetExporter(GenerationLanding):
    """Lands every data point in Hive-partitioned, zstd Parquet under ``<path>/metrics/``.

    Raises (at construction):
        TypeError: An unknown option, or ``path`` missing.
        ValueError: An option with an invalid value.
    """

    stats: ParquetStats

    def __init__(self, config: Mapping[str, Any], /) -> None:
        check_keys(config, _OPTIONS, "parquet")
        options = {**DEFAULTS, **config}
        self.root = Path(path_option(config, "directory path"))
        self.max_rows_per_file = int_option(options, "max_rows_per_file", 1)
        self.max_file_age_s = number_option(options, "max_file_age_s", 0.01)
        self.workers = int_option(options, "workers", 1, 64)
        self.row_group_rows = int_option(options, "row_group_rows", 1)
        self.max_pending_bytes = int_option(options, "max_pending_bytes", 1)
        self.raw = bool_option(options, "raw")
        self.new_log_epoch = bool_option(options, "new_log_epoch")
        level = options["compression_level"]
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            raise ValueError(f"option 'compression_level' must be an integer 1..22: {level!r}")
        if level is not None and not 1 <= level <= 22:
            raise ValueError(f"option 'compression_level' must be an integer 1..22: {level!r}")
        self.compression_level: int | None = level
        retention = options["retention_hours"]
        self.retention_hours = (
            None if retention is None else int_option(options, "retention_hours", 1)
        )
        self._retention: PeriodicRetention | None = None
        self.stats = ParquetStats()
        """Running counters for the server's metrics; see ``ParquetStats``."""
        self._handles: list[WorkerHandle] = []
        self._log_id: str | None = None  # the feeding ingest log, from bind_log
        self._epoch = LogEpoch(None, 0, 0)
        self._lock_file: IO[bytes] | None = None
        self._init_generations()
        self._abandoned: str | None = None  # a generation given up by cancellation
        self._durable = 0  # every offset below is published (or had nothing to land)
        self._next = 0  # offsets below were published before this start, or exported since
        self._gen_first: int | None = None
        self._gen_last = 0
        self._gen_started = 0.0
        self._gen_bytes = 0
        self._gen_rows = 0
        self._gen_open_files = 0
        self._gen_batches: list[asyncio.Future[Any]] = []
        self._round_robin = 0

    # -- the Exporter contract ----------------------------------------------------------------

    def bind_log(self, log_id: str, /) -> None:
        """The id of the ingest log feeding the landing (``LogBoundExporter``, ``log_epoch``)."""
        self._log_id = log_id

    async def start(self) -> None:
        """Lock the landing, recover it, start the workers and the age timer."""
        if self._closed:
            raise RuntimeError("parquet exporter is closed")
        if self._started:
            return
        self._lock_file = await asyncio.to_thread(_lock, self.root)
        try:
            recovery, self._epoch = await asyncio.to_thread(
                open_landing, self.root, self._log_id, new_epoch=self.new_log_epoch
            )
            self._durable = self._next = self._epoch.durable_offset
            self.stats.durable_offset = self._durable
            self.stats.recovered_files += recovery.rolled_forward
            self.stats.discarded_staged_files += recovery.discarded
            self.stats.missing_files += recovery.missing
            if recovery.rolled_forward or recovery.discarded or recovery.missing:
                _log.warning(
                    "parquet landing %s recovered: %d file(s) published, %d staged file(s) "
                    "of unfinished generations discarded, %d missing; resuming at offset %d",
                    self.root,
                    recovery.rolled_forward,
                    recovery.discarded,
                    recovery.missing,
                    self._durable,
                )
            token = uuid.uuid4().hex[:12]
            loop = asyncio.get_running_loop()
            for index in range(self.workers):
                handle = WorkerHandle(
                    WorkerConfig(
                        root=str(self.root),
                        worker_id=index,
                        token=token,
                        raw=self.raw,
                        compression_level=self.compression_level,
                        row_group_rows=self.row_group_rows,
                        epoch=self._epoch.epoch,
                    )
                )
                self._handles.append(handle)
                await asyncio.to_thread(handle.start)
                handle.attach(loop)
        except BaseException:
            await self._shutdown_workers()
            await asyncio.to_thread(_unlock, self._lock_file)
            self._lock_file = None
            raise
        self._started = True
        self._timer = asyncio.create_task(self._age_timer(), name=f"parquet-age-{self.root}")
        if self.retention_hours is not None:
            self._retention = landing_retention(self.root, self.retention_hours, self._gen_lock)
            self._retention.start()

    @property
    def retention_stats(self) -> RetentionStats | None:
        """Partitions and bytes ``retention_hours`` deleted; ``None`` when retention is off."""
        return self._retention.stats if self._retention is not None else None

    def durable_offset(self) -> int:
        """The first offset not yet in a published file (see the module docstring)."""
        if self._gen_first is not None:
            return self._gen_first
        return max(self._durable, self._next)

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        """Queue ``batch`` for a worker; wait only while the workers are saturated.

        Raises:
            TransientExportError: The landing has failed (see the module
                docstring) and needs a restart; nothing of the batch is kept.
        """
        if not self._started or self._closed:
            raise RuntimeError("parquet exporter used before start() or after close()")
        self._raise_if_failed()
        start = self._skip_replayed(batch, self._next)
        if start == len(batch):
            return
        pushes = tuple(batch[start:])
        async with self._gen_lock:
            self._raise_if_failed()
            handle = await self._free_worker()
            self._raise_if_failed()
            if self._gen_first is None:
                self._gen_first = pushes[0].offset
                self._gen_started = time.monotonic()
            future = handle.request(("batch", [_as_tuple(p) for p in pushes]))
            future.add_done_callback(self._on_batch)
            self._gen_batches.append(future)
            self._gen_last = pushes[-1].offset
            self._next = self._gen_last + 1
            self._gen_bytes += sum(len(p.payload) for p in pushes)
            if self._should_roll():
                await self._roll()

    def _where(self) -> str:
        return f"parquet landing {self.root}"

    async def _before_close(self) -> None:
        if self._retention is not None:
            await self._retention.stop()  # a pass in progress finishes first

    def _may_seal_on_close(self) -> bool:
        # A generation abandoned by a cancelled seal is replayed at the next start.
        return self._failure is None and self._abandoned is None

    async def _release(self) -> None:
        await self._shutdown_workers()
        if self._lock_file is not None:
            await asyncio.to_thread(_unlock, self._lock_file)
            self._lock_file = None

    async def _seal(self) -> None:
        await self._roll()

    # -- generations ---------------------------------------------------------------------------

    def _should_roll(self) -> bool:
        return (
            self._gen_rows >= self.max_rows_per_file * self.workers
            or self._gen_bytes >= self.max_pending_bytes
            or self._gen_open_files >= MAX_OPEN_FILES
        )

    async def _free_worker(self) -> WorkerHandle:
        """The next worker in turn with room for a batch (round robin keeps them even)."""
        index, self._round_robin = await free_worker(
            self._handles,
            self._round_robin,
            IN_FLIGHT_PER_WORKER,
            lambda: self._gen_batches,
            self._raise_if_failed,
        )
        return self._handles[index]

    def _on_batch(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            self._fail(str(error))
            return
        report: BatchReport = future.result()[1]
        self.stats.merge(report.stats)
        self._gen_rows += report.rows
        self._gen_open_files = max(self._gen_open_files, report.open_files)
        self.stats.skewed_times += report.skewed_times
        self.stats.spilled_files += report.spilled_files
        self.stats.pending_rows = self._gen_rows
        if report.unlandable:
            self.stats.unlandable_pushes += len(report.unlandable)
            _log.error(
                "parquet landing could not convert %d push(es), offsets %s",
                len(report.unlandable),
                report.unlandable[:20],
            )
        if report.stats.undecodable_payloads:
            _log.warning(
                "parquet landing skipped %d undecodable OTLP payload(s) at offsets %s",
                report.stats.undecodable_payloads,
                report.stats.undecodable_offsets[:20],
            )

    async def _roll(self) -> None:
        """Seal the current generation on every worker and publish it (``_gen_lock`` held)."""
        if self._gen_first is None:
            return
        first, last = self._gen_first, self._gen_last
        try:
            seals = [h.request(("seal", first, last)) for h in self._handles]
            # Every batch of the generation must have landed in the staged
            # files, or the generation is not published at all.
            outcomes = await asyncio.gather(*self._gen_batches, *seals, return_exceptions=True)
        except asyncio.CancelledError:
            self._abandon(first, last)
            raise
        try:
            for outcome in outcomes:
                if isinstance(outcome, asyncio.CancelledError):
                    # Only a cancelled seal cancels these: never publish without them.
                    self._abandon(first, last)
                    raise TransientExportError(self._abandoned)
                if isinstance(outcome, BaseException):
                    raise outcome
        except (WorkerFailedError, OSError, ValueError) as error:
            self._fail(f"publishing offsets {first}..{last} failed: {error}")
            raise TransientExportError(self._failure) from error
        replies: list[Any] = list(outcomes[len(self._gen_batches) :])
        files: list[PublishedFile] = [f for reply in replies for f in reply[1]]
        await run_to_completion(self._publish(first, last, files))

    async def _publish(self, first: int, last: int, files: list[PublishedFile]) -> None:
        """Publish a sealed generation and account for it: one step, never cut by a cancel."""
        try:
            if files:
                manifest = publishing.Manifest(
                    first, last, tuple(files), self._epoch.log_id, self._epoch.epoch
                )
                await asyncio.to_thread(publishing.publish, self.root, manifest)
        except (OSError, ValueError) as error:
            self._fail(f"publishing offsets {first}..{last} failed: {error}")
            raise TransientExportError(self._failure) from error
        stats = self.stats
        for file in files:
            if file.final.startswith("metrics/"):
                stats.rows_landed += file.rows
            else:
                stats.raw_rows_landed += file.rows
            stats.bytes_published += file.size
        stats.files_published += len(files)
        stats.generations_published += 1 if files else 0
        self._durable = last + 1
        stats.durable_offset = self._durable
        self._gen_first = None
        self._gen_batches = []
        self._gen_rows = self._gen_bytes = self._gen_open_files = 0
        stats.pending_rows = 0

    def _abandon(self, first: int, last: int) -> None:
        """Give up the generation ``first..last`` for this run: its seal was cancelled.

        The workers may still finish sealing, but their replies are no longer
        awaited, so no manifest ever names those staged files (recovery
        deletes them). ``durable_offset`` stays at ``first`` and the landing
        takes no more work, so nothing after ``first`` is committed either.
        """
        if self._abandoned is None:
            self._abandoned = (
                f"parquet landing {self.root}: sealing offsets {first}..{last} was cancelled; "
                f"they are landed after the next start (from offset {first})"
            )
            _log.warning("%s", self._abandoned)

    async def _age_timer(self) -> None:
        """Publish a generation once it is ``max_file_age_s`` old, however quiet the traffic."""
        await age_timer(
            self.max_file_age_s,
            lambda: (
                None
                if self._gen_first is None or self._failure is not None or self._abandoned
                else self._gen_started
            ),
            self._gen_lock,
            self._roll,
            lambda: self._closed or self._abandoned is not None,
        )

    # -- failure -------------------------------------------------------------------------------

    def _raise_if_failed(self) -> None:
        super()._raise_if_failed()
        if self._abandoned is not None:
            raise TransientExportError(self._abandoned)

    async def _shutdown_workers(self) -> None:
        handles, self._handles = self._handles, []
        await asyncio.gather(*(h.stop() for h in handles), return_exceptions=True)


#: Pushes cross the pipe as plain tuples: pickling a tuple costs a fifth of a
#: dataclass, and the pickling holds the server's GIL.
_as_tuple: Final = operator.attrgetter(*(f.name for f in dataclasses.fields(LoggedPush)))


def _lock(root: Path) -> IO[bytes]:
    """One exporter per landing root: two would publish overlapping file names."""
    make_dirs(root / publishing.LANDING_DIR)
    file = (root / publishing.LANDING_DIR / "lock").open("ab")
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        file.close()
        raise RuntimeError(
            f"the parquet landing {root} is in use by another exporter or process"
        ) from error
    return file


def _unlock(file: IO[bytes] | None) -> None:
    if file is not None:
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)
        file.close()
