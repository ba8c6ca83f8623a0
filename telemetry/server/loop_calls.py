"""A coroutine run on the event loop from another thread, waited for there with a bound.

librdkafka's rebalance callbacks run on the consumer's thread, inside
``consume``, while the event loop is free (the loop awaits that thread):
what they need from an exporter (where the landing's table stands, the
commit of its open generation) runs on the loop, and the thread waits.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

__all__ = ["wait_on_loop"]

_T = TypeVar("_T")


def wait_on_loop(
    loop: asyncio.AbstractEventLoop | None,
    call: Callable[[], Coroutine[Any, Any, _T]],
    timeout_s: float,
) -> _T:
    """``call()``'s result, run on ``loop``; cancelled there if the wait ends otherwise.

    Raises:
        RuntimeError: The loop is gone.
        TimeoutError: Not done within ``timeout_s``.
        Exception: What ``call()`` raised.
    """
    if loop is None or loop.is_closed():
        raise RuntimeError("the event loop is gone")
    future = asyncio.run_coroutine_threadsafe(call(), loop)
    try:
        return future.result(timeout=timeout_s)
    except BaseException:
        future.cancel()
        raise
