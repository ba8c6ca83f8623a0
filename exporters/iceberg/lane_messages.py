"""What crosses the pipe between the serving process and a landing lane, in pure Python.

The serving process unpickles every reply of a worker process; a reply
holding a class of ``rows`` or pyiceberg would import pyarrow or pyiceberg
there. So a lane's start, the tables it opened and a commit's outcome are
these plain dataclasses, and a lane's batch and write replies cross as
``types.SimpleNamespace`` copies of ``rows.BatchReply`` and
``rows.WrittenFile`` (``plain``): the same attributes, no import.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from exporters.iceberg.settings import LakeLocation

__all__ = [
    "CommitOutcome",
    "Committed",
    "FleetOutcome",
    "FleetState",
    "LakeSetup",
    "LaneStart",
    "Opened",
    "TopicBinding",
    "plain",
]


@dataclass(frozen=True, slots=True)
class TopicBinding:
    """The pushes topic feeding the landing (``[log] store = "kafka"``).

    Offsets are positions in one topic id: a topic deleted and created again
    under the same name (or a recreated cluster) has a new id, and its
    offsets start again from 0 (Apache Iceberg #16360).
    """

    cluster_id: str
    topic: str
    topic_id: str


@dataclass(frozen=True, slots=True)
class LakeSetup:
    """What the committing lane needs to open the lake's tables and find where this node stands."""

    location: LakeLocation
    node_id: str
    log_id: str | None
    tables: tuple[str, ...]
    #: The data directory, where a retired Parquet landing may have left manifests.
    data_dir: str | None
    #: The pushes topic, when the landing is fed from Kafka: positions are per partition.
    topic: TopicBinding | None = None


@dataclass(frozen=True, slots=True)
class LaneStart:
    """A lane's start: ``rows.LaneConfig``'s fields but those the opened tables give.

    ``lake`` is set for the lane that opens the tables and commits (lane 0).
    """

    lane_id: int
    lane: Mapping[str, Any]
    lake: LakeSetup | None = None


@dataclass(frozen=True, slots=True)
class Committed:
    """The newest commit of this node in a table (``commits.Position`` without pyiceberg)."""

    log_id: str | None
    offset_end: int


@dataclass(frozen=True, slots=True)
class Opened:
    """The tables as the committing lane found them."""

    positions: Mapping[str, Committed | None]
    #: One past the last offset a retired Parquet landing published (0 without one).
    floor: int
    locations: Mapping[str, str]
    by_kind: bool
    #: When the exporter hands gathered pushes over (``rows.COALESCE_*``).
    coalesce_pushes: int
    coalesce_bytes: int
    #: Per table, per partition of the pushes topic: the next offset the table does not hold.
    topic_offsets: Mapping[str, Mapping[int, int]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """One table's commit: the races it lost, and why it failed (``None``: committed).

    ``fenced``: the table no longer continues where the generation starts
    (another node landed those partitions meanwhile): nothing was committed.
    """

    conflicts: int
    error: str | None = None
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class FleetState:
    """Where the table stands for the fleet: what a committer resumes from, what workers watch."""

    #: Per partition of the pushes topic: the next offset the table does not hold.
    offsets: Mapping[int, int]
    #: The control offset the newest fleet commit stored (``None``: no fleet commit yet).
    control_offset: int | None
    #: When the newest fleet commit was made (ms since the epoch), ``None`` before the first.
    last_commit_ms: int | None


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    """A fleet commit: the sets added and dropped, the races lost, and why it failed.

    ``fenced``: another committer moved the table's control offset; nothing
    was committed.
    """

    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    conflicts: int = 0
    error: str | None = None
    fenced: bool = False


def plain(value: Any) -> types.SimpleNamespace:
    """A dataclass instance as a namespace of the same attributes (unpickled without its class)."""
    return types.SimpleNamespace(
        **{f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    )
