"""What the buffering landings share: the age timer, a free worker, stopping a task.

Both the Parquet landing and the Iceberg landing gather pushes into a
*generation* that worker processes fill and that is sealed when it is old
enough, so a quiet server still lands what it acknowledged; and both hand
batches round robin to workers with a bounded queue each.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any, Protocol

from exporters.api import TransientExportError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

__all__ = ["HasInFlight", "age_timer", "free_worker", "stop_task"]


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
