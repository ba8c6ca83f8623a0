"""A real, tiny file system for disk-full tests: a tmpfs mounted for the test and removed after.

ENOSPC then comes from the kernel, at whatever write or fsync meets it, rather
than from an injected exception. The tests run as root (the project's machines
and CI do); mounting needs that.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {result.stderr.strip()}")


@contextlib.contextmanager
def tiny_fs(mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """``mount_point`` as a tmpfs of ``size_bytes``; unmounted (lazily) on the way out."""
    mount_point.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mount_point))
    try:
        yield mount_point
    finally:
        _run("umount", "-l", str(mount_point))


def resize(mount_point: Path, size_bytes: int) -> None:
    """Grow (or shrink) a mounted tmpfs: the disk-full cause goes away."""
    _run("mount", "-o", f"remount,size={size_bytes}", str(mount_point))


def fill(directory: Path, name: str = "filler") -> Path:
    """Take every free byte of ``directory``'s file system; remove the file to give them back."""
    path = directory / name
    chunk = b"\0" * 65536
    with path.open("wb", buffering=0) as file:
        try:
            for _ in range(1_000_000):  # bounded; a tiny fs fills long before
                file.write(chunk)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    # The last partial page, byte by byte.
    with path.open("ab", buffering=0) as file, contextlib.suppress(OSError):
        for _ in range(65536):
            file.write(b"\0")
    return path
