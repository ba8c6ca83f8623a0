"""One step of ``Server.stop``: run it whatever the steps before did, and say when it was slow.

Each step is bounded; their sum is not small (in Kafka mode an exporter's
drain, flush, final commit and group leave, then the log's flush), so a
step that takes :data:`SLOW_STOP_STEP_S` or more is named in a WARNING: a
supervisor's kill timeout can be set from what it waited on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["SLOW_STOP_STEP_S", "run_stop_step"]

#: Logger of ``Server.stop`` itself: its lines read as the server's.
_log = logging.getLogger("telemetry.server.bootstrap")

SLOW_STOP_STEP_S: Final = 2.0


async def run_stop_step(
    name: str, step: Callable[[], Awaitable[None]]
) -> asyncio.CancelledError | None:
    """Run one step of ``Server.stop``; the cancellation of ``stop`` itself, if one came.

    A step's failure, or a CancelledError of its own, is logged and the stop
    goes on; a step that takes :data:`SLOW_STOP_STEP_S` or more is named.
    """
    began = time.monotonic()
    cancelled: asyncio.CancelledError | None = None
    try:
        await step()
    except asyncio.CancelledError as error:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # stop() itself is being cancelled: finish the (bounded) steps first.
            _log.warning("stopping: cancelled during %s; finishing the other steps", name)
            cancelled = error
        else:  # a step raised CancelledError of its own: a failure of that step
            _log.error("stopping: %s was cancelled; carrying on with the rest", name)
    except Exception:
        _log.exception("stopping: %s failed; carrying on with the rest", name)
    took_s = time.monotonic() - began
    if took_s >= SLOW_STOP_STEP_S:  # names what a supervisor's kill timeout waited on
        _log.warning("stopping: %s took %.1f s", name, took_s)
    return cancelled
