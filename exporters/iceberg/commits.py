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

Fed from the pushes topic (``[log] store = "kafka"``), a partition moves
between nodes, so positions belong to the topic, not to a node: each commit
carries the topic's cluster id and topic id and, as JSON, the next offset
of *every* partition landed so far (``kip714.kafka.offsets``: the previous
snapshot's map with this commit's partitions advanced). A commit is added
only if, in the snapshot it is applied on, each of its partitions ends
where the generation starts (``commit_topic_files``): Iceberg's optimistic
commit refuses a stale base, and the retry checks again on the refreshed
table, so a node that lost a partition (a rebalance, a zombie) commits
nothing for it (*fenced*). The map is looked up by topic id: a topic created
again under the same name starts from its offset 0 (Apache Iceberg #16360).

Several nodes append to one table: a commit that loses the race raises
``CommitFailedException``; it is retried with backoff on the refreshed
table, with the same data files (they are written once). Before each retry
the history is checked for this very commit, so a commit whose answer was
lost (a REST catalog's timeout) is never applied twice.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pyiceberg.exceptions import CommitFailedException

from exporters.iceberg.data_files import append_files
from exporters.iceberg.fleet import advance

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from exporters.iceberg.fleet import ControlRange, FileSet

__all__ = [
    "CLUSTER_ID",
    "COMMIT_ATTEMPTS",
    "COMMIT_ID",
    "CONTROL_OFFSET",
    "CONTROL_TOPIC_ID",
    "FILE_SETS",
    "LOG_ID",
    "NODE_ID",
    "OFFSET_END",
    "OFFSET_START",
    "TOPIC",
    "TOPIC_ID",
    "TOPIC_OFFSETS",
    "FencedError",
    "Position",
    "commit_files",
    "commit_fleet",
    "commit_topic_files",
    "committed_position",
    "control_offset",
    "last_fleet_commit_ms",
    "topic_offsets",
]

_log = logging.getLogger(__name__)

NODE_ID: Final = "kip714.node-id"
LOG_ID: Final = "kip714.log-id"
OFFSET_START: Final = "kip714.offset-start"
OFFSET_END: Final = "kip714.offset-end"
COMMIT_ID: Final = "kip714.commit-id"
CLUSTER_ID: Final = "kip714.kafka.cluster-id"
TOPIC: Final = "kip714.kafka.topic"
TOPIC_ID: Final = "kip714.kafka.topic-id"
TOPIC_OFFSETS: Final = "kip714.kafka.offsets"
#: A fleet commit (``fleet.py``): the control topic's id, the next offset of it to read,
#: and how many file sets the snapshot adds.
CONTROL_TOPIC_ID: Final = "kip714.control.topic-id"
CONTROL_OFFSET: Final = "kip714.control.offset"
FILE_SETS: Final = "kip714.file-sets"
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
    return _add_retrying(table, lambda _table: (files, properties), on_conflict)


class FencedError(Exception):
    """The table does not continue where a generation starts: another node landed that range."""


def _newest_first(table: Table) -> list[Snapshot]:
    return sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0, reverse=True)


def topic_offsets(table: Table, topic_id: str) -> dict[int, int]:
    """Per partition of topic ``topic_id``, the next offset the table does not hold.

    From the newest snapshot of that topic id: every snapshot of the
    metadata is walked, as in ``committed_position`` (expiry keeps the
    newest one of each topic id, see ``maintenance``).
    """
    for snapshot in _newest_first(table):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if props.get(TOPIC_ID) == topic_id and TOPIC_OFFSETS in props:
            return {int(p): int(o) for p, o in json.loads(props[TOPIC_OFFSETS]).items()}
    return {}


def _applied(table: Table, commit_id: str) -> bool:
    return any(
        s.summary is not None and s.summary.additional_properties.get(COMMIT_ID) == commit_id
        for s in table.metadata.snapshots
    )


def commit_topic_files(
    table: Table,
    files: list[str],
    properties: dict[str, str],
    ranges: Mapping[int, tuple[int | None, int]],
    on_conflict: list[int] | None = None,
) -> Table:
    """Append ``files`` holding offsets ``start..end-1`` of each partition (``ranges``).

    ``start`` is where the table stood for that partition when the
    generation began (``None``: it held none of it). The commit goes in only
    while that is still so; ``properties`` name the topic (``TOPIC_ID`` and
    the others).

    Raises:
        FencedError: A partition of the table is elsewhere now (nothing committed).
        CommitFailedException: Still losing races after ``COMMIT_ATTEMPTS`` attempts.
    """
    topic_id = properties[TOPIC_ID]

    def prepare(table: Table) -> tuple[list[str], dict[str, str]]:
        landed = topic_offsets(table, topic_id)
        for partition, (start, _) in sorted(ranges.items()):
            if landed.get(partition) != start:
                raise FencedError(
                    f"partition {partition} of {properties.get(TOPIC, 'the topic')} is landed "
                    f"up to offset {landed.get(partition)} in the table, the generation starts "
                    f"at {start}"
                )
        landed.update({partition: end for partition, (_, end) in ranges.items()})
        offsets = json.dumps({str(p): o for p, o in sorted(landed.items())})
        return files, {**properties, TOPIC_OFFSETS: offsets}

    return _add_retrying(table, prepare, on_conflict)


def control_offset(table: Table, control_topic_id: str) -> int | None:
    """The control offset stored by the newest fleet commit of that control topic id."""
    for snapshot in _newest_first(table):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if props.get(CONTROL_TOPIC_ID) == control_topic_id and CONTROL_OFFSET in props:
            return int(props[CONTROL_OFFSET])
    return None


def commit_fleet(
    table: Table,
    sets: Sequence[FileSet],
    properties: dict[str, str],
    control: ControlRange,
    on_conflict: list[int] | None = None,
) -> tuple[Table, list[str], list[str]]:
    """Add every contiguous set of ``sets`` in one snapshot; (the table, added, dropped ids).

    Judged on the table the commit is applied to, again on every retry:
    the table's stored control offset must be ``control.start`` (else this
    committer is a zombie: ``FencedError``, nothing committed), and each set
    must continue the table's offsets (``fleet.advance``; the others are
    dropped, their files orphans). Nothing is committed when no set is added.

    Raises:
        FencedError: Another committer moved the table's control offset.
        CommitFailedException: Still losing races after ``COMMIT_ATTEMPTS`` attempts.
    """
    topic_id = properties[TOPIC_ID]
    judged: dict[str, list[str]] = {"added": [], "dropped": []}

    def prepare(table: Table) -> tuple[list[str], dict[str, str]] | None:
        stored = control_offset(table, control.topic_id)
        if stored != control.start:
            raise FencedError(
                f"the table's control offset is {stored}, this committer read from "
                f"{control.start}: another committer commits now"
            )
        view, added, dropped = advance(topic_offsets(table, topic_id), sets)
        judged["added"], judged["dropped"] = [s.set_id for s in added], [s.set_id for s in dropped]
        files = [f.location for s in added for f in s.files]
        if not files:
            return None
        return files, {
            **properties,
            TOPIC_OFFSETS: json.dumps({str(p): o for p, o in sorted(view.items())}),
            CONTROL_TOPIC_ID: control.topic_id,
            CONTROL_OFFSET: str(control.end),
            FILE_SETS: str(len(added)),
        }

    table = _add_retrying(table, prepare, on_conflict)
    return table, judged["added"], judged["dropped"]


def last_fleet_commit_ms(table: Table) -> int | None:
    """When the newest fleet commit (one with a control offset) was made, ms since the epoch."""
    for snapshot in _newest_first(table):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if CONTROL_OFFSET in props:
            return snapshot.timestamp_ms
    return None


def _add_retrying(
    table: Table,
    prepare: Callable[[Table], tuple[list[str], dict[str, str]] | None],
    on_conflict: list[int] | None,
) -> Table:
    """Append what ``prepare(table)`` names in one snapshot, retrying lost races; the table after.

    ``prepare`` judges the table each attempt is applied to (it may raise,
    or return ``None``: nothing to commit). A lost race is retried with
    jittered backoff on the refreshed table; before each retry the history
    is checked for this very commit (``COMMIT_ID``), so a commit whose
    answer was lost is never applied twice. ``on_conflict`` gets one
    element per lost race.

    Raises:
        CommitFailedException: Still losing after ``COMMIT_ATTEMPTS`` attempts.
    """
    commit_id = uuid.uuid4().hex
    for attempt in range(COMMIT_ATTEMPTS):
        prepared = prepare(table)
        if prepared is None:
            return table
        files, properties = prepared
        try:
            append_files(table, files, {**properties, COMMIT_ID: commit_id})
            return table
        except CommitFailedException:
            if on_conflict is not None:
                on_conflict.append(1)
            if attempt + 1 == COMMIT_ATTEMPTS:
                raise
            low, high = _BACKOFF_S
            time.sleep(random.uniform(low, min(high, low * 2**attempt)))  # spreads nodes apart
            table = table.refresh()
            if _applied(table, commit_id):
                _log.warning("commit %s was applied although it reported a conflict", commit_id)
                return table
    raise AssertionError("unreachable")
