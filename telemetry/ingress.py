"""The one KIP-714 request flow every front door calls, so each answers the same way.

A door (the Kafka listener, the HTTP routes) reads its transport into a
request's fields and a :class:`RequestQuota` that charges its client, then
calls :class:`Ingress`: admit a new client instance (KIP-599, strict) →
charge the request (KIP-124 request time, produce-style push bytes) →
validate (:class:`~telemetry.core.manager.TelemetryManager`) → decompress to
check it, in a thread above :data:`INLINE_DECOMPRESSED_BYTES` → append the
payload as sent, with its codec and decompressed size, to the ingest log (it
decompresses on read) → complete the push from the log's future. The door turns the outcome
(or a future of it) back into its transport's answer. What the client is
told when the log refuses a push is decided here, once (:func:`refused_append`).

The manager learns a push's outcome from the log's (and the decompression's)
future callbacks, never from the door's coroutine, so a door cancelled while
waiting (a client gone, a server stopping) still leaves the instance in the
state the log decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from telemetry.core.manager import (
    AcceptedPush,
    DeferredPush,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryResponse,
)
from telemetry.errors import ErrorCode, TelemetryError, ThrottlingQuotaExceededError
from telemetry.ingest import LogFullError, PushContext, RecordTooLargeError

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from telemetry.core.client_instance import ClientInstanceMetadata, RequestContext
    from telemetry.core.client_uuid import Uuid
    from telemetry.core.manager import TelemetryManager

__all__ = [
    "DECOMPRESSION_NICENESS",
    "DECOMPRESSION_THREADS",
    "INLINE_DECOMPRESSED_BYTES",
    "RETRY_LATER_MS",
    "Appended",
    "Ingress",
    "PushFields",
    "PushLog",
    "PushOrigin",
    "RefusalCounter",
    "RequestQuota",
    "complete_failed_append",
    "decompression_outcome",
    "lower_thread_priority",
    "push_context",
    "refused_append",
    "wall_clock_ms",
]

_log = logging.getLogger(__name__)

#: The throttle of a push the log could not take for a reason other than room.
RETRY_LATER_MS = 1000

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


def wall_clock_ms() -> int:
    """Kafka's ``time.milliseconds()``: the push gates and the landing use wall time."""
    return time.time_ns() // 1_000_000


class PushLog(Protocol):
    """Where accepted pushes go before they are acknowledged (the ingest log)."""

    def append_nowait(
        self,
        context: PushContext,
        payload: bytes,
        compression: int = 0,
        decompressed_size: int = -1,
    ) -> tuple[int, asyncio.Future[None]]: ...


def lower_thread_priority() -> None:
    """Runs first in each decompression thread: nice only this thread (Linux), if allowed."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DECOMPRESSION_NICENESS)


class RefusalCounter(Protocol):
    """Where a door counts the pushes a bound refused (``Enforcement.refusals``)."""

    def count(self, door: str, reason: str, requests: int = 1) -> None: ...


def refused_append(
    error: BaseException, refusals: RefusalCounter | None = None, door: str = ""
) -> tuple[ErrorCode, int]:
    """The error code and throttle time for a push the log refused or failed.

    A full log is THROTTLING_QUOTA_EXCEEDED with the log's throttle time (and
    counted in ``refusals`` for ``door``, under the budget's key); a record
    over the log's limit is TELEMETRY_TOO_LARGE; anything else is 89 with
    1 s, retryable for every client (87 would switch their telemetry off).
    """
    if isinstance(error, LogFullError):
        _log.warning("refusing a push: %s", error.reason)
        if refusals is not None:
            refusals.count(door, error.bound)
        return ErrorCode.THROTTLING_QUOTA_EXCEEDED, error.throttle_time_ms
    if isinstance(error, RecordTooLargeError):
        return ErrorCode.TELEMETRY_TOO_LARGE, 0
    _log.error("the ingest log could not take a push: %r", error)
    return ErrorCode.THROTTLING_QUOTA_EXCEEDED, RETRY_LATER_MS


def complete_failed_append(
    manager: TelemetryManager,
    accepted: AcceptedPush,
    error: BaseException,
    refusals: RefusalCounter | None = None,
    door: str = "",
) -> PushTelemetryResponse:
    """Complete a push the log refused or failed; the error code tells the client when to retry."""
    code, throttle_time_ms = refused_append(error, refusals, door)
    return manager.complete_push(accepted, code, throttle_time_ms=throttle_time_ms)


def decompression_outcome(future: asyncio.Future[int | TelemetryError]) -> int | TelemetryError:
    """What a finished decompression thread means for its push.

    Codec refusals come back as values (``DeferredPush.outcome``); a
    cancelled future (the server stopping) or an exception (a bug, a
    MemoryError) is logged here, once, and answered as retryable.
    """
    if future.cancelled():
        return ThrottlingQuotaExceededError("the server is stopping")
    error = future.exception()
    if error is not None:
        _log.error("decompressing a push failed", exc_info=error)
        return ThrottlingQuotaExceededError(f"decompression failed: {error}")
    return future.result()


class PushOrigin(Protocol):
    """Who sent a push and through what: a Kafka connection's request context, a forwarded push."""

    @property
    def client_id(self) -> str | None: ...
    @property
    def client_software_name(self) -> str | None: ...
    @property
    def client_software_version(self) -> str | None: ...
    @property
    def client_source_address(self) -> str | None: ...
    @property
    def client_source_port(self) -> int | None: ...
    @property
    def principal(self) -> str | None: ...


