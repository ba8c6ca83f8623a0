"""The transport-independent KIP-714 manager (Kafka's ``ClientMetricsManager``).

Both listeners (Kafka protocol and HTTP) hand it decoded requests with an
injected ``now_ms`` and get back response values; nothing here does I/O, so
every rule is testable to the millisecond.

GetTelemetrySubscriptions, in Kafka's order: pick the instance id (a fresh
random one for ZERO), create or re-create the instance (re-created when the
subscriptions changed since it was evaluated), then the one check: a GET
within the push interval is THROTTLING_QUOTA_EXCEEDED (89) unless the last
push failed with UNKNOWN_SUBSCRIPTION_ID (117) or UNSUPPORTED_COMPRESSION_TYPE
(76), because clients re-GET at once after those (the ``&&`` fix of
apache/kafka#19959).

PushTelemetry, first failing check wins: reserved id → INVALID_REQUEST (42),
touching no instance; instance create/re-create; already terminating → 42;
timing gate (the slot is consumed even if a later check fails) → 89; a
terminating push passes its own gate instead (the first push after a GET, or
one per interval: a bound Kafka gets from locking the instance even when the
terminating push fails, which kip714 does not do, KAFKA-20898); subscription
id → 117; compression id → 76; size as
sent > ``max_bytes`` → 118; bounded decompression → 118 past
``max_decompressed_bytes`` (KAFKA-21076), 87 if corrupt.

A push is acknowledged only after the durable log append that follows, so a
push is two-phase: :meth:`TelemetryManager.validate_push` returns an
:class:`AcceptedPush` and :meth:`TelemetryManager.complete_push` records the
outcome of the append.

Decompression is the one costly check (a 1 MiB push may expand to the 16 MiB
bound: tens of milliseconds). It runs last, after every cheap check, so no
push is decompressed that the gates or the as-sent size would refuse. A
caller on an event loop passes ``inline_max_bytes``: output up to that size
is produced inline (every real client's push), and a payload that expands
further comes back as a :class:`DeferredPush`, whose
:meth:`~DeferredPush.decompress` is thread-safe and pure (run it in a
thread: zstd, zlib, lz4 and snappy release the GIL) and whose outcome
:meth:`TelemetryManager.finish_deferred` then records on the loop.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from telemetry.core.client_instance import ClientInstance, ClientInstanceMetadata, RequestContext
from telemetry.core.client_uuid import ZERO_UUID, Uuid
from telemetry.core.codecs import ADVERTISED_COMPRESSION_TYPES, CompressionType, decompress
from telemetry.core.instance_cache import InstanceCache
from telemetry.core.settings import TelemetryConfig
from telemetry.core.subscription_id import compute_subscription_id
from telemetry.core.subscriptions import SubscriptionRegistry
from telemetry.errors import (
    ErrorCode,
    InvalidRequestError,
    TelemetryError,
    TelemetryTooLargeError,
    ThrottlingQuotaExceededError,
    UnknownSubscriptionIdError,
    UnsupportedCompressionTypeError,
)

__all__ = [
    "AcceptedPush",
    "DeferredPush",
    "GetTelemetrySubscriptionsResponse",
    "PushTelemetryResponse",
    "TelemetryManager",
    "TelemetryStats",
]

_log = logging.getLogger(__name__)

# After these push errors clients GET again at once, so the GET gate lets them through.
_GET_GATE_EXEMPT: Final = frozenset(
    {ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE}
)
_INT32_MAX: Final = 2**31 - 1
#: The codecs by their wire id: a dict lookup, not an enum call, on every push.
_COMPRESSION_IDS: Final[dict[int, CompressionType]] = {int(c): c for c in CompressionType}


@dataclass(frozen=True, slots=True, kw_only=True)
class GetTelemetrySubscriptionsResponse:
    """GetTelemetrySubscriptions v0 response fields.

    The defaults are the message defaults, which is what an error response
    carries besides its code (Kafka's ``getErrorResponse``): a client must
    not read anything else from it. Successful responses set
    ``delta_temporality=True``.
    """

    throttle_time_ms: int = 0
    error_code: ErrorCode = ErrorCode.NONE
    client_instance_id: Uuid = ZERO_UUID
    subscription_id: int = 0
    accepted_compression_types: tuple[CompressionType, ...] = ()
    push_interval_ms: int = 0
    telemetry_max_bytes: int = 0
    delta_temporality: bool = False
    requested_metrics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PushTelemetryResponse:
    throttle_time_ms: int = 0
    error_code: ErrorCode = ErrorCode.NONE


#: The answer to a push logged without a throttle: one object for all of them.
_ACCEPTED: Final = PushTelemetryResponse()


@dataclass(slots=True, kw_only=True)
class AcceptedPush:
    """A push that passed every check and now waits for its durable append.

    Not frozen, though nothing changes one once built: one is built per
    push, and a frozen dataclass's ``__init__`` costs an
    ``object.__setattr__`` per field.

    ``data`` is the OTLP ``MetricsData`` bytes as the client sent them,
    compressed with ``compression_type``, and ``data_size`` their length
    decompressed: the log keeps them as sent and decompresses on read, so
    the decompressed copy made to check them is dropped here. ``data_size``
    is 0 when the client sent null or empty metrics, or a payload that
    decompresses to nothing (nothing to log; complete it at once).
    """

    client_instance_id: Uuid
    subscription_id: int
    context: RequestContext
    metadata: ClientInstanceMetadata
    push_interval_ms: int
    terminating: bool
    compression_type: CompressionType
    received_ms: int
    data: bytes
    data_size: int
    _instance: ClientInstance = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeferredPush:
    """A push that passed every cheap check; its payload expands past the inline limit.

    Call :meth:`decompress` off the event loop, then hand its result (or the
    :class:`TelemetryError` it raised) to
    :meth:`TelemetryManager.finish_deferred`, exactly once.
    """

    client_instance_id: Uuid
    subscription_id: int
    context: RequestContext
    terminating: bool
    compression_type: CompressionType
    received_ms: int
    payload: bytes = field(repr=False)
    max_decompressed_bytes: int
    _instance: ClientInstance = field(repr=False, compare=False)

    def decompress(self) -> bytes:
        """The OTLP bytes, bounded by ``max_decompressed_bytes``; touches no shared state.

        Raises:
            TelemetryTooLargeError: the output would exceed the bound.
            InvalidRecordError: the payload is corrupt.
        """
        return decompress(
            self.compression_type, self.payload, self.max_decompressed_bytes, share_gil=True
        )

    def outcome(self) -> int | TelemetryError:
        """The decompressed size, for a worker thread: a refusal is a value, so only bugs raise.

        Only the size leaves the thread: the log keeps the payload as sent.
        """
        try:
            return len(self.decompress())
        except TelemetryError as error:
            return error


@dataclass(slots=True)
class TelemetryStats:
    """Plain counters a Prometheus collector can read; Kafka's ``client-metrics`` group."""

    get_responses: Counter[ErrorCode] = field(default_factory=Counter)
    push_responses: Counter[ErrorCode] = field(default_factory=Counter)
    throttled: int = 0  # GET and PUSH refused by the interval gate (Kafka's throttle-count)
    unknown_subscription: int = 0
    decompressions: int = 0  # payloads decompressed (accepted or not): the costly step
    deferred_decompressions: int = 0  # of which expanded past the inline limit
    instances_created: int = 0
    instances_evicted: int = 0
    instances_expired: int = 0
    instances_disconnected: int = 0


class TelemetryManager:
    """Subscriptions, the instance cache, and the GET/PUSH rules of KIP-714.

    Not thread-safe: call it from one event loop, as the listeners do.
    """

    def __init__(
        self,
        config: TelemetryConfig | None = None,
        *,
        subscriptions: SubscriptionRegistry | None = None,
        random_uuid: Callable[[], Uuid] = Uuid.random,
    ) -> None:
        self._config = config if config is not None else TelemetryConfig()
        self._subscriptions = subscriptions if subscriptions is not None else SubscriptionRegistry()
        self._random_uuid = random_uuid
        self._cache = InstanceCache(
            self._config.instance_cache_size, self._config.instance_cache_expiry_ms
        )
        self.stats = TelemetryStats()

    @property
    def config(self) -> TelemetryConfig:
        return self._config

    @property
    def subscriptions(self) -> SubscriptionRegistry:
        return self._subscriptions

    @property
    def instance_count(self) -> int:
        return len(self._cache)

    def update_subscription(self, name: str, properties: Mapping[str, object]) -> None:
        """Kafka's ``updateSubscription``: clients see the change on their next request."""
        self._subscriptions.update(name, properties)

    def client_instance(self, client_instance_id: Uuid) -> ClientInstance | None:
        """The cached instance, untouched (for admin views and tests)."""
        return self._cache.peek(client_instance_id)

    def creates_instance(self, client_instance_id: Uuid | None, now_ms: int) -> bool:
        """Whether a GET with this id makes a new instance: ZERO, unknown, or expired.

        The listeners charge such a GET to the client's instance-creation
        quota (``controller_mutation_rate``) before calling
        :meth:`get_telemetry_subscriptions`.
        """
        if client_instance_id is None:
            return True
        # == ZERO_UUID by the halves (no __eq__ call): every push asks.
        uuid = client_instance_id
        if uuid.most_significant_bits == 0 and uuid.least_significant_bits == 0:
            return True
        return not self._cache.contains(client_instance_id, now_ms)

    def expiry_deadline_ms(self, client_instance_id: Uuid) -> int | None:
        return self._cache.deadline_ms(client_instance_id)

    def expire(self, now_ms: int) -> int:
        """Forget instances not heard from within their expiry delay; returns how many."""
        if now_ms < self._cache.earliest_deadline_ms:
            return 0  # nothing is due: every request asks
        expired = len(self._cache.expire(now_ms))
        self.stats.instances_expired += expired
        return expired

    def on_disconnect(self, connection_id: str) -> None:
        """A connection closed: drop the instances last seen on it (KAFKA-17778)."""
        self.stats.instances_disconnected += len(self._cache.disconnect(connection_id))

    def get_telemetry_subscriptions(
        self, client_instance_id: Uuid | None, context: RequestContext, now_ms: int
    ) -> GetTelemetrySubscriptionsResponse:
        """Handle GetTelemetrySubscriptions; ``None``/ZERO asks for a new instance id.

        A request id of ONE is not refused here: Kafka only checks reserved
        ids on push.
        """
        self.expire(now_ms)
        if client_instance_id is None or client_instance_id == ZERO_UUID:
            client_instance_id = self._new_client_instance_id(now_ms)
        instance = self._client_instance(client_instance_id, context, now_ms)
        if not instance.maybe_update_get_request_timestamp(now_ms):
            if instance.last_known_error not in _GET_GATE_EXEMPT:
                # last_known_error stays as it is: a refused GET is not a push outcome.
                self.stats.throttled += 1
                self.stats.get_responses[ErrorCode.THROTTLING_QUOTA_EXCEEDED] += 1
                return GetTelemetrySubscriptionsResponse(
                    error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
                )
            # Deviation from Kafka (its "exempted GET does not move lastGet" edge):
            # the exempted GET counts as a GET, so the client's jittered first
            # push after it is accepted. Otherwise every subscription change
            # (117 for every client) cost librdkafka clients a refused push
            # and an interval of telemetry.
            instance.last_get_request_ms = now_ms
        instance.last_known_error = ErrorCode.NONE
        self.stats.get_responses[ErrorCode.NONE] += 1
        return GetTelemetrySubscriptionsResponse(
            client_instance_id=client_instance_id,
            subscription_id=instance.subscription_id,
            accepted_compression_types=ADVERTISED_COMPRESSION_TYPES,
            push_interval_ms=instance.push_interval_ms,
            telemetry_max_bytes=self._config.max_bytes,
            delta_temporality=True,
            requested_metrics=instance.metrics,
        )

    def validate_push(
        self,
        *,
        client_instance_id: Uuid | None,
        subscription_id: int,
        terminating: bool,
        compression_type: int,
        metrics: bytes | None,
        context: RequestContext,
        now_ms: int,
        inline_max_bytes: int | None = None,
    ) -> AcceptedPush | DeferredPush | PushTelemetryResponse:
        """Run the PushTelemetry checks; an :class:`AcceptedPush` still needs :meth:`complete_push`.

        With ``inline_max_bytes``, a payload whose output would exceed it
        (and is allowed to, up to ``max_decompressed_bytes``) is returned as a
        :class:`DeferredPush` instead of being decompressed here; at most
        ``inline_max_bytes`` of output is produced inline to find that out.

        A refusal is returned as the response to send, and is recorded as the
        instance's last known error, as Kafka does. Unlike Kafka, a refused
        push never changes ``terminating`` (KAFKA-20898, apache/kafka#23094):
        Kafka sets it in a ``finally``, so one failed terminating push locked
        the instance out for good. Since a failed terminating push no longer
        locks, the terminating push's bypass of the interval gate is bounded
        instead: it passes as the first push after a GET (the retry after
        117/76) or once per push interval, else it is 89 like any early push.
        A flood of failing terminating pushes thus costs one decompression
        per interval, not one per request.
        """
        if now_ms >= self._cache.earliest_deadline_ms:
            self.expire(now_ms)
        if client_instance_id is None or client_instance_id.is_reserved:
            return self._push_refused(
                None, InvalidRequestError(f"invalid client instance id {client_instance_id}")
            )
        instance = self._client_instance(client_instance_id, context, now_ms)
        try:
            codec, payload = self._check_push(
                instance, subscription_id, terminating, compression_type, metrics, now_ms
            )
            size = self._decompressed_size(codec, payload, inline_max_bytes)
        except TelemetryError as error:
            return self._push_refused(instance, error)
        if size is None:
            self.stats.deferred_decompressions += 1
            return DeferredPush(
                client_instance_id=instance.client_instance_id,
                subscription_id=subscription_id,
                context=context,
                terminating=terminating,
                compression_type=codec,
                received_ms=now_ms,
                payload=payload,
                max_decompressed_bytes=self._config.max_decompressed_bytes,
                _instance=instance,
            )
        return self._accepted(
            instance, subscription_id, context, terminating, codec, now_ms, payload, size
        )

    def finish_deferred(
        self, deferred: DeferredPush, outcome: int | TelemetryError
    ) -> AcceptedPush | PushTelemetryResponse:
        """Record how a deferred decompression ended: accepted (to log) or refused (118/87).

        ``outcome`` is the decompressed size (:meth:`DeferredPush.outcome`).
        """
        if isinstance(outcome, TelemetryError):
            return self._push_refused(deferred._instance, outcome)
        return self._accepted(
            deferred._instance,
            deferred.subscription_id,
            deferred.context,
            deferred.terminating,
            deferred.compression_type,
            deferred.received_ms,
            deferred.payload,
            outcome,
        )

    def _decompressed_size(
        self, codec: CompressionType, payload: bytes, inline_max_bytes: int | None
    ) -> int | None:
        """The OTLP bytes' size, or ``None`` when they would exceed ``inline_max_bytes`` (defer).

        Decompressing is the check (bounded size, not corrupt); the output is
        dropped at once, since the log keeps the payload as sent.
        """
        if not payload:
            return 0  # null or empty metrics: accepted, nothing to log
        if codec is CompressionType.NONE:
            return len(decompress(codec, payload, self._config.max_decompressed_bytes))
        self.stats.decompressions += 1
        limit = self._config.max_decompressed_bytes
        if inline_max_bytes is None or inline_max_bytes >= limit:
            return len(decompress(codec, payload, limit))
        try:
            return len(decompress(codec, payload, inline_max_bytes))
        except TelemetryTooLargeError:
            return None

    def _accepted(
        self,
        instance: ClientInstance,
        subscription_id: int,
        context: RequestContext,
        terminating: bool,
        codec: CompressionType,
        now_ms: int,
        data: bytes,
        data_size: int,
    ) -> AcceptedPush:
        return AcceptedPush(
            # The instance's own id object: equal to the request's, and its
            # text form (logged with every push) is computed once per instance.
            client_instance_id=instance.client_instance_id,
            subscription_id=subscription_id,
            context=context,
            metadata=instance.metadata,
            push_interval_ms=instance.push_interval_ms,
            terminating=terminating,
            compression_type=codec,
            received_ms=now_ms,
            data=data,
            data_size=data_size,
            _instance=instance,
        )

    def complete_push(
        self,
        accepted: AcceptedPush,
        error_code: ErrorCode = ErrorCode.NONE,
        *,
        throttle_time_ms: int = 0,
    ) -> PushTelemetryResponse:
        """Record how the durable append of an accepted push ended, and answer.

        Call it exactly once per :class:`AcceptedPush`, also for one with no
        data (nothing to append: complete it with NONE at once).

        Only a push completed with NONE sets ``terminating`` (see
        :meth:`validate_push`). A full log is THROTTLING_QUOTA_EXCEEDED with the
        time to wait (capped to int32); the slot the push consumed stays
        consumed, so the client's retry after the interval passes the gate.
        """
        instance = accepted._instance
        instance.last_known_error = error_code
        if error_code == ErrorCode.NONE:
            instance.terminating = accepted.terminating
        self.stats.push_responses[error_code] += 1
        if error_code is ErrorCode.NONE and throttle_time_ms == 0:
            return _ACCEPTED  # the usual answer, shared (it is frozen)
        return PushTelemetryResponse(
            throttle_time_ms=min(max(throttle_time_ms, 0), _INT32_MAX), error_code=error_code
        )

    def _check_push(
        self,
        instance: ClientInstance,
        subscription_id: int,
        terminating: bool,
        compression_type: int,
        metrics: bytes | None,
        now_ms: int,
    ) -> tuple[CompressionType, bytes]:
        """The cheap checks, in Kafka's order; returns the codec and the payload as sent."""
        if instance.terminating:
            raise InvalidRequestError(
                f"client {instance.client_instance_id} already sent a terminating push"
            )
        # Evaluated first on purpose: an accepted slot is consumed even if a
        # later check refuses the push, as in Kafka. A terminating push has its
        # own gate (see ClientInstance.maybe_update_terminating_push_timestamp):
        # Kafka lets every one through, which only a lock on failure bounded.
        if terminating:
            accepted = instance.maybe_update_terminating_push_timestamp(now_ms)
        else:
            accepted = instance.maybe_update_push_request_timestamp(now_ms)
        if not accepted:
            self.stats.throttled += 1
            raise ThrottlingQuotaExceededError(
                f"push from {instance.client_instance_id} arrived before the next push interval"
            )
        if subscription_id != instance.subscription_id:
            self.stats.unknown_subscription += 1
            raise UnknownSubscriptionIdError(
                f"unknown subscription id {subscription_id} for {instance.client_instance_id}"
            )
        codec = _COMPRESSION_IDS.get(compression_type)
        if codec is None:
            raise UnsupportedCompressionTypeError(f"unknown compression type {compression_type}")
        # Old librdkafka (2.5.0–2.10.0) sends null metrics; Kafka disconnects,
        # we take it as empty.
        payload = metrics or b""
        if len(payload) > self._config.max_bytes:
            raise TelemetryTooLargeError(
                f"push of {len(payload)} bytes exceeds telemetry.max.bytes {self._config.max_bytes}"
            )
        return codec, payload

    def _push_refused(
        self, instance: ClientInstance | None, error: TelemetryError
    ) -> PushTelemetryResponse:
        code = error.error_code
        _log.debug("push refused with %s: %s", code.name, error)
        if instance is not None:
            instance.last_known_error = code
        self.stats.push_responses[code] += 1
        return PushTelemetryResponse(error_code=code)

    def _new_client_instance_id(self, now_ms: int) -> Uuid:
        candidate = self._random_uuid()
        while self._cache.contains(candidate, now_ms):
            candidate = self._random_uuid()
        return candidate

    def _client_instance(
        self, client_instance_id: Uuid, context: RequestContext, now_ms: int
    ) -> ClientInstance:
        """Find, create, or re-create the instance, and re-arm its expiry."""
        cache = self._cache
        # The usual request: found, current, re-armed in one step.
        instance = cache.touch(
            client_instance_id, now_ms, context.connection_id, self._subscriptions.version
        )
        if instance is not None:
            return instance
        instance = cache.get(client_instance_id, now_ms)
        if instance is None:
            metadata = ClientInstanceMetadata.from_context(client_instance_id, context)
        elif instance.subscription_version < self._subscriptions.version:
            # Subscriptions changed: a fresh instance (timestamps 0, not
            # terminating, no error) keeps only the metadata, as Kafka does.
            metadata = instance.metadata
        else:
            cache.arm(client_instance_id, now_ms, context.connection_id)
            return instance
        instance = self._create_instance(metadata)
        self.stats.instances_created += 1
        evicted = self._cache.put(instance, now_ms, context.connection_id)
        self.stats.instances_evicted += len(evicted)
        return instance

    def _create_instance(self, metadata: ClientInstanceMetadata) -> ClientInstance:
        version = self._subscriptions.version
        evaluation = self._subscriptions.evaluate(metadata)
        return ClientInstance(
            metadata=metadata,
            subscription_id=compute_subscription_id(
                evaluation.metrics, evaluation.push_interval_ms, metadata.client_instance_id
            ),
            subscription_version=version,
            metrics=evaluation.metrics,
            push_interval_ms=evaluation.push_interval_ms,
        )
