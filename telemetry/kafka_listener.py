"""The Kafka-protocol front door: unmodified Kafka clients push telemetry here.

One task per connection reads size-prefixed frames and answers each request
before reading the next, as a Kafka broker mutes a channel while its request
is in flight: pipelined requests are therefore answered in order. A response
with a throttle time keeps the channel muted for that long (Kafka's quota
backpressure), so a client that honours it is never disconnected for it.

Anything the codec refuses — a malformed frame, a lying size, an unknown api
key, an unsupported version of anything but ApiVersions — closes that one
connection with a log line; the server and every other client carry on.

A push is acknowledged (error NONE) only after the ingest log has it on disk.

A push whose payload expands past :data:`INLINE_DECOMPRESSED_BYTES` is
decompressed in a small thread pool rather than on the event loop, so one
client's 16 MiB expansion does not stall everybody else's small pushes; its
connection stays busy meanwhile, so its later requests are still answered
in order. Real clients' pushes (a few KiB) never leave the loop: no thread
hop, no task, on the hot path.

Quotas (``telemetry.enforcement``) are applied here the Kafka way: connection
limits at accept (refuse, close after a delay, or delay the acceptor); the
time of every request and the bytes of every push recorded against the
client's entity, the throttle returned in ``throttle_time_ms`` and served by
muting the channel after the response; a strict instance-creation quota on
GET; idle connections closed by one periodic sweep; and the bytes read but
not yet handled bounded across connections by the memory pool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from telemetry.client_uuid import Uuid
from telemetry.enforcement import (
    READ_BYTES,
    AdmissionOutcome,
    Enforcement,
    Throttle,
    ThrottleReason,
)
from telemetry.errors import ErrorCode, TelemetryError
from telemetry.ingest import PushContext
from telemetry.kafka_connection import (
    CloseConnectionError,
    ConnectionState,
    KafkaConnection,
    PendingResponse,
)
from telemetry.kafka_security import KafkaSecurity, security_api_name
from telemetry.manager import AcceptedPush, DeferredPush, TelemetryManager
from telemetry.manager import PushTelemetryResponse as ManagerPushResponse
from telemetry.push_completion import complete_failed_append, decompression_outcome
from telemetry.wire import (
    ApiKey,
    ApiVersionsRequest,
    FindCoordinatorRequest,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    InitProducerIdRequest,
    MetadataRequest,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    api_versions_response,
    build_metadata_response,
    coordinator_not_available,
    decode_request,
    encode_response,
    init_producer_id_response,
    unsupported_api_versions_response,
)

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable

    from telemetry.admin.kafka_handlers import KafkaAdminHandlers

    #: A request handler: (connection, header, decoded request, start ns) -> the answer.
    _Handler = Callable[
        [ConnectionState, RequestHeader, Any, int], tuple[bytes, int] | PendingResponse
    ]

_log = logging.getLogger(__name__)

#: Kafka's ``socket.request.max.bytes`` is 100 MiB; telemetry needs far less,
#: and the limit is also the most one connection may buffer.
DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024
#: How long a closing connection may take to flush its last bytes on shutdown.
CLOSE_GRACE_S = 2.0

#: Decompressed output produced on the event loop (≈0.1–0.5 ms of zstd or
#: gzip); a payload expanding further goes to the decompression threads.
#: librdkafka's pushes are 1.5–3 KiB decompressed.
INLINE_DECOMPRESSED_BYTES: Final = 256 * 1024
#: Threads for large decompressions. Each holds at most one output of
#: ``max_decompressed_bytes``; waiting pushes hold only their compressed bytes
#: (one per connection, since a connection answers one request at a time).
#: One thread: large pushes are the exception, and a second would let them
#: take every core of a small machine from the event loop.
DECOMPRESSION_THREADS: Final = 1
#: Scheduling niceness of the decompression threads (Linux schedules threads
#: individually): under contention the event loop, answering everybody's
#: small pushes, gets the CPU first.
DECOMPRESSION_NICENESS: Final = 10
#: The listener's name in connection quotas (Kafka's listener name).
LISTENER_NAME = "kafka"
#: The idle sweep runs this often at most (and at least ten times per idle limit).
MAX_SWEEP_PERIOD_S = 1.0


def wall_clock_ms() -> int:
    """Kafka's ``time.milliseconds()``: the push gates and the landing use wall time."""
    return time.time_ns() // 1_000_000


