"""The OTLP route's decoding threads: a few, shared fairly among senders.

One thread taking bodies first come, first served let two anonymous
senders of big JSON bodies hold every other sender's 1 KB export for
seconds (3 ms became 3.7–8.5 s). Here each sender (the route names it: its
principal, or an anonymous sender's address) has its own queue, and the
threads (``[http] decode_threads``, 2 by default) take one job from each
sender with work waiting in turn, so a sender waits for at most one job of
each other sender ahead of its own, however many it has queued.

The route marks a body over 64 KiB heavy (its parse is not bounded small):
heavy jobs run on every thread but one (on the one, with a single thread),
so a small body waits only for the small jobs ahead of it in turn, whatever
big bodies other senders keep sending.

A job's expected failures are best returned as values: an exception keeps
its traceback's frames, and their buffers, alive as long as it is held.

Each job's CPU time on its thread comes back with its outcome, so the route
charges it to the sender's request quota as it charges the event loop's
time (a thread's wait for the GIL or for its turn is not the sender's
cost). Threads start on demand, up to the bound, and stay; they are daemon
threads, so a decode under way never holds up the interpreter's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

__all__ = ["FairDecoder", "Outcome"]

T = TypeVar("T")


class Outcome(Generic[T]):
    """A job's result or exception, and the CPU time its thread spent on it."""

    __slots__ = ("error", "thread_ns", "value")

    def __init__(self, value: T | None, error: BaseException | None, thread_ns: int) -> None:
        self.value = value
        self.error = error
        self.thread_ns = thread_ns

    def result(self) -> T:
        """The job's result; raises its exception."""
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


class _Job(Generic[T]):
    __slots__ = ("function", "future", "heavy", "loop")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Outcome[T]],
        function: Callable[[], T],
        heavy: bool,
    ) -> None:
        self.loop = loop
        self.future = future
        self.function = function
        self.heavy = heavy

    def run(self) -> None:
        future = self.future
        if future.done():  # cancelled while it queued: its sender is gone
            return
        started_ns = time.thread_time_ns()
        value: T | None = None
        error: BaseException | None = None
        try:
            value = self.function()
        except Exception as failed:
            error = failed
        outcome = Outcome(value, error, time.thread_time_ns() - started_ns)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits for it
            self.loop.call_soon_threadsafe(_settle, future, outcome)
        # An error's traceback holds this frame: no cycle through it keeps the
        # job's buffers alive until a collection (as concurrent.futures does).
        value = error = outcome = future = None  # type: ignore[assignment]


def _settle(future: asyncio.Future[Outcome[T]], outcome: Outcome[T]) -> None:
    if not future.done():
        future.set_result(outcome)


class FairDecoder:
    """Up to ``threads`` threads taking jobs from per-sender queues in turn."""

    def __init__(self, threads: int, name: str = "otlp-decode") -> None:
        if threads < 1:
            raise ValueError("at least one decoding thread")
        self._max_threads = threads
        #: Heavy jobs run on all threads but one: a light job always finds a thread soon.
        self._max_heavy = max(1, threads - 1)
        self._heavy_running = 0
        self._name = name
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        #: Senders with jobs waiting, in the order they are served next.
        self._queues: OrderedDict[Hashable, deque[_Job[Any]]] = OrderedDict()
        self._pending = 0
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def queued(self) -> int:
        """Jobs waiting for a thread."""
        return self._pending

    async def run(
        self, sender: Hashable, function: Callable[[], T], *, heavy: bool = False
    ) -> Outcome[T]:
        """``function()`` on a decoding thread, in ``sender``'s turn; its outcome and CPU time.

        A ``heavy`` job (work not bounded small) waits, in its turn, while
        all threads but one run heavy jobs. Cancelling the wait drops a job
        not started yet; a started one finishes on its thread and its
        outcome is dropped.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome[T]] = loop.create_future()
        job = _Job(loop, future, function, heavy)
        with self._lock:
            if self._closed:
                raise RuntimeError("the decoding threads are stopped")
            queue = self._queues.get(sender)
            if queue is None:
                queue = self._queues[sender] = deque()
            queue.append(job)
            self._pending += 1
            # Idle threads not woken yet count as taken: a job beyond them gets a thread.
            if self._pending > self._idle and len(self._threads) < self._max_threads:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._work.notify()
        return await future

    def close(self) -> None:
        """Stop the threads once their current job is done; jobs still queued are cancelled.

        Called on the event loop (the jobs' futures are its).
        """
        with self._lock:
            self._closed = True
            waiting = [job for queue in self._queues.values() for job in queue]
            self._queues.clear()
            self._pending = 0
            self._work.notify_all()
        for job in waiting:
            job.future.cancel()

    def _serve(self) -> None:
        while True:
            with self._lock:
                job = self._next()
                while job is None and not self._closed:
                    self._idle += 1
                    self._work.wait()
                    self._idle -= 1
                    job = self._next()
                if job is None:  # closed
                    return
                heavy = job.heavy
                if heavy:
                    self._heavy_running += 1
            try:
                job.run()
            finally:
                if heavy:
                    with self._lock:
                        self._heavy_running -= 1
                        if self._pending:  # a heavy job waiting for this slot
                            self._work.notify()
            del job  # an idle thread must not keep the last job's outcome alive

    def _next(self) -> _Job[Any] | None:
        """The first job in turn this thread may take (under the lock); the sender goes last."""
        if self._closed:
            return None
        for sender, queue in self._queues.items():
            job = queue[0]
            if job.heavy and self._heavy_running >= self._max_heavy:
                continue  # keeps its turn
            queue.popleft()
            self._pending -= 1
            del self._queues[sender]
            if queue:  # back of the line: every other sender waiting goes first
                self._queues[sender] = queue
            return job  # the iteration ends here, so the table may change
        return None
