"""Hour-partition retention: delete ``<table>/date=YYYY-MM-DD/hour=HH/`` once it is too old.

The server prunes the Spark rollups with it (``[rollups] retention_hours``):
the Hive-partitioned rollups under ``<data_dir>/rollups/`` directly, and the
lake's Iceberg rollup tables through ``PeriodicRetention`` (the schedule; the
deletion is an Iceberg operation, ``telemetry.server.lake_rollup_pass``). It lives
beside the lake's maintenance because ``telemetry`` may import ``exporters``
and not the other way round. Standard library only.

Which partitions go is a pure decision (``expired_partitions``: an hour
expires once all of it lies more than ``retention_hours`` before ``now_ms``),
so it is tested without a clock. Deleting is made atomic for readers: the
hour directory is first *renamed* into ``<table>/.trash/`` (a name starting
with ``.``, which Spark, Hive and pyarrow dataset discovery skip), the
renaming made durable by fsyncing both parents, and only then are its files
removed. A listing therefore shows a partition whole or not at all, never
half its files. A crash between the rename and the removal leaves the
partition in the trash, emptied on the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar, final

from durable.fs import fsync_dir

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Set

__all__ = [
    "HOUR_MS",
    "RETENTION_INTERVAL_S",
    "RETRY_S",
    "TRASH_DIR",
    "DeletedPartition",
    "HourPartition",
    "PeriodicRetention",
    "RetentionStats",
    "delete_partition",
    "expired_partitions",
    "list_partitions",
    "prune",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

HOUR_MS: Final = 3_600_000
TRASH_DIR: Final = ".trash"
#: How often a running server looks for expired hours (retention is counted in hours).
RETENTION_INTERVAL_S: Final = 600.0
#: The first retry after a failed pass; doubles up to the interval.
RETRY_S: Final = 10.0


@dataclass(frozen=True, slots=True, order=True)
class HourPartition:
    """One ``date=…/hour=…`` directory; ``start_ms`` is its hour's UTC start."""

    start_ms: int
    date: str
    hour: str  # as the directory spells it ("04")

    @property
    def relative(self) -> str:
        return f"date={self.date}/hour={self.hour}"

    @classmethod
    def parse(cls, date_name: str, hour_name: str) -> HourPartition | None:
        """The partition named by two directory names, or ``None`` if they are not one."""
        date_text = date_name.removeprefix("date=")
        hour_text = hour_name.removeprefix("hour=")
        if date_text == date_name or hour_text == hour_name or len(date_text) != 10:
            return None
        try:
            day = dt.date.fromisoformat(date_text)
            hour = int(hour_text)
        except ValueError:
            return None
        if not 0 <= hour <= 23:
            return None
        start = dt.datetime(day.year, day.month, day.day, hour, tzinfo=dt.UTC)
        return cls(int(start.timestamp()) * 1000, date_text, hour_text)


@dataclass(frozen=True, slots=True)
class DeletedPartition:
    table: Path
    partition: HourPartition
    size_bytes: int


@dataclass(slots=True)
class RetentionStats:
    """Running totals of one retention task, for ``/metrics``."""

    passes: int = 0
    partitions_deleted: int = 0
    bytes_deleted: int = 0
    failures: int = 0


def expired_partitions(
    partitions: Iterable[HourPartition], *, now_ms: int, retention_hours: int
) -> list[HourPartition]:
    """The partitions whose whole hour ended ``retention_hours`` or more before ``now_ms``.

    Only hours strictly older than the cutoff go, so the hour being written
    now (and any hour a writer may still be finishing at the edge of the
    limit) is never among them. Oldest first.
    """
    cutoff_ms = now_ms - retention_hours * HOUR_MS
    return sorted(p for p in partitions if p.start_ms + HOUR_MS <= cutoff_ms)


def list_partitions(table: Path) -> list[HourPartition]:
    """Every hour partition under ``table`` (blocking); none if ``table`` does not exist."""
    if not table.is_dir():
        return []
    found = []
    for date_dir in table.iterdir():
        if not date_dir.name.startswith("date=") or not date_dir.is_dir():
            continue
        for hour_dir in date_dir.iterdir():
            partition = HourPartition.parse(date_dir.name, hour_dir.name)
            if partition is not None and hour_dir.is_dir():
                found.append(partition)
    return sorted(found)


def delete_partition(table: Path, partition: HourPartition) -> int:
    """Unlist the partition (rename into the trash, durably), then delete it; returns its bytes.

    Blocking. An emptied ``date=`` directory is removed as well.
    """
    source = table / partition.relative
    size = _tree_bytes(source)
    trash = table / TRASH_DIR
    if not trash.is_dir():
        with contextlib.suppress(FileExistsError):
            trash.mkdir()
        fsync_dir(table)
    target = trash / f"date={partition.date}-hour={partition.hour}-{uuid.uuid4().hex[:12]}"
    source.rename(target)
    fsync_dir(source.parent)
    fsync_dir(trash)
    shutil.rmtree(target)
    fsync_dir(trash)
    with contextlib.suppress(OSError):  # not empty: another hour of the day remains
        source.parent.rmdir()
        fsync_dir(table)
    return size


