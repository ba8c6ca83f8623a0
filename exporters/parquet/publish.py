"""Atomic publication of staged Parquet files, under a manifest, and recovery after a crash.

Layout under the landing root (the exporter's ``path``)::

    metrics/date=YYYY-MM-DD/hour=HH/part-<first>-<last>-w<worker>.parquet   published
    metrics/date=.../hour=.../part-e<epoch>-<first>-<last>-w<worker>.parquet   (epoch > 0)
    pushes/date=.../hour=.../part-...parquet                                 (raw = true)
    _landing/staging/*.parquet.tmp    written by the workers, fsynced, not yet published
    _landing/manifests/e<epoch>-<end>.json   what one publication covers
    _landing/lock                     one exporter per landing root

``_landing`` starts with an underscore, so Spark, Hive and pyarrow datasets
ignore it when they read ``metrics/``.

The protocol, for one generation (the pushes ``first..last`` of the log):

1. every file of the generation is written to ``staging/`` and fsynced, with
   the staging directory;
2. the manifest (offset range, and each file's staged and final name) is
   written to a temporary file, fsynced, renamed into ``manifests/``, and the
   directory fsynced: **this rename is the commit point**;
3. each staged file is renamed to its final partition path (new directories
   created and their parents fsynced), and the touched directories fsynced;
4. older manifests are deleted: only the newest is needed, to know where the
   landing stands.

``recover`` makes any crash look like "before 2" or "after 3": it rolls every
manifest forward (renames the staged files still there; renaming is
idempotent), deletes staged files no manifest names (a generation that never
reached its commit point), and returns one past the highest offset a
manifest covers. Final names are unique (offset ranges never overlap), and a
published file is never written again.

Offsets are unique only within one ingest log, so every manifest also
records the id of the log the landing is fed from and the landing's *offset
epoch*: 0 at first, one more each time the landing is explicitly moved to a
new log (``log_epoch.py``). File names of epochs after 0 carry the epoch, so
they never collide with the names of earlier epochs. The newest manifest is
the one with the highest ``(epoch, last_offset)``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from durable.fs import fsync_dir, make_dirs

__all__ = [
    "LANDING_DIR",
    "Manifest",
    "PublishedFile",
    "Recovery",
    "publish",
    "recover",
]

_log = logging.getLogger(__name__)

LANDING_DIR: Final = "_landing"
STAGING_DIR: Final = "staging"
MANIFEST_DIR: Final = "manifests"
STAGED_SUFFIX: Final = ".parquet.tmp"
_MANIFEST_VERSION: Final = 2
#: Version 1 manifests (written before log ids existed) are read as epoch 0, log id unknown.
_READABLE_VERSIONS: Final = frozenset({1, _MANIFEST_VERSION})


@dataclass(frozen=True, slots=True)
class PublishedFile:
    """One file of a generation: where a worker staged it, where it is published."""

    staged: str  # name inside _landing/staging/
    final: str  # path relative to the landing root, e.g. metrics/date=…/hour=…/part-….parquet
    rows: int
    size: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one publication covers: every push ``first_offset..last_offset`` (inclusive).

    ``log_id`` is the ingest log the offsets belong to (``None``: unknown,
    from before log ids existed), ``epoch`` the landing's offset epoch. A
    manifest with no files and ``last_offset = first_offset - 1`` covers no
    push; it records where the landing stands for a log (see ``log_epoch.py``).
    """

    first_offset: int
    last_offset: int
    files: tuple[PublishedFile, ...]
    log_id: str | None = None
    epoch: int = 0

    @property
    def name(self) -> str:
        # Named by the epoch and the end it reaches: unique, since the end
        # only grows within an epoch and ``last_offset`` may be -1.
        return f"e{self.epoch:06d}-{self.last_offset + 1:020d}.json"

    @property
    def order(self) -> tuple[int, int, bool]:
        """Newer sorts higher; a manifest naming its log beats an unnamed one of the same range."""
        return (self.epoch, self.last_offset, self.log_id is not None)

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "version": _MANIFEST_VERSION,
            "log_id": self.log_id,
            "epoch": self.epoch,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "files": [
                {"staged": f.staged, "final": f.final, "rows": f.rows, "size": f.size}
                for f in self.files
            ],
        }
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        body = json.loads(data)
        if body.get("version") not in _READABLE_VERSIONS:
            raise ValueError(f"unknown manifest version {body.get('version')!r}")
        log_id = body.get("log_id")
        return cls(
            first_offset=int(body["first_offset"]),
            last_offset=int(body["last_offset"]),
            files=tuple(
                PublishedFile(str(f["staged"]), str(f["final"]), int(f["rows"]), int(f["size"]))
                for f in body["files"]
            ),
            log_id=None if log_id is None else str(log_id),
            epoch=int(body.get("epoch", 0)),
        )


