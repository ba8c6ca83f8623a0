"""The ingest log: durable, group-committed appends and per-consumer positions.

A push is acknowledged when ``append`` returns, and ``append`` returns only
after the record is fsynced. Appends that arrive while a write is in flight
form the next group, so under load one fsync serves hundreds of pushes; under
light load a push waits for one fsync and no timer. The blocking write and
fsync run on a dedicated thread, so the event loop never waits on the disk.

Threads: the event loop owns all mutable state; the writer thread touches only
the active segment's descriptor (``SegmentWriter``); readers run in any
thread and see the segment list through ``_lock``.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from durable.fs import fsync_dir
from telemetry.ingest.config import LogConfig
from telemetry.ingest.decoded_backlog import DecodedBacklog
from telemetry.ingest.errors import (
    LogClosedError,
    LogCorruptionError,
    LogFailedError,
    LogFullError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from telemetry.ingest.positions import ConsumerPositions
from telemetry.ingest.reader import Position, read_records
from telemetry.ingest.record import encode_frame
from telemetry.ingest.recovery import recover
from telemetry.ingest.stats import LogStats
from telemetry.ingest.writer import SegmentState, SegmentWriter
from telemetry.ingest.writer_thread import WriterThread

if TYPE_CHECKING:
    from exporters.api import LoggedPush
    from telemetry.ingest.record import PushContext
    from telemetry.ingest.recovery import Recovered
    from telemetry.ingest.writer_thread import GroupWrite

logger = logging.getLogger(__name__)

_MIB = 1024 * 1024
_HINTS = 1024


class IngestLog:
    """An append-only, segmented, checksummed log of accepted pushes.

    Create it with ``await IngestLog.open(directory)``; it runs on the event
    loop it was opened on.
    """

    def __init__(self, directory: Path, config: LogConfig, state: Recovered) -> None:
        self._directory = directory
        self._config = config
        self._log_id = state.log_id
        self._max_frame = min(config.max_record_bytes, config.max_bytes - config.segment_bytes)
        self.stats = LogStats(recovery_truncated_bytes=state.truncated_bytes)
        self._lock = threading.Lock()
        self._segments = list(state.segments)
        self._bases = [s.base for s in self._segments]
        self._retained = sum(s.size for s in self._segments)
        self._durable_end = state.next_offset
        self._next_offset = state.next_offset
        self._hints: collections.OrderedDict[int, Position] = collections.OrderedDict()
        self._positions = ConsumerPositions(directory, state.positions)
        self._reported: set[tuple[Path, int]] = set()
        last = self._segments[-1]
        self._writer = SegmentWriter(
            directory, last.base, last.size, config.segment_bytes, self.stats
        )
        self._group_thread = WriterThread(self._writer.write_group, "ingest-log-writer")
        self._pending_parts: list[bytes] = []
        self._pending_lengths: list[int] = []
        self._pending_futures: list[asyncio.Future[None]] = []
        self._pending_bytes = 0
        self._wakeup = asyncio.Event()
        #: The writer waits for ``_wakeup``: only then does an append need to set it.
        self._writer_idle = False
        self._new_data = asyncio.Event()
        self._failure: BaseException | None = None
        self._closing = False
        self._closed = asyncio.Event()
        self._close_task: asyncio.Future[None] | None = None
        self._refused_length = 0
        self._decoded = DecodedBacklog()  # [log] max_pending_decoded_bytes
        # Kept: asyncio.get_running_loop() costs a getpid() system call on Python 3.11,
        # and every append makes a future.
        self._loop = asyncio.get_running_loop()
        self._writer_task = self._loop.create_task(
            self._write_loop(), name=f"ingest-log-writer:{directory}"
        )

    @classmethod
    async def open(
        cls, directory: str | os.PathLike[str], config: LogConfig | None = None
    ) -> IngestLog:
        """Open (creating if needed) and recover the log in ``directory``.

        Recovery truncates a torn or corrupt tail of the last segment (logged
        as a warning with the byte position and the reason) and deletes
        segments every known consumer has passed.

        Raises:
            ValueError: The consumer positions file or the log id is unreadable.
            OSError: The directory cannot be read or written.
        """
        path = Path(directory)
        state = await asyncio.to_thread(recover, path)
        log = cls(path, config or LogConfig(), state)
        try:
            await log._retain()
        except BaseException:
            await log.close()
            raise
        return log

    # -- appending -----------------------------------------------------------

    async def append(
        self,
        context: PushContext,
        payload: bytes,
        compression: int = 0,
        decompressed_size: int = -1,
    ) -> int:
        """Append one push; return its offset once it is durable on disk.

        See :meth:`append_nowait` for the arguments and what can be raised.
        """
        offset, durable = self.append_nowait(context, payload, compression, decompressed_size)
        await durable
        return offset

    def append_nowait(
        self,
        context: PushContext,
        payload: bytes,
        compression: int = 0,
        decompressed_size: int = -1,
    ) -> tuple[int, asyncio.Future[None]]:
        """Queue one push; return its offset and a future done once it is durable.

        ``payload`` is logged as given: compressed with ``compression`` (a
        Kafka ``CompressionType`` id, 0 for none) into ``decompressed_size``
        bytes, which the caller has checked (-1: uncompressed, its length).
        Readers get it decompressed. The record limit applies to the record
        as readers get it, so a push is refused for the same size whether it
        came compressed or not.

        For callers that finish their work in a callback rather than a task
        (the Kafka listener, where a task per push is measurable). The future
        fails with ``LogFailedError`` if the write or fsync fails.

        Cancelling the caller does not withdraw the record: it may still be
        written, unacknowledged, and a retrying client then gets it logged
        twice (at least once, like a Kafka producer retry).

        Raises:
            LogFullError: The disk budget has no room; nothing was written.
            RecordTooLargeError: The record exceeds ``max_record_bytes``.
            LogClosedError: The log is closed or closing.
            LogFailedError: An earlier write or fsync failed.
            ValueError: A context field does not fit the record format.
        """
        if self._failure is not None:
            raise LogFailedError(f"ingest log failed earlier: {self._failure}") from self._failure
        if self._closing:
            raise LogClosedError("ingest log is closed")
        size = len(payload) if decompressed_size < 0 else decompressed_size
        if size > self._max_frame or len(payload) > self._max_frame:
            # Refused before encode_frame checksums every byte of it on the loop.
            raise RecordTooLargeError(
                f"payload of {max(size, len(payload))} bytes exceeds {self._max_frame}"
            )
        offset = self._next_offset
        head, length = encode_frame(offset, context, payload, compression, decompressed_size)
        decoded = length - len(payload) + size  # the record as readers get it
        if length > self._max_frame or decoded > self._max_frame:
            raise RecordTooLargeError(
                f"record of {max(length, decoded)} bytes exceeds {self._max_frame}"
            )
        if self._retained + self._pending_bytes + length > self._config.max_bytes:
            raise self._refuse(length)
        pending_decoded = self._decoded.pending
        if pending_decoded + size > self._config.max_pending_decoded_bytes:
            raise self._refuse_decoded(pending_decoded, size)
        if self.stats.full:
            self.stats.full = False
            logger.info("ingest log has room again; accepting pushes")
        self._next_offset = offset + 1
        future: asyncio.Future[None] = self._loop.create_future()
        self._pending_parts += (head, payload)
        self._pending_lengths.append(length)
        self._pending_futures.append(future)
        self._pending_bytes += length
        self._decoded.add(offset, size)
        self.stats.pending_decoded_bytes = self._decoded.pending
        if self._writer_idle:
            self._wakeup.set()  # a writer busy with a group takes this one next, unwoken
        return offset, future

    def _refuse(self, length: int) -> LogFullError:
        slowest = self._positions.slowest()
        behind = (
            "no consumer is registered, so nothing can be deleted"
            if slowest is None
            else f"slowest consumer {slowest[0]!r} is at offset {slowest[1]} of {self._durable_end}"
        )
        reason = (
            f"ingest log disk budget exhausted: {self._retained + self._pending_bytes} of "
            f"{self._config.max_bytes} bytes in use, {length} more needed; {behind}"
        )
        self.stats.refused_full += 1
        self.stats.last_refusal_reason = reason
        self._refused_length = length
        if not self.stats.full:
            self.stats.full = True
            logger.warning("%s; refusing pushes with THROTTLING_QUOTA_EXCEEDED", reason)
        return LogFullError(self._config.full_throttle_ms, reason)

    def _refuse_decoded(self, pending: int, size: int) -> LogFullError:
        """A push refused for ``max_pending_decoded_bytes``, answered as a full log."""
        slowest = self._positions.slowest()
        behind = (
            "no consumer is registered"
            if slowest is None
            else f"slowest consumer {slowest[0]!r} is at offset {slowest[1]} of {self._durable_end}"
        )
        reason = (
            f"ingest log max_pending_decoded_bytes reached: {pending} decoded bytes not yet "
            f"consumed of {self._config.max_pending_decoded_bytes}, {size} more needed; {behind}"
        )
        self.stats.refused_full += 1
        self.stats.refused_pending_decoded += 1
        self.stats.last_refusal_reason = reason
        if not self.stats.full:
            self.stats.full = True
            logger.warning("%s; refusing pushes with THROTTLING_QUOTA_EXCEEDED", reason)
        return LogFullError(self._config.full_throttle_ms, reason, "max_pending_decoded_bytes")

    def _pass_decoded(self) -> None:
        """Drop the decoded sizes of records every consumer has passed from the pending budget."""
        low = self._positions.minimum()
        if low is None:
            return
        self._decoded.passed_below(low)
        self.stats.pending_decoded_bytes = self._decoded.pending

    async def _write_loop(self) -> None:
        """Write whatever is queued, group by group, until closed with nothing queued.

        The loop only sleeps when nothing is queued, so appends queued while a
        group was being written (or before ``close``) are never left behind.
        """
        try:
            while True:
                if not self._pending_futures:
                    if self._closing:
                        return
                    self._writer_idle = True
                    try:
                        await self._wakeup.wait()
                    finally:
                        self._writer_idle = False
                    self._wakeup.clear()
                    continue
                # One loop step first: the appends of the requests that step
                # serves join this group, not the next one (a group's sync
                # costs about the same whatever its size).
                await asyncio.sleep(0)
                parts, lengths, futures = (
                    self._pending_parts,
                    self._pending_lengths,
                    self._pending_futures,
                )
                self._pending_parts, self._pending_lengths, self._pending_futures = [], [], []
                await self._commit_group(parts, lengths, futures)
        except asyncio.CancelledError:
            self._closing = True
            self._fail_queued(LogClosedError("ingest log writer was cancelled"))
            raise

    async def _commit_group(
        self, parts: list[bytes], lengths: list[int], futures: list[asyncio.Future[None]]
    ) -> None:
        """Write one group; raise a cancellation met only once it is published and answered.

        A cancellation must not leave a ``writev`` running on a descriptor
        that ``close`` is about to release, nor durable records whose
        appenders never hear back.
        """
        first = self._durable_end
        size = sum(lengths)
        if self._failure is not None:
            self._finish_group(None, first, size, futures)
            return
        write = self._group_thread.submit(
            self._loop,
            parts,
            lengths,
            first,
            lambda done: self._finish_group(done, first, size, futures),
        )
        cancelled = await write.finished()
        if cancelled is not None:
            raise cancelled

    def _finish_group(
        self,
        write: GroupWrite | None,
        first: int,
        size: int,
        futures: list[asyncio.Future[None]],
    ) -> None:
        """Publish a written group and answer its appenders (``write`` None: not written).

        Called in the thread's report itself, a loop step before the writer
        task resumes: the appenders hear back one step sooner.
        """
        if write is not None:
            if write.error is not None:  # any failure leaves the file state unknown
                error = write.error
                logger.error("ingest log write failed; refusing appends until reopened: %s", error)
                logger.debug("ingest log write failure", exc_info=error)
                self._failure = error
                self._wake_readers()
            else:
                self._publish(write.touched, first + len(futures))
        self._pending_bytes -= size
        if self._failure is not None:
            failed = LogFailedError(f"ingest log write failed: {self._failure}")
            for future in futures:
                if not future.done():
                    future.set_exception(failed)
            return
        self.stats.appends += len(futures)
        self.stats.appended_bytes += size
        self.stats.group_commits += 1
        self.stats.largest_group = max(self.stats.largest_group, len(futures))
        for future in futures:
            if not future.done():
                future.set_result(None)

    def _fail_queued(self, error: Exception) -> None:
        futures, self._pending_futures = self._pending_futures, []
        self._pending_parts, self._pending_lengths = [], []
        self._pending_bytes = 0
        for future in futures:
            if not future.done():
                future.set_exception(error)

    def _publish(self, touched: list[SegmentState], durable_end: int) -> None:
        """Make a synced group visible to readers and to the budget, atomically."""
        with self._lock:
            for state in touched:
                if state.base == self._segments[-1].base:
                    self._retained += state.size - self._segments[-1].size
                    self._segments[-1] = state
                else:
                    self._retained += state.size
                    self._segments.append(state)
                    self._bases.append(state.base)
            self._durable_end = durable_end
        self._wake_readers()

    def _wake_readers(self) -> None:
        event, self._new_data = self._new_data, asyncio.Event()
        event.set()

    # -- reading -------------------------------------------------------------

    @property
    def log_start(self) -> int:
        """The lowest offset still retained (the first segment's base)."""
        return self._bases[0]

    @property
    def log_end(self) -> int:
        """One past the last durable offset: the offset the next record gets."""
        return self._durable_end

    @property
    def retained_bytes(self) -> int:
        return self._retained

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def log_id(self) -> str:
        """This log's id: a UUID created with the directory, the same after every reopen.

        Offsets are unique only within one log; a consumer that keeps offsets
        elsewhere compares this id to notice a log that was deleted or replaced.
        """
        return self._log_id

    @property
    def failure(self) -> str | None:
        """Why appends are refused for good (a failed write or fsync), else ``None``."""
        return None if self._failure is None else f"{type(self._failure).__name__}: {self._failure}"

    @property
    def full(self) -> bool:
        """True while the disk budget has no room for the last record it refused.

        Unlike ``stats.full`` (which changes on the next append), this clears
        as soon as retention frees the room, so readiness does not keep
        clients away from a log that could take their pushes again.
        """
        if not self.stats.full:
            return False
        needed = self._retained + self._pending_bytes + self._refused_length
        return needed > self._config.max_bytes

    def read(
        self, from_offset: int, max_records: int = 1000, max_bytes: int = 4 * _MIB
    ) -> list[LoggedPush]:
        """Durable records from ``from_offset`` on, in offset order (blocking).

        Call it from a thread (``asyncio.to_thread``). Returns an empty list at
        the durable end; offsets of consecutive records are consecutive except
        across a gap left by recovery after data loss.

        Raises:
            OffsetOutOfRangeError: ``from_offset`` is below the log start
                (retention deleted it) or past the durable end.
            LogCorruptionError: A stored record fails its checks; the reader
                cannot get past it (see the exception for the way out).
        """
        with self._lock:
            end = self._durable_end
            if from_offset < self._bases[0] or from_offset > end:
                raise OffsetOutOfRangeError(from_offset, self._bases[0], end)
            if from_offset == end or max_records <= 0:
                return []
            first = bisect.bisect_right(self._bases, from_offset) - 1
            segments = self._segments[first:]
            hint = self._hints.get(from_offset)
        try:
            records, stop = read_records(segments, from_offset, hint, max_records, max_bytes)
        except FileNotFoundError:
            raise OffsetOutOfRangeError(from_offset, self.log_start, self.log_end) from None
        except LogCorruptionError as exc:
            with self._lock:  # readers may run on several threads
                self.stats.corrupt_reads += 1
                first_report = (exc.path, exc.position) not in self._reported
                self._reported.add((exc.path, exc.position))
            if first_report:
                logger.error(
                    "ingest log corruption below the durable end, readers stop here: %s; "
                    "next readable offset: %s",
                    exc,
                    exc.next_readable_offset,
                )
            raise
        if stop is not None:
            with self._lock:
                self._hints[stop.offset] = stop
                self._hints.move_to_end(stop.offset)
                if len(self._hints) > _HINTS:
                    self._hints.popitem(last=False)
        return records

    async def wait_for(self, offset: int) -> None:
        """Return once a record at or after ``offset`` is durable.

        Wrap it in ``asyncio.timeout`` to bound a consumer's linger time.

        Raises:
            LogClosedError: The log closed before that.
            LogFailedError: A write failed, so nothing more will arrive.
        """
        while self._durable_end <= offset:
            if self._closing:
                raise LogClosedError("ingest log is closed")
            if self._failure is not None:
                raise LogFailedError(f"ingest log failed: {self._failure}")
            await self._new_data.wait()

    # -- consumers -----------------------------------------------------------

    def consumers(self) -> dict[str, int]:
        """Every registered consumer and its committed position."""
        return self._positions.snapshot()

    def committed(self, consumer: str) -> int:
        """The next offset ``consumer`` will read. Raises ``KeyError`` if unknown."""
        return self._positions.get(consumer)

    async def register(self, consumer: str) -> int:
        """Make ``consumer`` hold back retention; return its committed position.

        A new consumer starts at the log start: it sees every push still
        retained, rather than only those that arrive after it was configured.
        """
        if consumer not in self._positions:
            await self.commit(consumer, self.log_start)
        return self._positions.get(consumer)

    async def unregister(self, consumer: str) -> None:
        """Forget ``consumer`` (an exporter removed from the configuration).

        Its position stops holding back retention; without this, a removed
        exporter would eventually fill the disk budget.
        """
        if await self._positions.remove(consumer):
            await self._retain()

    async def commit(self, consumer: str, next_offset: int) -> None:
        """Durably record that ``consumer`` has handled everything before ``next_offset``.

        Registers ``consumer`` if it is new. Returns after the position is on
        disk, then deletes the segments that every consumer has passed.

        Raises:
            OffsetOutOfRangeError: ``next_offset`` is below the log start or
                past the durable end.
            LogClosedError: The log is closed.
        """
        if self._closed.is_set():
            raise LogClosedError("ingest log is closed")

        def check() -> None:
            if not self.log_start <= next_offset <= self._durable_end:
                raise OffsetOutOfRangeError(next_offset, self.log_start, self._durable_end)

        await self._positions.set(consumer, next_offset, check)
        await self._retain()

    async def _retain(self) -> None:
        """Delete segments that lie entirely below every consumer's position.

        With no consumer registered nothing is deleted: data nobody has read
        yet is kept until the budget refuses new pushes.
        """
        self._pass_decoded()
        low = self._positions.minimum()
        if low is None:
            return
        with self._lock:
            # Segment i is passed when the next one starts at or below ``low``;
            # the active (last) segment is never deleted.
            doomed = bisect.bisect_right(self._bases, low, 1, len(self._bases)) - 1
            if doomed <= 0:
                return
            gone = self._segments[:doomed]
            del self._segments[:doomed]
            del self._bases[:doomed]
            self._retained -= sum(s.size for s in gone)
        await asyncio.to_thread(self._delete, [s.path for s in gone])
        self.stats.segments_deleted += len(gone)

    def _delete(self, paths: list[Path]) -> None:
        for path in paths:  # oldest first, so a crash midway leaves a contiguous log
            path.unlink(missing_ok=True)
        fsync_dir(self._directory)

    # -- lifecycle -----------------------------------------------------------

    async def close(self) -> None:
        """Finish queued appends, then release the log. Idempotent.

        Appends already accepted are written and acknowledged; later ones
        raise ``LogClosedError``, and so do waiters in ``wait_for``. A
        cancelled caller does not stop the close half-way: it goes on in its
        own task (every step is bounded by one group's write), and the next
        ``close`` call awaits the same task.
        """
        if self._close_task is None:
            self._closing = True
            self._wakeup.set()
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        try:
            with contextlib.suppress(asyncio.CancelledError):
                # CancelledError here is the writer's: queued appends were failed.
                await asyncio.shield(self._writer_task)
        finally:
            # The lock waits out a positions save in flight; the writer thread is idle.
            async with self._positions.lock:
                self._group_thread.stop()
                self._writer.close()
            self._new_data.set()
            self._closed.set()
