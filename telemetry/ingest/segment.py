"""Segment files: their names, how frames are walked, and directory durability.

A segment is named by the offset of its first record, zero-padded so that
lexical and numeric order agree (Kafka's ``00000000000000000000.log``). The
log directory holds nothing else but the consumer-positions file and the
log's id (``identity.py``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from telemetry.ingest.record import HEADER, MAX_BODY, MIN_BODY, FrameError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SUFFIX = ".log"
_NAME_DIGITS = 20
_CHUNK = 1 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:0{_NAME_DIGITS}d}{SUFFIX}"


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files in ``directory`` as ``(base_offset, path)``, oldest first."""
    found = []
    for path in directory.iterdir():
        stem = path.name.removesuffix(SUFFIX)
        if path.name.endswith(SUFFIX) and len(stem) == _NAME_DIGITS and stem.isdigit():
            found.append((int(stem), path))
    found.sort()
    return found


def iter_frames(fd: int, position: int, end: int) -> Iterator[tuple[int, bytes, int, int, int]]:
    """Walk the frames of an open segment from ``position`` up to byte ``end``.

    Yields ``(frame_position, buf, body_start, body_end, crc)`` with the body
    at ``buf[body_start:body_end]``; the checksum is left to the caller, so
    skipping records costs no CRC. Reads in chunks of at least 1 MiB, so a
    batch of small records costs one ``pread``, not one per record.

    Raises:
        FrameError: At the first frame whose header is cut short, whose
            length is impossible, or which runs past ``end``.
    """
    buf = b""
    buf_start = position  # file position of buf[0]
    while position < end:
        if end - position < HEADER.size:
            raise FrameError(position, f"torn record header: only {end - position} bytes remain")
        i = position - buf_start
        if len(buf) - i < HEADER.size:
            buf, buf_start = _refill(fd, buf, buf_start, position, HEADER.size, end)
            i = 0
        length, crc = HEADER.unpack_from(buf, i)
        if length < MIN_BODY or length > MAX_BODY:
            hint = " (zero-filled tail)" if length == 0 else ""
            raise FrameError(position, f"impossible record length {length}{hint}")
        frame_end = position + HEADER.size + length
        if frame_end > end:
            raise FrameError(
                position,
                f"torn record: header announces {HEADER.size + length} bytes, "
                f"only {end - position} remain",
            )
        if len(buf) - i < HEADER.size + length:
            buf, buf_start = _refill(fd, buf, buf_start, position, HEADER.size + length, end)
            i = 0
        yield position, buf, i + HEADER.size, i + HEADER.size + length, crc
        position = frame_end


def _refill(
    fd: int, buf: bytes, buf_start: int, position: int, need: int, end: int
) -> tuple[bytes, int]:
    keep = buf[position - buf_start :]
    want = min(max(_CHUNK, need - len(keep)), end - position - len(keep))
    data = os.pread(fd, want, position + len(keep))
    buf = keep + data
    if len(buf) < need:
        raise FrameError(position, f"short read: file ends {len(buf)} bytes after this record")
    return buf, position
