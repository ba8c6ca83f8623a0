"""``POST /v1/telemetry/forward``: pushes a Kafka broker accepted, forwarded by the broker plugin.

A broker running ``broker-plugin/`` has already applied KIP-714's rules
(subscriptions, push gating, ``telemetry.max.bytes``), so kip714 does not
judge these pushes again: it authenticates the broker, checks each payload
is OTLP (``forward_payload``: a 3.7 broker forwards it still compressed; one
that is not OTLP is refused with INVALID_RECORD), logs each push durably as
the broker sent it (compressed, with its codec and decoded size, when it came
compressed), then answers one Kafka error code per push.

The framing is :mod:`telemetry.http.forward_codec`'s (see ``docs/plugin.md``). The reply is JSON,
``{"error_codes": [0, 89, …], "throttle_time_ms": 0}``: 0 logged,
THROTTLING_QUOTA_EXCEEDED (89) retry later (the log is full),
TELEMETRY_TOO_LARGE (118) never (bigger than
``telemetry.max_decompressed_bytes`` or the log's record limit),
INVALID_RECORD (87) never (not OTLP, compressed or not).

The broker's context is logged with the push (``PushContext.broker_id``,
``broker_listener``) and lands as two resource attributes added to every
resource of the payload when the log is read, ``kafka.broker.id`` (int) and
``kafka.broker.listener``, after any the client sent under those names (the
last of repeated keys wins): a client must not be able to claim which broker
it came through.

Quotas: the caller is a broker, so its traffic is one client quota entity,
user ``kafka-broker`` and client id ``broker-<node id>`` (``broker`` when the
node id is unknown), under the same ``[[quotas.clients]]`` rules as every
client: the request's time and payload bytes are recorded once it is
answered (``push_byte_rate`` the bytes as forwarded,
``push_decoded_byte_rate`` their decoded size), and the throttle comes back
in ``throttle_time_ms`` (the plugin waits that long before its next
request). A request arriving while that throttle runs is answered 429 with
``Retry-After`` and nothing of it is logged or recorded, as the HTTP
ingestion routes do for Kafka's muted channel.

Memory (design invariant 9): the body, then each payload decoded from it,
draw from the shared ``queued_max_request_bytes`` pool as the other HTTP
routes' bodies do (:mod:`telemetry.http.memory`); a request that cannot get
its share in ``[http] memory_wait_ms`` is answered 503 with ``Retry-After``
and nothing of it is logged. A payload's decoded copy holds its share only
while it is decoded and checked (the payload is logged as sent); the body's
is given back when the request is answered, cancelled or failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final, Protocol

from aiohttp import web

from telemetry.enforcement import ClientEntity
from telemetry.errors import ErrorCode, TelemetryError
from telemetry.http.forward_codec import (
    ForwardedPush,
    ForwardFormatError,
    ForwardRequest,
    decode_forward_request,
)
from telemetry.http.forward_payload import ForwardedPayload, ForwardStats, forwarded_otlp
from telemetry.http.throttle import retry_after_s
from telemetry.ingest import PushContext
from telemetry.ingress import push_context, refused_append, wall_clock_ms

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Executor

    from telemetry.http.memory import HeldMemory, HttpRequestMemory
    from telemetry.http.settings import ForwardSettings
    from telemetry.http.throttle import HttpQuotas
    from telemetry.ingress import PushLog, RefusalCounter

__all__ = ["FORWARD_PATH", "ForwardHandler"]

_log = logging.getLogger(__name__)

FORWARD_PATH: Final = "/v1/telemetry/forward"


class Refusal(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def message(self) -> str: ...


class ForwardAuthorizer(Protocol):
    """Whether a broker may forward (the server's authorizer, ``telemetry.admin``)."""

    def forward_refusal(self, authorization: str) -> Refusal | None: ...


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
        authorizer: ForwardAuthorizer,
        decompressor: Executor | None = None,
        stats: ForwardStats | None = None,
        memory: HttpRequestMemory | None = None,
        refusals: RefusalCounter | None = None,
    ) -> None:
        self._log = log
        self._settings = settings
        self._max_payload_bytes = max_payload_bytes
        self._authorizer = authorizer
        self._quotas = quotas
        self._clock = clock
        #: Where payloads are decompressed and checked (``None``: the loop's default executor).
        self._decompressor = decompressor
        self.stats = stats if stats is not None else ForwardStats()
        #: The shared request-memory pool (design invariant 9); ``None``: unbounded.
        self._memory = memory
        #: Where pushes the log's budgets refuse are counted (``Enforcement.refusals``).
        self._refusals = refusals

    async def handle(self, request: web.Request) -> web.Response:
        refusal = self._authenticate(request)
        if refusal is not None:
            return refusal
        started_ns = time.perf_counter_ns()
        body = await self._read_body(request)
        if isinstance(body, web.Response):
            return body
        memory = self._memory
        held = await memory.acquire(len(body)) if memory is not None else None
        if memory is not None and held is None:
            return _memory_refusal(memory.wait_s)
        try:
            return await self._handle_held(body, held, started_ns)
        except _MemoryRefusedError:
            assert memory is not None
            return _memory_refusal(memory.wait_s)
        finally:
            if held is not None:
                held.release()

    async def _handle_held(
        self, body: bytes, held: HeldMemory | None, started_ns: int
    ) -> web.Response:
        """The request once its body holds request memory (released by the caller)."""
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
            codes, throttle_ms, decoded_bytes = await self._log_pushes(forward, held)
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
                decoded_bytes=decoded_bytes,
            )
            throttle_ms = max(throttle_ms, quota_ms)
        return web.json_response({"error_codes": codes, "throttle_time_ms": throttle_ms})

    def _authenticate(self, request: web.Request) -> web.Response | None:
        refusal = self._authorizer.forward_refusal(request.headers.get("Authorization", ""))
        if refusal is None:
            return None
        headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
        return web.json_response({"error": refusal.message}, status=refusal.status, headers=headers)

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

    async def _log_pushes(
        self, forward: ForwardRequest, held: HeldMemory | None
    ) -> tuple[list[int], int, int]:
        """Append every push, then wait until each is durable or failed.

        Returns the codes, the log's throttle and the pushes' decoded bytes.

        Nothing is appended before every payload is decoded, so a request
        refused memory half way logged nothing (the plugin retries it whole).
        """
        codes: list[int] = []
        pending: list[tuple[int, asyncio.Future[None]]] = []
        throttle_ms = 0
        # Counted into a batch of its own off the loop, merged here on the loop's thread.
        batch = ForwardStats()
        payloads = await self._decoded_payloads(forward, batch, held)
        self.stats.decompressed.update(batch.decompressed)
        decoded_bytes = 0
        for index, (push, payload) in enumerate(zip(forward.pushes, payloads, strict=True)):
            if isinstance(payload, ErrorCode):
                codes.append(int(payload))
                continue
            decoded_bytes += payload.decoded_size
            try:
                _, durable = self._log.append_nowait(
                    _context(push, forward.broker_id),
                    payload.payload,
                    payload.compression,
                    payload.decoded_size,
                )
            except Exception as error:
                code, wait_ms = _refused(error, self._refusals)
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
                    code, wait_ms = _refused(result, self._refusals)
                    codes[index] = code
                    throttle_ms = max(throttle_ms, wait_ms)
        self.stats.answers.update(ErrorCode(code) for code in codes)
        return codes, throttle_ms, decoded_bytes

    async def _decoded_payloads(
        self, forward: ForwardRequest, stats: ForwardStats, held: HeldMemory | None
    ) -> list[ForwardedPayload | ErrorCode]:
        """Each push's payload to log, or the code refusing it.

        A payload may expand (a 3.7 broker forwards it compressed) up to
        ``max_decompressed_bytes``: like a compressed OTLP/HTTP body, each
        holds that much request memory before it queues for the decompression
        thread, and gives it back after (the payload is logged as sent).

        Raises:
            _MemoryRefusedError: the pool stayed full for ``memory_wait_ms``.
            _StoppingError: the server shut its decompression threads down.
        """
        memory = self._memory
        payloads: list[ForwardedPayload | ErrorCode] = []
        for push in forward.pushes:
            if len(push.payload) > self._max_payload_bytes:
                payloads.append(ErrorCode.TELEMETRY_TOO_LARGE)
                continue
            reserved = self._max_payload_bytes if held is not None else 0
            if memory is not None and held is not None and not await memory.grow(held, reserved):
                raise _MemoryRefusedError
            try:
                payload = await self._in_decompressor(push, stats)
            finally:
                if held is not None:
                    held.add(-reserved)
            payloads.append(payload)
        return payloads

    async def _in_decompressor(
        self, push: ForwardedPush, stats: ForwardStats
    ) -> ForwardedPayload | ErrorCode:
        """``_otlp_payload`` on a worker thread.

        Raises:
            _StoppingError: the server shut its decompression threads down.
        """
        if self._decompressor is None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self._otlp_payload, push, stats)
        try:
            work = self._decompressor.submit(self._otlp_payload, push, stats)
        except RuntimeError as error:  # "cannot schedule new futures after shutdown"
            raise _StoppingError from error
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            if work.cancelled() and not _current_task_cancelling():
                raise _StoppingError from None  # queued when the pool shut down
            raise

    def _otlp_payload(
        self, push: ForwardedPush, stats: ForwardStats
    ) -> ForwardedPayload | ErrorCode:
        """The push's payload to log, or the code refusing it (on a worker thread)."""
        try:
            return forwarded_otlp(
                push.payload, self._max_payload_bytes, stats=stats, share_gil=True
            )
        except TelemetryError as error:
            return error.error_code


