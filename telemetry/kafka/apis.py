"""The Kafka APIs kip714 serves: one request frame in, its response (or a pending one) out.

One table of served APIs (``telemetry.kafka.table``): the KIP-714 rows are
registered here, and hand their requests to the one ingress flow
(``telemetry.ingress``); SASL, the admin APIs and SCRAM credentials register
their own rows. The listener (``telemetry.kafka.listener``) owns the sockets
and hands every complete frame here. The time from decoding to the response is
the request time charged to the client's ``request_percentage`` quota (KIP-124).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from telemetry.core.client_uuid import Uuid
from telemetry.core.manager import PushTelemetryResponse as ManagerPushResponse
from telemetry.core.manager import TelemetryManager
from telemetry.enforcement import ANONYMOUS_USER, ClientEntity, Enforcement, Throttle
from telemetry.errors import ErrorCode
from telemetry.ingress import RETRY_LATER_MS, Appended, Ingress, PushFields, PushLog
from telemetry.kafka.authenticator import KafkaSecurity, security_api_name
from telemetry.kafka.connection import CloseConnectionError, PendingResponse
from telemetry.kafka.connection_state import ConnectionState
from telemetry.kafka.pending import Pending
from telemetry.kafka.settings import KafkaListenerConfig
from telemetry.kafka.table import ApiTable
from telemetry.wire import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    FindCoordinatorRequest,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    InitProducerIdRequest,
    MetadataRequest,
    PushTelemetryRequest,
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    api_versions_response,
    build_metadata_response,
    coordinator_not_available,
    decode_request,
    encode_push_response_v0,
    encode_response,
    init_producer_id_response,
    push_v0_fields,
    unsupported_api_versions_response,
)
from telemetry.wire.headers import read_request_header_prefix
from telemetry.wire.primitives import Reader

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable
    from concurrent.futures import Executor

    from telemetry.kafka.table import ApiHandler, ApiSet

    #: A request handler: (connection, header, decoded request, start ns) -> the answer.
    _Handler = Callable[
        [ConnectionState, RequestHeader, Any, int], tuple[bytes, int] | PendingResponse
    ]


#: Who a connection is before its first request names the client (and a client that never does).
_UNNAMED: Final = ClientEntity(ANONYMOUS_USER, "")
#: Entities held at once (one entry per throttled entity, dropped once its throttle passed).
MAX_MUTED_ENTITIES: Final = 100_000

#: The api key, the first field of every request header.
_API_KEY: Final = struct.Struct(">h")


class KafkaApis:
    """Kafka's ``KafkaApis``: one table of served APIs, each request routed by its key."""

    def __init__(
        self,
        config: KafkaListenerConfig,
        manager: TelemetryManager,
        log: PushLog,
        clock: Callable[[], int],
        enforcement: Enforcement,
        *,
        requests: Counter[str],
        advertised_address: Callable[[], tuple[str, int]],
        decompressor: Executor,
        admin: ApiSet | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.config = config
        self.manager = manager
        self.clock = clock
        self.enforcement = enforcement
        #: Requests answered, by API name (the listener's stats).
        self.requests = requests
        self.advertised_address = advertised_address
        #: The KIP-714 flow the telemetry APIs hand their requests to.
        self.ingress = Ingress(
            manager, log, decompressor, refusals=enforcement.refusals, door="kafka"
        )
        self.security = security
        #: Kafka's ProducerIdManager: each idempotent producer gets an id of its own.
        self._producer_ids = itertools.count(0)
        #: Entities a quota throttles, until when (``time.monotonic``): every
        #: connection of a throttled entity holds its next request until then.
        self.muted: dict[ClientEntity, float] = {}
        self.table = ApiTable(self._charge)
        # In SUPPORTED_VERSIONS' order: librdkafka's captured frames list 18, 3, 71, 72.
        for api_key, name, handle in (
            (ApiKey.API_VERSIONS, "ApiVersions", self._api_versions),
            (ApiKey.METADATA, "Metadata", self._metadata),
            (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "GetTelemetrySubscriptions", self._get),
            (ApiKey.PUSH_TELEMETRY, "PushTelemetry", self._push),
            (ApiKey.FIND_COORDINATOR, "FindCoordinator", self._find_coordinator),
            (ApiKey.INIT_PRODUCER_ID, "InitProducerId", self._init_producer_id),
        ):
            versions = SUPPORTED_VERSIONS[api_key]
            served = _decoded(handle)
            if api_key == ApiKey.PUSH_TELEMETRY:
                served = self._push_frame(served)
            self.table.register(api_key, name, (versions.min_version, versions.max_version), served)
        if admin is not None:
            admin.register(self.table)
        if security is not None:
            security.register(self.table)

    def handle_frame(
        self, state: ConnectionState, frame: bytes
    ) -> tuple[bytes, int] | PendingResponse:
        """Answer one request: ``(response frame, throttle ms)``, or a push still being logged.

        The time from here to the response (decoding, validation,
        decompression) is the request time charged to the client's
        ``request_percentage`` quota (KIP-124).

        Raises:
            MalformedFrameError: the frame does not decode (the connection closes).
            CloseConnectionError: a key that is not served, or a request the
                connection's SASL session does not admit.
        """
        started_ns = time.perf_counter_ns()
        if self.security is not None:
            answered = self.security.screen(state, frame)
            if answered is not None:
                self.requests[security_api_name(frame)] += 1
                return answered
        served = self.table.get(_API_KEY.unpack_from(frame)[0]) if len(frame) >= 2 else None
        if served is None:
            # A frame too short for its header is malformed, whatever its key.
            header = read_request_header_prefix(Reader(frame))
            raise CloseConnectionError(str(UnsupportedApiKeyError(header)))
        answer = served.handler(state, frame, started_ns)
        # Counted once answered: a frame that does not decode is no request.
        self.requests[served.name] += 1
        return answer

    def _charge(self, state: ConnectionState, started_ns: int, mutation_throttle_ms: int) -> int:
        """The table's charge for handlers registered from outside (the admin APIs)."""
        return self._finish_request(
            state, started_ns, mutation_throttle_ms=mutation_throttle_ms
        ).time_ms

    def _api_versions(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: ApiVersionsRequest,
        started_ns: int,
    ) -> tuple[bytes, int]:
        """Exactly what is served: every row of the table."""
        if request.client_software_name:
            state.software(request.client_software_name, request.client_software_version)
        throttle = self._finish_request(state, started_ns).time_ms
        answer = replace(api_versions_response(throttle), api_keys=self.table.advertised)
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
        host, port = self.advertised_address()
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
        now_ms: int | None = None,
        push_bytes: int | None = None,
        mutation_throttle_ms: int = 0,
    ) -> Throttle:
        """Charge the request to the client's quotas; the throttle its response carries.

        Versions without a throttle field (ApiVersions v0, Metadata v0-v2)
        are muted all the same, as Kafka mutes every throttled channel.
        ``now_ms`` is the request's one wall-clock read, when it has one.
        """
        if now_ms is None:
            now_ms = self.clock()
        clients = self.enforcement.clients
        sensors = state.quota_sensors = clients.sensors(state.entity, state.quota_sensors, now_ms)
        throttle = clients.finish_request(
            state.entity,
            time.perf_counter_ns() - started_ns,
            now_ms,
            push_bytes=push_bytes,
            mutation_throttle_ms=mutation_throttle_ms,
            sensors=sensors,
        )
        if throttle.time_ms > 0:
            self.mute(state.entity, throttle.time_ms)
        return throttle

    def mute(self, entity: ClientEntity, throttle_ms: int) -> None:
        """Hold every connection of ``entity`` for ``throttle_ms``, not only the throttled one.

        Kafka mutes the one channel a throttled response goes out on
        (KIP-219) and counts on the client to honour the throttle on its
        other connections. A client that opens many connections and ignores
        it would otherwise keep sending on the unmuted ones and land well
        over its quota; a compliant client has one connection to a broker, so
        holding them all costs it nothing.
        """
        if entity == _UNNAMED:
            # Every connection is (ANONYMOUS, "") until its first request names
            # its client: holding that entity would hold everybody's first request.
            return
        muted = self.muted
        until = time.monotonic() + throttle_ms / 1000
        previous = muted.get(entity)
        if previous is None:
            if len(muted) >= MAX_MUTED_ENTITIES:
                self.unmute_expired(time.monotonic())
                if len(muted) >= MAX_MUTED_ENTITIES:
                    return  # bounded: the throttled connection is still muted by itself
            muted[entity] = until
        elif until > previous:
            muted[entity] = until

    def unmute_expired(self, now_s: float) -> None:
        """Forget entities whose throttle has passed (the listener's sweep)."""
        muted = self.muted
        for entity in [entity for entity, until in muted.items() if until <= now_s]:
            del muted[entity]

    def _get(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: GetTelemetrySubscriptionsRequest,
        started_ns: int,
    ) -> tuple[bytes, int]:
        client_instance_id = Uuid.from_bytes(request.client_instance_id.bytes)
        answer, throttle = self.ingress.get_subscriptions(
            client_instance_id, state.context(), _Quota(self, state, started_ns), self.clock()
        )
        state.remember_instance_id(answer.client_instance_id)
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

    def _push_frame(self, decoded: ApiHandler) -> ApiHandler:
        """PushTelemetry's row: the common v0 shape read straight into the flow's fields.

        No request objects and one ``Uuid`` per instance and connection; any
        other shape goes through ``decoded``, the generic reader, which
        agrees with it on every frame.
        """

        def serve(
            state: ConnectionState, frame: bytes, started_ns: int
        ) -> tuple[bytes, int] | PendingResponse:
            read = push_v0_fields(frame)
            if read is None:
                return decoded(state, frame, started_ns)
            correlation_id, client_id, instance_id, subscription_id, terminating, codec, data = read
            if client_id != state.client_id:
                state.identify(client_id)
            fields = PushFields(
                state.instance_id(instance_id), subscription_id, terminating, codec, data
            )
            # _push_fields' usual case, inlined: a push queued in the log.
            outcome, quota_ms = ingress.push_appending(
                fields, state.context(), _Quota(self, state, started_ns), clock()
            )
            if isinstance(outcome, Appended):
                return _PushAnswer(outcome, correlation_id, quota_ms)
            return self._push_outcome(correlation_id, outcome, quota_ms)

        ingress, clock = self.ingress, self.clock
        return serve

    def _push(
        self,
        state: ConnectionState,
        header: RequestHeader,
        request: PushTelemetryRequest,
        started_ns: int,
    ) -> tuple[bytes, int] | PendingResponse:
        fields = PushFields(
            client_instance_id=state.instance_id(request.client_instance_id.bytes),
            subscription_id=request.subscription_id,
            terminating=request.terminating,
            compression_type=request.compression_type,
            metrics=None if request.metrics_was_null else request.metrics,
        )
        return self._push_fields(state, header.correlation_id, fields, started_ns)

    def _push_fields(
        self, state: ConnectionState, correlation_id: int, fields: PushFields, started_ns: int
    ) -> tuple[bytes, int] | PendingResponse:
        outcome, quota_ms = self.ingress.push_appending(
            fields, state.context(), _Quota(self, state, started_ns), self.clock()
        )
        return self._push_outcome(correlation_id, outcome, quota_ms)

    def _push_outcome(
        self,
        correlation_id: int,
        outcome: ManagerPushResponse | Appended | asyncio.Future[ManagerPushResponse],
        quota_ms: int,
    ) -> tuple[bytes, int] | PendingResponse:
        """The answer to a push: now, once logged, or once decompressed in a thread and logged."""
        if isinstance(outcome, Appended):
            return _PushAnswer(outcome, correlation_id, quota_ms)
        if isinstance(outcome, ManagerPushResponse):
            return _push_response(correlation_id, outcome, quota_ms)
        return Pending(
            outcome,
            lambda answer: _push_response(correlation_id, answer, quota_ms),
            lambda _: _push_response(correlation_id, _STOPPING, quota_ms),
        )


