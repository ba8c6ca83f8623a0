"""One pending response for every Kafka API whose answer waits on a future.

A push waiting for its fsync, a PLAIN check in a thread, an admin change
being made durable: the connection keeps its order by not reading the next
request until this one is answered. The one cancellation rule: a cancelled
future is a failure like any exception, answered through ``failed``, so
every request gets exactly one answer and the connection's in-flight
request always ends (its shutdown drain does not wait for nothing).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.kafka.connection import PendingResponse

    #: A response frame and the throttle (ms) the channel is muted for after it.
    Answer = tuple[bytes, int]

__all__ = ["Pending"]

T = TypeVar("T")


class Pending(Generic[T]):
    """Answers from ``future``: ``answer(result)``, or ``failed(error)`` (cancellation included)."""

    __slots__ = ("_answer", "_failed", "_future")

    def __init__(
        self,
        future: asyncio.Future[T],
        answer: Callable[[T], Answer | PendingResponse],
        failed: Callable[[BaseException], Answer | PendingResponse],
    ) -> None:
        self._future = future
        self._answer = answer
        self._failed = failed

    def add_done_callback(self, callback: Callable[[Answer], None]) -> None:
        def done(future: asyncio.Future[T]) -> None:
            if future.cancelled():
                result = self._failed(asyncio.CancelledError())
            elif (error := future.exception()) is not None:
                result = self._failed(error)
            else:
                result = self._answer(future.result())
            if isinstance(result, tuple):
                callback(result)
            else:
                result.add_done_callback(callback)

        self._future.add_done_callback(done)
