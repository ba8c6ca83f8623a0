"""Reading records back: blocking, for exporter hosts to run in a thread.

Readers work on a snapshot of the segments' *durable* extents taken under the
log's lock, so they never see bytes the writer has written but not yet
synced, and they need no lock while doing I/O.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from telemetry.ingest.errors import LogCorruptionError
from telemetry.ingest.record import FrameError, check_body, decode_checked_body, decoded_size
from telemetry.ingest.segment import iter_frames

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exporters.api import LoggedPush
    from telemetry.ingest.writer import SegmentState


@dataclass(frozen=True, slots=True)
class Position:
    """Where the record with ``offset`` starts: byte ``position`` of segment ``base``."""

    offset: int
    base: int
    position: int


def read_records(
    segments: Sequence[SegmentState],
    from_offset: int,
    hint: Position | None,
    max_records: int,
    max_bytes: int,
) -> tuple[list[LoggedPush], Position | None]:
    """Read up to ``max_records`` records from ``from_offset`` on, in order.

    ``segments`` starts with the segment holding ``from_offset``. ``hint``,
    when it names the first segment, saves scanning that segment from its
    start; consumers read sequentially, so the position where the previous
    read stopped is almost always known. At least one record is returned if
    any is durable, even when it alone exceeds ``max_bytes``, so an oversized
    record cannot stall a consumer.

    Returns the records and the position of the next offset, to be offered as
    the next read's hint.

    Raises:
        LogCorruptionError: A record fails its checks.
        FileNotFoundError: A segment was deleted by retention meanwhile.
    """
    out: list[LoggedPush] = []
    used = 0
    stop: Position | None = None
    for k, segment in enumerate(segments):
        if k == 0 and hint is not None and hint.base == segment.base:
            position, expected = hint.position, hint.offset
        else:
            position, expected = 0, segment.base
        fd = os.open(segment.path, os.O_RDONLY)
        try:
            for frame_at, buf, start, end, crc in iter_frames(fd, position, segment.size):
                if expected < from_offset:
                    expected += 1
                    continue
                if len(out) >= max_records:
                    return out, Position(expected, segment.base, frame_at)
                check_body(buf, start, end, crc, expected)
                # The budget counts records as returned: payloads decompressed.
                size = decoded_size(buf, start, end)
                if out and used + size > max_bytes:
                    return out, Position(expected, segment.base, frame_at)
                out.append(decode_checked_body(buf, start, end))
                used += size
                expected += 1
        except FrameError as exc:
            following = segments[k + 1].base if k + 1 < len(segments) else None
            raise LogCorruptionError(
                segment.path, exc.position, expected, exc.reason, following
            ) from exc
        finally:
            os.close(fd)
        stop = Position(expected, segment.base, segment.size)
    return out, stop
