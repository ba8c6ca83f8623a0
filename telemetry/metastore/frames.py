"""The metadata store's files: frames whose length is checksummed too (format 2).

A format-2 file starts with :data:`FILE_MAGIC`; each frame then is::

    frame := length:u32le  body_crc:u32le  head_crc:u32le  body[length]

``head_crc`` is CRC32C over the eight bytes before it, so a damaged length
is seen as damage instead of being followed to a wrong place (a flipped
length bit used to turn intact, acknowledged frames after it into a "torn
tail"). ``body_crc`` is CRC32C over the body (records.py).

Files without the magic are format 1 (``length:u32le crc:u32le body``, the
length outside the checksum); they are still read, and the store rewrites
them in format 2 when it opens them.

Torn tail or damage: an append writes one frame at the end of the file, so a
crash can only leave the *last* frame bad. A bad frame with an intact frame
anywhere after it is damage to acknowledged data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import crc32c

from telemetry.metastore.records import (
    HEADER,
    MAX_BODY,
    MIN_BODY,
    Batch,
    MetadataRecord,
    RecordFormatError,
    decode_body,
    encode_body,
    read_frames,
)

FILE_MAGIC: Final = b"KIP714M\x02"
"""Opens every format-2 file. A format-1 file cannot start with it: its first
four bytes are a length ≤ ``MAX_BODY``, whose top byte is at most 0x04."""

HEAD: Final = struct.Struct("<III")
_LENGTH_AND_CRC: Final = struct.Struct("<II")


@dataclass(frozen=True, slots=True)
class FileContent:
    """What one file holds, read without trusting anything unchecked."""

    format_version: int
    batches: list[Batch]
    valid_end: int
    """Byte position where the intact prefix ends."""
    reason: str | None
    """Why reading stopped at ``valid_end`` (None: the file ended on a frame boundary)."""
    torn_tail: bool
    """Whether what follows ``valid_end`` can be an interrupted append."""


def encode_frame(base_offset: int, records: tuple[MetadataRecord, ...]) -> bytes:
    """One format-2 frame holding ``records`` at offsets ``base_offset`` onwards.

    Raises:
        ValueError: a field does not fit the format, or the body exceeds ``MAX_BODY``.
    """
    body = encode_body(base_offset, records)
    length_and_crc = _LENGTH_AND_CRC.pack(len(body), crc32c.crc32c(body))
    return length_and_crc + struct.pack("<I", crc32c.crc32c(length_and_crc)) + body


def read_file(data: bytes) -> FileContent:
    """Decode a whole segment or snapshot file, in either format."""
    if data.startswith(FILE_MAGIC):
        return _read_v2(data)
    return _read_v1(data)


def _frame_at(data: bytes, position: int) -> tuple[Batch | None, int, str]:
    """The frame at ``position``: ``(batch, end, reason)``; batch None if it is bad."""
    if len(data) - position < HEAD.size:
        return None, position, "torn frame header"
    length, body_crc, head_crc = HEAD.unpack_from(data, position)
    if crc32c.crc32c(data[position : position + _LENGTH_AND_CRC.size]) != head_crc:
        return None, position, "frame header checksum mismatch"
    if length > MAX_BODY or length < MIN_BODY:
        return None, position, f"impossible frame length {length}"
    end = position + HEAD.size + length
    if end > len(data):
        return None, position, "torn frame body"
    try:
        return decode_body(data[position + HEAD.size : end], body_crc), end, ""
    except RecordFormatError as error:
        return None, position, str(error)


def _intact_frame_after(data: bytes, position: int) -> int | None:
    """The position of the first intact frame starting after ``position``, if any.

    Only the header checksum is tried at each byte, so the scan is linear in
    the bytes after the damage; it runs only when a frame is bad.
    """
    last = len(data) - HEAD.size
    for start in range(position + 1, last + 1):
        length, _, head_crc = HEAD.unpack_from(data, start)
        if length > MAX_BODY or length < MIN_BODY:
            continue
        if crc32c.crc32c(data[start : start + _LENGTH_AND_CRC.size]) != head_crc:
            continue
        if _frame_at(data, start)[0] is not None:
            return start
    return None


def _gap(batch: Batch, batches: list[Batch]) -> str:
    return f"batch at offset {batch.base_offset} does not follow {batches[-1].next_offset}"


def _read_v2(data: bytes) -> FileContent:
    batches: list[Batch] = []
    position = len(FILE_MAGIC)
    while position < len(data):
        batch, end, reason = _frame_at(data, position)
        if batch is not None and batches and batch.base_offset != batches[-1].next_offset:
            reason, batch = _gap(batch, batches), None
        if batch is None:
            intact = _intact_frame_after(data, position)
            if intact is not None:
                reason = f"{reason}, intact frame at byte {intact} after it"
            return FileContent(2, batches, position, reason, torn_tail=intact is None)
        batches.append(batch)
        position = end
    return FileContent(2, batches, position, None, torn_tail=True)


def _read_v1(data: bytes) -> FileContent:
    """Format 1, judged as it always was: the length is not checksummed."""
    batches, position, reason = read_frames(data)
    return FileContent(1, batches, position, reason, torn_tail=_v1_torn_tail(data, position))


def _v1_torn_tail(data: bytes, position: int) -> bool:
    tail = data[position:]
    if len(tail) < HEADER.size or not tail.strip(b"\0"):
        return True
    length: int = HEADER.unpack_from(tail)[0]
    return HEADER.size + length >= len(tail)
