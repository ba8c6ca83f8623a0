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

Every file is in format 2 (frames.py: the frame length is checksummed).
Recovery at open: the newest snapshot, then every record after it from the
segments. A bad *last* frame of the last segment with no intact frame after
it (a crash mid-append) is cut off and logged: that batch was never
acknowledged. Damage anywhere else is not a torn write, so the store refuses
to open, naming the file and byte, and changes nothing, rather than silently
forget acknowledged changes.

Files of format 1 (written before the length was checksummed) are read as
they always were, then rewritten at open: a format-2 snapshot of the whole
image, a new segment after it, and the old files renamed ``*.v1`` beside
them until the next snapshot deletes them.

Records that the admin plane's rules refuse (``check``, passed by whoever
opens the store: an older version's, or one written into the files by hand)
are skipped at replay, logged and counted, as the shared topic skips a
message: one request's batch whole, or one entity of a snapshot. A record
never stops the store from opening; damage to the files still does.

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
from telemetry.metastore.backend import MetadataLogStats
from telemetry.metastore.entities import entity_of, entity_state, replacing
from telemetry.metastore.frames import FILE_MAGIC, encode_frame, read_file
from telemetry.metastore.image import MetadataImage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path

    from telemetry.metastore.backend import StateCheck
    from telemetry.metastore.entities import Entity
    from telemetry.metastore.records import MetadataRecord

logger = logging.getLogger(__name__)

META_DIR: Final = "meta"
SEGMENT_SUFFIX: Final = ".log"
SNAPSHOT_SUFFIX: Final = ".checkpoint"
_TMP_SUFFIX: Final = ".tmp"
LEGACY_SUFFIX: Final = ".v1"
"""Appended to format-1 files once rewritten; the next snapshot deletes them."""
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
        stats: MetadataLogStats | None = None,
    ) -> None:
        self._directory = directory
        self._image = image
        self._next_offset = next_offset
        self._segment_base = segment_base
        self._interval = snapshot_interval_records
        self._since_snapshot = records_since_snapshot
        self._lock = threading.Lock()
        self._failed: BaseException | None = None
        self._fd: int | None = _open_segment(directory, segment_base)
        #: ``/metrics``: the next offset and what replay skipped.
        self.stats = stats or MetadataLogStats()
        self.stats.position = self.stats.high_watermark = next_offset

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        snapshot_interval_records: int = DEFAULT_SNAPSHOT_INTERVAL_RECORDS,
        check: StateCheck | None = None,
    ) -> MetadataStore:
        """Open (creating if needed) ``<data_dir>/meta`` and replay it into the image.

        ``check`` (the admin plane's rules) judges each replayed batch's
        entities as they stand after it; a batch it refuses is skipped.

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
        legacy: list[Path] = []
        stats = MetadataLogStats()
        replay = _Replay(directory, check, stats)
        image, snapshot_offset = _load_snapshot(directory, legacy, replay)
        image, next_offset, segment_base, replayed = _replay_segments(
            directory, image, snapshot_offset, legacy, replay
        )
        if legacy:
            _rewrite_legacy(directory, image, next_offset, legacy)
            segment_base, replayed = next_offset, 0
        # Debug: a start that fails later must print its one error line only.
        logger.debug(
            "metadata store opened: snapshot at offset %d, %d records replayed, next offset %d",
            snapshot_offset,
            replayed,
            next_offset,
        )
        return cls(
            directory,
            image,
            next_offset,
            segment_base,
            snapshot_interval_records,
            replayed,
            stats,
        )

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
            frame = encode_frame(self._next_offset, batch)
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
            self.stats.position = self.stats.high_watermark = self._next_offset
            self.stats.applied_records += len(batch)
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
        try:
            _write_file(
                directory / _name(offset, SNAPSHOT_SUFFIX),
                FILE_MAGIC + encode_frame(offset, self._image.to_records()),
            )
            if self._segment_base != offset:
                new_fd = _open_segment(directory, offset)
                assert self._fd is not None  # checked by the callers
                os.close(self._fd)
                self._fd, self._segment_base = new_fd, offset
            for base, path in _list(directory, SEGMENT_SUFFIX):
                if base < offset:
                    path.unlink()
            for base, path in _list(directory, SNAPSHOT_SUFFIX):
                if base < offset:
                    path.unlink()
            for path in directory.glob(f"*{LEGACY_SUFFIX}"):
                path.unlink()
            fsync_dir(directory)
        except OSError as error:
            # The log still holds every record, so the store stays usable; a
            # later snapshot retries. Only the bound on replay is delayed.
            logger.error("metadata snapshot at offset %d failed: %s", offset, error)
            return
        self._since_snapshot = 0
        logger.info("metadata snapshot written at offset %d", offset)


def _write_file(final: Path, data: bytes) -> None:
    """Write ``final`` whole or not at all: a temporary file, fsynced, renamed into place."""
    temporary = final.with_name(final.name + _TMP_SUFFIX)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, final)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)


def _open_segment(directory: Path, base: int) -> int:
    """Open the segment starting at ``base`` for appends, creating it with its magic."""
    path = directory / _name(base, SEGMENT_SUFFIX)
    if not path.exists():
        _write_file(path, FILE_MAGIC)
    return os.open(path, os.O_WRONLY | os.O_APPEND)


def _rewrite_legacy(
    directory: Path, image: MetadataImage, next_offset: int, legacy: list[Path]
) -> None:
    """Rewrite a format-1 store in format 2, keeping the old files beside as ``*.v1``.

    Crash-safe in any order of events: until the renames, a reopen reads the
    new snapshot (the newest) and the old segments it covers, and rewrites
    again; after them, the new snapshot alone.
    """
    _write_file(
        directory / _name(next_offset, SNAPSHOT_SUFFIX),
        FILE_MAGIC + encode_frame(next_offset, image.to_records()),
    )
    for path in legacy:
        if path.exists():  # a log that ended before its snapshot is already gone
            path.replace(path.with_name(path.name + LEGACY_SUFFIX))
    fsync_dir(directory)
    logger.warning(
        "metadata store %s: rewritten in format 2 at offset %d; the format-1 files are "
        "kept beside as *%s until the next snapshot",
        directory,
        next_offset,
        LEGACY_SUFFIX,
    )


class _Replay:
    """Applies replayed records, skipping (logged, counted) what ``check`` refuses."""

    def __init__(self, directory: Path, check: StateCheck | None, stats: MetadataLogStats) -> None:
        self.directory = directory
        self.check = check
        self.stats = stats

    def batch(
        self, image: MetadataImage, records: tuple[MetadataRecord, ...], where: str
    ) -> MetadataImage:
        """``image`` with one request's records, or unchanged if an entity they touch is refused."""
        try:
            after = image.apply(records)
            self._check(after, dict.fromkeys(entity_of(record) for record in records))
        except Exception as error:  # any record, however made, is skipped
            self._skipped(len(records), where, error)
            return image
        self.stats.applied_records += len(records)
        return after

    def snapshot(self, records: tuple[MetadataRecord, ...], where: str) -> MetadataImage:
        """The image of a snapshot's records, without the entities ``check`` refuses."""
        image = MetadataImage().apply(records)
        self.stats.applied_records += len(records)
        if self.check is None:
            return image
        removals: list[MetadataRecord] = []
        for entity in dict.fromkeys(entity_of(record) for record in records):
            if not self._valid(image, entity, where):
                state = entity_state(image, entity)
                self.stats.skipped_records += len(state)
                self.stats.applied_records -= len(state)
                removals.extend(replacing(image, entity, ()))
        return image.apply(removals) if removals else image

    def _check(self, image: MetadataImage, entities: Iterable[Entity]) -> None:
        if self.check is None:
            return
        for entity in entities:
            state = entity_state(image, entity)
            if state:
                self.check(state)

    def _valid(self, image: MetadataImage, entity: Entity, where: str) -> bool:
        try:
            self._check(image, (entity,))
        except Exception as error:  # whatever the rules raise, it is refused
            logger.error(
                "metadata store %s: skipping %s of %s: %s", self.directory, entity, where, error
            )
            return False
        return True

    def _skipped(self, count: int, where: str, error: Exception) -> None:
        self.stats.skipped_records += count
        text = str(error)
        logger.error(
            "metadata store %s: skipping %d record(s) of %s: %s: %s",
            self.directory,
            count,
            where,
            type(error).__name__,
            text[:300] + ("..." if len(text) > 300 else ""),
        )


