"""The Kafka-protocol front door: unmodified Kafka clients push telemetry here.

The listener owns the sockets: it accepts connections (Kafka's connection
quotas at accept: refuse, close after a delay, or delay the acceptor),
closes idle ones and those whose frame did not complete within
``partial_frame_timeout_ms`` in one periodic sweep, bounds the bytes read but
not yet handled across connections by the memory pool, and hands every
complete frame to :class:`~telemetry.kafka.apis.KafkaApis`, which answers it
from the one table of served APIs.

One task per connection reads size-prefixed frames and answers each request
before reading the next, as a Kafka broker mutes a channel while its request
is in flight: pipelined requests are therefore answered in order. A response
with a throttle time keeps the channel muted for that long (Kafka's quota
backpressure), so a client that honours it is never disconnected for it.

Anything refused — a malformed frame, a lying size, an unknown api key, an
unsupported version of anything but ApiVersions — closes that one
connection with a log line; the server and every other client carry on.

The decompression threads for pushes expanding past
:data:`~telemetry.ingress.INLINE_DECOMPRESSED_BYTES` are created here (and
shared with the HTTP door by the server), so one client's 16 MiB expansion
does not stall everybody else's small pushes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from telemetry.enforcement import (
    READ_BYTES,
    AdmissionOutcome,
    Enforcement,
    RateLimitedLog,
    ThrottleReason,
)
from telemetry.ingress import DECOMPRESSION_THREADS, lower_thread_priority, wall_clock_ms
from telemetry.kafka.apis import KafkaApis
from telemetry.kafka.connection import PARTIAL_FRAME_TIMEOUT, KafkaConnection, PendingResponse
from telemetry.kafka.connection_state import ConnectionState

if TYPE_CHECKING:
    import socket
    import ssl
    from collections.abc import Callable, Sequence

    from telemetry.core.manager import TelemetryManager
    from telemetry.ingress import PushLog
    from telemetry.kafka.authenticator import KafkaSecurity
    from telemetry.kafka.settings import KafkaListenerConfig
    from telemetry.kafka.table import ApiSet

_log = logging.getLogger(__name__)

#: How long a closing connection may take to flush its last bytes on shutdown.
CLOSE_GRACE_S = 2.0

#: The listener's name in connection quotas (Kafka's listener name).
LISTENER_NAME = "kafka"
#: The door's name in ``kip714_requests_refused_total{door}``.
DOOR = "kafka"
#: The idle sweep runs this often at most (and at least ten times per idle limit).
MAX_SWEEP_PERIOD_S = 1.0


@dataclass(slots=True)
class ListenerStats:
    """Counters for the Prometheus layer."""

    connections_accepted: int = 0
    connections_open: int = 0
    closed_for: Counter[str] = field(default_factory=Counter)
    requests: Counter[str] = field(default_factory=Counter)


class KafkaListener:
    """An asyncio server speaking enough of the Kafka protocol for KIP-714."""

    def __init__(
        self,
        config: KafkaListenerConfig,
        manager: TelemetryManager,
        log: PushLog,
        clock: Callable[[], int] = wall_clock_ms,
        enforcement: Enforcement | None = None,
        admin: ApiSet | None = None,
        *,
        security: KafkaSecurity | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        #: The admin APIs (``telemetry.admin``): they register into the API table when given.
        self.admin = admin
        #: SASL, SCRAM admin and TLS principals (docs/security.md); None serves everyone.
        self.security = security
        self.ssl_context = ssl_context
        self.manager = manager
        self.log = log
        self.clock = clock
        self.enforcement = enforcement if enforcement is not None else Enforcement()
        self.request_memory = self.enforcement.request_memory
        self.read_buffer = memoryview(bytearray(READ_BYTES))
        self.stats = ListenerStats()
        self.max_frame_bytes = config.max_frame_bytes
        #: Connections with a frame started, not complete: see :meth:`close_partial_frames`.
        self.partial_frames: dict[KafkaConnection, None] = {}
        #: Closes (by a bound, a refused or malformed request) are logged once per
        #: address, reason and minute.
        self.refusal_log = RateLimitedLog(logging.getLogger("telemetry.kafka.connection"))
        self._server: asyncio.Server | None = None
        self._connections: set[KafkaConnection] = set()
        self._ids = itertools.count(1)
        self._bound: tuple[str, int] | None = None
        #: Threads for pushes that expand past ``INLINE_DECOMPRESSED_BYTES``;
        #: shared with the HTTP front door, so both draw on one bounded pool.
        self.decompressor = ThreadPoolExecutor(
            DECOMPRESSION_THREADS,
            thread_name_prefix="kip714-decompress",
            initializer=lower_thread_priority,
        )
        #: Every complete frame is answered there.
        self.apis = KafkaApis(
            config,
            manager,
            log,
            clock,
            self.enforcement,
            requests=self.stats.requests,
            advertised_address=lambda: self.advertised_address,
            decompressor=self.decompressor,
            admin=admin,
            security=security,
        )
        #: Throttled entities: every connection of one holds its next request (KafkaApis.mute).
        self.muted = self.apis.muted
        #: Answers one request: ``(response frame, throttle ms)``, or a push
        #: still being logged. The API table's own method: no call in between.
        self.handle_frame: Callable[
            [ConnectionState, bytes], tuple[bytes, int] | PendingResponse
        ] = self.apis.handle_frame
        # Admission: connections counted by the connection quotas, the
        # acceptor's backlog while it is delayed, and when the delay ends.
        self._counted: set[KafkaConnection] = set()
        self._backlog: collections.deque[KafkaConnection] = collections.deque()
        self._acceptor_timer: asyncio.TimerHandle | None = None
        self._delayed: KafkaConnection | None = None
        # Idle: admitted connections, least recently active first (monotonic s).
        self._activity: dict[KafkaConnection, float] = {}
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def bound_address(self) -> tuple[str, int]:
        if self._bound is None:
            raise RuntimeError("the Kafka listener is not started")
        return self._bound

    @property
    def advertised_address(self) -> tuple[str, int]:
        host, port = self.bound_address
        return (self.config.advertised_host or host, self.config.advertised_port or port)

    async def start(self, *, serve: bool = True) -> tuple[str, int]:
        """Bind; with ``serve=False`` connections wait in the backlog until :meth:`serve`."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection,
            self.config.host,
            self.config.port,
            ssl=self.ssl_context,
            start_serving=serve,
        )
        # uvloop's servers hand a list where typeshed says tuple, and compiled
        # code checks a declared tuple: read it untyped.
        sockets: Sequence[socket.socket] = getattr(self._server, "sockets")  # noqa: B009
        sockname = sockets[0].getsockname()
        self._bound = (str(sockname[0]), int(sockname[1]))
        self.enforcement.connections.add_listener(LISTENER_NAME)
        self.request_memory.defer = loop.call_soon
        self._sweeper = asyncio.create_task(self._sweep(), name="kafka-listener-sweep")
        return self._bound

    async def serve(self) -> None:
        if self._server is not None:
            await self._server.start_serving()

    async def stop_accepting(self) -> None:
        """Close the listening socket; open connections carry on until ``close``.

        ``Server.wait_closed()`` is not awaited here: from Python 3.12 it also
        waits for every connection to end, which an idle client never does.
        """
        if self._server is not None:
            self._server.close()

    async def close(self, drain_timeout_s: float = 5.0) -> None:
        """Stop accepting, let pushes being logged finish (bounded), then close every connection.

        Every wait is bounded: a peer that stopped reading cannot flush its
        last responses, so its connection is aborted after ``CLOSE_GRACE_S``;
        only then is the server's ``wait_closed`` awaited (also bounded).
        """
        if self._server is not None:
            self._server.close()
        await self._stop_sweeper()
        pending = [
            connection.idle for connection in self._connections if not connection.idle.done()
        ]
        if pending:
            await asyncio.wait(pending, timeout=drain_timeout_s)
        connections = list(self._connections)
        for connection in connections:
            connection.close("shutdown")
        lost = [connection.lost for connection in connections if not connection.lost.done()]
        if lost:
            await asyncio.wait(lost, timeout=CLOSE_GRACE_S)
            for connection in connections:
                if not connection.lost.done():
                    connection.abort()
        # A decompression still running finishes in its thread (it cannot be
        # interrupted, and is bounded); queued ones are dropped unanswered.
        self.decompressor.shutdown(wait=False, cancel_futures=True)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_GRACE_S)
            self._server = None

    # -- connections -------------------------------------------------------------------------

    def _new_connection(self) -> KafkaConnection:
        connection = KafkaConnection(self, self._new_state)
        self._connections.add(connection)
        self.stats.connections_accepted += 1
        self.stats.connections_open += 1
        return connection

    def _new_state(self, address: str, port: int) -> ConnectionState:
        return ConnectionState(f"kafka-{next(self._ids)}", address, port)

    def connection_opened(self, connection: KafkaConnection) -> None:
        """Connection quotas at accept; while the acceptor is delayed, new ones queue behind it."""
        if self.security is not None:
            self.security.connection_opened(connection.state, connection.ssl_object)
        if self._backlog or self._acceptor_timer is not None:
            connection.hold()
            self._backlog.append(connection)
            return
        self._admit(connection)

    def _admit(self, connection: KafkaConnection) -> None:
        enforcement = self.enforcement
        address = connection.state.address
        admission = enforcement.connections.admit(
            LISTENER_NAME, address, self.clock(), waiting=len(self._backlog)
        )
        if admission.counted:
            self._counted.add(connection)
        outcome = admission.outcome
        reason = admission.reason.value if admission.reason is not None else "refused"
        if outcome is AdmissionOutcome.REFUSED:
            _log.info("refusing a connection from %s: %s reached", address, reason)
            connection.close(reason)
        elif outcome is AdmissionOutcome.THROTTLED:
            # Kafka's DelayedCloseSocket: closed, unserved, once the throttle passed.
            _log.debug(
                "closing a connection from %s in %d ms: %s", address, admission.wait_ms, reason
            )
            connection.hold()
            asyncio.get_running_loop().call_later(
                admission.wait_ms / 1000, connection.close, reason
            )
        elif admission.wait_ms > 0:
            # The broker-wide creation rate: the acceptor waits before this
            # connection is served, and takes no other connection meanwhile.
            connection.hold()
            self._delayed = connection
            self._acceptor_timer = asyncio.get_running_loop().call_later(
                admission.wait_ms / 1000, self._acceptor_ready
            )
        else:
            connection.admit()
            self.connection_active(connection)

    def _acceptor_ready(self) -> None:
        self._acceptor_timer = None
        delayed, self._delayed = self._delayed, None
        if delayed is not None and delayed in self._connections:
            delayed.admit()
            self.connection_active(delayed)
        while self._backlog and self._acceptor_timer is None:
            self._admit(self._backlog.popleft())

    def connection_active(self, connection: KafkaConnection) -> None:
        """A request was answered (or a throttle ended): the idle clock starts again."""
        activity = self._activity
        activity.pop(connection, None)
        activity[connection] = time.monotonic()

    def connection_eof(self, connection: KafkaConnection) -> None:
        if self.security is not None:
            self.security.connection_closed(connection.state)

    def connection_closed(self, connection: KafkaConnection, reason: str) -> None:
        if connection in self._connections:
            self._connections.discard(connection)
            self.stats.connections_open -= 1
            self.stats.closed_for[reason] += 1
            self.manager.on_disconnect(connection.state.connection_id)
        self._activity.pop(connection, None)
        if connection in self._counted:
            self._counted.discard(connection)
            self.enforcement.connections.release(LISTENER_NAME, connection.state.address)
        if connection is self._delayed:
            self._delayed = None
        if self.security is not None:
            self.security.connection_closed(connection.state)
        if self._backlog and connection in self._backlog:
            self._backlog.remove(connection)

    def refused_frame(self, connection: KafkaConnection, reason: str, detail: str) -> None:
        """A bound closes ``connection`` (``reason``, its key): counted, logged rate-limited."""
        self.enforcement.refusals.count(DOOR, reason)
        address = connection.state.address
        self.refusal_log(
            address,
            reason,
            "closing Kafka connection %s from %s: %s (%s; further closes for it from this "
            "address within a minute are not logged)",
            connection.state.connection_id,
            address,
            detail,
            reason,
        )

    # -- idle connections and housekeeping ---------------------------------------------------

    async def _sweep(self) -> None:
        """One periodic sweep: idle and partial-frame closes, quota housekeeping."""
        while True:
            enforcement = self.enforcement
            idle_ms = enforcement.connections_max_idle_ms
            partial_ms = enforcement.partial_frame_timeout_ms
            await asyncio.sleep(
                min(MAX_SWEEP_PERIOD_S, max(0.01, idle_ms / 10_000), max(0.01, partial_ms / 10_000))
            )
            try:
                self.close_partial_frames(time.monotonic(), partial_ms)
                self.close_idle(time.monotonic(), idle_ms)
                self.apis.unmute_expired(time.monotonic())
                self.enforcement.tick(self.clock())
            except Exception:
                _log.exception("the Kafka listener's sweep failed; it runs again")

    def close_idle(self, now_s: float, idle_ms: int) -> int:
        """Close connections with no complete request for ``idle_ms`` (Kafka's idle expiry)."""
        activity = self._activity
        cutoff = now_s - idle_ms / 1000
        closed = 0
        while activity:
            connection, last = next(iter(activity.items()))
            if last > cutoff:
                break
            if connection.busy:
                # A push waiting for the log, or a throttle being served: not idle.
                self.connection_active(connection)
                continue
            closed += 1
            self.enforcement.tracker.count(ThrottleReason.CONNECTIONS_MAX_IDLE_MS)
            _log.debug(
                "closing idle connection %s from %s (no complete request for %d ms)",
                connection.state.connection_id, connection.state.address, idle_ms,
            )  # fmt: skip
            activity.pop(connection, None)
            connection.close("idle")
        return closed

    def close_partial_frames(self, now_s: float, timeout_ms: int) -> int:
        """Close connections whose frame did not complete within ``timeout_ms`` of its first byte.

        A connection the server itself holds (a throttle being served, a
        backlog of frames) is not timed meanwhile: its clock starts again.
        A connection paused by the memory pool or by its unauthenticated
        share is timed: it is what holds the memory.
        """
        cutoff = now_s - timeout_ms / 1000
        expired = [
            connection for connection in self.partial_frames if connection.frame_started <= cutoff
        ]
        closed = 0
        for connection in expired:
            if connection.waiting_for_server:
                connection.restart_frame_clock(now_s)
                continue
            closed += 1
            self.refused_frame(
                connection,
                PARTIAL_FRAME_TIMEOUT,
                f"a frame not complete {timeout_ms} ms after its first byte",
            )
            connection.close(PARTIAL_FRAME_TIMEOUT)
        return closed

    async def _stop_sweeper(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
