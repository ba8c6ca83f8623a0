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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from telemetry.client_instance import RequestContext
from telemetry.client_uuid import Uuid
from telemetry.errors import ErrorCode
from telemetry.ingest import LogFullError, PushContext, RecordTooLargeError
from telemetry.manager import AcceptedPush, TelemetryManager
from telemetry.manager import PushTelemetryResponse as ManagerPushResponse
from telemetry.wire import (
    SIZE_PREFIX,
    ApiKey,
    ApiVersionsRequest,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    MalformedFrameError,
    MetadataRequest,
    PushTelemetryRequest,
    PushTelemetryResponse,
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    api_versions_response,
    build_metadata_response,
    decode_request,
    encode_response,
    parse_size_prefix,
    unsupported_api_versions_response,
)

if TYPE_CHECKING:
    from collections.abc import Callable

_log = logging.getLogger(__name__)

#: Kafka's ``socket.request.max.bytes`` is 100 MiB; telemetry needs far less,
#: and the limit is also the most one connection may buffer.
DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024


def wall_clock_ms() -> int:
    """Kafka's ``time.milliseconds()``: the push gates and the landing use wall time."""
    return time.time_ns() // 1_000_000


class PushLog(Protocol):
    """Where accepted pushes go before they are acknowledged (the ingest log)."""

    async def append(self, context: PushContext, payload: bytes) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaListenerConfig:
    """``[kafka]`` settings; ``advertised_*`` default to the bound address."""

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


@dataclass(slots=True)
class _Connection:
    connection_id: str
    address: str
    port: int
    client_id: str = ""
    software_name: str | None = None
    software_version: str | None = None

    def context(self) -> RequestContext:
        return RequestContext(
            client_id=self.client_id,
            client_source_address=self.address,
            client_source_port=self.port,
            client_software_name=self.software_name,
            client_software_version=self.software_version,
            connection_id=self.connection_id,
        )


class _CloseConnectionError(Exception):
    """The request cannot be answered; close the connection (Kafka does the same)."""


