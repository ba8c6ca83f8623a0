"""The landing's generations: the age timer, a free lane, fail-stop, flush and close.

The landing gathers pushes into a *generation* that its lanes fill and that
is committed when it is old enough, so a quiet server still lands what it
acknowledged; it hands batches round robin to lanes with a bounded queue each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from exporters.api import TransientExportError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

__all__ = ["GenerationLanding", "HasInFlight", "age_timer", "free_worker", "stop_task"]

_log = logging.getLogger(__name__)


class HasInFlight(Protocol):
    @property
    def in_flight(self) -> int: ...


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait for it to end.

    ``asyncio.wait``, not ``await task`` under ``suppress(CancelledError)``:
    that would also swallow a cancellation of the caller itself.
    """
    if task is not None:
        task.cancel()
        await asyncio.wait({task})


async def age_timer(
    max_age_s: float,
    started: Callable[[], float | None],
    lock: asyncio.Lock,
    seal: Callable[[], Awaitable[None]],
    stopped: Callable[[], bool],
) -> None:
    """Seal the generation once it is ``max_age_s`` old, however quiet the traffic.

    ``started`` gives the open generation's start (``time.monotonic()``) or
    ``None``; ``stopped`` tells the timer the landing takes no more work. It
    ticks every quarter of the age, at most every second.
    """
    tick = min(1.0, max_age_s / 4)
    while True:
        await asyncio.sleep(tick)
        since = started()
        if since is None or stopped() or time.monotonic() - since < max_age_s:
            continue
        async with lock:
            if stopped():
                return
            with contextlib.suppress(TransientExportError):  # the landing logged and failed
                await seal()


async def free_worker(
    workers: Sequence[HasInFlight],
    turn: int,
    limit: int,
    busy: Callable[[], list[asyncio.Future[Any]]],
    check: Callable[[], None],
) -> tuple[int, int]:
    """(Index of the next worker in turn with at most ``limit`` requests queued, next turn).

    Waits for one of ``busy()`` (the generation's batches) to finish while
    every worker is full; ``check`` raises if the landing failed meanwhile.
    """
    while True:
        for _ in range(len(workers)):
            index, turn = turn, (turn + 1) % len(workers)
            if workers[index].in_flight <= limit:
                return index, turn
        pending = [f for f in busy() if not f.done()]
        if not pending:
            return turn, (turn + 1) % len(workers)
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        check()


class _Counters(Protocol):
    failures: int
    replayed_pushes_skipped: int


class GenerationLanding:
    """The fail-stop state, ``flush`` and ``close`` of a landing that seals generations.

    A subclass calls ``_init_generations`` in its constructor, sets
    ``stats`` (with ``failures`` and ``replayed_pushes_skipped``) and
    implements ``_seal`` (seal and land the open generation),
    ``durable_offset``, ``_where`` (its name in messages) and, where it has
    them, ``_before_close`` (stop background work) and ``_release`` (stop
    workers, unlock).
    """

    stats: _Counters
    _timer: asyncio.Task[None] | None

    def _init_generations(self) -> None:
        self._gen_lock = asyncio.Lock()
        self._timer = None
        self._started = False
        self._closed = False
        self._failure: str | None = None

    def durable_offset(self) -> int:
        raise NotImplementedError

    def _where(self) -> str:
        raise NotImplementedError

    async def _seal(self) -> None:
        raise NotImplementedError

    async def _before_close(self) -> None:
        return None

    async def _release(self) -> None:
        return None

    def _may_seal_on_close(self) -> bool:
        return self._failure is None

    @property
    def failure(self) -> str | None:
        """Why the landing stopped (fail-stop, until a restart), or ``None`` while it works."""
        return self._failure

    def _fail(self, reason: str) -> None:
        if self._failure is None:
            self._failure = (
                f"{self._where()} stopped: {reason}; restart kip714 to resume "
                f"from offset {self.durable_offset()}"
            )
            self.stats.failures += 1
            _log.error("%s", self._failure)

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise TransientExportError(self._failure)

    def _skip_replayed(self, batch: Sequence[Any], next_offset: int) -> int:
        """How many pushes at the head of ``batch`` lie below ``next_offset`` (counted)."""
        start = 0
        while start < len(batch) and batch[start].offset < next_offset:
            start += 1
        self.stats.replayed_pushes_skipped += start
        return start

    async def flush(self) -> None:
        """Seal and land the open generation (everything exported so far)."""
        if not self._started or self._closed:
            return
        async with self._gen_lock:
            self._raise_if_failed()
            await self._seal()

    async def close(self) -> None:
        """Land what is pending (unless failed), stop the timer and the workers; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._before_close()
            if self._started:
                # Under the lock: an age-timer seal in progress finishes first,
                # rather than being cancelled half-way.
                async with self._gen_lock:
                    await self._stop_timer()
                    if self._may_seal_on_close():
                        try:
                            await self._seal()
                        except TransientExportError:
                            _log.error("%s could not land its last generation", self._where())
        finally:
            await self._stop_timer()
            await self._release()

    async def _stop_timer(self) -> None:
        timer, self._timer = self._timer, None
        await stop_task(timer)
