"""A landing lane's work: flatten pushes, write the lake's data files, and (lane 0) commit them.

Flattening, Parquet encoding and every catalog operation (the costly steps,
and the ones that need pyarrow and pyiceberg) run here, in a worker process,
so the serving process stays small and its acknowledgements fast; the
server only hands over batches and keeps the exactly-once bookkeeping.
Messages, in order, over a ``multiprocessing`` pipe
(``exporters.landing.pool.WorkerHandle`` keeps a FIFO of futures, so every
request gets exactly one reply, in order):

* ``("open",)`` (lane 0) → ``("opened", lane_messages.Opened)``: the tables
  opened (created, evolved) and this node's newest commit in each; the
  lane is then ready for batches. A failure → ``("open-failed", reason)``.
* ``("configure", locations, by_kind)`` (the other lanes, first) →
  ``("configured",)``
* ``("batch", [LoggedPush fields as a tuple, ...], metrics_from, pushes_from)``
  → ``("done", BatchReply)``
* ``("write", first, last)`` → ``("written", [WrittenFile, ...], BatchReply)`` (the
  reply: the pushes gathered since the last flattening, flattened before writing)
* ``("commit", table, [file location, ...], first, last)`` (lane 0) →
  ``("committed", lane_messages.CommitOutcome)``
* ``("commit-topic", table, [file location, ...], {partition: (start, end)})``
  (lane 0, fed from the pushes topic) → ``("committed", lane_messages.CommitOutcome)``
* ``("fleet-state", control topic id)`` (lane 0) → ``("fleet-state",
  lane_messages.FleetState)``; ``("commit-fleet", [fleet.FileSet, ...],
  fleet.ControlRange)`` (lane 0, the fleet's committer) → ``("committed-fleet",
  lane_messages.FleetOutcome)``
* ``("offsets",)`` (lane 0, fed from the pushes topic) → ``("offsets", {table:
  {partition: next offset}})``: where the tables stand now (a rebalance)
* ``("stop",)`` → ``("stopped",)``, then the process exits
* anything that fails → ``("error", traceback)``; the worker is then
  poisoned and refuses to write, so a generation missing a batch is never
  committed.

``BatchReply`` and ``WrittenFile`` cross as plain namespaces
(``lane_messages.plain``). A worker whose parent dies sees EOF and exits;
files it wrote and nobody committed are orphans, never read, removed by
orphan cleanup. A worker that dies during a commit leaves the exporter not
knowing whether it happened: it reads the position from the table again
before it retries, as a restart does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exporters.api import LoggedPush
from exporters.iceberg.committer import LakeTables
from exporters.iceberg.lane_messages import (
    CommitOutcome,
    FleetOutcome,
    FleetState,
    Opened,
    plain,
)
from exporters.iceberg.rows import BatchReply, LakeRows, LaneConfig, WrittenFile
from exporters.landing.pool import serve_requests

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from multiprocessing.connection import Connection

    from exporters.iceberg.fleet import ControlRange, FileSet
    from exporters.iceberg.lane_messages import LaneStart

__all__ = ["LaneWorker", "worker_main"]


class LaneWorker:
    """One lane's state: its rows once it knows the tables, and (lane 0) the tables themselves."""

    def __init__(self, start: LaneStart) -> None:
        self.start = start
        self.lake = None if start.lake is None else LakeTables(start.lake)
        self._rows: LakeRows | None = None

    @property
    def rows(self) -> LakeRows:
        if self._rows is None:
            raise RuntimeError("lane used before its tables were opened or configured")
        return self._rows

    def open(self) -> Opened:
        """Open the tables (lane 0), then take batches for them."""
        if self.lake is None:
            raise RuntimeError("only the committing lane opens the tables")
        opened = self.lake.open()
        self.configure(opened.locations, opened.by_kind)
        return opened

    def configure(self, locations: Mapping[str, str], by_kind: bool) -> None:
        self._rows = LakeRows(
            LaneConfig(
                lane_id=self.start.lane_id, locations=locations, by_kind=by_kind, **self.start.lane
            )
        )

    def batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> BatchReply:
        return self.rows.batch(pushes, metrics_from, pushes_from)

    def write(self, first: int, last: int) -> tuple[list[WrittenFile], BatchReply]:
        return self.rows.write(first, last)

    def commit(self, table: str, files: list[str], first: int, last: int) -> CommitOutcome:
        if self.lake is None:
            raise RuntimeError("only the committing lane commits")
        return self.lake.commit(table, files, first, last)

    def commit_topic(
        self, table: str, files: list[str], ranges: Mapping[int, tuple[int | None, int]]
    ) -> CommitOutcome:
        if self.lake is None:
            raise RuntimeError("only the committing lane commits")
        return self.lake.commit_topic(table, files, ranges)

    def fleet_state(self, control_topic_id: str | None) -> FleetState:
        if self.lake is None:
            raise RuntimeError("only the committing lane reads the tables")
        return self.lake.fleet_state(control_topic_id)

    def commit_fleet(self, sets: Sequence[FileSet], control: ControlRange) -> FleetOutcome:
        if self.lake is None:
            raise RuntimeError("only the committing lane commits")
        return self.lake.commit_fleet(sets, control)

    def topic_offsets(self) -> dict[str, dict[int, int]]:
        if self.lake is None:
            raise RuntimeError("only the committing lane reads the tables")
        return self.lake.topic_offsets()

    def discard(self) -> None:
        if self._rows is not None:
            self._rows.discard()


def _open_reply(lane: LaneWorker) -> tuple[Any, ...]:
    try:
        return ("opened", lane.open())
    except Exception as error:  # the catalog is away: the exporter backs off and retries
        return ("open-failed", f"{type(error).__name__}: {error}")


def _configured(lane: LaneWorker, locations: Mapping[str, str], by_kind: bool) -> tuple[Any, ...]:
    lane.configure(locations, by_kind)
    return ("configured",)


def _written(lane: LaneWorker, first: int, last: int) -> tuple[Any, ...]:
    files, reply = lane.write(first, last)
    return ("written", [plain(f) for f in files], plain(reply))


def worker_main(conn: Connection, start: LaneStart) -> None:
    """Entry point of a worker process; serves requests until ``stop`` or EOF."""
    lane = LaneWorker(start)
    serve_requests(
        conn,
        {
            "open": lambda _m: _open_reply(lane),
            "configure": lambda m: _configured(lane, m[1], m[2]),
            "batch": lambda m: (
                "done",
                plain(lane.batch([LoggedPush(*f) for f in m[1]], m[2], m[3])),
            ),
            "write": lambda m: _written(lane, m[1], m[2]),
            "commit": lambda m: ("committed", lane.commit(m[1], m[2], m[3], m[4])),
            "commit-topic": lambda m: ("committed", lane.commit_topic(m[1], m[2], m[3])),
            "offsets": lambda _m: ("offsets", lane.topic_offsets()),
            "fleet-state": lambda m: ("fleet-state", lane.fleet_state(m[1])),
            "commit-fleet": lambda m: ("committed-fleet", lane.commit_fleet(m[1], m[2])),
        },
        lambda _reason: lane.discard(),
        lane.discard,
        # The table's state, and the fleet's commit of files written already: the catalog
        # may be away for a while; the lane's rows are untouched by these.
        reads=frozenset({"offsets", "fleet-state", "commit-fleet"}),
    )