class KafkaListener:
    """An asyncio server speaking enough of the Kafka protocol for KIP-714."""

    def __init__(
        self,
        config: KafkaListenerConfig,
        manager: TelemetryManager,
        log: PushLog,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.manager = manager
        self.log = log
        self.clock = clock
        self.stats = ListenerStats()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._bound: tuple[str, int] | None = None

    @property
    def bound_address(self) -> tuple[str, int]:
        if self._bound is None:
            raise RuntimeError("the Kafka listener is not started")
        return self._bound

    @property
    def advertised_address(self) -> tuple[str, int]:
        host, port = self.bound_address
        return (self.config.advertised_host or host, self.config.advertised_port or port)

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._on_connection, self.config.host, self.config.port, limit=64 * 1024
        )
        sockname = self._server.sockets[0].getsockname()
        self._bound = (str(sockname[0]), int(sockname[1]))
        return self._bound

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def close(self) -> None:
        """Stop accepting, then end every connection (in-flight appends are awaited)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- connections -------------------------------------------------------------------------

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("", 0)
        connection = _Connection(
            connection_id=f"kafka-{next(self._ids)}", address=str(peer[0]), port=int(peer[1])
        )
        self.stats.connections_accepted += 1
        self.stats.connections_open += 1
        reason = "eof"
        try:
            reason = await self._serve(connection, reader, writer)
        except asyncio.CancelledError:
            reason = "shutdown"
        except ConnectionError:
            reason = "reset"
        finally:
            self.stats.connections_open -= 1
            self.stats.closed_for[reason] += 1
            self.manager.on_disconnect(connection.connection_id)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
            if task is not None:
                self._connections.discard(task)

    async def _serve(
        self, connection: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> str:
        while True:
            try:
                prefix = await reader.readexactly(SIZE_PREFIX.size)
            except asyncio.IncompleteReadError as eof:
                return "eof" if not eof.partial else "truncated"
            try:
                size = parse_size_prefix(prefix, self.config.max_frame_bytes)
                frame = await reader.readexactly(size)
                response, throttle_time_ms = await self._handle(connection, frame)
            except asyncio.IncompleteReadError:
                _log.info("connection %s closed mid-frame", connection.connection_id)
                return "truncated"
            except (MalformedFrameError, _CloseConnectionError) as error:
                _log.warning(
                    "closing connection %s from %s:%s: %s",
                    connection.connection_id,
                    connection.address,
                    connection.port,
                    error,
                )
                return "malformed" if isinstance(error, MalformedFrameError) else "refused"
            writer.write(response)
            await writer.drain()
            if throttle_time_ms > 0:
                # Muted channel: read nothing more until the throttle has passed.
                await asyncio.sleep(throttle_time_ms / 1000)

    # -- requests ----------------------------------------------------------------------------

    async def _handle(self, connection: _Connection, frame: bytes) -> tuple[bytes, int]:
        try:
            header, request = decode_request(frame)
        except UnsupportedVersionError as error:
            if error.header.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 so the client can retry with a version we know.
                self.stats.requests["ApiVersions"] += 1
                answer = unsupported_api_versions_response()
                return encode_response(error.header, ApiKey.API_VERSIONS, 0, answer), 0
            raise _CloseConnectionError(str(error)) from error
        except UnsupportedApiKeyError as error:
            raise _CloseConnectionError(str(error)) from error
        connection.client_id = header.client_id or ""
        version = header.api_version
        if isinstance(request, ApiVersionsRequest):
            self.stats.requests["ApiVersions"] += 1
            if request.client_software_name:
                connection.software_name = request.client_software_name
                connection.software_version = request.client_software_version
            return encode_response(header, ApiKey.API_VERSIONS, version, api_versions_response()), 0
        if isinstance(request, MetadataRequest):
            self.stats.requests["Metadata"] += 1
            host, port = self.advertised_address
            metadata = build_metadata_response(
                request,
                version,
                node_id=self.config.node_id,
                host=host,
                port=port,
                cluster_id=self.config.cluster_id,
            )
            return encode_response(header, ApiKey.METADATA, version, metadata), 0
        if isinstance(request, GetTelemetrySubscriptionsRequest):
            self.stats.requests["GetTelemetrySubscriptions"] += 1
            return self._get_subscriptions(connection, header, request), 0
        if isinstance(request, PushTelemetryRequest):
            self.stats.requests["PushTelemetry"] += 1
            return await self._push(connection, header, request)
        raise _CloseConnectionError(f"no handler for {type(request).__name__}")

    def _get_subscriptions(
        self,
        connection: _Connection,
        header: RequestHeader,
        request: GetTelemetrySubscriptionsRequest,
    ) -> bytes:
        answer = self.manager.get_telemetry_subscriptions(
            Uuid.from_bytes(request.client_instance_id.bytes), connection.context(), self.clock()
        )
        response = GetTelemetrySubscriptionsResponse(
            error_code=int(answer.error_code),
            throttle_time_ms=answer.throttle_time_ms,
            client_instance_id=uuid.UUID(bytes=answer.client_instance_id.to_bytes()),
            subscription_id=answer.subscription_id,
            accepted_compression_types=tuple(int(c) for c in answer.accepted_compression_types),
            push_interval_ms=answer.push_interval_ms,
            telemetry_max_bytes=answer.telemetry_max_bytes,
            delta_temporality=answer.delta_temporality,
            requested_metrics=answer.requested_metrics,
        )
        return encode_response(header, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, response)

    async def _push(
        self, connection: _Connection, header: RequestHeader, request: PushTelemetryRequest
    ) -> tuple[bytes, int]:
        outcome = self.manager.validate_push(
            client_instance_id=Uuid.from_bytes(request.client_instance_id.bytes),
            subscription_id=request.subscription_id,
            terminating=request.terminating,
            compression_type=request.compression_type,
            metrics=None if request.metrics_was_null else request.metrics,
            context=connection.context(),
            now_ms=self.clock(),
        )
        if isinstance(outcome, AcceptedPush):
            outcome = await self._log_push(outcome)
        response = PushTelemetryResponse(
            error_code=int(outcome.error_code), throttle_time_ms=outcome.throttle_time_ms
        )
        frame = encode_response(header, ApiKey.PUSH_TELEMETRY, 0, response)
        return frame, outcome.throttle_time_ms

    async def _log_push(self, accepted: AcceptedPush) -> ManagerPushResponse:
        """Append durably, then complete the push with the outcome of the append."""
        if not accepted.data:
            return self.manager.complete_push(accepted)  # null/empty metrics: nothing to log
        context = accepted.context
        push_context = PushContext(
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
        try:
            await self.log.append(push_context, accepted.data)
        except LogFullError as full:
            _log.warning("refusing a push: %s", full.reason)
            return self.manager.complete_push(
                accepted,
                ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                throttle_time_ms=full.throttle_time_ms,
            )
        except RecordTooLargeError:
            return self.manager.complete_push(accepted, ErrorCode.TELEMETRY_TOO_LARGE)
        except Exception:
            # The push is not acknowledged; the client retries after its interval.
            _log.exception("the ingest log could not take a push")
            return self.manager.complete_push(
                accepted, ErrorCode.THROTTLING_QUOTA_EXCEEDED, throttle_time_ms=1000
            )
        return self.manager.complete_push(accepted)