def push_context(
    *,
    client_instance_id: Uuid | str,
    subscription_id: int,
    received_ms: int,
    push_interval_ms: int | None,
    terminating: bool,
    origin: PushOrigin,
    first: ClientInstanceMetadata | None = None,
    content_type: str | None = None,
) -> PushContext:
    """The push's context as the log keeps it, whichever door took the push.

    A Kafka connection carries its client id and software on every request;
    an HTTP client may send them once, with its GetTelemetrySubscriptions:
    given the instance's ``first`` request, what the push does not say comes
    from there. Unknown (``None``) interval is 0; content type defaults to OTLP.
    """
    return PushContext(
        client_instance_id=str(client_instance_id),
        subscription_id=subscription_id,
        received_time_ms=received_ms,
        push_interval_ms=push_interval_ms or 0,
        terminating=terminating,
        content_type=content_type or "OTLP",
        # Kafka reads a null client id as ""; the log keeps "absent" as None.
        client_id=origin.client_id or (first.client_id if first else None) or None,
        client_software_name=origin.client_software_name
        or (first.client_software_name if first else None),
        client_software_version=origin.client_software_version
        or (first.client_software_version if first else None),
        client_source_address=origin.client_source_address or None,
        client_source_port=origin.client_source_port,
        principal=origin.principal,
    )


class RequestQuota(Protocol):
    """How a door charges one request to its client's quotas; each returns a throttle in ms."""

    def admit_instance_creation(self, now_ms: int) -> int:
        """Draw a token for a new client instance (KIP-599, strict); > 0: refused, wait this."""
        ...

    def finish(
        self,
        now_ms: int,
        *,
        push_bytes: int | None = None,
        mutation_throttle_ms: int = 0,
        decoded_bytes: int | None = None,
    ) -> int:
        """Record the request (its time so far, its bytes): the throttle its response carries.

        ``decoded_bytes``: the payload's size decompressed (``push_decoded_byte_rate``).
        """
        ...

    def charge_decoded(self, now_ms: int, decoded_bytes: int) -> int:
        """Record a payload's decoded size learnt after :meth:`finish`; a throttle in ms."""
        ...


@dataclass(slots=True)
class PushFields:
    """A PushTelemetry request's fields, whatever the transport.

    Not frozen, though nothing changes one: one is built per push, and a
    frozen dataclass's ``__init__`` costs an ``object.__setattr__`` per field.
    """

    client_instance_id: Uuid | None
    subscription_id: int
    terminating: bool
    compression_type: int
    #: None: a null metrics field (Kafka), nothing to log.
    metrics: bytes | None


#: A refusal for want of an instance-creation token: Kafka's ``getErrorResponse``.
THROTTLED_GET: Final = GetTelemetrySubscriptionsResponse(
    error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
)

#: A push's outcome now, or once the log (and a decompression thread) decided it.
PushOutcome = PushTelemetryResponse | asyncio.Future[PushTelemetryResponse]


