"""The ingest log's writer thread: each group's write and fsync, off the event loop.

One long-lived thread, fed through a ``queue.SimpleQueue`` and answering
through ``loop.call_soon_threadsafe``. ``loop.run_in_executor`` did the same
through ``concurrent.futures`` (a work item and its future with a condition,
then ``wrap_future``'s chained callbacks), and with ``run_to_completion``'s
task and ``asyncio.wait`` around it that was interpreted code costing the
event loop about 60 µs per group (docs/architecture.md).

A call's outcome is kept on its :class:`GroupWrite`, not only in a future, so
a waiter that is cancelled can wait again and still learn it: a cancellation
must not leave a ``writev`` running on a descriptor that ``close`` is about
to release, nor durable records whose appenders never hear back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.ingest.writer import SegmentState

__all__ = ["GroupWrite", "WriterThread"]

logger = logging.getLogger(__name__)


class GroupWrite:
    """One group's write on the writer thread, as the event loop sees it."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, finish: Callable[[GroupWrite], None]
    ) -> None:
        self.loop = loop
        self._finish = finish
        self.done = False
        self.touched: list[SegmentState] = []
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] = loop.create_future()

    def settle(self, touched: list[SegmentState], error: BaseException | None) -> None:
        """On the loop: the thread finished the write (``error`` if it failed).

        ``finish`` runs here, in the thread's report, not when the waiter
        resumes a loop step later; an error in it goes to the loop's
        exception handler, and the waiter is released all the same.
        """
        self.done = True
        self.touched = touched
        self.error = error
        try:
            self._finish(self)
        finally:
            if not self._waiter.done():
                self._waiter.set_result(None)

    async def finished(self) -> asyncio.CancelledError | None:
        """Wait until the write is over, through cancellations; return the last one.

        The caller finishes its bookkeeping, then raises what this returns.
        """
        cancelled: asyncio.CancelledError | None = None
        while not self.done:
            try:
                await self._waiter
            except asyncio.CancelledError as error:
                cancelled = error
                if not self.done:
                    self._waiter = self.loop.create_future()
        return cancelled


class WriterThread:
    """Runs ``write_group`` calls one at a time, in submission order, on one thread."""

    def __init__(
        self, write_group: Callable[[list[bytes], list[int], int], list[SegmentState]], name: str
    ) -> None:
        self._write_group = write_group
        self._jobs: queue.SimpleQueue[tuple[GroupWrite, list[bytes], list[int], int] | None] = (
            queue.SimpleQueue()
        )
        # A daemon: a write cut short at exit was never acknowledged, and
        # recovery truncates a torn tail.
        self._worker = threading.Thread(target=self._run, name=name, daemon=True)
        self._worker.start()

    def submit(
        self,
        loop: asyncio.AbstractEventLoop,
        parts: list[bytes],
        lengths: list[int],
        first: int,
        finish: Callable[[GroupWrite], None],
    ) -> GroupWrite:
        """Queue one write; ``finish`` runs on ``loop`` as soon as it is over."""
        job = GroupWrite(loop, finish)
        self._jobs.put((job, parts, lengths, first))
        return job

    def stop(self) -> None:
        """Let the thread end once the writes submitted before are done, and join it."""
        self._jobs.put(None)
        self._worker.join()

    def _run(self) -> None:
        try:
            while (item := self._jobs.get()) is not None:
                job, parts, lengths, first = item
                touched: list[SegmentState] = []
                error: BaseException | None = None
                try:
                    touched = self._write_group(parts, lengths, first)
                except BaseException as failure:  # reported on the loop, logged there
                    error = failure
                # RuntimeError: the loop is closed, and no one waits for the answer.
                with contextlib.suppress(RuntimeError):
                    job.loop.call_soon_threadsafe(job.settle, touched, error)
        except BaseException:
            logger.exception("the ingest log's writer thread failed")
            raise
