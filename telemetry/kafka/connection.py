"""One Kafka-protocol connection: framing, ordering, muting and backpressure.

An ``asyncio.BufferedProtocol`` rather than streams: the listener answers thousands
of pushes a second on one event loop, and a reader task plus ``drain()`` per
request cost more than the request. Frames are split out of one buffer and
handled strictly one at a time, in order, as a Kafka broker mutes a channel
while its request is in flight; a push waiting for the ingest log completes
through a callback, not a task.

Reads land in one scratch buffer of the listener's and are copied once into
the connection's buffer. A paused connection is offered a one-byte buffer:
uvloop starts reading right after ``connection_made`` whatever it was told,
and may deliver a read after ``pause_reading``, so what a paused connection
can take is one byte, not a whole read.

Memory per connection is bounded: reading pauses while a frame is in flight
and more than a few frames (or more than one maximal frame) are buffered,
and while the peer does not read its responses. Across connections, the
bytes held count against the listener's ``queued_max_request_bytes`` pool,
which pauses readers when it is full: complete frames, and of a frame being
received the bytes received so far, never its declared size (a size prefix
alone would otherwise reserve up to ``max_frame_bytes``).

Until it is authenticated (on a listener without SASL, or with anonymous
clients allowed: until its first request is answered) a connection is
*pending*: its bytes also count against its address's share of the pool's
unauthenticated share (``RequestMemoryPool.enter_pending``), which pauses it
when full; and where SASL is required its frames may declare at most
:data:`PRE_AUTHENTICATION_MAX_FRAME_BYTES` (Kafka's
``sasl.server.max.receive.size``). A frame must complete within
``partial_frame_timeout_ms`` of its first byte: the listener's sweep closes
a connection whose frame does not (:attr:`KafkaConnection.frame_started`).
Reading is paused for any of several reasons at once (a backlog, a mute, the
memory pool, a delayed admission, a full unauthenticated share) and resumes
when none is left.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import TYPE_CHECKING, Final, Protocol, cast

from telemetry.enforcement import ClientEntity
from telemetry.kafka.connection_state import ConnectionState
from telemetry.security.sasl_session import SaslState
from telemetry.wire import SIZE_PREFIX, MalformedFrameError

if TYPE_CHECKING:
    from collections.abc import Callable

    from telemetry.enforcement import RateLimitedLog, RequestMemoryPool


#: Frames buffered beyond the one in flight before reading pauses.
MAX_QUEUED_FRAMES = 8

# Why reading is paused (bits): it resumes when none is left.
_BACKLOG = 1  # frames queued up, or more than a frame buffered
_MUTED = 2  # a throttle is being served (KIP-219)
_MEMORY = 4  # the queued_max_request_bytes pool is full
_ADMISSION = 8  # the acceptor delays the connection (creation rate) or will close it
_SHARE = 16  # not yet authenticated, and its share of the memory pool is full
#: Waits the server imposes: a partial frame's clock does not run through them.
_SERVER_WAITS = _BACKLOG | _MUTED

#: Kafka's ``sasl.server.max.receive.size``: the largest frame before SASL authentication.
PRE_AUTHENTICATION_MAX_FRAME_BYTES: Final = 512 * 1024
#: Close reasons that are refusals by a bound (``kip714_requests_refused_total``).
PARTIAL_FRAME_TIMEOUT: Final = "partial_frame_timeout_ms"
PRE_AUTHENTICATION_FRAME: Final = "sasl_server_max_receive_size"


class CloseConnectionError(Exception):
    """The request cannot be answered; close the connection (Kafka does the same)."""


class PendingResponse(Protocol):
    """A response that completes later (a push waiting to be durable)."""

    def add_done_callback(self, callback: Callable[[tuple[bytes, int]], None]) -> None: ...


class FrameHandler(Protocol):
    """The listener side: turns one request frame into a response."""

    max_frame_bytes: int
    request_memory: RequestMemoryPool
    #: Connections with a frame started and not complete (the timeout's sweep reads it).
    partial_frames: dict[KafkaConnection, None]
    #: Why connections are closed, logged at most once per address, reason and minute.
    refusal_log: RateLimitedLog
    #: Throttled entities and until when (``time.monotonic``): see ``KafkaApis.mute``.
    muted: dict[ClientEntity, float]
    #: Where every connection's reads land (one event loop reads one at a time).
    read_buffer: memoryview

    def handle_frame(
        self, state: ConnectionState, frame: bytes
    ) -> tuple[bytes, int] | PendingResponse: ...

    def connection_eof(self, connection: KafkaConnection) -> None:
        """The peer closed its side: work only it could use (a password check) may be dropped."""
        ...

    def connection_opened(self, connection: KafkaConnection) -> None: ...

    def connection_active(self, connection: KafkaConnection) -> None: ...

    def connection_closed(self, connection: KafkaConnection, reason: str) -> None: ...

    def refused_frame(self, connection: KafkaConnection, reason: str, detail: str) -> None:
        """A bound closes the connection: counted and logged (rate-limited) by the listener."""
        ...


class KafkaConnection(asyncio.BufferedProtocol):
    """Serves one client connection; see the module docstring."""

    def __init__(self, handler: FrameHandler, state_factory: Callable[[str, int], ConnectionState]):
        self._handler = handler
        self._state_factory = state_factory
        self.state = ConnectionState("", "", 0)
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._frames: collections.deque[bytes] = collections.deque()
        self._frame_bytes = 0  # bytes of the frames in _frames
        self._held = 0  # bytes counted against the memory pool
        self._busy = False  # a request in flight, or the channel muted
        self._eof = False
        self._closed = False
        self._paused = 0  # why reading is paused (the bits above)
        self._writing_paused = False
        self._mute: asyncio.TimerHandle | None = None
        self._in_flight = False  # a pending response (a push waiting for the log)
        self._idle: asyncio.Future[None] | None = None  # made only when asked: see idle
        self._max_frame = handler.max_frame_bytes  # lower while SASL is not done
        self._pending = False  # in the pool's unauthenticated share (see the docstring)
        #: When the frame being received started (``time.monotonic``); 0: none is.
        self.frame_started = 0.0
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self._transport = cast("asyncio.Transport", transport)
        peer = self._transport.get_extra_info("peername") or ("", 0)
        self.state = self._state_factory(str(peer[0]), int(peer[1]))
        pool = self._handler.request_memory
        if not pool.register(self):
            self._pause(_MEMORY)
        self._pending = True
        if not pool.enter_pending(self, self.state.address):
            self._pause(_SHARE)
        self._handler.connection_opened(self)
        if self.state.authentication_required:
            self._max_frame = min(self._max_frame, PRE_AUTHENTICATION_MAX_FRAME_BYTES)
        if self._paused:
            # uvloop starts reading after connection_made returns, whatever
            # pause_reading said inside it: pause again once it has.
            asyncio.get_running_loop().call_soon(self._repause)

    def _repause(self) -> None:
        if self._paused and not self._closed and self._transport is not None:
            self._transport.pause_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        buffer = self._handler.read_buffer
        # Paused (the transport reads anyway, see the module docstring): one byte at most.
        return buffer[:1] if self._paused else buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return
        read = self._handler.read_buffer
        if not self._buffer and not self._paused and not self._frames and nbytes > SIZE_PREFIX.size:
            # The usual read: exactly one whole request, nothing held before it.
            # Copied once, straight from the read buffer (no append, no delete).
            (size,) = SIZE_PREFIX.unpack_from(read)
            if nbytes == SIZE_PREFIX.size + size and size <= self._max_frame:
                self._frames.append(bytes(read[SIZE_PREFIX.size : nbytes]))
                self._frame_bytes += size
                self._pump()
                self._count_held()
                return
        self._buffer += read[:nbytes]
        if self._paused:
            self._repause()
            if self._paused & _ADMISSION:
                # Not admitted yet: keep the byte, never serve it.
                self._count_held()
                return
        queued = len(self._frames)
        if self._split_frames():
            started = len(self._frames) > queued  # the rest of the buffer began in this read
            self._pump()
            if self._buffer and not self._closed:
                if started or not self.frame_started:
                    self.frame_started = time.monotonic()
                    self._handler.partial_frames[self] = None
            elif self.frame_started:
                self._stop_frame_clock()
        self._count_held()

    def eof_received(self) -> bool:
        self._eof = True
        self._handler.connection_eof(self)
        self._pump()
        return True  # we close once the requests already read are answered

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            self._closed = True
            self._finish("reset" if exc is not None else "eof")
        if self._mute is not None:
            self._mute.cancel()
        if not self.lost.done():
            self.lost.set_result(None)

    # -- pausing, from the listener and its limits -------------------------------------------

    def hold(self) -> None:
        """Read nothing until :meth:`admit` (an acceptor delay, or a close to come)."""
        self._pause(_ADMISSION)

    def admit(self) -> None:
        self._unpause(_ADMISSION)

    def pause_for_memory(self) -> bool:
        """Pause, in the middle of a frame too: the pool lets one finish at a time."""
        if self._closed:
            return False
        self._pause(_MEMORY)
        return True

    def resume_for_memory(self) -> None:
        self._unpause(_MEMORY)

    @property
    def mid_frame(self) -> bool:
        """Part of a frame is buffered and may be read on: what the pool's finisher must be.

        Not while paused for its unauthenticated share: as finisher it would not finish.
        """
        return bool(self._buffer) and not self._closed and not self._paused & _SHARE

    def pause_for_share(self) -> None:
        self._pause(_SHARE)

    def resume_for_share(self) -> None:
        self._unpause(_SHARE)

    @property
    def waiting_for_server(self) -> bool:
        """Reading is paused by the server's own doing (a throttle, a backlog of frames)."""
        return bool(self._paused & _SERVER_WAITS)

    def restart_frame_clock(self, now_s: float) -> None:
        """The server held this connection's partial frame: its clock starts again."""
        self.frame_started = now_s

    @property
    def ssl_object(self) -> object:
        """The TLS session (``ssl.SSLObject``) on a TLS listener, else None."""
        if self._transport is None:
            return None
        ssl_object: object = self._transport.get_extra_info("ssl_object")
        return ssl_object

    @property
    def idle(self) -> asyncio.Future[None]:
        """Done when no request is in flight (a shutdown drain waits for it).

        Made when asked, not per request: a drain is rare, requests are not.
        """
        idle = self._idle
        if idle is None:
            idle = self._idle = asyncio.get_running_loop().create_future()
            if not self._in_flight:
                idle.set_result(None)
        return idle

    @property
    def busy(self) -> bool:
        """A request in flight or a throttle being served: not idle, whatever the clock says."""
        return self._busy

    @property
    def held_bytes(self) -> int:
        return self._held

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._pump()
        self._count_held()

    # -- framing and ordering ----------------------------------------------------------------

    def _split_frames(self) -> bool:
        buffer = self._buffer
        limit = self._max_frame
        while len(buffer) >= SIZE_PREFIX.size:
            (size,) = SIZE_PREFIX.unpack_from(buffer)
            if size < 0 or size > limit:
                if 0 < size <= self._handler.max_frame_bytes:
                    # Only the pre-authentication bound refuses it (Kafka's
                    # sasl.server.max.receive.size): a bound, counted as such.
                    detail = f"frame size {size} over {limit} before SASL authentication"
                    self._handler.refused_frame(self, PRE_AUTHENTICATION_FRAME, detail)
                    self.close(PRE_AUTHENTICATION_FRAME)
                else:
                    self.close("malformed", f"frame size {size} outside 0..{limit}")
                return False
            end = SIZE_PREFIX.size + size
            if len(buffer) < end:
                break
            self._frames.append(bytes(buffer[SIZE_PREFIX.size : end]))
            self._frame_bytes += size
            del buffer[:end]
        if len(self._frames) > MAX_QUEUED_FRAMES or len(buffer) > limit + SIZE_PREFIX.size:
            self._pause(_BACKLOG)
        return True

    def _count_held(self) -> None:
        """Tell the memory pool what this connection holds: its frames, and what it has of the next.

        A started frame counts by the bytes received, not its declared size
        (as Kafka would allocate it): four bytes of size prefix must not
        reserve megabytes of the shared pool.
        """
        held = 0 if self._closed else self._frame_bytes + len(self._buffer)
        delta = held - self._held
        pool = self._handler.request_memory
        if delta or pool.held >= pool.bound:  # pool.exhausted, without the property call
            self._held = held
            if self._pending and delta:
                pool.change_pending(self.state.address, delta)
            pool.change(delta)

    def _pump(self) -> None:
        """Answer queued frames in order until one must wait (a push, a mute, a full socket)."""
        while self._frames and not self._busy and not self._closed and not self._writing_paused:
            muted = self._handler.muted
            if muted and self._held_for_entity(muted):
                return
            frame = self._frames.popleft()
            self._frame_bytes -= len(frame)
            try:
                result = self._handler.handle_frame(self.state, frame)
            except (MalformedFrameError, CloseConnectionError) as error:
                reason = "malformed" if isinstance(error, MalformedFrameError) else "refused"
                self.close(reason, str(error))
                return
            if isinstance(result, tuple):
                self._respond(*result)
            else:
                self._busy = self._in_flight = True
                if self._idle is not None and self._idle.done():
                    self._idle = None  # the next drain waits for this request
                result.add_done_callback(self._completed)
                return
        if self._closed:
            return
        if (
            self._paused & _BACKLOG
            and len(self._frames) <= MAX_QUEUED_FRAMES // 2
            and not self._busy
        ):
            self._unpause(_BACKLOG)
        if self._eof and not self._frames and not self._busy:
            self.close("truncated" if self._buffer else "eof")

    def _held_for_entity(self, muted: dict[ClientEntity, float]) -> bool:
        """Mute this connection while its entity is throttled on another (``KafkaApis.mute``)."""
        until = muted.get(self.state.entity)
        if until is None:
            return False
        wait_s = until - time.monotonic()
        if wait_s <= 0:
            del muted[self.state.entity]
            return False
        self._busy = True
        self._pause(_MUTED)
        self._mute = asyncio.get_running_loop().call_later(wait_s, self._unmute)
        return True

    def _completed(self, outcome: tuple[bytes, int]) -> None:
        self._busy = self._in_flight = False
        if self._idle is not None and not self._idle.done():
            self._idle.set_result(None)
        if self._closed:
            return
        self._respond(*outcome)
        self._pump()
        self._count_held()

    def _respond(self, response: bytes, throttle_time_ms: int) -> None:
        assert self._transport is not None
        self._transport.write(response)
        if self.state.closing is not None:
            self.close("refused", self.state.closing)  # closing flushes the response first
            return
        if self._pending:
            self._leave_pending()
        self._handler.connection_active(self)
        if throttle_time_ms > 0:
            # KIP-219: the response goes out first, then the channel is muted:
            # nothing more is read or answered until the throttle has passed.
            self._busy = True
            self._pause(_MUTED)
            self._mute = asyncio.get_running_loop().call_later(
                throttle_time_ms / 1000, self._unmute
            )

    def _leave_pending(self) -> None:
        """Authenticated (or, with no SASL required, a request answered): out of the share."""
        state = self.state
        if state.authentication_required:
            session = state.sasl
            if session is None or session.state is not SaslState.AUTHENTICATED:
                return
        self._pending = False
        self._max_frame = self._handler.max_frame_bytes
        self._handler.request_memory.leave_pending(self, state.address, self._held)
        self._unpause(_SHARE)

    def _stop_frame_clock(self) -> None:
        self.frame_started = 0.0
        self._handler.partial_frames.pop(self, None)

    def _unmute(self) -> None:
        self._mute = None
        self._busy = False
        self._unpause(_MUTED)
        # The throttle was the server's doing: the idle clock starts again now.
        self._handler.connection_active(self)
        self._pump()
        self._count_held()

    def _pause(self, reason: int) -> None:
        if not self._paused and self._transport is not None and not self._closed:
            self._transport.pause_reading()
        self._paused |= reason

    def _unpause(self, reason: int) -> None:
        if not self._paused & reason:
            return
        self._paused &= ~reason
        if not self._paused and self._transport is not None and not self._closed:
            self._transport.resume_reading()

    # -- closing -----------------------------------------------------------------------------

    def close(self, reason: str, detail: str | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if detail is not None:
            # Once per address, reason and minute: a flood of bad requests
            # (failed SASL attempts, malformed frames) must not flood the log.
            self._handler.refusal_log(
                self.state.address,
                reason,
                "closing connection %s from %s:%s: %s",
                self.state.connection_id,
                self.state.address,
                self.state.port,
                detail,
            )
        if self._transport is not None:
            self._transport.close()
        self._finish(reason)

    def abort(self) -> None:
        """Drop the socket now, unsent data included: a closing peer that stopped reading
        would otherwise keep it open (and the server's shutdown waiting) for good."""
        self.close("shutdown")
        if self._transport is not None:
            self._transport.abort()

    def _finish(self, reason: str) -> None:
        self._frames.clear()
        self._frame_bytes = 0
        self._buffer.clear()
        if self._mute is not None:
            self._mute.cancel()
            self._mute = None
        if self.frame_started:
            self._stop_frame_clock()
        pool = self._handler.request_memory
        if self._pending:
            self._pending = False
            pool.leave_pending(self, self.state.address, self._held)
        pool.unregister(self, self._held)
        self._held = 0
        self._handler.connection_closed(self, reason)
