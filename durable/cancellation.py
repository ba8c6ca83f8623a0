"""Critical sections that a cancellation must not cut in half.

``asyncio.to_thread`` work goes on after its awaiting task is cancelled, so a
cancelled save, write or fsync leaves a thread still touching the file while
the caller already moved on (a second save of the same temp file, a closed
descriptor reused under a running ``writev``). ``run_to_completion`` lets the
step and its bookkeeping finish, then delivers the cancellation: the cost is
one bounded disk operation of delay, the gain is that no state is half-done.

Shared by the exporters (the landing's publication) and the server (the
ingest log's writes and positions saves); it lives here because exporters
never import the server, while the server may import exporters.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Any

__all__ = ["run_to_completion"]

T = TypeVar("T")


async def run_to_completion(step: Coroutine[Any, Any, T]) -> T:
    """Await ``step`` to its end even if the caller is cancelled meanwhile.

    The caller's cancellation is re-raised once ``step`` finished (chained to
    ``step``'s own error, if it failed), so the caller still stops; put every
    state change that must not be lost inside ``step``.
    """
    task = asyncio.ensure_future(step)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            # wait(), unlike shield(), never raises the step's own error here.
            await asyncio.wait({task})
        except asyncio.CancelledError as error:
            cancelled = error
    if cancelled is not None:
        failure = None if task.cancelled() else task.exception()
        raise cancelled from failure
    return task.result()