class Ingress:
    """The flow of GetTelemetrySubscriptions and PushTelemetry, shared by every door."""

    __slots__ = ("_door", "_inherit", "_refusals", "decompressor", "log", "manager")

    def __init__(
        self,
        manager: TelemetryManager,
        log: PushLog,
        decompressor: Executor | None,
        *,
        inherit: bool = False,
        refusals: RefusalCounter | None = None,
        door: str = "",
    ) -> None:
        self.manager = manager
        self.log = log
        #: Threads for payloads expanding past the inline limit; None: the loop's default.
        self.decompressor = decompressor
        self._inherit = inherit
        #: Where pushes the log's budgets refuse are counted, for ``door``.
        self._refusals = refusals
        self._door = door

    def get_subscriptions(
        self,
        client_instance_id: Uuid,
        context: RequestContext,
        quota: RequestQuota,
        now_ms: int,
    ) -> tuple[GetTelemetrySubscriptionsResponse, int]:
        """The answer and the throttle its response carries."""
        manager = self.manager
        if manager.creates_instance(client_instance_id, now_ms):
            # KIP-599 strict: a new instance costs a token; in deficit, nothing is created.
            refused_ms = quota.admit_instance_creation(now_ms)
            if refused_ms > 0:
                return THROTTLED_GET, quota.finish(now_ms, mutation_throttle_ms=refused_ms)
        answer = manager.get_telemetry_subscriptions(client_instance_id, context, now_ms)
        return answer, max(answer.throttle_time_ms, quota.finish(now_ms))

    def push_appending(
        self, fields: PushFields, context: RequestContext, quota: RequestQuota, now_ms: int
    ) -> tuple[PushTelemetryResponse | Appended | asyncio.Future[PushTelemetryResponse], int]:
        """As :meth:`push`, but a push queued in the log comes back as its :class:`Appended`.

        For a door that completes pushes in callbacks (the Kafka listener):
        no answer future per push, the log's own future is the one waited on.
        """
        manager = self.manager
        instance_id = fields.client_instance_id
        # The bytes as received, accepted or not (Kafka's produce quota
        # records every request; an over-quota push is still accepted).
        push_bytes = len(fields.metrics) if fields.metrics is not None else 0
        if (
            instance_id is not None
            and not instance_id.is_reserved
            and manager.creates_instance(instance_id, now_ms)
        ):
            # A push with an unknown id makes an instance as a GET does (Kafka's
            # ClientMetricsManager), so it draws from the same strict bucket:
            # otherwise made-up ids would be a way around it.
            refused_ms = quota.admit_instance_creation(now_ms)
            if refused_ms > 0:
                throttle_ms = quota.finish(
                    now_ms, push_bytes=push_bytes, mutation_throttle_ms=refused_ms
                )
                refusal = PushTelemetryResponse(
                    throttle_time_ms=throttle_ms, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
                )
                return refusal, throttle_ms
        outcome = manager.validate_push(
            client_instance_id=instance_id,
            subscription_id=fields.subscription_id,
            terminating=fields.terminating,
            compression_type=fields.compression_type,
            metrics=fields.metrics,
            context=context,
            now_ms=now_ms,
            inline_max_bytes=INLINE_DECOMPRESSED_BYTES,
        )
        # The decoded size, known here for a payload checked inline; a deferred
        # one is charged once its thread has decompressed it (_decompress).
        decoded = outcome.data_size if isinstance(outcome, AcceptedPush) else None
        quota_ms = quota.finish(now_ms, push_bytes=push_bytes, decoded_bytes=decoded)
        if isinstance(outcome, AcceptedPush):
            return self.append(outcome), quota_ms
        if isinstance(outcome, DeferredPush):
            return self._decompress(outcome, quota, now_ms), quota_ms
        return outcome, quota_ms

    def push(
        self, fields: PushFields, context: RequestContext, quota: RequestQuota, now_ms: int
    ) -> tuple[PushOutcome, int]:
        """The outcome (or its future) and the quota throttle, recorded before any wait.

        The request time recorded is the event loop's so far: a deferred
        decompression runs in a thread, and waiting for the fsync is not work.
        """
        outcome, quota_ms = self.push_appending(fields, context, quota, now_ms)
        if isinstance(outcome, Appended):
            return outcome.future(), quota_ms
        return outcome, quota_ms

    def log_push(self, accepted: AcceptedPush) -> PushOutcome:
        """Append an accepted push; completed (in the manager too) from the log's future."""
        appended = self.append(accepted)
        return appended.future() if isinstance(appended, Appended) else appended

    def append(self, accepted: AcceptedPush) -> PushTelemetryResponse | Appended:
        """Queue an accepted push in the log: its outcome now (refused), or once durable."""
        manager = self.manager
        if not accepted.data_size:
            return manager.complete_push(accepted)  # null or empty metrics: nothing to log
        try:
            context = push_context(
                client_instance_id=accepted.client_instance_id,
                subscription_id=accepted.subscription_id,
                received_ms=accepted.received_ms,
                push_interval_ms=accepted.push_interval_ms,
                terminating=accepted.terminating,
                origin=accepted.context,
                first=accepted.metadata if self._inherit else None,
            )
            # Logged as sent: the log decompresses on read (the writer copies
            # ~10× fewer bytes into the page cache than decompressed).
            _, durable = self.log.append_nowait(
                context, accepted.data, accepted.compression_type, accepted.data_size
            )
        except Exception as error:
            return complete_failed_append(manager, accepted, error, self._refusals, self._door)
        return Appended(manager, accepted, durable, self._refusals, self._door)

    def _decompress(
        self, deferred: DeferredPush, quota: RequestQuota, now_ms: int
    ) -> asyncio.Future[PushTelemetryResponse]:
        """Decompress in a thread, then log; the manager hears the outcome exactly once.

        The decoded size is charged to ``push_decoded_byte_rate`` once known
        (at the request's time, the door's clock), and its throttle goes out
        with the answer (which is sent only then).
        """
        loop = asyncio.get_running_loop()
        decompressed = loop.run_in_executor(self.decompressor, deferred.outcome)
        answer: asyncio.Future[PushTelemetryResponse] = loop.create_future()

        def done(future: asyncio.Future[int | TelemetryError]) -> None:
            result = self.manager.finish_deferred(deferred, decompression_outcome(future))
            if not isinstance(result, AcceptedPush):
                _settle(answer, result)
                return
            decoded_ms = quota.charge_decoded(now_ms, result.data_size)
            appended = self.append(result)
            if isinstance(appended, Appended):
                appended.durable.add_done_callback(
                    lambda _: _settle(answer, _throttled(appended.outcome(), decoded_ms))
                )
            else:
                _settle(answer, _throttled(appended, decoded_ms))

        decompressed.add_done_callback(done)
        return answer