class _Quota:
    """The Kafka door's :class:`~telemetry.ingress.RequestQuota`: the connection's entity."""

    __slots__ = ("_apis", "_started_ns", "_state")

    def __init__(self, apis: KafkaApis, state: ConnectionState, started_ns: int) -> None:
        self._apis = apis
        self._state = state
        self._started_ns = started_ns

    def admit_instance_creation(self, now_ms: int) -> int:
        return self._apis.enforcement.clients.admit_instance_creation(self._state.entity, now_ms)

    def finish(
        self,
        now_ms: int,
        *,
        push_bytes: int | None = None,
        mutation_throttle_ms: int = 0,
        decoded_bytes: int | None = None,
    ) -> int:
        # KafkaApis._finish_request, inlined: every push comes here.
        state = self._state
        clients = self._apis.enforcement.clients
        sensors = state.quota_sensors = clients.sensors(state.entity, state.quota_sensors, now_ms)
        throttle_ms = clients.finish_request(
            state.entity,
            time.perf_counter_ns() - self._started_ns,
            now_ms,
            push_bytes=push_bytes,
            mutation_throttle_ms=mutation_throttle_ms,
            sensors=sensors,
            decoded_bytes=decoded_bytes,
        ).time_ms
        if throttle_ms > 0:
            self._apis.mute(state.entity, throttle_ms)
        return throttle_ms

    def charge_decoded(self, now_ms: int, decoded_bytes: int) -> int:
        state = self._state
        throttle_ms = self._apis.enforcement.clients.finish_request(
            state.entity, 0, now_ms, decoded_bytes=decoded_bytes
        ).time_ms
        if throttle_ms > 0:
            self._apis.mute(state.entity, throttle_ms)
        return throttle_ms