class PushLog(Protocol):
    """Where accepted pushes go before they are acknowledged (the ingest log)."""

    def append_nowait(
        self, context: PushContext, payload: bytes
    ) -> tuple[int, asyncio.Future[None]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaListenerConfig:
    """``[kafka]`` settings; ``advertised_*`` default to the bound address.

    The configuration refuses an unspecified advertised address (``0.0.0.0``,
    ``::``, given or defaulted from the bind address): clients connect to
    what Metadata advertises.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    node_id: int = 1
    cluster_id: str = "kip714"


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
        admin: KafkaAdminHandlers | None = None,
        *,
        security: KafkaSecurity | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        #: The admin APIs (``telemetry.admin``), served and advertised when given.
        self.admin = admin
        #: SASL, SCRAM admin and TLS principals (docs/security.md); None serves everyone.
        self.security = security
        self.ssl_context = ssl_context
        #: The telemetry codec's requests: the name they are counted under, their handler.
        self._handlers: dict[type, tuple[str, _Handler]] = {
            PushTelemetryRequest: ("PushTelemetry", self._push),
            GetTelemetrySubscriptionsRequest: (
                "GetTelemetrySubscriptions",
                self._get_subscriptions,
            ),
            ApiVersionsRequest: ("ApiVersions", self._api_versions),
            MetadataRequest: ("Metadata", self._metadata),
            FindCoordinatorRequest: ("FindCoordinator", self._find_coordinator),
            InitProducerIdRequest: ("InitProducerId", self._init_producer_id),
        }
        self.manager = manager
        self.log = log
        self.clock = clock
        self.enforcement = enforcement if enforcement is not None else Enforcement()
        self.request_memory = self.enforcement.request_memory
        self.read_buffer = memoryview(bytearray(READ_BYTES))
        self.stats = ListenerStats()
        self.max_frame_bytes = config.max_frame_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[KafkaConnection] = set()
        self._ids = itertools.count(1)
        #: Kafka's ProducerIdManager: each idempotent producer gets an id of its own.
        self._producer_ids = itertools.count(0)
        self._bound: tuple[str, int] | None = None
        #: Threads for pushes that expand past ``INLINE_DECOMPRESSED_BYTES``;
        #: shared with the HTTP front door, so both draw on one bounded pool.
        self.decompressor = ThreadPoolExecutor(
            DECOMPRESSION_THREADS,
            thread_name_prefix="kip714-decompress",
            initializer=_lower_thread_priority,
        )
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
        sockname = self._server.sockets[0].getsockname()
        self._bound = (str(sockname[0]), int(sockname[1]))
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

    # -- idle connections and housekeeping ---------------------------------------------------

    async def _sweep(self) -> None:
        """One periodic sweep for every connection: idle closes and quota housekeeping."""
        while True:
            idle_ms = self.enforcement.connections_max_idle_ms
            await asyncio.sleep(min(MAX_SWEEP_PERIOD_S, max(0.01, idle_ms / 10_000)))
            try:
                self.close_idle(time.monotonic(), idle_ms)
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

    async def _stop_sweeper(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)

    # -- requests ----------------------------------------------------------------------------

    def handle_frame(
        self, state: ConnectionState, frame: bytes
    ) -> tuple[bytes, int] | PendingResponse:
        """Answer one request: ``(response frame, throttle ms)``, or a push still being logged.

        The time from here to the response (decoding, validation,
        decompression) is the request time charged to the client's
        ``request_percentage`` quota (KIP-124).
        """
        started_ns = time.perf_counter_ns()
        if self.security is not None:
            answered = self.security.screen(state, frame)
            if answered is not None:
                self.stats.requests[security_api_name(frame)] += 1
                return answered
        try:
            header, request = decode_request(frame)
        except UnsupportedVersionError as error:
            if error.header.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 so the client can retry with a version we know.
                self.stats.requests["ApiVersions"] += 1
                answer = unsupported_api_versions_response()
                return encode_response(error.header, ApiKey.API_VERSIONS, 0, answer), 0
            raise CloseConnectionError(str(error)) from error
        except UnsupportedApiKeyError as error:
            return self._admin_request(state, frame, error, started_ns)
        # Kafka reads a null client id as "".
        state.identify(header.client_id or "")
        handler = self._handlers.get(type(request))
        if handler is None:
            raise CloseConnectionError(f"no handler for {type(request).__name__}")
        name, handle = handler
        self.stats.requests[name] += 1
        return handle(state, header, request, started_ns)

    def _admin_request(
        self,
        state: ConnectionState,
        frame: bytes,
        error: UnsupportedApiKeyError,
        started_ns: int,
    ) -> tuple[bytes, int] | PendingResponse:
        """An api key the telemetry codec does not know: the admin APIs', or a closed connection."""
        admin = self.admin
        if admin is None or not admin.serves(error.header.api_key):
            raise CloseConnectionError(str(error)) from error
        state.identify(error.header.client_id or "")
        self.stats.requests[admin.name(error.header.api_key)] += 1
        return admin.handle(
            state,
            frame,
            lambda mutation_ms: (
                self._finish_request(state, started_ns, mutation_throttle_ms=mutation_ms).time_ms
            ),
        )

    def _api_versions(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: ApiVersionsRequest,
        started_ns: int,
    ) -> tuple[bytes, int]:
        """Exactly what is served: the telemetry APIs, plus the admin and SASL ones when on."""
        if request.client_software_name:
            state.software(request.client_software_name, request.client_software_version)
        throttle = self._finish_request(state, started_ns).time_ms
        answer = api_versions_response(throttle)
        if self.admin is not None:
            answer = replace(answer, api_keys=answer.api_keys + self.admin.advertised)
        if self.security is not None:
            answer = self.security.api_versions(answer)
        return encode_response(header, ApiKey.API_VERSIONS, header.api_version, answer), throttle

    def _metadata(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: MetadataRequest,
        started_ns: int,
    ) -> tuple[bytes, int]:
        """kip714 itself as the only broker, and no topics."""
        version = header.api_version
        host, port = self.advertised_address
        throttle = self._finish_request(state, started_ns).time_ms
        metadata = build_metadata_response(
            request,
            version,
            node_id=self.config.node_id,
            host=host,
            port=port,
            cluster_id=self.config.cluster_id,
            throttle_time_ms=throttle,
        )
        return encode_response(header, ApiKey.METADATA, version, metadata), throttle

    def _find_coordinator(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: FindCoordinatorRequest,
        started_ns: int,
    ) -> tuple[bytes, int]:
        """No coordinator exists here: retriable COORDINATOR_NOT_AVAILABLE, as Kafka answers.

        A Java group consumer keeps polling (and pushing) instead of
        throwing UnsupportedVersionException on every ``poll()``.
        """
        throttle = self._finish_request(state, started_ns).time_ms
        lookup = coordinator_not_available(request, throttle)
        return encode_response(
            header, ApiKey.FIND_COORDINATOR, header.api_version, lookup
        ), throttle

    def _init_producer_id(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: InitProducerIdRequest,
        started_ns: int,
    ) -> tuple[bytes, int]:
        """A producer id at epoch 0, so the idempotent Java producer stays out of its fatal state.

        kip714 accepts no Produce, so the id only has to satisfy the client.
        """
        throttle = self._finish_request(state, started_ns).time_ms
        producer = init_producer_id_response(request, next(self._producer_ids), throttle)
        return encode_response(
            header, ApiKey.INIT_PRODUCER_ID, header.api_version, producer
        ), throttle

    def _finish_request(
        self,
        state: ConnectionState,
        started_ns: int,
        *,
        push_bytes: int | None = None,
        mutation_throttle_ms: int = 0,
    ) -> Throttle:
        """Charge the request to the client's quotas; the throttle its response carries.

        Versions without a throttle field (ApiVersions v0, Metadata v0-v2)
        are muted all the same, as Kafka mutes every throttled channel.
        """
        return self.enforcement.clients.finish_request(
            state.entity,
            time.perf_counter_ns() - started_ns,
            self.clock(),
            push_bytes=push_bytes,
            mutation_throttle_ms=mutation_throttle_ms,
        )

    def _get_subscriptions(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: GetTelemetrySubscriptionsRequest,
        started_ns: int,
    ) -> tuple[bytes, int]:
        client_instance_id = Uuid.from_bytes(request.client_instance_id.bytes)
        now_ms = self.clock()
        if self.manager.creates_instance(client_instance_id, now_ms):
            # KIP-599 strict: a new instance costs a token; in deficit, nothing is created.
            refused_ms = self.enforcement.clients.admit_instance_creation(state.entity, now_ms)
            if refused_ms > 0:
                throttle = self._finish_request(
                    state, started_ns, mutation_throttle_ms=refused_ms
                ).time_ms
                refusal = GetTelemetrySubscriptionsResponse(
                    error_code=int(ErrorCode.THROTTLING_QUOTA_EXCEEDED), throttle_time_ms=throttle
                )
                return encode_response(header, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, refusal), (
                    throttle
                )
        answer = self.manager.get_telemetry_subscriptions(
            client_instance_id, state.context(), now_ms
        )
        throttle = max(answer.throttle_time_ms, self._finish_request(state, started_ns).time_ms)
        response = GetTelemetrySubscriptionsResponse(
            error_code=int(answer.error_code),
            throttle_time_ms=throttle,
            client_instance_id=uuid.UUID(bytes=answer.client_instance_id.to_bytes()),
            subscription_id=answer.subscription_id,
            accepted_compression_types=tuple(int(c) for c in answer.accepted_compression_types),
            push_interval_ms=answer.push_interval_ms,
            telemetry_max_bytes=answer.telemetry_max_bytes,
            delta_temporality=answer.delta_temporality,
            requested_metrics=answer.requested_metrics,
        )
        return encode_response(header, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, response), throttle

    def _push(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: PushTelemetryRequest,
        started_ns: int,
    ) -> tuple[bytes, int] | PendingResponse:
        client_instance_id = Uuid.from_bytes(request.client_instance_id.bytes)
        now_ms = self.clock()
        # The bytes as received, accepted or not (Kafka's produce quota
        # records every request; an over-quota push is still accepted).
        push_bytes = len(request.metrics)
        if not client_instance_id.is_reserved and self.manager.creates_instance(
            client_instance_id, now_ms
        ):
            # A push with an unknown id makes an instance as a GET does (Kafka's
            # ClientMetricsManager), so it draws from the same strict bucket:
            # otherwise made-up ids would be a way around it.
            refused_ms = self.enforcement.clients.admit_instance_creation(state.entity, now_ms)
            if refused_ms > 0:
                throttle = self._finish_request(
                    state, started_ns, push_bytes=push_bytes, mutation_throttle_ms=refused_ms
                ).time_ms
                refusal = ManagerPushResponse(
                    throttle_time_ms=throttle, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
                )
                return _push_response(header, refusal, throttle)
        outcome = self.manager.validate_push(
            client_instance_id=client_instance_id,
            subscription_id=request.subscription_id,
            terminating=request.terminating,
            compression_type=request.compression_type,
            metrics=None if request.metrics_was_null else request.metrics,
            context=state.context(),
            now_ms=now_ms,
            inline_max_bytes=INLINE_DECOMPRESSED_BYTES,
        )

        def finish() -> int:
            """Record the request (its time so far, its bytes); the quota throttle."""
            return self._finish_request(state, started_ns, push_bytes=push_bytes).time_ms

        if isinstance(outcome, AcceptedPush):
            return self._log_push(header, outcome, finish)
        if isinstance(outcome, DeferredPush):
            # The decompression thread's time is not the event loop's, so the
            # request time recorded is the loop's, as for every other request.
            return _DeferredPush(self, header, outcome, finish())
        return _push_response(header, outcome, finish())

    def _log_push(
        self, header: RequestHeader, accepted: AcceptedPush, finish: Callable[[], int]
    ) -> tuple[bytes, int] | PendingResponse:
        """Append ``accepted``; ``finish`` records the request once the append is done."""
        if not accepted.data:
            # Null or empty metrics: nothing to log.
            return _push_response(header, self.manager.complete_push(accepted), finish())
        try:
            _, durable = self.log.append_nowait(_push_context(accepted), accepted.data)
        except Exception as error:
            return _push_response(header, self._append_failed(accepted, error), finish())
        return _PendingPush(self, header, accepted, durable, finish())

    def _append_failed(self, accepted: AcceptedPush, error: BaseException) -> ManagerPushResponse:
        """The push is not acknowledged; the error code tells the client when to retry."""
        return complete_failed_append(self.manager, accepted, error)


class _PendingPush:
    """An accepted push waiting for its fsync; answered from the log future's callback."""

    __slots__ = ("_accepted", "_durable", "_header", "_listener", "_quota_throttle_ms")

    def __init__(
        self,
        listener: KafkaListener,
        header: RequestHeader,
        accepted: AcceptedPush,
        durable: asyncio.Future[None],
        quota_throttle_ms: int,
    ) -> None:
        self._listener = listener
        self._header = header
        self._accepted = accepted
        self._durable = durable
        self._quota_throttle_ms = quota_throttle_ms

    def add_done_callback(self, callback: Callable[[tuple[bytes, int]], None]) -> None:
        def done(durable: asyncio.Future[None]) -> None:
            manager = self._listener.manager
            error = None if durable.cancelled() else durable.exception()
            if durable.cancelled() or error is not None:
                failure = error if error is not None else asyncio.CancelledError()
                outcome = self._listener._append_failed(self._accepted, failure)
            else:
                outcome = manager.complete_push(self._accepted)
            callback(_push_response(self._header, outcome, self._quota_throttle_ms))

        self._durable.add_done_callback(done)


class _DeferredPush:
    """A push being decompressed in a thread, then logged; answered from callbacks, in order."""

    __slots__ = ("_decompressed", "_deferred", "_header", "_listener", "_quota_throttle_ms")

    def __init__(
        self,
        listener: KafkaListener,
        header: RequestHeader,
        deferred: DeferredPush,
        quota_throttle_ms: int,
    ) -> None:
        self._listener = listener
        self._header = header
        self._deferred = deferred
        self._quota_throttle_ms = quota_throttle_ms
        loop = asyncio.get_running_loop()
        self._decompressed = loop.run_in_executor(listener.decompressor, deferred.outcome)

    def add_done_callback(self, callback: Callable[[tuple[bytes, int]], None]) -> None:
        def done(decompressed: asyncio.Future[bytes | TelemetryError]) -> None:
            listener = self._listener
            outcome = decompression_outcome(decompressed)
            result = listener.manager.finish_deferred(self._deferred, outcome)
            if not isinstance(result, AcceptedPush):
                callback(_push_response(self._header, result, self._quota_throttle_ms))
                return
            logged = listener._log_push(self._header, result, lambda: self._quota_throttle_ms)
            if isinstance(logged, tuple):
                callback(logged)
            else:
                logged.add_done_callback(callback)

        self._decompressed.add_done_callback(done)


def _lower_thread_priority() -> None:
    """Runs first in each decompression thread: nice only this thread (Linux), if allowed."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DECOMPRESSION_NICENESS)


def _push_response(
    header: RequestHeader, outcome: ManagerPushResponse, quota_throttle_ms: int = 0
) -> tuple[bytes, int]:
    """The response, carrying the longer of the quota throttle and the log's own."""
    throttle_ms = max(outcome.throttle_time_ms, quota_throttle_ms)
    response = PushTelemetryResponse(
        error_code=int(outcome.error_code), throttle_time_ms=throttle_ms
    )
    return encode_response(header, ApiKey.PUSH_TELEMETRY, 0, response), throttle_ms


def _push_context(accepted: AcceptedPush) -> PushContext:
    context = accepted.context
    return PushContext(
        client_instance_id=str(accepted.client_instance_id),
        subscription_id=accepted.subscription_id,
        received_time_ms=accepted.received_ms,
        push_interval_ms=accepted.push_interval_ms,
        terminating=accepted.terminating,
        # Kafka reads a null client id as ""; the log keeps "absent" as None.
        client_id=context.client_id or None,
        client_software_name=context.client_software_name,
        client_software_version=context.client_software_version,
        client_source_address=context.client_source_address,
        client_source_port=context.client_source_port,
        principal=context.principal,
    )