class Appended:
    """A push queued in the log; :meth:`outcome` once ``durable`` is done (exactly once).

    Whoever waits for ``durable`` must call :meth:`outcome` from its
    callback, so the manager hears how the append ended even if the door
    stopped waiting (:meth:`future` does it for a door that awaits).
    """

    __slots__ = ("accepted", "door", "durable", "manager", "refusals")

    def __init__(
        self,
        manager: TelemetryManager,
        accepted: AcceptedPush,
        durable: asyncio.Future[None],
        refusals: RefusalCounter | None = None,
        door: str = "",
    ) -> None:
        self.manager = manager
        self.accepted = accepted
        self.durable = durable
        #: Where a refusal the future reports is counted (the log in Kafka refuses there too).
        self.refusals = refusals
        self.door = door

    def outcome(self) -> PushTelemetryResponse:
        """Record the append's outcome in the manager; the response for the client."""
        durable = self.durable
        error = asyncio.CancelledError() if durable.cancelled() else durable.exception()
        if error is None:
            return self.manager.complete_push(self.accepted)
        return complete_failed_append(self.manager, self.accepted, error, self.refusals, self.door)

    def future(self) -> asyncio.Future[PushTelemetryResponse]:
        """The outcome as a future of its own (a door that awaits, and may be cancelled)."""
        answer: asyncio.Future[PushTelemetryResponse] = asyncio.get_running_loop().create_future()
        self.durable.add_done_callback(lambda _: _settle(answer, self.outcome()))
        return answer


def _throttled(outcome: PushTelemetryResponse, throttle_ms: int) -> PushTelemetryResponse:
    """``outcome`` carrying at least ``throttle_ms``."""
    if throttle_ms <= outcome.throttle_time_ms:
        return outcome
    return PushTelemetryResponse(throttle_time_ms=throttle_ms, error_code=outcome.error_code)


def _settle(answer: asyncio.Future[PushTelemetryResponse], outcome: PushTelemetryResponse) -> None:
    if not answer.done():  # a door that stopped waiting cancelled it: the outcome stands
        answer.set_result(outcome)
