"""Which ingest log a landing belongs to, decided once at start.

The landing skips every offset below the end its newest manifest covers
(exactly once across restarts). That is right only while the offsets come
from the same log: if the log directory was deleted but the landing kept, the
new log starts again at offset 0 and every new push would be taken for a
replay and dropped. So each manifest records the id of the log it was fed
from, and at start:

* no manifest yet, or only manifests from before log ids: the landing adopts
  the current log's id (recorded at once in a manifest that covers no push);
* the same id: resume as always;
* a different id: refuse to start (``LogMismatchError``) before recovery
  touches anything, unless the ``new_log_epoch`` option asks for a new
  *offset epoch*: a manifest for the new log at offset 0 and epoch + 1 is
  recorded, the files of earlier epochs stay untouched, and new file names
  carry the epoch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from exporters.parquet import publish as publishing

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["LogEpoch", "LogMismatchError", "open_landing"]

_log = logging.getLogger(__name__)


class LogMismatchError(RuntimeError):
    """The landing was filled from another ingest log than the one feeding it now."""


@dataclass(frozen=True, slots=True)
class LogEpoch:
    """Where the landing stands: the log it lands (``None`` if unknown), its epoch, its end."""

    log_id: str | None
    epoch: int
    durable_offset: int


def open_landing(
    root: Path, log_id: str | None, *, new_epoch: bool
) -> tuple[publishing.Recovery, LogEpoch]:
    """Check the log id, recover the landing, record the id or a new epoch.

    Blocking: run it in a thread. ``log_id`` is ``None`` when the host does
    not say which log feeds the landing; the landing then behaves as before
    log ids and keeps whatever id its manifests hold.

    Raises:
        LogMismatchError: The newest manifest names another log and
            ``new_epoch`` is false. Nothing on disk was changed.
    """
    before = max(publishing.read_manifests(root), key=lambda m: m.order, default=None)
    if (
        log_id is not None
        and before is not None
        and before.log_id not in (None, log_id)
        and not new_epoch
    ):
        raise LogMismatchError(
            f"the parquet landing {root} holds offsets up to {before.last_offset} of ingest "
            f"log {before.log_id}, but ingest log {log_id} feeds it now (was the log directory "
            f"deleted or replaced?); nothing was changed; to keep the landed files and land "
            f"the new log beside them, set the exporter option new_log_epoch = true"
        )
    recovery = publishing.recover(root)
    newest = recovery.newest
    if newest is None:
        if log_id is not None:
            _record(root, publishing.Manifest(0, -1, (), log_id, 0))
        return recovery, LogEpoch(log_id, 0, 0)
    if log_id is None or newest.log_id == log_id:
        return recovery, LogEpoch(newest.log_id, newest.epoch, recovery.durable_offset)
    if newest.log_id is None:
        _record(root, replace(newest, log_id=log_id))
        return recovery, LogEpoch(log_id, newest.epoch, recovery.durable_offset)
    epoch = newest.epoch + 1
    _record(root, publishing.Manifest(0, -1, (), log_id, epoch))
    _log.warning(
        "parquet landing %s: new offset epoch %d for ingest log %s; the files of ingest log %s "
        "(offsets up to %d, epoch %d) are kept",
        root,
        epoch,
        log_id,
        newest.log_id,
        newest.last_offset,
        newest.epoch,
    )
    return recovery, LogEpoch(log_id, epoch, 0)


def _record(root: Path, manifest: publishing.Manifest) -> None:
    """Make ``manifest`` the newest; its files (if any) were rolled forward by ``recover``."""
    publishing.write_manifest(root, manifest)
    publishing.drop_older_manifests(root, manifest)
