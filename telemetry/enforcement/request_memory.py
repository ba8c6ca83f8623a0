"""``queued_max_request_bytes``: one budget for request bytes read but not yet handled.

Kafka's ``queued.max.request.bytes`` is a memory pool: a channel that cannot
get memory for its next request is muted until memory is freed. Here the
budget counts the bytes every connection holds — partial frames included —
and the pool decides which connections may read:

* when the bytes held reach the bound, every reading connection is paused at
  once (an event-loop transport pushes whole reads at us, so waiting for
  each connection's next read would let every one of them add a read's worth
  past the bound);
* as bytes are freed, paused connections are resumed in the order they were
  paused, a read's worth of room (:data:`READ_BYTES`) per connection, so
  one freed frame does not wake thousands of connections at once.

Connections are opaque to the pool: anything with ``pause_for_memory`` and
``resume_for_memory``. Waiting costs nothing per byte: a paused connection's
bytes stay in the kernel's socket buffer.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["READ_BYTES", "MemoryClient", "RequestMemoryPool"]

#: The most one read of an event-loop transport delivers (asyncio and uvloop: 256 KiB).
READ_BYTES = 256 * 1024


class MemoryClient(Protocol):
    def pause_for_memory(self) -> None: ...

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

    @property
    def exhausted(self) -> bool:
        return self.held >= self.bound

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def register(self, client: MemoryClient) -> bool:
        """A new connection; returns whether it may read now (else it is paused and queued)."""
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
        if delta == 0:
            return
        self.held += delta
        if delta > 0:
            self.peak = max(self.peak, self.held)
            if self.held >= self.bound and self._reading:
                self._pause_all()
        elif self._waiting and self.held < self.bound:
            self._resume_some()

    def set_bound(self, bound: int) -> None:
        self.bound = bound
        if self.held >= bound and self._reading:
            self._pause_all()
        elif self._waiting and self.held < bound:
            self._resume_some()

    def _pause_all(self) -> None:
        self.pauses += 1
        reading = list(self._reading)
        self._reading.clear()
        for client in reading:
            self._waiting[client] = None
        for client in reading:
            client.pause_for_memory()

    def _resume_some(self) -> None:
        room = self.bound - self.held
        count = max(1, -(-room // READ_BYTES))
        resumed = []
        while self._waiting and count > 0:
            client = next(iter(self._waiting))
            del self._waiting[client]
            self._reading[client] = None
            resumed.append(client)
            count -= 1
        for client in resumed:
            client.resume_for_memory()
            if self.exhausted:
                break
