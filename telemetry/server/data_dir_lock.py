"""One owner per data directory: an exclusive ``flock`` on ``<data_dir>/kip714.lock``.

Two servers on one directory would both append to the ingest log and both
recover it, each cutting the other's records as "torn" (offsets reused,
acknowledged pushes lost). The lock is taken before anything in the
directory is opened and held until the owner stops; the kernel drops it
when the process dies, so a ``kill -9`` never leaves a stale lock behind.
The owner's pid is written into the file only so the refusal can name it.

``kip714 log skip`` takes the same lock, so it never edits positions under
a running server; ``kip714 log status`` only probes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from typing import Final, final

from durable.fs import make_dirs

__all__ = ["LOCK_FILE", "DataDirLock", "DataDirLockedError", "holder"]

LOCK_FILE: Final = "kip714.lock"


class DataDirLockedError(Exception):
    """Another process holds the data directory."""

    def __init__(self, data_dir: Path, holder_pid: int | None) -> None:
        who = f"pid {holder_pid}" if holder_pid is not None else "a process whose pid is unknown"
        super().__init__(f"data directory {data_dir} is in use by another kip714 ({who})")
        self.data_dir = data_dir
        self.holder_pid = holder_pid


@final
class DataDirLock:
    """An exclusive lock on a data directory; ``release`` (or process exit) gives it back."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: str | os.PathLike[str]) -> DataDirLock:
        """Create ``data_dir`` if needed and lock it without waiting.

        Raises:
            DataDirLockedError: Another process (or another lock in this one) holds it.
            OSError: The directory or the lock file cannot be created.
        """
        directory = Path(data_dir)
        make_dirs(directory)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise DataDirLockedError(directory, holder(directory)) from None
        # Write before truncating: a reader racing us sees the new pid on the
        # first line, never an empty file.
        pid = f"{os.getpid()}\n".encode()
        os.pwrite(fd, pid, 0)
        os.ftruncate(fd, len(pid))
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the directory back. Idempotent; the file stays (unlinking it would race)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def holder(data_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the process holding ``data_dir``, or ``None`` if it is free.

    Read-only: a missing lock file means nobody holds the directory, and is
    not created. The probe takes a shared lock for an instant; a server
    starting in exactly that instant is refused and can simply be started again.
    """
    path = Path(data_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            return _pid_in(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _pid_in(fd: int) -> int | None:
    first_line = os.pread(fd, 64, 0).split(b"\n", 1)[0]
    with contextlib.suppress(ValueError):
        return int(first_line)
    return None