@dataclass(slots=True)
class Recovery:
    """What ``recover`` found and did."""

    durable_offset: int = 0
    newest: Manifest | None = None  # where the landing stands: its log id, epoch and end
    manifests: int = 0
    rolled_forward: int = 0  # staged files renamed into place on recovery
    missing: int = 0  # files a manifest names that are neither staged nor published
    discarded: int = 0  # staged files of generations that never committed


def staging_dir(root: Path) -> Path:
    return root / LANDING_DIR / STAGING_DIR


def manifest_dir(root: Path) -> Path:
    return root / LANDING_DIR / MANIFEST_DIR


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Step 2, the commit point: temp file, fsync, rename, fsync the directory."""
    directory = manifest_dir(root)
    temporary = directory / (manifest.name + ".tmp")
    with temporary.open("wb") as file:
        file.write(manifest.to_json())
        file.flush()
        os.fsync(file.fileno())
    temporary.rename(directory / manifest.name)
    fsync_dir(directory)


def move_into_place(root: Path, manifest: Manifest) -> tuple[int, int]:
    """Step 3: rename each staged file to its final path; returns (moved, missing)."""
    staging = staging_dir(root)
    touched: set[Path] = set()
    moved = missing = 0
    for file in manifest.files:
        source = staging / file.staged
        target = root / file.final
        if target.exists():
            # Renamed before a crash; a staged copy can only be a leftover.
            source.unlink(missing_ok=True)
            continue
        if not source.exists():
            missing += 1
            _log.error(
                "parquet landing: %s (offsets %d..%d) is neither staged nor published",
                file.final,
                manifest.first_offset,
                manifest.last_offset,
            )
            continue
        make_dirs(target.parent)
        source.rename(target)
        touched.add(target.parent)
        moved += 1
    for directory in touched:
        fsync_dir(directory)
    if moved:
        fsync_dir(staging)
    return moved, missing


def drop_older_manifests(root: Path, keep: Manifest) -> None:
    """Step 4: only the newest manifest is needed to know where the landing stands."""
    directory = manifest_dir(root)
    removed = False
    for path in directory.glob("*.json"):
        if path.name != keep.name:
            path.unlink(missing_ok=True)
            removed = True
    if removed:
        fsync_dir(directory)


def publish(root: Path, manifest: Manifest) -> None:
    """Steps 2 to 4 for files already staged and fsynced (step 1, done by the workers)."""
    write_manifest(root, manifest)
    _, missing = move_into_place(root, manifest)
    if missing:
        raise FileNotFoundError(f"{missing} staged file(s) of {manifest.name} vanished")
    drop_older_manifests(root, manifest)


def prepare(root: Path) -> None:
    """Create the landing's private directories (durably)."""
    make_dirs(staging_dir(root))
    make_dirs(manifest_dir(root))


def read_manifests(root: Path) -> list[Manifest]:
    """Every committed manifest, changing nothing (none if the landing is new)."""
    directory = manifest_dir(root)
    if not directory.is_dir():
        return []
    return [Manifest.from_json(p.read_bytes()) for p in sorted(directory.glob("*.json"))]


def recover(root: Path) -> Recovery:
    """Roll every committed generation forward, discard uncommitted ones; see the module doc."""
    prepare(root)
    result = Recovery()
    directory = manifest_dir(root)
    for leftover in directory.glob("*.json.tmp"):
        leftover.unlink()
    manifests = read_manifests(root)
    named: set[str] = set()
    for manifest in manifests:
        moved, missing = move_into_place(root, manifest)
        result.rolled_forward += moved
        result.missing += missing
        named.update(f.staged for f in manifest.files)
    staging = staging_dir(root)
    for path in staging.iterdir():
        if path.name not in named:
            path.unlink()
            result.discarded += 1
    if result.discarded:
        fsync_dir(staging)
    if manifests:
        newest = max(manifests, key=lambda m: m.order)
        drop_older_manifests(root, newest)
        result.newest = newest
        result.durable_offset = newest.last_offset + 1
        result.manifests = len(manifests)
    fsync_dir(directory)
    return result
