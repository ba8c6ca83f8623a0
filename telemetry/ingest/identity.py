"""The ingest log's identity: a random UUID created with the log and kept in its directory.

Offsets are unique only within one log. A consumer that remembers offsets
beyond the log's own directory (the landing records the offsets each
snapshot covers) must notice when the directory was deleted or replaced and offsets
start again at 0, or it would take new pushes for replays. The id is that
signal: it is created once, at the first open of a directory, and never
changes while the directory exists.

Creation is atomic: the id is written to a temporary file, fsynced, and then
hard-linked to its final name, which fails if another opener got there
first; so a reader sees either no id or the whole one, and never two
different ids for one directory.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

from durable.fs import fsync_dir

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["FILE_NAME", "load_or_create_log_id"]

FILE_NAME = "log_id"
_TMP_SUFFIX = ".tmp"


def load_or_create_log_id(directory: Path) -> str:
    """The id stored in ``directory``, created (durably) if the directory has none yet.

    Blocking: run it in a thread.

    Raises:
        ValueError: The id file exists but holds no UUID. Making up a new id
            would make every consumer refuse or restart, so it is not done
            silently.
        OSError: The directory cannot be read or written.
    """
    path = directory / FILE_NAME
    temporary = directory / (FILE_NAME + _TMP_SUFFIX)
    temporary.unlink(missing_ok=True)  # a creation that crashed before its link
    if not path.exists():
        with temporary.open("w", encoding="ascii") as file:
            file.write(f"{uuid.uuid4()}\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        fsync_dir(directory)
    text = path.read_text(encoding="ascii", errors="replace").strip()
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise ValueError(f"{path}: not a log id (expected a UUID): {text[:60]!r}") from None
