"""KIP-714 over HTTP: ``POST /v1/telemetry/subscriptions`` and ``POST /v1/telemetry/push``.

The two RPCs of KIP-714 with the fields of their Kafka messages, answered by
the same :class:`~telemetry.core.manager.TelemetryManager` as the Kafka listener,
so the checks, their order, the error codes and the throttle times are the
same. What HTTP adds:

* GetTelemetrySubscriptions takes a JSON object; PushTelemetry takes the
  metrics bytes (compressed as its compression type says) as the body and
  its other fields in ``Kip714-*`` headers, so a payload is never re-encoded.
  The Kafka request header's client id and ApiVersions' software name and
  version travel in the same request (JSON fields or headers); the source
  address and port are the connection's; the principal is the client
  certificate's subject with mTLS, else anonymous (:mod:`telemetry.http.principal`).
* The answer is a JSON object with the response's fields and the error code
  (and its name). HTTP status 200 carries every Kafka outcome, errors and
  quota throttles included, except a refusal that names a wait
  (THROTTLING_QUOTA_EXCEEDED with ``throttle_time_ms`` > 0), which is HTTP
  429 with ``Retry-After``. A request that cannot be read as these messages
  (a Kafka broker would close the connection) is HTTP 400 with error code
  INVALID_REQUEST.
* Client quotas apply per (principal, the request's client id), as on
  the Kafka listener; the muted channel that serves a throttle there is
  emulated per entity (:mod:`telemetry.http.throttle`): while muted, the
  entity's requests are 429 THROTTLING_QUOTA_EXCEEDED with the time left,
  unprocessed and unrecorded.
* HTTP is stateless: an instance is not tied to a connection, so only
  expiry removes it from the instance cache.

A push is acknowledged only once the ingest log has it on disk. Its outcome
is recorded in the manager from the log's future, not from the handler, so a
handler cancelled while waiting (a client gone, a server stopping) still
leaves the instance in the state the log says.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from telemetry.core.client_instance import RequestContext
from telemetry.core.client_uuid import ZERO_UUID, Uuid
from telemetry.core.manager import (
    AcceptedPush,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryResponse,
)
from telemetry.enforcement import ClientEntity
from telemetry.errors import ErrorCode
from telemetry.http.content import BodyTooLargeError, read_body, read_prefix
from telemetry.http.otlp import peer
from telemetry.http.principal import principal, request_user
from telemetry.http.throttle import retry_after_s
from telemetry.ingress import THROTTLED_GET, Ingress, PushFields

if TYPE_CHECKING:
    from telemetry.http.ingest import HttpIngest
    from telemetry.http.throttle import HttpQuotas

__all__ = [
    "GET_ROUTE",
    "MAX_GET_BODY_BYTES",
    "PUSH_ROUTE",
    "GetSubscriptionsHandler",
    "PushHandler",
]

_log = logging.getLogger(__name__)

GET_ROUTE: Final = "/v1/telemetry/subscriptions"
PUSH_ROUTE: Final = "/v1/telemetry/push"
#: A GetTelemetrySubscriptions request is a handful of short strings.
MAX_GET_BODY_BYTES: Final = 64 * 1024

CLIENT_INSTANCE_ID: Final = "Kip714-Client-Instance-Id"
SUBSCRIPTION_ID: Final = "Kip714-Subscription-Id"
COMPRESSION_TYPE: Final = "Kip714-Compression-Type"
TERMINATING: Final = "Kip714-Terminating"
CLIENT_ID: Final = "Kip714-Client-Id"
SOFTWARE_NAME: Final = "Kip714-Client-Software-Name"
SOFTWARE_VERSION: Final = "Kip714-Client-Software-Version"

_INT32: Final = (-(2**31), 2**31 - 1)
_INT8: Final = (-128, 127)
_BOOLEANS: Final = {"true": True, "false": False, "1": True, "0": False}


class _BadRequestError(Exception):
    """The request does not read as the RPC's fields (a Kafka broker closes the connection)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _answer(fields: dict[str, Any], status: int = 200) -> web.Response:
    """``status``, except that a refusal naming a wait is 429 with ``Retry-After``.

    An accepted request whose response carries a quota throttle stays 200:
    the throttle is served by muting the entity's next requests.
    """
    response = web.json_response(fields, status=status)
    throttle_time_ms: int = fields["throttle_time_ms"]
    if fields["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED and throttle_time_ms > 0:
        response.set_status(429)
        response.headers["Retry-After"] = str(retry_after_s(throttle_time_ms))
    return response


def _error_fields(code: ErrorCode, throttle_time_ms: int = 0) -> dict[str, Any]:
    return {"throttle_time_ms": throttle_time_ms, "error_code": int(code), "error_name": code.name}


def _bad_request(error: _BadRequestError) -> web.Response:
    fields = _error_fields(ErrorCode.INVALID_REQUEST)
    fields["message"] = str(error)
    return _answer(fields, error.status)


def _optional_string(document: dict[str, Any], key: str) -> str | None:
    value = document.get(key)
    if value is not None and not isinstance(value, str):
        raise _BadRequestError(f"{key} must be a string or null")
    return value


def _instance_id(text: str | None, name: str) -> Uuid | None:
    if text is None:
        return None
    try:
        return Uuid.parse(text.strip())
    except ValueError as error:
        raise _BadRequestError(f"{name}: {error}") from None


def _context(
    request: web.Request,
    user: str,
    client_id: str | None,
    software: tuple[str | None, str | None],
) -> RequestContext:
    address, port = peer(request)
    return RequestContext(
        # Kafka reads a null client id as "".
        client_id=client_id or "",
        client_source_address=address or "",
        client_source_port=port or 0,
        client_software_name=software[0],
        client_software_version=software[1],
        principal=principal(user),
    )


def _entity(user: str, client_id: str | None) -> ClientEntity:
    # Kafka reads a null client id as "".
    return ClientEntity(user, client_id or "")


class GetSubscriptionsHandler:
    """``POST /v1/telemetry/subscriptions``: GetTelemetrySubscriptions v0 as JSON."""

    def __init__(self, ingest: HttpIngest) -> None:
        self._ingest = ingest
        self._ingress = _ingress(ingest)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            response = await self._get(request)
        except _BadRequestError as error:
            response = _bad_request(error)
        self._ingest.stats.responses[(GET_ROUTE, response.status)] += 1
        return response

    async def _get(self, request: web.Request) -> web.Response:
        try:
            body = await read_body(request, MAX_GET_BODY_BYTES)
        except BodyTooLargeError as error:
            raise _BadRequestError(str(error), 413) from None
        started_ns = time.perf_counter_ns()
        document: object = {}
        if body.strip():
            if request.content_type != "application/json":
                raise _BadRequestError("the request body is JSON (application/json)", 415)
            try:
                document = json.loads(body)
            except (ValueError, RecursionError) as error:
                raise _BadRequestError(f"not JSON: {error}") from None
        if not isinstance(document, dict):
            raise _BadRequestError("the request is a JSON object")
        client_id = _optional_string(document, "client_id")
        software = (
            _optional_string(document, "client_software_name"),
            _optional_string(document, "client_software_version"),
        )
        instance_id = _instance_id(
            _optional_string(document, "client_instance_id"), "client_instance_id"
        )
        user = request_user(request)
        ingest, entity = self._ingest, _entity(user, client_id)
        quotas, now_ms = ingest.quotas, ingest.clock()
        if (muted_ms := quotas.muted_ms(entity, now_ms)) > 0:
            # A throttle an earlier response carried is still running: Kafka's muted channel.
            return _answer(_get_fields(THROTTLED_GET, muted_ms))
        answer, throttle_ms = self._ingress.get_subscriptions(
            instance_id or ZERO_UUID,
            _context(request, user, client_id, software),
            _Quota(quotas, entity, started_ns),
            now_ms,
        )
        return _answer(_get_fields(answer, throttle_ms))


def _get_fields(answer: GetTelemetrySubscriptionsResponse, throttle_ms: int) -> dict[str, Any]:
    fields = _error_fields(answer.error_code, throttle_ms)
    fields.update(
        client_instance_id=str(answer.client_instance_id),
        subscription_id=answer.subscription_id,
        accepted_compression_types=[int(codec) for codec in answer.accepted_compression_types],
        push_interval_ms=answer.push_interval_ms,
        telemetry_max_bytes=answer.telemetry_max_bytes,
        delta_temporality=answer.delta_temporality,
        requested_metrics=list(answer.requested_metrics),
    )
    return fields


def _header_int(
    request: web.Request, name: str, bounds: tuple[int, int], default: int | None
) -> int:
    text = request.headers.get(name)
    if text is None:
        if default is None:
            raise _BadRequestError(f"the {name} header is required")
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise _BadRequestError(f"{name} is not an integer: {text!r}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise _BadRequestError(f"{name} {value} is out of range {bounds[0]}..{bounds[1]}")
    return value


class PushHandler:
    """``POST /v1/telemetry/push``: PushTelemetry v0, metrics as the body, fields as headers."""

    def __init__(self, ingest: HttpIngest) -> None:
        self._ingest = ingest
        self._ingress = _ingress(ingest)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            response = await self._push(request)
        except _BadRequestError as error:
            response = _bad_request(error)
        self._ingest.stats.responses[(PUSH_ROUTE, response.status)] += 1
        return response

    async def _push(self, request: web.Request) -> web.Response:
        headers = request.headers
        if CLIENT_INSTANCE_ID not in headers:
            raise _BadRequestError(f"the {CLIENT_INSTANCE_ID} header is required")
        instance_id = _instance_id(headers[CLIENT_INSTANCE_ID], CLIENT_INSTANCE_ID)
        subscription_id = _header_int(request, SUBSCRIPTION_ID, _INT32, None)
        compression_type = _header_int(request, COMPRESSION_TYPE, _INT8, 0)
        terminating_text = headers.get(TERMINATING, "false").strip().lower()
        if terminating_text not in _BOOLEANS:
            raise _BadRequestError(f"{TERMINATING} is true or false, not {terminating_text!r}")
        client_id = headers.get(CLIENT_ID)
        user = request_user(request)
        context = _context(
            request, user, client_id, (headers.get(SOFTWARE_NAME), headers.get(SOFTWARE_VERSION))
        )
        ingest = self._ingest
        # One byte past the limit is enough for the manager to answer
        # TELEMETRY_TOO_LARGE in Kafka's order of checks; the rest is never read.
        metrics = await read_prefix(request, ingest.manager.config.max_bytes + 1)
        started_ns = time.perf_counter_ns()
        entity, quotas, now_ms = _entity(user, client_id), ingest.quotas, ingest.clock()
        if (muted_ms := quotas.muted_ms(entity, now_ms)) > 0:
            # A throttle an earlier response carried is still running: Kafka's muted channel.
            return _answer(_error_fields(ErrorCode.THROTTLING_QUOTA_EXCEEDED, muted_ms))
        fields = PushFields(
            client_instance_id=instance_id,
            subscription_id=subscription_id,
            terminating=_BOOLEANS[terminating_text],
            compression_type=compression_type,
            metrics=metrics,
        )
        outcome, quota_ms = self._ingress.push(
            fields, context, _Quota(quotas, entity, started_ns), now_ms
        )
        if not isinstance(outcome, PushTelemetryResponse):
            outcome = await outcome
        return _answer(_error_fields(outcome.error_code, max(outcome.throttle_time_ms, quota_ms)))

    async def log_push(self, accepted: AcceptedPush) -> PushTelemetryResponse:
        """Append an accepted push and answer once it is durable (or refused).

        The manager learns the outcome from the log's future, not from this
        coroutine, so cancelling it (a client gone, a server stopping) never
        leaves the instance without the outcome the log decided.
        """
        logged = self._ingress.log_push(accepted)
        return logged if isinstance(logged, PushTelemetryResponse) else await logged


def _ingress(ingest: HttpIngest) -> Ingress:
    """The flow, over the routes' parts; an HTTP push inherits its instance's identity."""
    return Ingress(
        ingest.manager,
        ingest.log,
        ingest.decompressor,
        inherit=True,
        refusals=ingest.refusals,
        door="http",
    )


class _Quota:
    """The HTTP door's :class:`~telemetry.ingress.RequestQuota`: the request's entity."""

    __slots__ = ("_entity", "_quotas", "_started_ns")

    def __init__(self, quotas: HttpQuotas, entity: ClientEntity, started_ns: int) -> None:
        self._quotas = quotas
        self._entity = entity
        self._started_ns = started_ns

    def admit_instance_creation(self, now_ms: int) -> int:
        return self._quotas.admit_instance_creation(self._entity, now_ms)

    def finish(
        self,
        now_ms: int,
        *,
        push_bytes: int | None = None,
        mutation_throttle_ms: int = 0,
        decoded_bytes: int | None = None,
    ) -> int:
        return self._quotas.finish_request(
            self._entity,
            time.perf_counter_ns() - self._started_ns,
            now_ms,
            push_bytes=push_bytes,
            mutation_throttle_ms=mutation_throttle_ms,
            decoded_bytes=decoded_bytes,
        )

    def charge_decoded(self, now_ms: int, decoded_bytes: int) -> int:
        return self._quotas.finish_request(self._entity, 0, now_ms, decoded_bytes=decoded_bytes)