def prune(
    tables: Iterable[Path],
    *,
    now_ms: int,
    retention_hours: int,
    keep: Set[Path] = frozenset(),
) -> list[DeletedPartition]:
    """Delete every expired partition of ``tables`` except those in ``keep`` (blocking).

    ``keep`` holds partition directories a writer still needs (the landing's
    manifests name them). Leftovers of an interrupted deletion are removed first.
    """
    deleted = []
    for table in tables:
        _empty_trash(table)
        for partition in expired_partitions(
            list_partitions(table), now_ms=now_ms, retention_hours=retention_hours
        ):
            if table / partition.relative in keep:
                continue
            size = delete_partition(table, partition)
            _log.info(
                "retention deleted %s/%s (%d bytes): older than %d h",
                table,
                partition.relative,
                size,
                retention_hours,
            )
            deleted.append(DeletedPartition(table, partition, size))
    return deleted


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@final
class PeriodicRetention:
    """Prunes ``tables()`` at start and every ``interval_s``, in a background task.

    A failed pass is logged when it happens, counted, and retried after
    ``retry_s`` (doubling up to ``interval_s``). ``guard``, if given, is held
    for each whole pass, so a writer that takes it too (the landing's
    publication) never races a deletion. ``tables`` and ``keep`` run in the
    pass's thread, under the guard. ``prune_pass(now_ms)``, if given, is the
    pass instead of pruning ``tables`` (the server's retention of the lake's
    Iceberg rollup tables deletes by commit, not by directory).
    """

    def __init__(
        self,
        name: str,
        tables: Callable[[], Iterable[Path]],
        retention_hours: int,
        *,
        keep: Callable[[], Set[Path]] | None = None,
        guard: asyncio.Lock | None = None,
        interval_s: float = RETENTION_INTERVAL_S,
        retry_s: float = RETRY_S,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        prune_pass: Callable[[int], list[DeletedPartition]] | None = None,
    ) -> None:
        if retention_hours < 1:
            raise ValueError(f"retention_hours must be at least 1: {retention_hours!r}")
        self.name = name
        self.retention_hours = retention_hours
        self.stats = RetentionStats()
        self._tables = tables
        self._keep = keep
        self._guard = guard
        self._interval_s = interval_s
        self._retry_s = retry_s
        self._clock_ms = clock_ms
        self._prune_pass = prune_pass
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"retention:{self.name}")

    async def stop(self) -> None:
        """Let a pass in progress finish, then end the task. Idempotent.

        The task is shielded: if the caller is cancelled, the task still ends
        on its own after its pass, never in the middle of one.
        """
        self._stopping.set()
        if self._task is not None:
            await asyncio.shield(self._task)

    async def run_once(self) -> list[DeletedPartition]:
        """One pass now (the task's body; also for tests and tools)."""
        now_ms = self._clock_ms()
        async with self._guard or contextlib.nullcontext():
            deleted = await _complete(asyncio.to_thread(self._pass, now_ms))
        self.stats.passes += 1
        self.stats.partitions_deleted += len(deleted)
        self.stats.bytes_deleted += sum(d.size_bytes for d in deleted)
        return deleted

    def _pass(self, now_ms: int) -> list[DeletedPartition]:
        if self._prune_pass is not None:
            return self._prune_pass(now_ms)
        keep = self._keep() if self._keep is not None else frozenset()
        return prune(self._tables(), now_ms=now_ms, retention_hours=self.retention_hours, keep=keep)

    async def _run(self) -> None:
        delay_s = self._retry_s
        failing = False
        while not self._stopping.is_set():
            try:
                await self.run_once()
            except Exception as error:
                self.stats.failures += 1
                failing = True
                _log.error(
                    "retention of %s failed, retrying in %.0f s: %s", self.name, delay_s, error
                )
                wait_s = delay_s
                delay_s = min(delay_s * 2, self._interval_s)
            else:
                if failing:
                    _log.info("retention of %s works again", self.name)
                failing = False
                delay_s = self._retry_s
                wait_s = self._interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait_s)


async def _complete(work: Awaitable[_T]) -> _T:
    """Await ``work`` to its end even when cancelled meanwhile, then re-raise the cancellation.

    A thread cannot be interrupted: returning early would release the guard
    while the thread still renames and deletes, racing the writer it guards against.
    """
    future = asyncio.ensure_future(work)
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait({future})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return future.result()


def _empty_trash(table: Path) -> None:
    trash = table / TRASH_DIR
    if not trash.is_dir():
        return
    leftovers = list(trash.iterdir())
    for leftover in leftovers:
        _log.info("retention: removing %s left by an interrupted deletion", leftover)
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        else:
            leftover.unlink()
    if leftovers:
        fsync_dir(trash)


def _tree_bytes(directory: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total
