"""The blocking half of group commit: one vectored write and one fsync per group.

Everything here runs on the log's single writer thread, never on the event
loop, and only one call is in flight at a time, so the active segment's file
descriptor and size need no lock. The asyncio half (``log.py``) decides what
goes into a group and publishes the result.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable.fs import fsync_dir
from telemetry.ingest.segment import segment_name

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from telemetry.ingest.stats import LogStats

try:
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError):  # pragma: no cover - every Linux has it
    _IOV_MAX = 1024


_datasync = getattr(os, "fdatasync", os.fsync)  # fdatasync is POSIX; macOS lacks it


@dataclass(frozen=True, slots=True)
class SegmentState:
    """A segment's durable extent after a group commit."""

    base: int
    path: Path
    size: int


def write_all(fd: int, parts: Sequence[bytes | memoryview]) -> None:
    """``writev`` every part, resuming after short writes (signals, nearly full disks)."""
    pending = list(parts)
    i = 0
    while i < len(pending):
        batch = pending[i : i + _IOV_MAX]
        written = os.writev(fd, batch)
        if written == 0 and any(len(b) for b in batch):
            raise OSError("writev wrote nothing")
        for part in batch:
            if written >= len(part):
                written -= len(part)
                i += 1
            else:
                pending[i] = memoryview(part)[written:]
                break


class SegmentWriter:
    """Appends frames to the active segment and rolls to new ones."""

    def __init__(
        self, directory: Path, base: int, size: int, segment_bytes: int, stats: LogStats
    ) -> None:
        self._directory = directory
        self._segment_bytes = segment_bytes
        self._stats = stats
        self._base = base
        self._size = size
        self._fd = self._open(base)

    @property
    def base(self) -> int:
        return self._base

    def _open(self, base: int) -> int:
        return os.open(
            self._directory / segment_name(base), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )

    def _fsync(self) -> None:
        started = time.perf_counter()
        # fdatasync: an append-only segment needs its data and its size on
        # disk, which fdatasync guarantees; skipping the timestamp journal
        # write roughly halves the commit latency. The file's name is made
        # durable separately (directory fsync in roll()).
        _datasync(self._fd)
        self._stats.observe_fsync(time.perf_counter() - started)

    def roll(self, base: int) -> SegmentState:
        """Start a new, empty segment at ``base``; the old one is already synced.

        The new name is made durable (directory fsync) before anything is
        written into it, so an acknowledged record can never sit in a file that
        a power loss makes disappear.
        """
        fd = self._open(base)
        fsync_dir(self._directory)
        os.close(self._fd)
        self._fd, self._base, self._size = fd, base, 0
        self._stats.segments_rolled += 1
        return SegmentState(base, self._directory / segment_name(base), 0)

    def write_group(
        self, parts: list[bytes], frame_lengths: list[int], first_offset: int
    ) -> list[SegmentState]:
        """Write one group of frames durably; return the segments it touched.

        ``parts`` holds two buffers per frame (head, payload). The group goes
        out as one ``writev`` and one ``fsync`` unless it crosses the roll
        size: then the part before the boundary is written and synced first,
        so a segment is complete and durable before its successor is named
        after the offset that follows it.
        """
        touched: list[SegmentState] = []
        size = self._size
        start = 0
        for k, length in enumerate(frame_lengths):
            if size > 0 and size + length > self._segment_bytes:
                if k > start:
                    write_all(self._fd, parts[2 * start : 2 * k])
                    self._fsync()
                self._size = size
                touched.append(
                    SegmentState(self._base, self._directory / segment_name(self._base), size)
                )
                self.roll(first_offset + k)
                size = 0
                start = k
            size += length
        write_all(self._fd, parts[2 * start :])
        self._fsync()
        self._size = size
        touched.append(SegmentState(self._base, self._directory / segment_name(self._base), size))
        return touched

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
