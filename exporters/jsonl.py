"""The ``jsonl`` exporter: one JSON object per data point, appended to one file.

Meant for eyeballing, piping into ``jq`` and small deployments; the Parquet
landing is the analytical store. Each line is one row of the landing schema
(``exporters.otlp_rows``), keys in ``otlp_rows.COLUMNS`` order, and lines are
in log order. ``time``, ``start_time`` and ``received_time`` are ISO-8601 UTC
strings with nanosecond precision (``"2026-11-21T06:08:00.705846000Z"``), or
``null``; every other value is the column's JSON value (attribute maps as
objects, lists as arrays; no NaN or infinity ever appears).

Delivery is at least once: a crash or a failed ``export`` between writing a
batch and the host committing it makes the batch appear again. Every line
carries ``push_offset``; readers that need each push once keep, per
``push_offset``, only the first complete run of its lines. A crash in the
middle of a write can also leave one truncated line; ``start`` ends such a
line with a newline so later lines stay intact, and readers skip lines that
do not parse.

Options (``[exporters.NAME.options]``):
    path: The file to append to, or an existing directory (or a path ending
        in a separator) meaning ``<dir>/kip714.jsonl``. Parent directories
        are created in ``start``.
    fsync: ``true`` to ``os.fsync`` the file on every ``flush`` and on
        ``close`` (default ``false``: the OS decides when data reaches disk).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, final

from exporters.api import TransientExportError
from exporters.options import bool_option, check_keys, path_option
from exporters.otlp_rows import FlattenStats, flatten_batch, iter_rows

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exporters.api import LoggedPush

__all__ = ["DEFAULT_FILE_NAME", "JsonlExporter"]

DEFAULT_FILE_NAME: Final = "kip714.jsonl"

_log = logging.getLogger(__name__)
_OPTIONS = frozenset({"path", "fsync"})
_TIME_COLUMNS = ("time", "start_time", "received_time")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@final
class JsonlExporter:
    """Append each data point of each logged push as one JSON line.

    Raises (at construction):
        TypeError: An unknown option, or ``path`` missing.
        ValueError: An option with an invalid value.
    """

    def __init__(self, config: Mapping[str, Any], /) -> None:
        check_keys(config, _OPTIONS, "jsonl")
        self._configured_path = path_option(config, "file or directory path")
        self._fsync = bool_option({"fsync": False, **config}, "fsync")
        self._path: Path | None = None
        self._file: IO[bytes] | None = None
        self._closed = False
        self._lock = asyncio.Lock()
        self.stats = FlattenStats()
        """Running totals of what flattening counted (NaNs, undecodable pushes, ...)."""

    @property
    def path(self) -> Path | None:
        """The file written to; ``None`` until ``start`` resolved it."""
        return self._path

    async def start(self) -> None:
        """Resolve the path, create parent directories and open the file for appending."""
        async with self._lock:
            if self._closed:
                raise RuntimeError("jsonl exporter is closed")
            if self._file is None:
                self._path, self._file = await asyncio.to_thread(_open, self._configured_path)

    async def export(self, batch: Sequence[LoggedPush], /) -> None:
        """Write one line per data point of ``batch``, in order.

        Raises:
            TransientExportError: Writing failed (disk full, I/O error); the
                file is cut back to where the batch began, so a retry does
                not leave a partial batch behind.
        """
        async with self._lock:
            file = self._file
            if file is None:
                raise RuntimeError("jsonl exporter used before start() or after close()")
            stats = await asyncio.to_thread(_write_batch, file, tuple(batch))
        self.stats.merge(stats)
        if stats.undecodable_payloads:
            _log.warning(
                "jsonl exporter skipped %d undecodable OTLP payload(s) at offsets %s",
                stats.undecodable_payloads,
                stats.undecodable_offsets,
            )
        dropped = stats.nan_values + stats.inf_values
        if dropped:
            _log.info("jsonl exporter wrote %d NaN/infinite value(s) as null", dropped)

    async def flush(self) -> None:
        """Hand buffered lines to the OS, and fsync them if configured."""
        async with self._lock:
            if self._file is not None:
                await asyncio.to_thread(_flush, self._file, self._fsync)

    async def close(self) -> None:
        """Flush (and fsync if configured) and close the file; idempotent."""
        async with self._lock:
            self._closed = True
            file, self._file = self._file, None
            if file is not None:
                await asyncio.to_thread(_close, file, self._fsync)


def _open(configured: str) -> tuple[Path, IO[bytes]]:
    path = Path(configured)
    if path.is_dir() or configured.endswith((os.sep, "/")):
        path = path / DEFAULT_FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unbuffered: a batch is written as one block anyway, and without a
    # buffer a failed write can be cut back exactly (see _write_batch).
    file = path.open("ab", buffering=0)
    try:
        size = file.seek(0, os.SEEK_END)
        if size:
            with path.open("rb") as reader:
                reader.seek(size - 1)
                torn = reader.read(1) != b"\n"
            if torn:
                # A crash cut the last line short; end it so that the next
                # line does not get glued onto it.
                _write_all(file, b"\n")
    except BaseException:
        file.close()
        raise
    return path, file


def _write_batch(file: IO[bytes], batch: tuple[LoggedPush, ...]) -> FlattenStats:
    columns, stats = flatten_batch(batch)
    times: dict[int, str] = {}
    for name in _TIME_COLUMNS:
        column = columns[name]
        for i, ns in enumerate(column):
            if ns is not None:
                text = times.get(ns)
                if text is None:
                    text = times[ns] = _iso(ns)
                column[i] = text
    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    data = "".join([encode(row) + "\n" for row in iter_rows(columns)]).encode()
    position = file.tell()
    try:
        _write_all(file, data)
    except OSError as exc:
        try:
            file.truncate(position)
            # truncate() leaves the file position where the partial write
            # ended; the next batch must not take that stale end as its start
            # (cutting back to it would pad the file with NUL bytes).
            file.seek(position)
        except OSError:
            _log.exception("jsonl exporter could not cut back a partly written batch")
        raise TransientExportError(f"writing {file.name!r} failed: {exc}") from exc
    return stats


def _write_all(file: IO[bytes], data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = file.write(view)
        if not written:
            raise OSError(f"no progress writing {file.name!r}")
        view = view[written:]


def _iso(ns: int) -> str:
    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = _EPOCH + dt.timedelta(seconds=seconds)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


def _flush(file: IO[bytes], fsync: bool) -> None:
    file.flush()
    if fsync:
        os.fsync(file.fileno())


def _close(file: IO[bytes], fsync: bool) -> None:
    try:
        _flush(file, fsync)
    finally:
        file.close()
