"""A class-data-sharing archive of the driver JVM's classes, kept in the cache for the next run.

Why: a small run spends most of its wall time in cold JVM code, and a good
part of that is loading, parsing and verifying some 17,000 classes of Spark,
Hadoop and Scala. A dynamic AppCDS archive (JDK 13+, JEP 350) holds them
ready to map: the next JVM starts with them already parsed and verified
(docs/rollups.md, "Small runs and the summary", has the figures).

How a stale or broken archive is never used, and never slows a run:

- The archive's name is a digest of what the JVM checks it against: the
  ``java`` the launcher runs (``$JAVA_HOME/bin/java``, else ``java`` on the
  PATH, as Spark's ``spark-class`` picks it) with its release file and the
  size and mtime of its class modules and ``libjvm.so``, and every jar of the
  classpath (name, size, mtime). A new JDK, PySpark or jar gives a new name:
  the old archive is never passed again, and a new one is built.
- A run that finds no archive adds ``-XX:ArchiveClassesAtExit`` with a
  private part file: the JVM writes it when it exits, after this process
  has printed its summary and exited, so no run waits for it. The JVM writes
  the archive's header (its magic number) last, so a part file that starts
  with the magic is whole: the next run renames it into place (atomically,
  ``os.replace``). A part file without it is a dump still being written
  (no second dump starts) or, after ``_PART_TTL_S``, a dead one (removed).
- A file is passed as ``-XX:SharedArchiveFile`` only if it starts with the
  magic: for a file that does not, the JVM drops even the JDK's own default
  archive. The JVM checks everything else (its own version, the base
  archive, each jar's size and mtime) and runs without the archive when
  anything differs.
- ``-Xlog:cds*=off``: the JVM's CDS warnings (an unusable archive, the
  classes a dump skips: thousands of lines) would go to the JVM's stdout.

Any error of the cache directory (read-only, full) means no archive and no
dump: the run goes on as without this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from spark_jobs.jars import cache_root

__all__ = ["ARCHIVE_MAGIC", "QUIET", "archive_dir", "archive_key", "java_binary", "jvm_options"]

ARCHIVE_MAGIC = (0xF00BABA8).to_bytes(4, "little")
"""A dynamic CDS archive's first bytes (``CDS_DYNAMIC_ARCHIVE_MAGIC``, little-endian)."""

QUIET = "-Xlog:cds*=off"
"""Keeps CDS warnings (JVM unified logging, on stdout by default) off the user's terminal."""

_FORMAT = "2"
"""Part of the key: bump when what an archive is built from changes (2: the
class path in the launcher's order, the Iceberg jars on it in local mode)."""
_SUFFIX = ".jsa"
_PART = ".part"
_PART_TTL_S = 15 * 60
"""A part file without the magic this old is a dump that died (a dump takes under a minute)."""
_KEEP = 2
"""Archives kept (newest first): another JDK or PySpark on the machine may use the other."""


def archive_dir() -> Path:
    return cache_root() / "cds"


def java_binary() -> Path | None:
    """The ``java`` Spark's launcher scripts run: ``$JAVA_HOME/bin/java``, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if found is None or not os.path.isfile(found):
        return None
    return Path(found).resolve()


def _stat_line(path: Path) -> str:
    try:
        status = path.stat()
    except OSError:
        return f"{path} -"
    return f"{path} {status.st_size} {status.st_mtime_ns}"


def archive_key(java: Path, classpath: Iterable[Path]) -> str:
    """A digest of the JVM build and of the class path's jars, as the JVM validates an archive."""
    home = java.parent.parent
    digest = hashlib.sha256(f"kip714-cds {_FORMAT}\n".encode())
    with contextlib.suppress(OSError):
        digest.update((home / "release").read_bytes())
    for part in (java, home / "lib" / "modules", home / "lib" / "server" / "libjvm.so"):
        digest.update(_stat_line(part).encode() + b"\n")
    for jar in classpath:  # in order: the JVM checks the class path's order too
        digest.update(_stat_line(jar).encode() + b"\n")
    for name in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH"):
        digest.update(f"{name}={os.environ.get(name, '')}\n".encode())
    return digest.hexdigest()[:32]


def _whole(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(len(ARCHIVE_MAGIC)) == ARCHIVE_MAGIC
    except OSError:
        return False


def _settle_parts(directory: Path, key: str, now: float) -> bool:
    """Promote whole dumps of ``key``, remove dead ones; True if one is still being written."""
    writing = False
    for part in directory.glob(f".{key}.*{_PART}"):
        if _whole(part):
            os.replace(part, directory / f"{key}{_SUFFIX}")
        elif now - part.stat().st_mtime > _PART_TTL_S:
            part.unlink(missing_ok=True)
        else:
            writing = True
    return writing


def _prune(directory: Path, keep: Path, now: float) -> None:
    """Keep the newest archives (``keep`` always) and no dead part file of any key."""
    archives = sorted(directory.glob(f"*{_SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [a for a in archives if a != keep][_KEEP - 1 :]:
        old.unlink(missing_ok=True)
    for part in directory.glob(f".*{_PART}"):
        if not _whole(part) and now - part.stat().st_mtime > _PART_TTL_S:
            part.unlink(missing_ok=True)


def jvm_options(classpath: Sequence[Path], *, now: float | None = None) -> list[str]:
    """Driver JVM options: use this JVM build's archive, or have the JVM write one at exit.

    Empty when there is no usable ``java`` or cache directory, or while
    another run's dump is still being written.
    """
    java = java_binary()
    if java is None:
        return []
    clock = time.time() if now is None else now
    directory = archive_dir()
    key = archive_key(java, classpath)
    archive = directory / f"{key}{_SUFFIX}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writing = _settle_parts(directory, key, clock)
        if _whole(archive):
            _prune(directory, archive, clock)
            return [f"-XX:SharedArchiveFile={archive}", QUIET]
        if writing:
            return []
        part = directory / f".{key}.{secrets.token_hex(4)}{_PART}"
        part.touch()  # claims the dump: a run starting meanwhile does not dump too
    except OSError:
        return []
    return [f"-XX:ArchiveClassesAtExit={part}", QUIET]
