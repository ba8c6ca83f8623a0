"""``POST /v1/metrics``: OTLP/HTTP metrics into the ingest log, per the OTLP 1.x specification.

Protobuf (``application/x-protobuf``) or JSON (``application/json``) bodies,
optionally compressed (:mod:`telemetry.http.content`); the response is in the
request's content type. Statuses, as the OpenTelemetry Collector's receiver
answers them:

* 200 with an ``ExportMetricsServiceResponse`` once every resource of the
  request is durably logged; with ``partial_success`` when some resources
  were logged and others refused (their data points are counted as
  rejected, and the sender must not retry them).
* 400 for a body that does not decode (its encoding, the JSON, or the
  protobuf down to each resource: below) or that passes one of the request's
  bounds (its message names the ``[telemetry]`` key: below), 413 for
  a body over ``telemetry.max_bytes`` as sent or over
  ``telemetry.max_decompressed_bytes`` decoded, 415 for another content type
  (plain text, as the Collector answers) or an unknown ``Content-Encoding``.
* 429 with ``Retry-After`` while the sender's entity is muted by a client
  quota (below), 503 with ``Retry-After`` when the ingest log cannot take
  the request (its disk budget is full, it failed, or the server is
  stopping) or when the request-memory pool stayed full for ``[http]
  memory_wait_ms`` (:mod:`telemetry.http.memory`). Both are retryable;
  ``Retry-After`` stays below 10 s.

Memory and the event loop: the body as sent, then its decoded form and
what the walk down to its resources built, are held in the
``queued_max_request_bytes`` pool every door shares. A body whose compressed
or decoded size passes 64 KiB is decompressed and parsed on a decoding
thread (:mod:`telemetry.http.decoding`: ``[http] decode_threads``, senders
served in turn), so the loop keeps serving and decoded bodies never pile up
in memory; every JSON body is parsed on a thread too (protobuf's JSON
mapping is Python), and every request of several resources is grouped
there. The loop reads a small protobuf body and, for one resource (every
SDK request), looks its identity up, deriving it only for a small resource.
A body that does not decode or passes a bound is charged to the sender's
request quota (its principal, client id ``""``: the body named no identity)
for the loop's and the thread's time spent on it, as any request is; each
bound's refusals are counted in ``kip714_requests_refused_total{door="otlp",
reason=<key>}``.

Error bodies are a ``google.rpc.Status`` in the request's content type.
What is done to a body alone (decode, walk, group, answer) is in
:mod:`telemetry.http.otlp_body`; this module holds the route's state.

A protobuf body is read as wire format down to its resources, which are
decoded whole; its metrics are left encoded for the landing, which decodes
them anyway (:mod:`telemetry.http.otlp_wire`), so a body whose metrics do not
decode is logged, and the landing skips and counts it, as it does a
PushTelemetry payload that is not OTLP. A JSON body is parsed whole. The
walk checks the request's bounds as it goes, before any resource is grouped:
``max_resources_per_request``, ``max_scopes_per_resource``,
``max_resource_bytes`` and ``max_attribute_value_bytes`` (``[telemetry]``).

Each resource gets its KIP-714 identity from its attributes
(:mod:`telemetry.http.identity`); a request whose resources have one identity
(every SDK request) is logged as sent, as one push; resources of different
identities (a Collector forwarding several services) are logged as one push
per identity. The logged payload is the ``MetricsData`` encoding, which is
also the ``ExportMetricsServiceRequest`` encoding. OTLP senders are not
KIP-714 client instances: no subscription, push interval or instance cache
applies to them, and every metric they send lands.

Client quotas apply per (principal, derived client id), as on the Kafka
listener (the principal is the client certificate's subject with mTLS, else
``ANONYMOUS``; :mod:`telemetry.http.principal`): an accepted request records
its event-loop time, its decoding thread's CPU time and its bytes as sent
(split among its identities by the size of their resources) and is answered
200; OTLP has no throttle field, so a throttle it earns mutes the entity and
its next requests are 429 until the throttle has elapsed
(:mod:`telemetry.http.throttle`). The sender is known only once the body is
parsed, so a muted sender's request is read and parsed, then refused whole
(unlogged, unrecorded) if any of its identities is muted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final

from aiohttp import hdrs, web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)

from telemetry.enforcement import ANONYMOUS_USER, ClientEntity
from telemetry.http.decoding import FairDecoder
from telemetry.http.identity import IdentityCache, OtlpIdentity
from telemetry.http.otlp_body import (
    JSON,
    PROTOBUF,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    DecodedBody,
    Groups,
    Logged,
    RefusedError,
    accepted_response,
    count_data_points,
    count_encoded_data_points,
    decode_body,
    decode_parse_group,
    group_by_identity,
    group_parsed,
    logged_payloads,
    message_response,
    parse_body,
    read_request_body,
    status_response,
)
from telemetry.http.otlp_wire import WireLimits, resource_bytes, structure_bytes
from telemetry.http.principal import principal, request_user
from telemetry.http.throttle import OTLP_MAX_RETRY_AFTER_S, retry_after_s
from telemetry.ingest import LogFullError, PushContext, RecordTooLargeError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from telemetry.http.decoding import Outcome
    from telemetry.http.ingest import HttpIngest
    from telemetry.http.memory import HeldMemory

__all__ = [
    "INLINE_BYTES",
    "JSON",
    "PROTOBUF",
    "ROUTE",
    "OtlpMetricsHandler",
    "count_data_points",
    "peer",
]

_log = logging.getLogger(__name__)


ROUTE: Final = "/v1/metrics"
#: Bodies up to this size, as sent and decoded, are decoded on the event loop (and a
#: protobuf one read there), larger ones decoded and parsed on a decoding thread.
INLINE_BYTES: Final = 64 * 1024
#: A request of one resource not cached yet, up to this size, has its identity derived
#: on the loop (tens of µs); a bigger one's is derived on a decoding thread.
INLINE_RESOURCE_BYTES: Final = 4 * 1024
#: The door's name in ``kip714_requests_refused_total{door,reason}``.
DOOR: Final = "otlp"
_CONTENT_TYPES: Final = frozenset({PROTOBUF, JSON})


def peer(request: web.Request) -> tuple[str | None, int | None]:
    """The connection's source address and port (``None`` when not TCP).

    From aiohttp's connection, which asks the transport once per connection;
    ``get_extra_info("peername")`` is a ``getpeername`` system call each time.
    """
    peername = request.protocol.peername
    if isinstance(peername, tuple) and len(peername) >= 2:
        return str(peername[0]), int(peername[1])
    return None, None


class OtlpMetricsHandler:
    """The aiohttp handler of ``POST /v1/metrics``."""

    def __init__(self, ingest: HttpIngest) -> None:
        self._ingest = ingest
        config = ingest.manager.config
        self._limits = WireLimits(
            max_resources=config.max_resources_per_request,
            max_scopes=config.max_scopes_per_resource,
            max_resource_bytes=config.max_resource_bytes,
            max_attribute_value_bytes=config.max_attribute_value_bytes,
        )
        self._identities = IdentityCache(max_bytes=config.identity_cache_max_bytes)
        ingest.stats.identity_cache = self._identities
        self._decoder = FairDecoder(ingest.decode_threads)
        ingest.stats.decoder = self._decoder

    def close(self) -> None:
        """Stop the decoding threads (a decode under way finishes on its own)."""
        self._decoder.close()

    async def handle(self, request: web.Request) -> web.Response:
        content_type = request.headers.get(hdrs.CONTENT_TYPE, "")
        if content_type not in _CONTENT_TYPES:  # parameters (charset=...) or case to parse
            content_type = request.content_type
        if content_type not in _CONTENT_TYPES:
            response = web.Response(
                status=415,
                text=f"415 unsupported media type, supported: [{JSON}, {PROTOBUF}]",
            )
        else:
            try:
                response = await self._export(request, content_type == JSON)
            except RefusedError as refusal:
                if refusal.bound is not None:
                    self._ingest.refusals.count(DOOR, refusal.bound)
                response = status_response(refusal, content_type == JSON)
        self._ingest.stats.responses[(ROUTE, response.status)] += 1
        return response

    async def _export(self, request: web.Request, is_json: bool) -> web.Response:
        ingest = self._ingest
        body = await read_request_body(request, ingest.manager.config.max_bytes)
        memory = ingest.memory
        held = await memory.acquire(len(body)) if memory is not None else None
        if memory is not None and held is None:
            raise _memory_refusal(memory.wait_s)
        try:
            return await self._decoded(request, body, is_json, held)
        finally:
            if held is not None:
                held.release()

    async def _decoded(
        self, request: web.Request, body: bytes, is_json: bool, held: HeldMemory | None
    ) -> web.Response:
        ingest = self._ingest
        user = request_user(request)
        encoding = request.headers.get(hdrs.CONTENT_ENCODING, "")
        address, port = peer(request)
        source = address or ""
        started_ns = time.perf_counter_ns()
        loop_ns = 0  # the event loop's time before started_ns
        thread_ns = 0  # a decoding thread's
        try:
            # Inline first, without a coroutine: the usual body is small, its identity cached.
            inline = self._decode_inline(encoding, body, is_json, held)
            groups = (
                self._grouped_inline(inline, source) if isinstance(inline, DecodedBody) else None
            )
            if isinstance(inline, DecodedBody) and groups is not None:
                decoded = inline
            else:
                loop_ns = time.perf_counter_ns() - started_ns
                outcome = await self._on_thread(user, source, encoding, body, inline, is_json, held)
                started_ns = time.perf_counter_ns()
                thread_ns = outcome.thread_ns
                done = outcome.result()
                del outcome
                if isinstance(done, RefusedError):
                    raise done
                decoded, groups = done
        except RefusedError as refusal:
            if refusal.status == 400:  # a malformed body costs its sender like any request
                spent_ns = loop_ns + thread_ns + time.perf_counter_ns() - started_ns
                ingest.quotas.finish_request(ClientEntity(user, ""), spent_ns, ingest.clock())
            raise
        if not groups:
            return accepted_response(is_json)
        identities = [identity for identity, _ in groups]
        entities = [_entity(user, identity) for identity in identities]
        now_ms = ingest.clock()
        self._refuse_if_muted(entities, now_ms)
        payloads = logged_payloads(groups, decoded, encoding, body, is_json)
        del decoded  # what is logged is in payloads; the decoded copy need not wait for the fsync
        loop_ns += time.perf_counter_ns() - started_ns
        self._record(entities, payloads, len(body), loop_ns + thread_ns, now_ms)
        if len(payloads) == 1:
            context = _push_context(identities[0], user, address, port, now_ms)
            failed = await self._append_one(context, payloads[0])
        else:
            failed = await self._append(
                [
                    (_push_context(identity, user, address, port, now_ms), logged)
                    for identity, logged in zip(identities, payloads, strict=True)
                ]
            )
        if not failed:
            return accepted_response(is_json)
        _count_refusals(ingest, failed.values())
        if len(failed) == len(groups):
            raise _log_refusal(next(iter(failed.values())))
        response = ExportMetricsServiceResponse()
        response.partial_success.rejected_data_points = sum(
            count_encoded_data_points(payloads[index][0]) for index in failed
        )
        response.partial_success.error_message = (
            f"{len(failed)} of {len(groups)} resources were not logged: "
            f"{_log_refusal(next(iter(failed.values()))).message}"
        )
        return message_response(response, is_json)

    def _grouped_inline(self, decoded: DecodedBody, source: str) -> Groups | None:
        """The groups of a body read on the loop, when that is cheap; ``None``: the thread's work.

        Cheap is every SDK request: one resource, its identity cached, or
        small enough to derive in tens of µs. A request of several resources
        (a Collector's) is grouped on a decoding thread: up to
        ``max_resources_per_request`` identities to derive.
        """
        resources = decoded.resources
        if not resources:
            return []
        if len(resources) > 1:
            return None
        only = resources[0]
        resource = resource_bytes(only)
        identity = self._identities.cached(resource, source)
        if identity is None:
            if len(resource) > INLINE_RESOURCE_BYTES:
                return None
            return group_by_identity(self._identities, resources, source)
        return [(identity, [only])]

    def _decode_inline(
        self, encoding: str, body: bytes, is_json: bool, held: HeldMemory | None
    ) -> DecodedBody | bytes | None:
        """What the loop does of a body: all of its reading, its decoding only, or nothing.

        A body up to 64 KiB as sent and decoded is decoded on the loop (C
        codecs, bounded), and a protobuf one read there too (the wire walk,
        down to the resources, checking the bounds); a JSON body is returned
        decoded, to be parsed on a thread (``json_format`` is Python, about
        0.3 µs a byte: 20 ms of a 64 KiB body). ``None`` for a bigger body:
        decoding and parsing go to a decoding thread (:meth:`_on_thread`).
        """
        if len(body) > INLINE_BYTES:
            return None
        max_decoded = self._ingest.manager.config.max_decompressed_bytes
        try:
            inline = decode_body(encoding, body, min(max_decoded, INLINE_BYTES))
        except RefusedError as refusal:
            if refusal.status != 413 or max_decoded <= INLINE_BYTES:
                raise
            return None
        decoded_bytes = len(inline) if inline is not body else 0
        if is_json:
            if held is not None and decoded_bytes:
                held.add(decoded_bytes)
            return inline
        parsed = parse_body(inline, False, self._limits)
        if held is not None:  # one change of the pool: every SDK request comes here
            held.add(decoded_bytes + structure_bytes(parsed.resources))
        return parsed

    async def _on_thread(
        self,
        user: str,
        source: str,
        encoding: str,
        body: bytes,
        inline: DecodedBody | bytes | None,
        is_json: bool,
        held: HeldMemory | None,
    ) -> Outcome[tuple[DecodedBody, Groups] | RefusedError]:
        """What the loop left of a body, done on a decoding thread in its sender's turn.

        ``inline`` is what the loop did: the body read (grouping is left),
        decoded (parsing and grouping are left), or nothing. A compressed body
        queues only once it holds ``max_decompressed_bytes`` of request memory
        (Kafka reserves a whole request before reading it); the hold shrinks
        to the decoded size after, plus what the walk built. The sender, for
        taking turns: its principal, or an anonymous sender's address.
        """
        sender = (user, source if user == ANONYMOUS_USER else "")
        identities = self._identities
        limits = self._limits
        if isinstance(inline, DecodedBody):
            parsed = inline
            return await self._decoder.run(sender, lambda: group_parsed(parsed, identities, source))
        max_decoded = self._ingest.manager.config.max_decompressed_bytes
        reserved = 0
        if inline is None:
            compressed = encoding.strip().lower() not in ("", "identity")
            reserved = max_decoded if compressed and held is not None else 0
            memory = self._ingest.memory
            if (
                reserved
                and memory is not None
                and held is not None
                and not await memory.grow(held, reserved)
            ):
                raise _memory_refusal(memory.wait_s)
        decoded_body = inline
        try:
            outcome = await self._decoder.run(
                sender,
                lambda: decode_parse_group(
                    encoding, body, decoded_body, max_decoded, is_json, limits, identities, source
                ),
                heavy=decoded_body is None,  # over 64 KiB: its parse is not bounded small
            )
        except BaseException:
            if held is not None:
                held.add(-reserved)
            raise
        if held is not None:
            grown = -reserved
            if isinstance(outcome.value, tuple):
                decoded = outcome.value[0]
                if decoded.data is not body and decoded_body is None:
                    grown += len(decoded.data)
                if decoded.encoded is not decoded.data:  # JSON: its protobuf form too
                    grown += len(decoded.encoded)
                grown += structure_bytes(decoded.resources)
            held.add(grown)
        return outcome

    def _refuse_if_muted(self, entities: Sequence[ClientEntity], now_ms: int) -> None:
        """429 while a throttle an identity earned earlier runs (Kafka's muted channel)."""
        quotas = self._ingest.quotas
        muted_ms = 0
        for entity in entities:
            muted_ms = max(muted_ms, quotas.muted_ms(entity, now_ms))
        if muted_ms > 0:
            raise RefusedError(
                429,
                RESOURCE_EXHAUSTED,
                f"throttled by a client quota for another {muted_ms} ms",
                retry_after_s(muted_ms, OTLP_MAX_RETRY_AFTER_S),
            )

    def _record(
        self,
        entities: Sequence[ClientEntity],
        payloads: Sequence[Logged],
        body_bytes: int,
        loop_ns: int,
        now_ms: int,
    ) -> None:
        """Charge the request to each identity: an equal share of its time, its share of bytes.

        A throttle earned here mutes the identity (:class:`HttpQuotas`); the
        request itself is accepted, as Kafka accepts an over-quota produce.
        """
        quotas = self._ingest.quotas
        payload_bytes = sum(size for _, _, size in payloads) or 1
        for entity, (_, _, size) in zip(entities, payloads, strict=True):
            quotas.finish_request(
                entity,
                loop_ns // len(entities),
                now_ms,
                push_bytes=body_bytes * size // payload_bytes,
                decoded_bytes=size,
            )

    async def _append(
        self, records: Sequence[tuple[PushContext, Logged]]
    ) -> dict[int, BaseException]:
        """Append every record and wait until each is durable; the failures by index."""
        failed: dict[int, BaseException] = {}
        pending: dict[int, asyncio.Future[None]] = {}
        for index, (context, (payload, codec, size)) in enumerate(records):
            try:
                _, pending[index] = self._ingest.log.append_nowait(context, payload, codec, size)
            except Exception as error:
                failed[index] = error
        if pending:
            # asyncio.wait, not gather: one failed record must not end the wait
            # for the others.
            await asyncio.wait(pending.values())
        for index, durable in pending.items():
            outcome = asyncio.CancelledError() if durable.cancelled() else durable.exception()
            if outcome is not None:
                failed[index] = outcome
        return dict(sorted(failed.items()))

    async def _append_one(self, context: PushContext, logged: Logged) -> dict[int, BaseException]:
        """:meth:`_append` of one record (every SDK request): its future, awaited as is.

        ``asyncio.wait`` would cost a waiter and two callbacks. Cancelling the
        handler cancels only that future; the log skips a done future and
        writes the record anyway.
        """
        payload, codec, size = logged
        try:
            _, durable = self._ingest.log.append_nowait(context, payload, codec, size)
            await durable
        except Exception as error:
            return {0: error}
        return {}


def _entity(user: str, identity: OtlpIdentity) -> ClientEntity:
    return ClientEntity(user, identity.client_id or "")


def _memory_refusal(wait_s: float) -> RefusedError:
    return RefusedError(
        503,
        UNAVAILABLE,
        "the server's request memory (limits.queued_max_request_bytes) is full",
        retry_after_s(max(1000, int(wait_s * 1000)), OTLP_MAX_RETRY_AFTER_S),
    )


def _count_refusals(ingest: HttpIngest, errors: Iterable[BaseException]) -> None:
    """Count the appends a log budget refused (``kip714_requests_refused_total``)."""
    for error in errors:
        if isinstance(error, LogFullError):
            ingest.refusals.count("otlp", error.bound)


def _log_refusal(error: BaseException) -> RefusedError:
    """How a refused or failed append is answered."""
    if isinstance(error, LogFullError):
        return RefusedError(
            503,
            UNAVAILABLE,
            error.reason,
            retry_after_s(error.throttle_time_ms, OTLP_MAX_RETRY_AFTER_S),
        )
    if isinstance(error, RecordTooLargeError):
        return RefusedError(413, RESOURCE_EXHAUSTED, str(error))
    _log.warning("the ingest log could not take an OTLP request: %r", error)
    return RefusedError(503, UNAVAILABLE, f"the ingest log cannot take requests: {error!r}", 1)


def _push_context(
    identity: OtlpIdentity, user: str, address: str | None, port: int | None, now_ms: int
) -> PushContext:
    # No subscription and no push interval: 0 for both, as the landing's pushes table shows.
    return PushContext(
        client_instance_id=str(identity.client_instance_id),
        subscription_id=0,
        received_time_ms=now_ms,
        push_interval_ms=0,
        client_id=identity.client_id,
        client_software_name=identity.client_software_name,
        client_software_version=identity.client_software_version,
        client_source_address=address,
        client_source_port=port,
        principal=principal(user),
    )