class _PushAnswer:
    """A push waiting for the log: answered from the log's own future, no other future made.

    The connection asks for the callback once, right after the push was
    handed over; the manager hears the append's outcome in that callback.
    """

    __slots__ = ("_appended", "_callback", "_correlation_id", "_quota_ms")

    def __init__(self, appended: Appended, correlation_id: int, quota_ms: int) -> None:
        self._appended = appended
        self._correlation_id = correlation_id
        self._quota_ms = quota_ms

    def add_done_callback(self, callback: Callable[[tuple[bytes, int]], None]) -> None:
        self._callback = callback
        self._appended.durable.add_done_callback(self._done)

    def _done(self, _: object) -> None:
        outcome = self._appended.outcome()
        # _push_response, inlined.
        throttle_ms = max(outcome.throttle_time_ms, self._quota_ms)
        response = encode_push_response_v0(self._correlation_id, throttle_ms, outcome.error_code)
        self._callback((response, throttle_ms))


#: A push whose outcome future was cancelled (the server stopping): retry later.
_STOPPING: Final = ManagerPushResponse(
    throttle_time_ms=RETRY_LATER_MS, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
)


def _push_response(
    correlation_id: int, outcome: ManagerPushResponse, quota_throttle_ms: int = 0
) -> tuple[bytes, int]:
    """The response, carrying the longer of the quota throttle and the log's own."""
    throttle_ms = max(outcome.throttle_time_ms, quota_throttle_ms)
    return encode_push_response_v0(correlation_id, throttle_ms, outcome.error_code), throttle_ms


def _decoded(handle: _Handler) -> ApiHandler:
    """A telemetry-codec API as a table row: decode, name the client, then ``handle``."""

    def serve(
        state: ConnectionState, frame: bytes, started_ns: int
    ) -> tuple[bytes, int] | PendingResponse:
        try:
            header, request = decode_request(frame)
        except UnsupportedVersionError as error:
            if error.header.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 so the client can retry with a version we know.
                answer = unsupported_api_versions_response()
                return encode_response(error.header, ApiKey.API_VERSIONS, 0, answer), 0
            raise CloseConnectionError(str(error)) from error
        # Kafka reads a null client id as "".
        state.identify(header.client_id or "")
        return handle(state, header, request, started_ns)

    return serve
