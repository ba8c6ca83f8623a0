"""Opening a log directory: find the segments, verify the tail, cut what is torn.

Only the last segment can hold a torn or partial write: the writer syncs a
segment completely before it names the next one. So the last segment is
scanned record by record (length, CRC32C, version, offset) and cut at the
first frame that fails; older segments are checked record by record whenever
they are read. A cut tail never held an acknowledged record after a crash,
because records are acknowledged only after their fsync.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable.fs import fsync_dir, make_dirs
from telemetry.ingest.identity import load_or_create_log_id
from telemetry.ingest.positions import load_positions
from telemetry.ingest.record import FrameError, check_body
from telemetry.ingest.segment import iter_frames, list_segments, segment_name
from telemetry.ingest.writer import SegmentState

if TYPE_CHECKING:
    from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Recovered:
    """What ``recover`` found: the durable segments and where appends continue."""

    segments: list[SegmentState]
    next_offset: int
    positions: dict[str, int]
    truncated_bytes: int
    log_id: str


def recover(directory: Path) -> Recovered:
    """Bring ``directory`` to a consistent state (blocking: run in a thread)."""
    make_dirs(directory)
    log_id = load_or_create_log_id(directory)
    positions = load_positions(directory)
    segments = [SegmentState(b, p, p.stat().st_size) for b, p in list_segments(directory)]
    truncated = 0
    end = 0
    if segments:
        last = segments[-1]
        valid, count = _verify(last)
        if valid < last.size:
            truncated = last.size - valid
            _truncate(last.path, valid)
            segments[-1] = SegmentState(last.base, last.path, valid)
        end = last.base + count
    high = max([end, *positions.values()])
    if high > end:
        logger.warning(
            "ingest log %s holds records up to offset %d but consumers have committed up to %d: "
            "records were lost; continuing at offset %d so that no offset is reused",
            directory,
            end,
            high,
            high,
        )
    if not segments or high > end:
        path = directory / segment_name(high)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        fsync_dir(directory)
        segments.append(SegmentState(high, path, 0))
    return Recovered(segments, high, positions, truncated, log_id)


def _verify(segment: SegmentState) -> tuple[int, int]:
    """Scan every record; return the size of the valid prefix and its record count."""
    fd = os.open(segment.path, os.O_RDONLY)
    count = 0
    try:
        for _position, buf, start, end, crc in iter_frames(fd, 0, segment.size):
            check_body(buf, start, end, crc, segment.base + count)
            count += 1
    except FrameError as exc:
        logger.warning(
            "ingest log segment %s: torn or corrupt record at byte %d (offset %d): %s; "
            "truncating the %d bytes from there to the end of the file",
            segment.path,
            exc.position,
            segment.base + count,
            exc.reason,
            segment.size - exc.position,
        )
        return exc.position, count
    finally:
        os.close(fd)
    return segment.size, count


def _truncate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
