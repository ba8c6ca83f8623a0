"""``queued_max_request_bytes``: one budget for request bytes read but not yet handled.

Kafka's ``queued.max.request.bytes`` is a memory pool: when a channel has read
the size of its next request it allocates the whole request from the pool,
and a channel that cannot get memory is muted until memory is freed. A
request that got its memory is read to the end (the pool is not strict: an
allocation succeeds while any memory is left, so the bound is passed by at
most the requests already started).

The same here, for transports that push reads at us: a connection holds, in
the pool, its complete frames not yet handled plus the *declared* size of the
frame it has started. When the pool is full, every connection between frames
is paused at once (waiting for each one's next read would let every one of
them add a read's worth past the bound); connections in the middle of a
frame keep reading, so they finish it, it is handled, and memory comes
back — the pool cannot deadlock on partial frames. As memory is freed, the
paused connections resume in the order they were paused, a read's worth of
room (:data:`READ_BYTES`) per connection, so one freed frame does not wake
thousands of connections at once. A paused connection costs nothing per
byte: what its peer sends waits in the kernel's socket buffer.

Connections are opaque to the pool: anything with ``pause_for_memory``
(which says whether it paused: one in the middle of a frame does not) and
``resume_for_memory``. Doors that cannot pause a reader (HTTP requests, read
whole by aiohttp) wait for memory instead: :meth:`RequestMemoryPool.on_freed`
tells them when bytes come back below the bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["READ_BYTES", "MemoryClient", "RequestMemoryPool"]

#: The most one read of an event-loop transport delivers (asyncio and uvloop: 256 KiB).
READ_BYTES = 256 * 1024


class MemoryClient(Protocol):
    def pause_for_memory(self) -> bool: ...

    def resume_for_memory(self) -> None: ...


class RequestMemoryPool:
    """Bytes held across connections against one bound; pauses and resumes readers."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.held = 0
        self.peak = 0
        self.pauses = 0
        self._reading: dict[MemoryClient, None] = {}
        self._waiting: dict[MemoryClient, None] = {}  # insertion order = resume order
        self._freed: list[Callable[[], None]] = []

    @property
    def exhausted(self) -> bool:
        return self.held >= self.bound

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def register(self, client: MemoryClient) -> bool:
        """A new connection; returns whether it may read now (else it is queued, paused)."""
        if self.exhausted:
            self._waiting[client] = None
            return False
        self._reading[client] = None
        return True

    def unregister(self, client: MemoryClient, held: int) -> None:
        """A closed connection gives back what it held."""
        self._reading.pop(client, None)
        self._waiting.pop(client, None)
        self.change(-held)

    def change(self, delta: int) -> None:
        """Bytes held went up or down by ``delta``; pause or resume readers as the bound says."""
        self.held += delta
        if self.held >= self.bound:
            self.peak = max(self.peak, self.held)
            if self._reading:
                self._pause_readers()
        else:
            if self._waiting:
                self._resume_some()
            if delta < 0:
                for freed in self._freed:
                    freed()

    def on_freed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever bytes are given back and the pool is below its bound."""
        self._freed.append(callback)

    def set_bound(self, bound: int) -> None:
        self.bound = bound
        self.change(0)

    def _pause_readers(self) -> None:
        """Pause every reader between frames; those in the middle of one read on."""
        paused = [client for client in list(self._reading) if client.pause_for_memory()]
        if paused:
            self.pauses += 1
        for client in paused:
            del self._reading[client]
            self._waiting[client] = None

    def _resume_some(self) -> None:
        room = self.bound - self.held
        count = -(-room // READ_BYTES)
        resumed = []
        while self._waiting and count > 0:
            client = next(iter(self._waiting))
            del self._waiting[client]
            self._reading[client] = None
            resumed.append(client)
            count -= 1
        for client in resumed:
            client.resume_for_memory()
