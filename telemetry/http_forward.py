"""``POST /v1/telemetry/forward``: pushes a Kafka broker accepted, forwarded by the broker plugin.

A broker running ``broker-plugin/`` has already applied KIP-714's rules
(subscriptions, push gating, ``telemetry.max.bytes``), so kip714 does not
judge these pushes again: it authenticates the broker, makes each payload
OTLP (``forward_payload``: a 3.7 broker forwards it still compressed; one
that is not OTLP is refused with INVALID_RECORD), logs each push durably,
then answers one Kafka error code per push.

Why a binary framing rather than JSON: a batch holds up to megabytes of OTLP
bytes, and base64 would cost the broker a third more to send and both sides
a pass over every byte; the framing is as simple as Kafka's own (see
``docs/plugin.md``)::

    request := version:int8(=1) broker_id:int32 count:int32 push[count]
    push    := client_instance_id:16 bytes  flags:int8 (0x01 terminating)
               push_interval_ms:int32 (-1 unknown)  received_time_ms:int64
               source_port:int32 (-1 unknown)
               7 × string  (client_id, software_name, software_version,
                            source_address, principal, listener, content_type)
               payload_length:int32  payload
    string  := length:int16 (-1 = null)  UTF-8 bytes

All integers are big-endian. The reply is JSON,
``{"error_codes": [0, 89, …], "throttle_time_ms": 0}``: 0 logged,
THROTTLING_QUOTA_EXCEEDED (89) retry later (the log is full),
TELEMETRY_TOO_LARGE (118) never (bigger than
``telemetry.max_decompressed_bytes`` or the log's record limit),
INVALID_RECORD (87) never (not OTLP, compressed or not).

The broker's context lands as two resource attributes added to every
resource of the payload, ``kafka.broker.id`` (int) and
``kafka.broker.listener``, replacing any the client sent: a client must not
be able to claim which broker it came through.

Quotas: the caller is a broker, so its traffic is one client quota entity,
user ``kafka-broker`` and client id ``broker-<node id>`` (``broker`` when the
node id is unknown), under the same ``[[quotas.clients]]`` rules as every
client: the request's time and payload bytes are recorded once it is
answered, and the throttle comes back in ``throttle_time_ms`` (the plugin
waits that long before its next request). A request arriving while that
throttle runs is answered 429 with ``Retry-After`` and nothing of it is
logged or recorded, as the HTTP ingestion routes do for Kafka's muted
channel.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from aiohttp import web

from telemetry.client_uuid import Uuid
from telemetry.enforcement import ClientEntity
from telemetry.errors import ErrorCode, TelemetryError
from telemetry.http.forward_payload import (
    BROKER_ID_ATTRIBUTE,
    BROKER_LISTENER_ATTRIBUTE,
    ForwardStats,
    forwarded_otlp,
)
from telemetry.http.throttle import retry_after_s
from telemetry.ingest import LogFullError, PushContext, RecordTooLargeError
from telemetry.kafka_listener import wall_clock_ms

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Executor

    from telemetry.http.throttle import HttpQuotas
    from telemetry.kafka_listener import PushLog

__all__ = [
    "BROKER_ID_ATTRIBUTE",
    "BROKER_LISTENER_ATTRIBUTE",
    "CONTENT_TYPE",
    "DEFAULT_MAX_REQUEST_BYTES",
    "FORWARD_PATH",
    "ForwardFormatError",
    "ForwardHandler",
    "ForwardRequest",
    "ForwardSettings",
    "ForwardedPush",
    "decode_forward_request",
]

_log = logging.getLogger(__name__)

FORWARD_PATH: Final = "/v1/telemetry/forward"
CONTENT_TYPE: Final = "application/x-kip714-forward"
FORMAT_VERSION: Final = 1
#: The plugin's batches are 4 MiB by default; a single push may be larger.
DEFAULT_MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
_TERMINATING: Final = 0x01
_HEAD: Final = struct.Struct(">bii")
_PUSH_FIXED: Final = struct.Struct(">16sbiqi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
#: The fewest bytes one push takes (no strings, empty payload): bounds ``count``.
_MIN_PUSH: Final = _PUSH_FIXED.size + 7 * _INT16.size + _INT32.size
#: Retryable for the plugin (87 would be final for a Kafka client; 89 is "later").
_RETRY_LATER_MS: Final = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardSettings:
    """``[forward]``: the token brokers present, and the largest request taken.

    ``token`` ``None`` disables the route (403): an open forward endpoint
    would let anyone write data that claims to come from the cluster.
    """

    token: str | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES


class ForwardFormatError(ValueError):
    """The body is not a forward request of a known version."""


@dataclass(frozen=True, slots=True)
class ForwardedPush:
    client_instance_id: str
    terminating: bool
    push_interval_ms: int | None
    received_time_ms: int
    client_source_port: int | None
    client_id: str | None
    client_software_name: str | None
    client_software_version: str | None
    client_source_address: str | None
    principal: str | None
    listener: str | None
    content_type: str | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class ForwardRequest:
    broker_id: int | None
    pushes: list[ForwardedPush]


def decode_forward_request(body: bytes) -> ForwardRequest:
    """Parse a whole request; every length is checked against what is left of ``body``.

    Raises:
        ForwardFormatError: Unknown version, truncated or trailing bytes, bad UTF-8.
    """
    view = memoryview(body)
    try:
        version, broker_id, count = _HEAD.unpack_from(view, 0)
    except struct.error:
        raise ForwardFormatError("shorter than the request header") from None
    if version != FORMAT_VERSION:
        raise ForwardFormatError(f"unknown forward format version {version}")
    position = _HEAD.size
    if count < 0 or count > (len(body) - position) // _MIN_PUSH:
        raise ForwardFormatError(f"push count {count} does not fit the body")
    pushes = []
    try:
        for _ in range(count):
            push, position = _decode_push(view, position)
            pushes.append(push)
    except struct.error:
        raise ForwardFormatError("truncated push") from None
    if position != len(body):
        raise ForwardFormatError(f"{len(body) - position} bytes after the last push")
    return ForwardRequest(None if broker_id < 0 else broker_id, pushes)


def _decode_push(view: memoryview, position: int) -> tuple[ForwardedPush, int]:
    raw_id, flags, interval, received_ms, port = _PUSH_FIXED.unpack_from(view, position)
    position += _PUSH_FIXED.size
    strings: list[str | None] = []
    for _ in range(7):
        (length,) = _INT16.unpack_from(view, position)
        position += _INT16.size
        if length < 0:
            strings.append(None)
            continue
        if position + length > len(view):
            raise ForwardFormatError("string past the end of the body")
        try:
            strings.append(str(view[position : position + length], "utf-8"))
        except UnicodeDecodeError as error:
            raise ForwardFormatError(f"invalid UTF-8: {error.reason}") from None
        position += length
    (length,) = _INT32.unpack_from(view, position)
    position += _INT32.size
    if length < 0 or position + length > len(view):
        raise ForwardFormatError("payload past the end of the body")
    payload = bytes(view[position : position + length])
    position += length
    client_id, name, version, address, principal, listener, content_type = strings
    return (
        ForwardedPush(
            client_instance_id=str(Uuid.from_bytes(raw_id)),
            terminating=bool(flags & _TERMINATING),
            push_interval_ms=interval if interval >= 0 else None,
            received_time_ms=received_ms,
            client_source_port=port if 0 <= port <= 65535 else None,
            client_id=client_id,
            client_software_name=name,
            client_software_version=version,
            client_source_address=address,
            principal=principal,
            listener=listener,
            content_type=content_type,
            payload=payload,
        ),
        position,
    )


class ForwardHandler:
    """The route's handler: authenticate, read within bounds, log every push, answer per push."""

    def __init__(
        self,
        log: PushLog,
        settings: ForwardSettings,
        max_payload_bytes: int,
        quotas: HttpQuotas | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        *,
        decompressor: Executor | None = None,
        stats: ForwardStats | None = None,
    ) -> None:
        self._log = log
        self._settings = settings
        self._max_payload_bytes = max_payload_bytes
        self._token = None if settings.token is None else settings.token.encode("utf-8")
        self._quotas = quotas
        self._clock = clock
        #: Where payloads are decompressed and checked (``None``: the loop's default executor).
        self._decompressor = decompressor
        self.stats = stats if stats is not None else ForwardStats()

    async def handle(self, request: web.Request) -> web.Response:
        refusal = self._authenticate(request)
        if refusal is not None:
            return refusal
        started_ns = time.perf_counter_ns()
        body = await self._read_body(request)
        if isinstance(body, web.Response):
            return body
        try:
            forward = decode_forward_request(body)
        except ForwardFormatError as error:
            return web.json_response({"error": f"not a forward request: {error}"}, status=400)
        broker = _broker_entity(forward.broker_id)
        quotas = self._quotas
        if quotas is not None and (muted_ms := quotas.muted_ms(broker, self._clock())) > 0:
            # Kafka's muted channel, kept per broker: nothing of it is logged or recorded.
            return web.json_response(
                {"error": "this broker's quota throttles it", "throttle_time_ms": muted_ms},
                status=429,
                headers={"Retry-After": str(retry_after_s(muted_ms))},
            )
        # Handling time: reading and decoding; waiting for the fsync is not work.
        handled_ns = time.perf_counter_ns() - started_ns
        try:
            codes, throttle_ms = await self._log_pushes(forward)
        except _StoppingError:
            # Nothing of it was logged: the plugin retries it (503 with Retry-After).
            return web.json_response(
                {"error": "kip714 is stopping"}, status=503, headers={"Retry-After": "1"}
            )
        if quotas is not None:
            quota_ms = quotas.finish_request(
                broker,
                handled_ns,
                self._clock(),
                push_bytes=sum(len(push.payload) for push in forward.pushes),
            )
            throttle_ms = max(throttle_ms, quota_ms)
        return web.json_response({"error_codes": codes, "throttle_time_ms": throttle_ms})

    def _authenticate(self, request: web.Request) -> web.Response | None:
        if self._token is None:
            return web.json_response(
                {"error": "forwarding is disabled: set forward.token"}, status=403
            )
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            presented.strip().encode("utf-8"), self._token
        ):
            return web.json_response(
                {"error": "a valid bearer token is required"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return None

    async def _read_body(self, request: web.Request) -> bytes | web.Response:
        """The body, never buffering more than ``max_request_bytes`` (lying lengths included)."""
        limit = self._settings.max_request_bytes
        too_large = web.json_response(
            {"error": f"request larger than forward.max_request_bytes ({limit})"}, status=413
        )
        if request.content_length is not None and request.content_length > limit:
            return too_large
        chunks = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                return too_large
            chunks.append(chunk)
        return b"".join(chunks)

    async def _log_pushes(self, forward: ForwardRequest) -> tuple[list[int], int]:
        """Append every push, then wait until each is durable or failed."""
        codes: list[int] = []
        pending: list[tuple[int, asyncio.Future[None]]] = []
        throttle_ms = 0
        # Counted into a batch of its own off the loop, merged here on the loop's thread.
        batch = ForwardStats()
        payloads = await self._in_decompressor(forward, batch)
        self.stats.decompressed.update(batch.decompressed)
        for index, (push, payload) in enumerate(zip(forward.pushes, payloads, strict=True)):
            if isinstance(payload, ErrorCode):
                codes.append(int(payload))
                continue
            try:
                _, durable = self._log.append_nowait(_context(push), payload)
            except Exception as error:
                code, wait_ms = _refused(error)
                codes.append(code)
                throttle_ms = max(throttle_ms, wait_ms)
                continue
            codes.append(int(ErrorCode.NONE))
            pending.append((index, durable))
        if pending:
            # A cancelled request cancels only this wait: the log skips futures
            # that are done, and a queued record is still written (unanswered,
            # so the plugin retries it: at least once, like a producer retry).
            results = await asyncio.gather(*(f for _, f in pending), return_exceptions=True)
            for (index, _), result in zip(pending, results, strict=True):
                if isinstance(result, BaseException):
                    code, wait_ms = _refused(result)
                    codes[index] = code
                    throttle_ms = max(throttle_ms, wait_ms)
        self.stats.answers.update(ErrorCode(code) for code in codes)
        return codes, throttle_ms

    async def _in_decompressor(
        self, forward: ForwardRequest, stats: ForwardStats
    ) -> list[bytes | ErrorCode]:
        """``_otlp_payloads`` on a worker thread.

        Raises:
            _StoppingError: the server shut its decompression threads down.
        """
        if self._decompressor is None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self._otlp_payloads, forward, stats)
        try:
            work = self._decompressor.submit(self._otlp_payloads, forward, stats)
        except RuntimeError as error:  # "cannot schedule new futures after shutdown"
            raise _StoppingError from error
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            if work.cancelled() and not _current_task_cancelling():
                raise _StoppingError from None  # queued when the pool shut down
            raise

    def _otlp_payloads(
        self, forward: ForwardRequest, stats: ForwardStats
    ) -> list[bytes | ErrorCode]:
        """Each push's payload to log, or the code refusing it (on a worker thread)."""
        payloads: list[bytes | ErrorCode] = []
        for push in forward.pushes:
            if len(push.payload) > self._max_payload_bytes:
                payloads.append(ErrorCode.TELEMETRY_TOO_LARGE)
                continue
            try:
                payloads.append(
                    forwarded_otlp(
                        push.payload,
                        self._max_payload_bytes,
                        forward.broker_id,
                        push.listener,
                        stats=stats,
                        share_gil=True,
                    )
                )
            except TelemetryError as error:
                payloads.append(error.error_code)
        return payloads


class _StoppingError(Exception):
    """The server is stopping: a request it cannot finish is answered 503, not dropped."""


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


#: The quota entity's user for forwarded traffic (a broker is not a client principal).
FORWARD_USER: Final = "kafka-broker"


def _broker_entity(broker_id: int | None) -> ClientEntity:
    """``(kafka-broker, broker-<node id>)``: one client quota entity per forwarding broker."""
    return ClientEntity(FORWARD_USER, "broker" if broker_id is None else f"broker-{broker_id}")


def _refused(error: BaseException) -> tuple[int, int]:
    """A Kafka error code and throttle time for a push the log did not take."""
    if isinstance(error, LogFullError):
        return int(ErrorCode.THROTTLING_QUOTA_EXCEEDED), error.throttle_time_ms
    if isinstance(error, RecordTooLargeError):
        return int(ErrorCode.TELEMETRY_TOO_LARGE), 0
    _log.error("the ingest log could not take a forwarded push: %s", error)
    return int(ErrorCode.THROTTLING_QUOTA_EXCEEDED), _RETRY_LATER_MS


def _context(push: ForwardedPush) -> PushContext:
    """The push's context as the log keeps it; the broker exposes no subscription id (0)."""
    return PushContext(
        client_instance_id=push.client_instance_id,
        subscription_id=0,
        received_time_ms=push.received_time_ms,
        push_interval_ms=push.push_interval_ms or 0,
        terminating=push.terminating,
        content_type=push.content_type or "OTLP",
        client_id=push.client_id or None,
        client_software_name=push.client_software_name,
        client_software_version=push.client_software_version,
        client_source_address=push.client_source_address,
        client_source_port=push.client_source_port,
        principal=push.principal,
    )
