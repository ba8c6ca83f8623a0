"""Durable directory operations: one copy for the ingest log, the metadata store and the landing.

``fsync`` on a file covers its data and inode, not the directory entry that
names it: without an fsync of the directory, a new file (or a renamed one)
can vanish in a power loss even though its contents were synced.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["fsync_dir", "make_dirs"]


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (creations, renames, deletions) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that fsyncs the parent of every level it creates."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for level in reversed(missing):
        with contextlib.suppress(FileExistsError):
            level.mkdir()
        fsync_dir(level.parent)
