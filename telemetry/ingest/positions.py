"""Durable per-consumer positions: the next offset each exporter will read.

All positions live in one small JSON file replaced atomically (write a temp
file, fsync it, rename it over the old one, fsync the directory). After a
crash the file is either the old or the new version, never a mix, and a
position is durable when ``save_positions`` returns. A handful of consumers committing
a few times a second makes rewriting the whole file cheaper than anything
cleverer.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import TYPE_CHECKING

from durable.cancellation import run_to_completion
from durable.fs import fsync_dir

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

FILE_NAME = "consumers.json"
_TMP_SUFFIX = ".tmp"
_VERSION = 1


def load_positions(directory: Path) -> dict[str, int]:
    """Read the committed positions; none if the file does not exist yet.

    A leftover temp file is a save that crashed before its rename: the old
    file is still the committed state, so the temp file is just removed.

    Raises:
        ValueError: The file exists but is not a positions file. Starting
            over from the log start would replay everything, and starting at
            the end would skip unexported data, so neither is done silently.
    """
    (directory / (FILE_NAME + _TMP_SUFFIX)).unlink(missing_ok=True)
    return read_positions(directory)


def read_positions(directory: Path) -> dict[str, int]:
    """``load_positions`` without removing a leftover temp file: changes nothing on disk.

    Raises:
        ValueError: The file exists but is not a positions file.
    """
    path = directory / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        doc = json.loads(text)
        if doc.get("version") != _VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        consumers = doc["consumers"]
        positions = {str(k): int(v) for k, v in consumers.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: unreadable consumer positions: {exc}") from exc
    if any(v < 0 for v in positions.values()):
        raise ValueError(f"{path}: negative consumer position")
    return positions


def save_positions(directory: Path, positions: Mapping[str, int]) -> None:
    """Replace the positions file atomically and durably (blocking: run in a thread)."""
    tmp = directory / (FILE_NAME + _TMP_SUFFIX)
    data = json.dumps(
        {"version": _VERSION, "consumers": dict(sorted(positions.items()))}, indent=1
    ).encode("utf-8")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / FILE_NAME)
    fsync_dir(directory)


class ConsumerPositions:
    """The in-memory view of the positions file, changed only through durable saves.

    The view is updated only after the new file is on disk, so retention,
    which trusts the view, never deletes a segment a crash could make a
    consumer need again. ``lock`` serializes saves, so the file never goes
    back to an older state when commits overlap. A save runs to its end even
    when its caller is cancelled (the thread writing the temp file cannot be
    stopped), and keeps the lock until then: two threads never write the temp
    file at once, and the view never misses a save that reached the disk.
    """

    def __init__(self, directory: Path, positions: Mapping[str, int]) -> None:
        self._directory = directory
        self._positions = dict(positions)
        self.lock = asyncio.Lock()

    def __contains__(self, consumer: str) -> bool:
        return consumer in self._positions

    def snapshot(self) -> dict[str, int]:
        return dict(self._positions)

    def get(self, consumer: str) -> int:
        return self._positions[consumer]

    def minimum(self) -> int | None:
        return min(self._positions.values(), default=None)

    def slowest(self) -> tuple[str, int] | None:
        return min(self._positions.items(), key=lambda kv: kv[1], default=None)

    async def set(self, consumer: str, offset: int, check: Callable[[], None]) -> None:
        """Save ``consumer`` at ``offset``; ``check`` validates it under the lock."""
        async with self.lock:
            check()
            await self._save({**self._positions, consumer: offset})

    async def remove(self, consumer: str) -> bool:
        async with self.lock:
            if consumer not in self._positions:
                return False
            await self._save({k: v for k, v in self._positions.items() if k != consumer})
            return True

    async def _save(self, positions: dict[str, int]) -> None:
        async def save_and_apply() -> None:
            await asyncio.to_thread(save_positions, self._directory, positions)
            self._positions = positions

        await run_to_completion(save_and_apply())