def _load_snapshot(
    directory: Path, legacy: list[Path], replay: _Replay
) -> tuple[MetadataImage, int]:
    snapshots = _list(directory, SNAPSHOT_SUFFIX)
    if not snapshots:
        return MetadataImage(), 0
    offset, path = snapshots[-1]
    content = read_file(path.read_bytes())
    batches, reason = content.batches, content.reason
    if reason is not None or len(batches) != 1 or batches[0].base_offset != offset:
        raise MetadataCorruptionError(
            f"snapshot {path} is damaged at byte {content.valid_end}: {reason or 'bad content'}"
        )
    if content.format_version == 1:
        legacy.append(path)
    return replay.snapshot(batches[0].records, path.name), offset


def _replay_segments(
    directory: Path,
    image: MetadataImage,
    snapshot_offset: int,
    legacy: list[Path],
    replay: _Replay,
) -> tuple[MetadataImage, int, int, int]:
    """Replay the records at or after ``snapshot_offset``; add format-1 files to ``legacy``.

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
        content = read_file(data)
        batches, valid_end, reason = content.batches, content.valid_end, content.reason
        if content.format_version == 1:
            legacy.append(path)
        if reason is not None:
            if index != len(segments) - 1 or not content.torn_tail:
                raise MetadataCorruptionError(
                    f"segment {path} is damaged at byte {valid_end} ({reason}): not a torn write"
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
            image = replay.batch(image, records, f"{path.name} at offset {batch.base_offset}")
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
