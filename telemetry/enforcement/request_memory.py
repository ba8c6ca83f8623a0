"""``queued_max_request_bytes``: one budget for request bytes read but not yet handled.

Kafka's ``queued.max.request.bytes`` is a memory pool: a channel that cannot
get memory is muted until memory is freed. Kafka allocates a request's whole
*declared* size once it has read the size; here a connection holds, in the
pool, the bytes it has actually received and not yet handled (its complete
frames and the part of the frame it has started), so a peer that sends only
a size prefix holds four bytes, not the size it declares.

When the pool is full, every connection is paused at once (waiting for each
one's next read would let every one of them add a read's worth past the
bound), those in the middle of a frame included: with frames charged as
received, letting them read on would let every started frame grow to its
declared size past the bound. So that partial frames cannot hold the pool
for good, one paused connection in the middle of a frame, the *finisher*,
reads on until its frame is complete (it is then handled and its memory comes
back); the bound is passed by at most the finisher's frame and the read that
crossed it. A finisher that stalls is closed by the listener's
``partial_frame_timeout_ms`` and the next one takes over. As memory is freed,
the paused connections resume in the order they were paused, a read's worth
of room (:data:`READ_BYTES`) per connection, so one freed frame does not wake
thousands of connections at once; while room is left, another batch is
resumed on the next turn of the event loop (:attr:`RequestMemoryPool.defer`),
so connections resumed with nothing to send cannot leave the others paused.
A paused connection costs nothing per byte: what its peer sends waits in the
kernel's socket buffer.

Connections not yet authenticated (on a listener without SASL: with no
request answered yet) hold together at most a quarter of the bound
(:attr:`RequestMemoryPool.unauthenticated_bound`), and those of one source
address a quarter of that (:attr:`RequestMemoryPool.address_bound`): once a
share is full its connections are paused, mid-frame or not, until it frees,
so unauthenticated peers can neither fill the pool nor, from one address,
hold up another address's first request.

Connections are opaque to the pool: anything with ``pause_for_memory``
(which says whether it paused: a closed one does not), ``resume_for_memory``
and ``mid_frame``; an unauthenticated one also has ``pause_for_share`` and
``resume_for_share``. Doors that cannot pause a reader (HTTP requests, read
whole by aiohttp) wait for memory instead: :meth:`RequestMemoryPool.on_freed`
tells them when bytes come back below the bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ADDRESS_SHARE_DIVISOR",
    "READ_BYTES",
    "UNAUTHENTICATED_SHARE_DIVISOR",
    "MemoryClient",
    "PendingClient",
    "RequestMemoryPool",
]

#: The most one read of an event-loop transport delivers (asyncio and uvloop: 256 KiB).
READ_BYTES = 256 * 1024
#: Unauthenticated connections hold at most ``bound // 4`` together ...
UNAUTHENTICATED_SHARE_DIVISOR: Final = 4
#: ... and those of one source address at most a quarter of that.
ADDRESS_SHARE_DIVISOR: Final = 4


class MemoryClient(Protocol):
    def pause_for_memory(self) -> bool: ...

    def resume_for_memory(self) -> None: ...

    @property
    def mid_frame(self) -> bool: ...


class PendingClient(Protocol):
    """An unauthenticated connection: paused while its share is full."""

    def pause_for_share(self) -> None: ...

    def resume_for_share(self) -> None: ...


class RequestMemoryPool:
    """Bytes held across connections against one bound; pauses and resumes readers."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.held = 0
        self.peak = 0
        self.pauses = 0
        self._reading: dict[MemoryClient, None] = {}
        self._waiting: dict[MemoryClient, None] = {}  # insertion order = resume order
        self._finisher: MemoryClient | None = None
        self._freed: list[Callable[[], None]] = []
        #: Runs a callback on the next turn of the event loop (``loop.call_soon``),
        #: set by the listener that pauses readers; None: resume on changes only.
        self.defer: Callable[[Callable[[], None]], object] | None = None
        self._resume_scheduled = False
        #: Bytes held by unauthenticated connections, in all and by source address.
        self.unauthenticated_held = 0
        self.unauthenticated_peak = 0
        #: Times an unauthenticated share filled and its connections were paused.
        self.share_pauses = 0
        self._pending: dict[str, dict[PendingClient, None]] = {}
        self._pending_held: dict[str, int] = {}
        self._full_addresses: set[str] = set()
        self._share_full = False

    @property
    def exhausted(self) -> bool:
        return self.held >= self.bound

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def unauthenticated_bound(self) -> int:
        return self.bound // UNAUTHENTICATED_SHARE_DIVISOR

    @property
    def address_bound(self) -> int:
        return self.bound // (UNAUTHENTICATED_SHARE_DIVISOR * ADDRESS_SHARE_DIVISOR)

    def held_by(self, address: str) -> int:
        """Bytes the unauthenticated connections from ``address`` hold."""
        return self._pending_held.get(address, 0)

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
        if client is self._finisher:
            self._finisher = None
        self.change(-held)

    def change(self, delta: int) -> None:
        """Bytes held went up or down by ``delta``; pause or resume readers as the bound says."""
        self.held += delta
        if self.held >= self.bound:
            self.peak = max(self.peak, self.held)
            if self._reading:
                self._pause_readers()
            finisher = self._finisher
            if finisher is None or not finisher.mid_frame:
                self._next_finisher()
        else:
            if self._finisher is not None:
                self._reading[self._finisher] = None
                self._finisher = None
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
        self._change_share("", 0)  # the whole share: paused or resumed as the new bound says
        if not self._share_full:
            for address in list(self._full_addresses):
                if self._pending_held[address] < self.address_bound:
                    self._full_addresses.discard(address)
                    for client in list(self._pending[address]):
                        client.resume_for_share()

    def _pause_readers(self) -> None:
        """Pause every reader, those in the middle of a frame too (the finisher reads on)."""
        paused = [client for client in list(self._reading) if client.pause_for_memory()]
        if paused:
            self.pauses += 1
        for client in paused:
            del self._reading[client]
            self._waiting[client] = None

    def _next_finisher(self) -> None:
        """The pool is full: let one paused connection in the middle of a frame finish it."""
        done = self._finisher
        if done is not None:
            self._finisher = None
            if done.pause_for_memory():  # between frames now: it waits like the others
                self._waiting[done] = None
        chosen: MemoryClient | None = None
        for client in self._waiting:
            if client.mid_frame:
                chosen = client
                break
        if chosen is not None:
            del self._waiting[chosen]
            self._finisher = chosen
            chosen.resume_for_memory()

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
        if self._waiting and self.defer is not None and not self._resume_scheduled:
            # Those resumed may have nothing to send: look again once they had their turn.
            self._resume_scheduled = True
            self.defer(self._resume_later)

    def _resume_later(self) -> None:
        self._resume_scheduled = False
        if self._waiting and self.held < self.bound:
            self._resume_some()

    # -- the unauthenticated share -----------------------------------------------------------

    def enter_pending(self, client: PendingClient, address: str) -> bool:
        """An unauthenticated connection from ``address``; False: its share is full, pause it."""
        clients = self._pending.get(address)
        if clients is None:
            clients = self._pending[address] = {}
            self._pending_held[address] = 0
        clients[client] = None
        return not (self._share_full or address in self._full_addresses)

    def leave_pending(self, client: PendingClient, address: str, held: int) -> None:
        """Authenticated (its bytes stay in the pool) or closed: out of the share."""
        clients = self._pending.get(address)
        if clients is None or client not in clients:
            return
        del clients[client]
        self._change_share(address, -held)
        if not clients:
            del self._pending[address]
            del self._pending_held[address]
            self._full_addresses.discard(address)

    def change_pending(self, address: str, delta: int) -> None:
        """An unauthenticated connection's bytes changed by ``delta`` (its pool change apart)."""
        if address in self._pending_held:
            self._change_share(address, delta)

    def _change_share(self, address: str, delta: int) -> None:
        held = self._pending_held.get(address, 0) + delta
        if address in self._pending_held:
            self._pending_held[address] = held
        total = self.unauthenticated_held = self.unauthenticated_held + delta
        if total >= self.unauthenticated_bound:
            self.unauthenticated_peak = max(self.unauthenticated_peak, total)
            if not self._share_full:
                self._share_full = True
                self.share_pauses += 1
                for clients in list(self._pending.values()):
                    for client in list(clients):
                        client.pause_for_share()
        if address and held >= self.address_bound and address not in self._full_addresses:
            self._full_addresses.add(address)
            if not self._share_full:
                self.share_pauses += 1
                for client in list(self._pending.get(address, ())):
                    client.pause_for_share()
        if delta <= 0:
            self._share_freed(address, held, total)

    def _share_freed(self, address: str, held: int, total: int) -> None:
        """Bytes came back (or the bound moved): resume what is no longer over a share."""
        full = self._full_addresses
        if self._share_full and total < self.unauthenticated_bound:
            self._share_full = False
            for freed, clients in list(self._pending.items()):
                if freed in full and self._pending_held[freed] >= self.address_bound:
                    continue
                full.discard(freed)
                for client in list(clients):
                    client.resume_for_share()
        elif address in full and held < self.address_bound:
            full.discard(address)
            if not self._share_full:
                for client in list(self._pending.get(address, ())):
                    client.resume_for_share()
