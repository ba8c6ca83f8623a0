"""Test support for the HTTP ingestion routes: a real aiohttp server over a real log.

:func:`running_http` serves :func:`telemetry.http.add_ingest_routes` on
127.0.0.1 (port 0) over the manager, ingest log and clock of a
:func:`~tests.telemetry.kafka_wire_client.running_server`, so both
listeners share one manager, one log and one set of client quotas, as in
``kip714 serve``.
:class:`HttpKip714Client` offers the :class:`WireClient` methods the Kafka
listener's tests use (``subscribe``, ``get_subscriptions``, ``push``,
``close``) over the HTTP routes and returns the same response types, so
those tests run unchanged against HTTP; it also keeps every HTTP status and
``Retry-After`` it saw.
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from telemetry.errors import ErrorCode
from telemetry.http import HttpIngest, HttpQuotas, add_ingest_routes
from telemetry.http.routes import RUNNER_OPTIONS
from telemetry.http.throttle import MAX_MUTED_ENTITIES
from telemetry.ingress import wall_clock_ms
from telemetry.wire import GetTelemetrySubscriptionsResponse, PushTelemetryResponse
from tests.telemetry.kafka_wire_client import IO_TIMEOUT_S, LOOPBACK, ZERO_ID

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from exporters.api import LoggedPush
    from telemetry.core.manager import TelemetryManager
    from telemetry.ingest import IngestLog
    from tests.telemetry.kafka_wire_client import ManualClock, Server

TIMEOUT = aiohttp.ClientTimeout(total=IO_TIMEOUT_S)


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of its 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def from_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP exchange as the test saw it."""

    status: int
    retry_after: str | None
    body: dict[str, Any]


@dataclass(slots=True)
class HttpServer:
    """The HTTP routes of one running server, with the Kafka-side :class:`Server` behind them."""

    kafka: Server
    url: str
    ingest: HttpIngest
    session: aiohttp.ClientSession
    answers: list[Answer] = field(default_factory=list)

    @property
    def manager(self) -> TelemetryManager:
        return self.kafka.manager

    @property
    def log(self) -> IngestLog:
        return self.kafka.log

    @property
    def clock(self) -> ManualClock | None:
        return self.kafka.clock

    async def pushes(self) -> list[LoggedPush]:
        return await self.kafka.pushes()

    async def connect(self, client_id: str | None = "kip714-http-test") -> HttpKip714Client:
        return HttpKip714Client(self, client_id)


@contextlib.asynccontextmanager
async def running_http(
    kafka: Server, max_muted: int = MAX_MUTED_ENTITIES
) -> AsyncIterator[HttpServer]:
    """Serve the ingestion routes over ``kafka``'s manager, log, clock and quotas until exit."""
    ingest = HttpIngest(
        manager=kafka.manager,
        log=kafka.log,
        clock=kafka.clock if kafka.clock is not None else wall_clock_ms,
        quotas=HttpQuotas(kafka.listener.enforcement.clients, max_muted),
        refusals=kafka.listener.enforcement.refusals,
    )
    app = web.Application()
    add_ingest_routes(app, ingest)
    runner = web.AppRunner(app, **RUNNER_OPTIONS)
    await runner.setup()
    try:
        site = web.TCPSite(runner, LOOPBACK, 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}"
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            yield HttpServer(kafka, url, ingest, session)
    finally:
        await runner.cleanup()


class HttpKip714Client:
    """The Kafka wire client's KIP-714 calls, over ``/v1/telemetry/*``."""

    def __init__(self, server: HttpServer, client_id: str | None) -> None:
        self.server = server
        self.client_id = client_id

    async def _post(
        self, path: str, *, json: Any = None, data: bytes = b"", headers: dict[str, str]
    ) -> dict[str, Any]:
        server = self.server
        async with server.session.post(
            server.url + path, json=json, data=None if json is not None else data, headers=headers
        ) as response:
            body: dict[str, Any] = await response.json()
            server.answers.append(
                Answer(response.status, response.headers.get("Retry-After"), body)
            )
        # The HTTP mapping of Kafka's throttle: 429 exactly for a refusal naming a wait.
        refused = body["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        expected = 429 if refused and body["throttle_time_ms"] > 0 else 200
        assert response.status == expected, (response.status, body)
        assert body["error_name"] == ErrorCode(body["error_code"]).name
        return body

    async def get_subscriptions(
        self, client_instance_id: uuid.UUID = ZERO_ID
    ) -> GetTelemetrySubscriptionsResponse:
        request: dict[str, Any] = {
            "client_instance_id": kafka_uuid(client_instance_id),
            "client_software_name": "kip714-http-test",
            "client_software_version": "0.0.1",
        }
        if self.client_id is not None:
            request["client_id"] = self.client_id
        body = await self._post("/v1/telemetry/subscriptions", json=request, headers={})
        return GetTelemetrySubscriptionsResponse(
            error_code=body["error_code"],
            throttle_time_ms=body["throttle_time_ms"],
            client_instance_id=from_kafka_uuid(body["client_instance_id"]),
            subscription_id=body["subscription_id"],
            accepted_compression_types=tuple(body["accepted_compression_types"]),
            push_interval_ms=body["push_interval_ms"],
            telemetry_max_bytes=body["telemetry_max_bytes"],
            delta_temporality=body["delta_temporality"],
            requested_metrics=tuple(body["requested_metrics"]),
        )

    async def subscribe(self) -> GetTelemetrySubscriptionsResponse:
        answer = await self.get_subscriptions()
        assert answer.error_code == ErrorCode.NONE, answer
        return answer

    async def push(
        self,
        client_instance_id: uuid.UUID,
        subscription_id: int,
        metrics: bytes | None,
        compression_type: int = 0,
        *,
        terminating: bool = False,
    ) -> PushTelemetryResponse:
        """``metrics=None`` is an empty body: HTTP has no null."""
        headers = {
            "Kip714-Client-Instance-Id": kafka_uuid(client_instance_id),
            "Kip714-Subscription-Id": str(subscription_id),
            "Kip714-Compression-Type": str(int(compression_type)),
            "Kip714-Terminating": "true" if terminating else "false",
            "Content-Type": "application/x-protobuf",
        }
        if self.client_id is not None:
            headers["Kip714-Client-Id"] = self.client_id
        body = await self._post("/v1/telemetry/push", data=metrics or b"", headers=headers)
        return PushTelemetryResponse(
            error_code=body["error_code"], throttle_time_ms=body["throttle_time_ms"]
        )

    async def close(self) -> None:
        """Nothing to close: HTTP requests share the session's connections."""
