"""Where a lane works: a worker process, or (``workers = 0``) a thread of the server.

Both kinds take requests in order and answer each with an ``asyncio`` future
(``worker.py`` lists them): ``open`` (lane 0: the tables and this node's
position), ``configure`` (the other lanes), ``batch`` (flatten and buffer),
``write`` (write the buffered rows as data files), ``commit`` and, fed from
the pushes topic, ``commit_topic`` and ``topic_offsets`` (lane 0).
A process lane is ``exporters.landing.pool.WorkerHandle`` running
``worker.worker_main``, so the event loop only pickles batches and reads
small replies, and the serving process never imports pyarrow or pyiceberg:
this module imports neither (the process's entry point and the thread
lane's ``LaneWorker`` are imported where they run). A thread lane runs the
same ``LaneWorker`` on a one-thread executor (tests, embedding, machines
with one core).
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from exporters.api import LoggedPush
from exporters.landing.pool import WorkerHandle

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from multiprocessing.connection import Connection

    from exporters.iceberg.fleet import ControlRange, FileSet
    from exporters.iceberg.lane_messages import LaneStart

__all__ = ["ProcessLane", "ThreadLane"]

#: Pushes cross the pipe as plain tuples: pickling a tuple costs a fifth of a dataclass.
_as_tuple: Final = operator.attrgetter(*(f.name for f in dataclasses.fields(LoggedPush)))


def _lane_main(conn: Connection, start: LaneStart) -> None:
    """The worker process's entry point, importable without pyarrow (spawn pickles it by name)."""
    from exporters.iceberg.worker import worker_main  # noqa: PLC0415  (the worker's imports)

    worker_main(conn, start)


class ProcessLane:
    """A worker process (spawned: the server has threads)."""

    def __init__(self, start: LaneStart) -> None:
        self._handle = WorkerHandle(start, target=_lane_main, name="kip714-lake")

    async def start(self) -> None:
        await asyncio.to_thread(self._handle.start)
        self._handle.attach(asyncio.get_running_loop())

    @property
    def in_flight(self) -> int:
        return self._handle.in_flight

    @property
    def failed(self) -> bool:
        """The worker died or its pipe broke: every request to it fails from now on.

        (Not before it started: its exit code is ``None`` until it ran and ended.)
        """
        if self._handle.failure is not None:
            return True
        try:
            return self._handle.process.exitcode is not None
        except ValueError:  # closed: the lane was stopped
            return True

    def open(self) -> asyncio.Future[Any]:
        return self._handle.request(("open",))

    def configure(self, locations: Mapping[str, str], by_kind: bool) -> asyncio.Future[Any]:
        return self._handle.request(("configure", dict(locations), by_kind))

    def batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> asyncio.Future[Any]:
        return self._handle.request(
            ("batch", [_as_tuple(p) for p in pushes], metrics_from, pushes_from)
        )

    def write(self, first: int, last: int) -> asyncio.Future[Any]:
        return self._handle.request(("write", first, last))

    def commit(self, table: str, files: list[str], first: int, last: int) -> asyncio.Future[Any]:
        return self._handle.request(("commit", table, files, first, last))

    def commit_topic(
        self, table: str, files: list[str], ranges: Mapping[int, tuple[int | None, int]]
    ) -> asyncio.Future[Any]:
        return self._handle.request(("commit-topic", table, files, dict(ranges)))

    def topic_offsets(self) -> asyncio.Future[Any]:
        return self._handle.request(("offsets",))

    def fleet_state(self, control_topic_id: str | None) -> asyncio.Future[Any]:
        return self._handle.request(("fleet-state", control_topic_id))

    def commit_fleet(self, sets: Sequence[FileSet], control: ControlRange) -> asyncio.Future[Any]:
        return self._handle.request(("commit-fleet", list(sets), control))

    async def stop(self) -> None:
        await self._handle.stop()


class ThreadLane:
    """The same work on one thread of this process, in request order (pyiceberg loads here)."""

    def __init__(self, start: LaneStart) -> None:
        from exporters.iceberg.worker import LaneWorker  # noqa: PLC0415  (in-process by choice)

        self._lane = LaneWorker(start)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"kip714-lake-l{start.lane_id}")
        self._pending: set[asyncio.Future[Any]] = set()

    async def start(self) -> None:
        return None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def failed(self) -> bool:
        return False  # a thread lane's failure is its request's, never the lane's

    def _submit(self, call: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().run_in_executor(self._executor, call, *args)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def open(self) -> asyncio.Future[Any]:
        return self._submit(lambda: ("opened", self._lane.open()))

    def configure(self, locations: Mapping[str, str], by_kind: bool) -> asyncio.Future[Any]:
        return self._submit(self._lane.configure, locations, by_kind)

    def batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> asyncio.Future[Any]:
        pushes = list(pushes)
        return self._submit(lambda: ("done", self._lane.batch(pushes, metrics_from, pushes_from)))

    def write(self, first: int, last: int) -> asyncio.Future[Any]:
        return self._submit(lambda: ("written", *self._lane.write(first, last)))

    def commit(self, table: str, files: list[str], first: int, last: int) -> asyncio.Future[Any]:
        return self._submit(lambda: ("committed", self._lane.commit(table, files, first, last)))

    def commit_topic(
        self, table: str, files: list[str], ranges: Mapping[int, tuple[int | None, int]]
    ) -> asyncio.Future[Any]:
        return self._submit(
            lambda: ("committed", self._lane.commit_topic(table, files, dict(ranges)))
        )

    def topic_offsets(self) -> asyncio.Future[Any]:
        return self._submit(lambda: ("offsets", self._lane.topic_offsets()))

    def fleet_state(self, control_topic_id: str | None) -> asyncio.Future[Any]:
        return self._submit(lambda: ("fleet-state", self._lane.fleet_state(control_topic_id)))

    def commit_fleet(self, sets: Sequence[FileSet], control: ControlRange) -> asyncio.Future[Any]:
        return self._submit(
            lambda: ("committed-fleet", self._lane.commit_fleet(list(sets), control))
        )

    async def stop(self) -> None:
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._lane.discard()
