"""The metadata store: an append-only, checksummed log of admin changes, with snapshots.

Layout under ``<data_dir>/meta/``::

    00000000000000000000.log          segments: frames of record batches (records.py),
    00000000000000000042.log          named by the offset of their first record
    00000000000000000042.checkpoint   a snapshot: the whole image as one batch whose
                                      base offset is the offset it covers up to

The API is blocking on purpose: an append returns only after ``fsync``, so a
change is durable before the admin request that made it is acknowledged
(KRaft commits a request's records before answering). Event-loop callers run
:meth:`MetadataStore.append` in a thread (``asyncio.to_thread``); a lock
serialises appends, and :attr:`MetadataStore.image` can be read from any
thread at any time (it is replaced, never mutated).

Recovery at open: the newest snapshot, then every record after it from the
segments. A torn or corrupt tail of the *last* segment (a crash mid-append)
is cut off and logged: that batch was never acknowledged. Damage anywhere
else is not a torn write, so the store refuses to open rather than silently
forget acknowledged changes.

Snapshots bound replay: after ``snapshot_interval_records`` appended records
the store writes the image to a temporary file, fsyncs it, renames it into
place, starts a new segment at the snapshot offset and deletes the segments
and snapshots the new snapshot covers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import TYPE_CHECKING, Final

from durable.fs import fsync_dir, make_dirs
from telemetry.metastore.image import MetadataImage
from telemetry.metastore.records import HEADER, encode_batch, read_frames

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from telemetry.metastore.records import MetadataRecord

logger = logging.getLogger(__name__)

META_DIR: Final = "meta"
SEGMENT_SUFFIX: Final = ".log"
SNAPSHOT_SUFFIX: Final = ".checkpoint"
_TMP_SUFFIX: Final = ".tmp"
_DIGITS: Final = 20
DEFAULT_SNAPSHOT_INTERVAL_RECORDS: Final = 1000


class MetadataStoreError(Exception):
    """Base of the store's errors."""


class MetadataCorruptionError(MetadataStoreError):
    """Damage that is not a torn tail: the store will not guess what was lost."""


class MetadataStoreFailedError(MetadataStoreError):
    """A write or fsync failed; the store takes no more appends until reopened."""


class MetadataStoreClosedError(MetadataStoreError):
    """The store was closed."""


def _name(offset: int, suffix: str) -> str:
    return f"{offset:0{_DIGITS}d}{suffix}"


def _list(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    found = []
    for path in directory.iterdir():
        stem = path.name.removesuffix(suffix)
        if path.name.endswith(suffix) and len(stem) == _DIGITS and stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class MetadataStore:
    """The durable record of dynamic subscriptions, quotas and SCRAM credentials.

    Open with :meth:`open`; the data directory's lock (one server per
    directory) makes this the only writer.
    """

    def __init__(
        self,
        directory: Path,
        image: MetadataImage,
        next_offset: int,
        segment_base: int,
        snapshot_interval_records: int,
        records_since_snapshot: int,
    ) -> None:
        self._directory = directory
        self._image = image
        self._next_offset = next_offset
        self._segment_base = segment_base
        self._interval = snapshot_interval_records
        self._since_snapshot = records_since_snapshot
        self._lock = threading.Lock()
        self._failed: BaseException | None = None
        self._fd: int | None = os.open(
            directory / _name(segment_base, SEGMENT_SUFFIX),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT,
            0o644,
        )
        fsync_dir(directory)

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        snapshot_interval_records: int = DEFAULT_SNAPSHOT_INTERVAL_RECORDS,
    ) -> MetadataStore:
        """Open (creating if needed) ``<data_dir>/meta`` and replay it into the image.

        Raises:
            MetadataCorruptionError: a snapshot or a non-final segment is damaged,
                or the segments do not continue one another.
        """
        if snapshot_interval_records < 1:
            raise ValueError(f"snapshot_interval_records must be >= 1: {snapshot_interval_records}")
        directory = data_dir / META_DIR
        if not directory.is_dir():
            make_dirs(directory)
        for leftover in directory.glob(f"*{_TMP_SUFFIX}"):
            leftover.unlink()  # a snapshot that never reached its rename
        image, snapshot_offset = _load_snapshot(directory)
        image, next_offset, segment_base, replayed = _replay_segments(
            directory, image, snapshot_offset
        )
        # Debug: a start that fails later must print its one error line only.
        logger.debug(
            "metadata store opened: snapshot at offset %d, %d records replayed, next offset %d",
            snapshot_offset,
            replayed,
            next_offset,
        )
        return cls(directory, image, next_offset, segment_base, snapshot_interval_records, replayed)

    @property
    def image(self) -> MetadataImage:
        """The state after every acknowledged append."""
        return self._image

    @property
    def next_offset(self) -> int:
        """The offset the next appended record gets (records appended so far, ever)."""
        return self._next_offset

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def location(self) -> str:
        return str(self._directory)

    def watch(self, callback: Callable[[], None]) -> None:
        """Nothing but :meth:`append` changes a local store: ``callback`` is never called."""

    def interrupt(self) -> None:
        """An append waits only for its own fsync: it is left to finish."""

    def append(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Append one request's records atomically and durably; return the new image.

        An empty batch writes nothing. Blocking: fsyncs before it returns.

        Raises:
            MetadataStoreClosedError: after :meth:`close`.
            MetadataStoreFailedError: this or an earlier write or fsync failed.
            ValueError: a record does not fit the format (nothing is written).
        """
        batch = tuple(records)
        with self._lock:
            fd = self._writable_fd()
            if not batch:
                return self._image
            frame = encode_batch(self._next_offset, batch)
            try:
                _write_all(fd, frame)
                os.fsync(fd)
            except OSError as error:
                # After a failed fsync the page cache may hold data the disk does
                # not: never retry on this descriptor, reopen and recover instead.
                self._failed = error
                logger.error("metadata store append failed, refusing further appends: %s", error)
                raise MetadataStoreFailedError(f"metadata append failed: {error}") from error
            self._image = self._image.apply(batch)
            self._next_offset += len(batch)
            self._since_snapshot += len(batch)
            if self._since_snapshot >= self._interval:
                self._snapshot_locked()
            return self._image

    def snapshot(self) -> None:
        """Write a snapshot now and drop the log it covers."""
        with self._lock:
            self._writable_fd()
            self._snapshot_locked()

    def close(self) -> None:
        """Close the active segment; idempotent. Every append already returned is durable."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _writable_fd(self) -> int:
        if self._fd is None:
            raise MetadataStoreClosedError("metadata store is closed")
        if self._failed is not None:
            raise MetadataStoreFailedError(f"metadata store failed earlier: {self._failed}")
        return self._fd

    def _snapshot_locked(self) -> None:
        offset = self._next_offset
        directory = self._directory
        final = directory / _name(offset, SNAPSHOT_SUFFIX)
        temporary = final.with_name(final.name + _TMP_SUFFIX)
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, encode_batch(offset, self._image.to_records()))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, final)
            fsync_dir(directory)
            if self._segment_base != offset:
                new_fd = os.open(
                    directory / _name(offset, SEGMENT_SUFFIX),
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                    0o644,
                )
                assert self._fd is not None  # checked by the callers
                os.close(self._fd)
                self._fd, self._segment_base = new_fd, offset
                fsync_dir(directory)
            for base, path in _list(directory, SEGMENT_SUFFIX):
                if base < offset:
                    path.unlink()
            for base, path in _list(directory, SNAPSHOT_SUFFIX):
                if base < offset:
                    path.unlink()
            fsync_dir(directory)
        except OSError as error:
            # The log still holds every record, so the store stays usable; a
            # later snapshot retries. Only the bound on replay is delayed.
            logger.error("metadata snapshot at offset %d failed: %s", offset, error)
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            return
        self._since_snapshot = 0
        logger.info("metadata snapshot written at offset %d", offset)


