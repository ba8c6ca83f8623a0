"""Data files into a shared table, exactly once per node: snapshot properties and resume.

Each append's snapshot carries the node's id, the id of the ingest log it
was fed from and the log offsets it covers (``kip714.node-id``,
``kip714.log-id``, ``kip714.offset-start``, ``kip714.offset-end``). On start a
node walks the table's snapshot history from the current snapshot back to
the newest one it wrote and resumes after its ``offset-end``, as Iceberg's
Kafka Connect sink does with its source offsets. A commit is atomic (the
catalog swaps the metadata pointer), so either every file of a generation is
in the table or none is; files written before a crash and never committed
are referenced by no snapshot, never read, and removed by orphan cleanup.

Several nodes append to one table: a commit that loses the race raises
``CommitFailedException``; it is retried with backoff on the refreshed
table, with the same data files (they are written once). Before each retry
the history is checked for this very commit, so a commit whose answer was
lost (a REST catalog's timeout) is never applied twice.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pyiceberg.exceptions import CommitFailedException

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = [
    "COMMIT_ATTEMPTS",
    "LOG_ID",
    "NODE_ID",
    "OFFSET_END",
    "OFFSET_START",
    "Position",
    "commit_files",
    "committed_position",
]

_log = logging.getLogger(__name__)

NODE_ID: Final = "kip714.node-id"
LOG_ID: Final = "kip714.log-id"
OFFSET_START: Final = "kip714.offset-start"
OFFSET_END: Final = "kip714.offset-end"
#: Attempts of one commit before the landing gives up (fail-stop, resumed by a restart).
COMMIT_ATTEMPTS: Final = 20
_BACKOFF_S: Final = (0.05, 2.0)


@dataclass(frozen=True, slots=True)
class Position:
    """The newest commit of one node: which log fed it, and the last offset it covers."""

    log_id: str | None
    offset_end: int
    snapshot_id: int


def committed_position(table: Table, node_id: str) -> Position | None:
    """The newest snapshot ``node_id`` appended, walking the history from the newest snapshot.

    Every snapshot of the table's metadata is walked, newest first, not only
    the parent chain of the current one: expiry may have removed a parent
    (it keeps each node's newest snapshot, see ``maintenance``), and all
    kip714 commits go to the main branch, so every retained snapshot is in
    its history.
    """
    history = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0, reverse=True)
    for snapshot in history:
        summary = snapshot.summary
        if summary is None:
            continue
        props = summary.additional_properties
        if props.get(NODE_ID) != node_id or OFFSET_END not in props:
            continue
        return Position(props.get(LOG_ID), int(props[OFFSET_END]), snapshot.snapshot_id)
    return None


def commit_files(
    table: Table,
    files: list[str],
    properties: dict[str, str],
    on_conflict: list[int] | None = None,
) -> Table:
    """Append ``files`` in one snapshot with ``properties``, retrying lost races; the table after.

    ``on_conflict``, when given, gets one element per lost race (a counter).

    Raises:
        CommitFailedException: Still losing after ``COMMIT_ATTEMPTS`` attempts.
    """
    node, end = properties[NODE_ID], int(properties[OFFSET_END])
    log_id = properties.get(LOG_ID)
    commit_id = uuid.uuid4().hex
    props = {**properties, "kip714.commit-id": commit_id}
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            table.add_files(files, snapshot_properties=props, check_duplicate_files=False)
            return table
        except CommitFailedException:
            if on_conflict is not None:
                on_conflict.append(1)
            if attempt + 1 == COMMIT_ATTEMPTS:
                raise
            low, high = _BACKOFF_S
            time.sleep(
                random.uniform(low, min(high, low * 2**attempt))
            )  # jitter spreads nodes apart
            table = table.refresh()
            done = committed_position(table, node)
            if done is not None and done.log_id == log_id and done.offset_end >= end:
                _log.warning("commit %s was applied although it reported a conflict", commit_id)
                return table
    raise AssertionError("unreachable")
