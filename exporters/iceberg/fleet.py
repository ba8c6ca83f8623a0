"""One committer for the fleet: the file sets landing workers publish, and who may add which.

Iceberg serialises commits on one metadata pointer, so N nodes committing
every few seconds split a fixed budget of commits and retry each other's
races (``shared/reference/fleet-notes.md``; Iceberg's Kafka Connect sink
centralises commits for the same reason). Fed from the pushes topic, each
node's landing therefore writes data files but does not commit them: it
publishes each closed generation as one *file set* (its data files, their
rows, and per partition of the pushes topic the offsets ``start..end-1``
they hold) on the control topic ``<pushes topic>_control``, and the one
committer of the table, the member of group ``kip714-committer-<namespace>``
that holds that topic's only partition, adds every worker's files in one
snapshot per ``commit_interval_s``.

Fencing by contiguity (confluent-kafka exposes no group generation): a set
is added only if, for each of its partitions, it starts where the table
(plus the sets added before it) ends, for the same topic id; anything else is
dropped (its files become orphans) and counted, so a stale worker adds
nothing. A committer adds sets only from the control offset stored in the
table's newest fleet snapshot (``kip714.control.offset``): a zombie
committer, whose consumed range starts elsewhere, commits nothing (Apache
Iceberg #17551). Positions are kept per topic id (pushes and control), so a
recreated topic or cluster starts from its offset 0 (Iceberg #16360).

This module is pure Python (no pyiceberg, no Kafka client): the serving
process decodes and judges file sets; the commit itself runs in the
landing's first lane (``commits.commit_fleet``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ControlRange", "FileSet", "FileSetError", "FleetBatch", "SetFile"]

#: The record format's version; a committer skips (and counts) a newer one.
VERSION = 1


class FileSetError(ValueError):
    """A control record that is not a file set this version understands."""


@dataclass(frozen=True, slots=True)
class SetFile:
    """One data file of a set: the table it belongs to, where it is, its rows."""

    table: str
    location: str
    rows: int


@dataclass(frozen=True, slots=True)
class FileSet:
    """A worker's closed generation: files to add, and the offsets they hold per partition.

    ``ranges`` maps a partition of the pushes topic to ``(start, end)``:
    the offsets ``start..end-1``, where ``start`` is where the worker's chain
    for that partition stood (``None``: the table held none of it).
    """

    set_id: str
    node_id: str
    topic_id: str
    ranges: Mapping[int, tuple[int | None, int]]
    files: tuple[SetFile, ...]
    #: The lake namespace of the table the files belong to (landings of several namespaces
    #: may share the pushes topic, and so the control topic).
    namespace: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": VERSION,
                "set": self.set_id,
                "node": self.node_id,
                "topic_id": self.topic_id,
                "namespace": self.namespace,
                "ranges": {str(p): [s, e] for p, (s, e) in sorted(self.ranges.items())},
                "files": [[f.table, f.location, f.rows] for f in self.files],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, value: bytes | None) -> FileSet:
        """Raises ``FileSetError`` for anything but a well-formed file set of this version."""
        try:
            doc: Any = json.loads(value or b"")
            if doc.get("v") != VERSION:
                raise FileSetError(f"file set version {doc.get('v')!r}, not {VERSION}")
            ranges: dict[int, tuple[int | None, int]] = {}
            for partition, (start, end) in doc["ranges"].items():
                if start is not None and not isinstance(start, int):
                    raise FileSetError(f"partition {partition}: start {start!r}")
                if not isinstance(end, int) or (start is not None and end <= start):
                    raise FileSetError(f"partition {partition}: range {start!r}..{end!r}")
                ranges[int(partition)] = (start, end)
            files = tuple(SetFile(str(t), str(loc), int(rows)) for t, loc, rows in doc["files"])
            return cls(
                str(doc["set"]),
                str(doc["node"]),
                str(doc["topic_id"]),
                ranges,
                files,
                str(doc["namespace"]),
            )
        except FileSetError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise FileSetError(f"not a file set: {error}") from None


@dataclass(frozen=True, slots=True)
class ControlRange:
    """The control topic's records a commit covers: ``start`` (``None``: from its first) to ``end``.

    ``start`` must be the offset the table's newest fleet snapshot stored
    for this control topic id, else the committer is a zombie.
    """

    topic_id: str
    start: int | None
    end: int


@dataclass(slots=True)
class FleetBatch:
    """The committer's view: the table's offsets plus the sets accepted since, in order.

    ``offer`` judges each set as the control topic delivers it: contiguous
    sets are accepted and advance the view; the others are dropped.
    """

    topic_id: str
    view: dict[int, int]
    accepted: list[FileSet] = field(default_factory=list)
    dropped: int = 0

    def offer(self, file_set: FileSet) -> bool:
        """Accept ``file_set`` if it continues the view for every partition it holds."""
        if file_set.topic_id != self.topic_id or not contiguous(self.view, file_set.ranges):
            self.dropped += 1
            return False
        self.view.update((p, end) for p, (_, end) in file_set.ranges.items())
        self.accepted.append(file_set)
        return True


def contiguous(view: Mapping[int, int], ranges: Mapping[int, tuple[int | None, int]]) -> bool:
    """Whether each range starts where ``view`` ends for its partition (``None``: none yet)."""
    return all(view.get(partition) == start for partition, (start, _) in ranges.items())


def advance(
    view: Mapping[int, int], sets: Iterable[FileSet]
) -> tuple[dict[int, int], list[FileSet], list[FileSet]]:
    """``view`` after adding ``sets`` in order: (the new view, the sets added, the sets dropped)."""
    now = dict(view)
    added: list[FileSet] = []
    dropped: list[FileSet] = []
    for file_set in sets:
        if contiguous(now, file_set.ranges):
            now.update((p, end) for p, (_, end) in file_set.ranges.items())
            added.append(file_set)
        else:
            dropped.append(file_set)
    return now, added, dropped


@dataclass(frozen=True, slots=True)
class _Published:
    set_id: str
    ranges: Mapping[int, tuple[int | None, int]]
    at: float  # time.monotonic() when published


@dataclass(slots=True)
class FleetChain:
    """A worker's file sets published and not yet seen in the table, per partition a chain.

    A worker's next generation of a partition starts where its last
    published set ends (``start_of``), not where the table stands: the
    committer adds them in order. ``judge`` compares the chain with the
    table: sets the table holds are done; a partition the table holds
    elsewhere than the chain expects means a set was dropped (another node
    landed that partition meanwhile): the worker then drops its chain and
    feeds again from the table.
    """

    ends: dict[int, int] = field(default_factory=dict)
    pending: list[_Published] = field(default_factory=list)

    def start_of(self, partition: int, landed: int | None) -> int | None:
        """Where a new generation of ``partition`` starts: the chain's end, else the table's."""
        return self.ends.get(partition, landed)

    def published(
        self, set_id: str, ranges: Mapping[int, tuple[int | None, int]], now: float
    ) -> None:
        self.pending.append(_Published(set_id, dict(ranges), now))
        self.ends.update((p, end) for p, (_, end) in ranges.items())

    def judge(self, table: Mapping[int, int], assigned: Iterable[int]) -> str | None:
        """Forget the sets ``table`` holds; why the chain cannot continue, else ``None``."""
        while self.pending and all(
            table.get(p, -1) >= end for p, (_, end) in self.pending[0].ranges.items()
        ):
            self.pending.pop(0)
        for partition in assigned:
            expected = next(
                (s.ranges[partition][0] for s in self.pending if partition in s.ranges),
                self.ends.get(partition, table.get(partition)),
            )
            if table.get(partition) != expected:
                return (
                    f"partition {partition} is landed up to {table.get(partition)} in the "
                    f"table, this node's file sets continue from {expected}"
                )
        return None

    def oldest(self) -> float | None:
        """When the oldest set still waiting for the committer was published."""
        return self.pending[0].at if self.pending else None

    def forget(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self.ends.pop(partition, None)

    def reset(self) -> None:
        self.ends.clear()
        self.pending.clear()