def _load_snapshot(directory: Path) -> tuple[MetadataImage, int]:
    snapshots = _list(directory, SNAPSHOT_SUFFIX)
    if not snapshots:
        return MetadataImage(), 0
    offset, path = snapshots[-1]
    batches, _, reason = read_frames(path.read_bytes())
    if reason is not None or len(batches) != 1 or batches[0].base_offset != offset:
        raise MetadataCorruptionError(f"snapshot {path} is damaged: {reason or 'bad content'}")
    return MetadataImage().apply(batches[0].records), offset


def _is_torn_tail(data: bytes, position: int) -> bool:
    """Whether the bad frame at ``position`` can be an interrupted append.

    An append only ever damages the end of the file: a frame cut short, a
    last frame whose bytes did not all reach the disk, or a zero-filled tail.
    A bad frame with whole frames after it is damage to acknowledged data.
    """
    tail = data[position:]
    if len(tail) < HEADER.size or not tail.strip(b"\0"):
        return True
    length: int = HEADER.unpack_from(tail)[0]
    return HEADER.size + length >= len(tail)


def _replay_segments(
    directory: Path, image: MetadataImage, snapshot_offset: int
) -> tuple[MetadataImage, int, int, int]:
    """Replay the records at or after ``snapshot_offset``.

    Returns ``(image, next_offset, active_segment_base, records_replayed)``.
    """
    segments = _list(directory, SEGMENT_SUFFIX)
    # A crash between writing a snapshot and deleting what it covers leaves
    # segments that end before it: they are redundant, not damage.
    while len(segments) >= 2 and segments[1][0] <= snapshot_offset:
        segments.pop(0)[1].unlink()
    if segments and segments[0][0] > snapshot_offset:
        raise MetadataCorruptionError(
            f"records {snapshot_offset}..{segments[0][0] - 1} are missing from the log"
        )
    next_offset = snapshot_offset
    replayed = 0
    for index, (base, path) in enumerate(segments):
        data = path.read_bytes()
        batches, valid_end, reason = read_frames(data)
        if reason is not None:
            if index != len(segments) - 1 or not _is_torn_tail(data, valid_end):
                raise MetadataCorruptionError(
                    f"segment {path} is damaged at byte {valid_end} ({reason}) "
                    "with data after it: not a torn write"
                )
            logger.warning(
                "metadata segment %s: cutting %d bytes at byte %d (%s): "
                "a write that was never acknowledged",
                path.name,
                len(data) - valid_end,
                valid_end,
                reason,
            )
            with path.open("r+b") as file:
                file.truncate(valid_end)
                os.fsync(file.fileno())
        if (index > 0 and base != next_offset) or (batches and batches[0].base_offset != base):
            raise MetadataCorruptionError(
                f"segment {path} does not continue the log at offset {next_offset}"
            )
        for batch in batches:
            records = batch.records[max(0, snapshot_offset - batch.base_offset) :]
            image = image.apply(records)
            replayed += len(records)
        next_offset = batches[-1].next_offset if batches else base
    if next_offset < snapshot_offset:
        # Only possible if acknowledged records were lost from the log while
        # the snapshot kept them: the snapshot is the truth, start after it.
        logger.warning("metadata log ends at %d, before its snapshot", next_offset)
        for _, path in segments:
            path.unlink()
        return image, snapshot_offset, snapshot_offset, replayed
    return image, next_offset, segments[-1][0] if segments else snapshot_offset, replayed
