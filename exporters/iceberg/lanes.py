"""Where a batch is flattened: a worker process, or (``workers = 0``) a thread of the server.

Both kinds take requests in order and answer each with an ``asyncio`` future:
``batch`` (flatten and buffer) and ``write`` (write the buffered rows as data
files). A process lane is ``exporters.landing.pool.WorkerHandle`` running
``worker.worker_main``, so the event loop only pickles batches and reads
small replies; a thread lane runs the same ``LakeRows`` on a one-thread
executor (tests, embedding, machines with one core).
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from exporters.api import LoggedPush
from exporters.iceberg.rows import LakeRows, LaneConfig
from exporters.iceberg.worker import worker_main
from exporters.landing.pool import WorkerHandle

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["ProcessLane", "ThreadLane"]

#: Pushes cross the pipe as plain tuples: pickling a tuple costs a fifth of a dataclass.
_as_tuple: Final = operator.attrgetter(*(f.name for f in dataclasses.fields(LoggedPush)))


class ProcessLane:
    """A worker process (spawned: the server has threads)."""

    def __init__(self, config: LaneConfig) -> None:
        self._handle = WorkerHandle(config, target=worker_main, name="kip714-lake")

    async def start(self) -> None:
        await asyncio.to_thread(self._handle.start)
        self._handle.attach(asyncio.get_running_loop())

    @property
    def in_flight(self) -> int:
        return self._handle.in_flight

    def batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> asyncio.Future[Any]:
        return self._handle.request(
            ("batch", [_as_tuple(p) for p in pushes], metrics_from, pushes_from)
        )

    def write(self, first: int, last: int) -> asyncio.Future[Any]:
        return self._handle.request(("write", first, last))

    async def stop(self) -> None:
        await self._handle.stop()


class ThreadLane:
    """The same work on one thread of this process, in request order."""

    def __init__(self, config: LaneConfig) -> None:
        self._rows = LakeRows(config)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"kip714-lake-l{config.lane_id}")
        self._pending: set[asyncio.Future[Any]] = set()

    async def start(self) -> None:
        return None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _submit(self, call: Any, *args: Any) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().run_in_executor(self._executor, call, *args)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def batch(
        self, pushes: Sequence[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> asyncio.Future[Any]:
        return self._submit(self._batch, list(pushes), metrics_from, pushes_from)

    def _batch(
        self, pushes: list[LoggedPush], metrics_from: int, pushes_from: int | None
    ) -> tuple[str, Any]:
        return ("done", self._rows.batch(pushes, metrics_from, pushes_from))

    def write(self, first: int, last: int) -> asyncio.Future[Any]:
        return self._submit(self._write, first, last)

    def _write(self, first: int, last: int) -> tuple[Any, ...]:
        return ("written", *self._rows.write(first, last))

    async def stop(self) -> None:
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._rows.discard()
