"""HTTP request bodies draw from the same ``queued_max_request_bytes`` pool as Kafka frames.

Kafka's memory pool is one for every listener; so is kip714's
(:class:`~telemetry.enforcement.RequestMemoryPool`). A Kafka connection that
cannot get memory is paused; an HTTP request, whose body aiohttp has already
read, holds its body as sent and then its decoded form, and the next request
waits for memory instead: at most ``[http] memory_wait_ms``, then it is
answered 503 with ``Retry-After`` (never more memory). As in Kafka the pool
is not strict: a request admitted while any memory is left may pass the
bound by its own size, so the bound is exceeded by at most the requests
being decoded at once (one per decoding thread: OTLP bodies on
the OTLP route's, forwarded payloads on the Kafka listener's).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from telemetry.enforcement import RequestMemoryPool

DEFAULT_MEMORY_WAIT_MS: Final = 5_000


class HeldMemory:
    """Bytes one request holds in the pool; :meth:`release` gives them all back (idempotent)."""

    __slots__ = ("_held", "_pool")

    def __init__(self, pool: RequestMemoryPool, size: int) -> None:
        self._pool = pool
        self._held = 0
        self.add(size)

    @property
    def held(self) -> int:
        return self._held

    def add(self, size: int) -> None:
        """The request now holds ``size`` more bytes (its decoded body)."""
        self._held += size
        self._pool.change(size)

    def release(self) -> None:
        held, self._held = self._held, 0
        if held:
            self._pool.change(-held)


class HttpRequestMemory:
    """Admission of HTTP requests to the shared request-memory pool."""

    def __init__(self, pool: RequestMemoryPool, wait_ms: int = DEFAULT_MEMORY_WAIT_MS) -> None:
        self.pool = pool
        self.wait_s = wait_ms / 1000
        self.refused = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        pool.on_freed(self._wake)

    async def acquire(self, size: int) -> HeldMemory | None:
        """Hold ``size`` bytes once the pool has room; None after waiting ``wait_ms`` in vain."""
        if not await self._room():
            return None
        return HeldMemory(self.pool, size)

    async def grow(self, held: HeldMemory, size: int) -> bool:
        """Add ``size`` bytes to ``held`` once the pool has room; False after ``wait_ms``."""
        if not await self._room():
            return False
        held.add(size)
        return True

    async def _room(self) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while self.pool.exhausted:
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.refused += 1
                return False
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(waiter), remaining)
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        return True

    def _wake(self) -> None:
        """Memory came back: every waiter looks again (the pool decides, in arrival order)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