class _StoppingError(Exception):
    """The server is stopping: a request it cannot finish is answered 503, not dropped."""


class _MemoryRefusedError(Exception):
    """The request-memory pool stayed full: the request is answered 503, nothing logged."""


def _memory_refusal(wait_s: float) -> web.Response:
    """503 with ``Retry-After``, as the other HTTP routes answer a full pool (invariant 9)."""
    return web.json_response(
        {"error": "the server's request memory (limits.queued_max_request_bytes) is full"},
        status=503,
        headers={"Retry-After": str(retry_after_s(max(1000, int(wait_s * 1000))))},
    )


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


#: The quota entity's user for forwarded traffic (a broker is not a client principal).
FORWARD_USER: Final = "kafka-broker"


def _broker_entity(broker_id: int | None) -> ClientEntity:
    """``(kafka-broker, broker-<node id>)``: one client quota entity per forwarding broker."""
    return ClientEntity(FORWARD_USER, "broker" if broker_id is None else f"broker-{broker_id}")


def _refused(error: BaseException, refusals: RefusalCounter | None = None) -> tuple[int, int]:
    """A Kafka error code and throttle time for a push the log did not take."""
    code, throttle_time_ms = refused_append(error, refusals, "forward")
    return int(code), throttle_time_ms


def _context(push: ForwardedPush, broker_id: int | None) -> PushContext:
    """The push's context as the log keeps it; the broker exposes no subscription id (0)."""
    context = push_context(
        client_instance_id=push.client_instance_id,
        subscription_id=0,
        received_ms=push.received_time_ms,
        push_interval_ms=push.push_interval_ms,
        terminating=push.terminating,
        origin=push,
        content_type=push.content_type,
    )
    context.broker_id = broker_id
    context.broker_listener = push.listener
    return context
