"""A read-only look at a log directory: segments, positions, and every damaged range.

For ``kip714 log status|skip``, which run with no server (and so no
``IngestLog``) on the directory. Nothing here writes: the consumer-positions
file is read without removing a leftover temp file, and the tail of the last
segment is judged, not truncated. Frames are walked and checked by the same
code recovery and readers use (``segment.iter_frames``, ``record.check_body``).

What a damaged range means to a reader: a segment is walked frame by frame
from its start, so nothing after the first bad frame of a segment can be
found again. The range ``[offset, next segment's base)`` is lost to readers;
in the last segment, recovery cuts the bad frame and everything after it at
the next start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from telemetry.ingest.positions import read_positions
from telemetry.ingest.record import FrameError, check_body, decode_body
from telemetry.ingest.segment import iter_frames, list_segments

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["MAX_NAMED_UNDECODABLE", "Damage", "LogInspection", "SegmentInfo", "inspect_log"]

#: How many undecodable payloads' offsets a segment's inspection keeps (all are counted).
MAX_NAMED_UNDECODABLE = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class Damage:
    """The first frame of a segment that fails its checks, and what it costs."""

    segment: Path
    position: int  # byte position of the bad frame in its segment
    offset: int  # the offset that frame should hold: the first one readers cannot get
    reason: str
    bytes_after: int  # bytes from the bad frame to the end of the segment
    next_readable_offset: int | None  # the next segment's base; None in the last segment

    @property
    def in_last_segment(self) -> bool:
        """Recovery will cut it (with everything after it) at the next start."""
        return self.next_readable_offset is None


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentInfo:
    base: int
    path: Path
    size: int
    valid_records: int  # records before the first bad frame (all of them if undamaged)
    damage: Damage | None
    #: Records whose payload failed ``inspect_log``'s ``payload_ok`` (0 without one).
    undecodable: int = 0
    undecodable_offsets: tuple[int, ...] = ()  # the first MAX_NAMED_UNDECODABLE of them


@dataclass(frozen=True, slots=True, kw_only=True)
class LogInspection:
    """What ``inspect_log`` found.

    ``log_start`` and ``log_end`` are what the log would report once opened:
    the end after recovery cut a damaged tail, raised to the highest
    committed position if records were lost (offsets are never reused).
    """

    directory: Path
    segments: tuple[SegmentInfo, ...]
    positions: dict[str, int]
    log_start: int
    log_end: int

    @property
    def damage(self) -> list[Damage]:
        return [s.damage for s in self.segments if s.damage is not None]

    @property
    def undecodable(self) -> int:
        return sum(s.undecodable for s in self.segments)

    @property
    def undecodable_offsets(self) -> list[int]:
        return [offset for s in self.segments for offset in s.undecodable_offsets]

    def damage_covering(self, offset: int) -> Damage | None:
        """The damaged range a reader starting at ``offset`` would stop in, if any."""
        for damage in self.damage:
            end = damage.next_readable_offset
            if damage.offset <= offset and (end is None or offset < end):
                return damage
        return None


def inspect_log(
    directory: Path, payload_ok: Callable[[bytes], bool] | None = None
) -> LogInspection:
    """Scan every segment of the log in ``directory`` (blocking; reads the whole log).

    With ``payload_ok`` every record is also decoded and its payload judged:
    those it refuses are counted (exporters skip them as undecodable).

    Raises:
        FileNotFoundError: ``directory`` does not exist.
        ValueError: The consumer-positions file is unreadable.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"no ingest log at {directory}")
    positions = read_positions(directory)
    found = list_segments(directory)
    segments: list[SegmentInfo] = []
    for index, (base, path) in enumerate(found):
        following = found[index + 1][0] if index + 1 < len(found) else None
        try:
            segments.append(_scan(base, path, following, payload_ok))
        except FileNotFoundError:
            continue  # deleted by a running server's retention since the listing
    end = segments[-1].base + segments[-1].valid_records if segments else 0
    log_end = max([end, *positions.values()])
    return LogInspection(
        directory=directory,
        segments=tuple(segments),
        positions=positions,
        log_start=segments[0].base if segments else log_end,
        log_end=log_end,
    )


def _scan(
    base: int, path: Path, following: int | None, payload_ok: Callable[[bytes], bool] | None
) -> SegmentInfo:
    fd = os.open(path, os.O_RDONLY)
    undecodable = 0
    named: list[int] = []
    damage = None
    try:
        size = os.fstat(fd).st_size
        count = 0
        try:
            for _position, buf, start, end, crc in iter_frames(fd, 0, size):
                if payload_ok is None:
                    check_body(buf, start, end, crc, base + count)
                elif not payload_ok(decode_body(buf, start, end, crc, base + count).payload):
                    undecodable += 1
                    if len(named) < MAX_NAMED_UNDECODABLE:
                        named.append(base + count)
                count += 1
        except FrameError as error:
            damage = Damage(
                segment=path,
                position=error.position,
                offset=base + count,
                reason=error.reason,
                bytes_after=size - error.position,
                next_readable_offset=following,
            )
    finally:
        os.close(fd)
    return SegmentInfo(
        base=base,
        path=path,
        size=size,
        valid_records=count,
        damage=damage,
        undecodable=undecodable,
        undecodable_offsets=tuple(named),
    )
