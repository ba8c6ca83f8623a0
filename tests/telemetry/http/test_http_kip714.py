"""KIP-714 over HTTP: the Kafka listener's push tests, run unchanged over ``/v1/telemetry/*``.

The tests imported from ``test_kafka_listener_push`` take their ``server``
fixture from this module, which serves the HTTP routes over the same manager
and log (:mod:`tests.telemetry.http_support`), so every error code, gate and
check order the Kafka listener is held to holds over HTTP too; the HTTP
client also checks each status (429 exactly for THROTTLING_QUOTA_EXCEEDED
with a throttle time). Below them: what only HTTP has (bad requests, the
identity fields, a cancelled handler); client quotas are in
``test_http_quotas``.
"""

from __future__ import annotations

import asyncio
import gzip
from typing import TYPE_CHECKING

import pytest

from telemetry.core.client_instance import RequestContext
from telemetry.core.client_uuid import Uuid
from telemetry.core.codecs import CompressionType
from telemetry.core.manager import AcceptedPush, PushTelemetryResponse
from telemetry.core.settings import TelemetryConfig
from telemetry.errors import ErrorCode
from telemetry.http.kip714 import PushHandler
from telemetry.ingest import LogConfig
from telemetry.ingress import INLINE_DECOMPRESSED_BYTES
from tests.telemetry.http_support import HttpServer, kafka_uuid, running_http

# The Kafka listener's cases, collected here with this module's ``server`` fixture.
from tests.telemetry.kafka.test_kafka_listener_push import (  # noqa: F401
    INTERVAL_MS,
    MAX_BYTES,
    MAX_DECOMPRESSED,
    PAYLOAD,
    test_a_refused_terminating_push_does_not_lock_the_instance,
    test_corrupt_compressed_bytes_are_an_invalid_record,
    test_decompression_bomb_is_too_large,
    test_every_codec_is_logged_as_sent_and_read_back_decompressed,
    test_get_with_the_one_id_is_answered_but_pushes_are_refused,
    test_get_with_zero_id_gets_a_fresh_id_that_is_then_echoed,
    test_null_and_empty_metrics_are_accepted_and_not_logged,
    test_payload_over_telemetry_max_bytes_is_too_large,
    test_push_and_get_within_the_interval_are_throttled,
    test_push_with_a_reserved_id_is_an_invalid_request,
    test_subscription_change_takes_effect_on_the_next_request,
    test_terminating_push_is_accepted_once,
    test_the_first_failing_push_check_wins,
    test_unknown_subscription_id_then_get_is_exempt_from_the_gate,
    test_unsupported_compression_type_then_get_is_exempt,
)
from tests.telemetry.kafka_wire_client import LOOPBACK, ManualClock, otlp_payload, running_server

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path
    from typing import Any

PUSH = "/v1/telemetry/push"
GET = "/v1/telemetry/subscriptions"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[HttpServer]:
    telemetry = TelemetryConfig(max_bytes=MAX_BYTES, max_decompressed_bytes=MAX_DECOMPRESSED)
    async with (
        running_server(tmp_path, telemetry=telemetry, clock=ManualClock()) as kafka,
        running_http(kafka) as http,
    ):
        yield http


async def test_a_full_log_is_429_with_the_logs_throttle_time(tmp_path: Path) -> None:
    log_config = LogConfig(segment_bytes=4096, max_bytes=8192, full_throttle_ms=1200)
    clock = ManualClock()
    async with (
        running_server(tmp_path, log_config=log_config, clock=clock) as kafka,
        running_http(kafka) as server,
    ):
        await server.log.register("stuck-exporter")  # holds back retention
        client = await server.connect()
        sub = await client.subscribe()
        payload = otlp_payload("org.apache.kafka.producer.filler", points=25)
        codes: list[tuple[int, int]] = []
        for _ in range(12):  # the budget holds about five of these
            pushed = await client.push(sub.client_instance_id, sub.subscription_id, payload)
            codes.append((pushed.error_code, pushed.throttle_time_ms))
            clock.advance(INTERVAL_MS)
            if pushed.error_code != ErrorCode.NONE:
                break
        logged = await server.pushes()

    *accepted, refused = codes
    assert accepted and all(code == (ErrorCode.NONE, 0) for code in accepted)
    assert refused == (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 1200)
    assert (server.answers[-1].status, server.answers[-1].retry_after) == (429, "2")
    assert len(logged) == len(accepted)


async def test_a_record_too_large_for_the_log_is_too_large(tmp_path: Path) -> None:
    log_config = LogConfig(segment_bytes=64 * 1024, max_bytes=1024 * 1024, max_record_bytes=1024)
    async with (
        running_server(tmp_path, log_config=log_config) as kafka,
        running_http(kafka) as server,
    ):
        client = await server.connect()
        sub = await client.subscribe()
        pushed = await client.push(sub.client_instance_id, sub.subscription_id, PAYLOAD)
        assert await server.pushes() == []
    assert pushed.error_code == ErrorCode.TELEMETRY_TOO_LARGE


async def test_identity_fields_and_the_connection_land_with_the_push(server: HttpServer) -> None:
    client = await server.connect("orders-service")
    sub = await client.subscribe()
    pushed = await client.push(sub.client_instance_id, sub.subscription_id, PAYLOAD)
    [logged] = await server.pushes()
    assert pushed.error_code == ErrorCode.NONE
    assert logged.client_instance_id == kafka_uuid(sub.client_instance_id)
    assert logged.client_id == "orders-service"
    # The instance's metadata is captured by its first request (the GET's JSON fields).
    assert (logged.client_software_name, logged.client_software_version) == (
        "kip714-http-test",
        "0.0.1",
    )
    assert logged.client_source_address == "127.0.0.1"
    assert logged.client_source_port is not None and logged.client_source_port > 0
    assert logged.principal == "User:ANONYMOUS"
    assert logged.payload == PAYLOAD


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Kip714-Subscription-Id": "1"}, "Kip714-Client-Instance-Id header is required"),
        (
            {"Kip714-Client-Instance-Id": "not-a-uuid", "Kip714-Subscription-Id": "1"},
            "not a base64url-encoded Uuid",
        ),
        ({"Kip714-Client-Instance-Id": "AAAAAAAAAAAAAAAAAAAAAQ"}, "Subscription-Id header"),
        (
            {"Kip714-Client-Instance-Id": "AAAAAAAAAAAAAAAAAAAAAQ", "Kip714-Subscription-Id": "x"},
            "not an integer",
        ),
        (
            {
                "Kip714-Client-Instance-Id": "AAAAAAAAAAAAAAAAAAAAAQ",
                "Kip714-Subscription-Id": str(2**31),
            },
            "out of range",
        ),
        (
            {
                "Kip714-Client-Instance-Id": "AAAAAAAAAAAAAAAAAAAAAQ",
                "Kip714-Subscription-Id": "1",
                "Kip714-Compression-Type": "128",
            },
            "out of range",
        ),
        (
            {
                "Kip714-Client-Instance-Id": "AAAAAAAAAAAAAAAAAAAAAQ",
                "Kip714-Subscription-Id": "1",
                "Kip714-Terminating": "maybe",
            },
            "true or false",
        ),
    ],
    ids=["no-id", "bad-id", "no-subscription", "bad-subscription", "int32", "int8", "terminating"],
)
async def test_a_push_that_does_not_read_as_pushtelemetry_is_400(
    server: HttpServer, headers: dict[str, str], expected: str
) -> None:
    async with server.session.post(server.url + PUSH, data=PAYLOAD, headers=headers) as response:
        body = await response.json()
        status = response.status
    assert status == 400
    assert (body["error_code"], body["error_name"]) == (42, "INVALID_REQUEST")
    assert expected in body["message"]
    assert server.manager.instance_count == 0
    assert await server.pushes() == []


@pytest.mark.parametrize(
    ("request_kwargs", "status", "expected"),
    [
        ({"data": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, "JSON"),
        ({"json": [1, 2]}, 400, "JSON object"),
        ({"json": {"client_id": 7}}, 400, "client_id must be a string"),
        ({"json": {"client_instance_id": "short"}}, 400, "client_instance_id"),
        ({"data": b"client_id=x", "headers": {"Content-Type": "text/plain"}}, 415, "JSON"),
        ({"json": {"client_id": "x" * 70_000}}, 413, "exceeds"),
    ],
    ids=["not-json", "not-object", "bad-type", "bad-id", "content-type", "too-large"],
)
async def test_a_get_that_does_not_read_as_gettelemetrysubscriptions_is_refused(
    server: HttpServer, request_kwargs: dict[str, Any], status: int, expected: str
) -> None:
    async with server.session.post(server.url + GET, **request_kwargs) as response:
        body = await response.json()
        answered = response.status
    assert answered == status
    assert body["error_code"] == ErrorCode.INVALID_REQUEST
    assert expected in body["message"]
    assert server.manager.instance_count == 0


async def test_an_empty_get_asks_for_a_new_instance(server: HttpServer) -> None:
    async with server.session.post(server.url + GET) as response:
        body = await response.json()
    assert response.status == 200
    assert body["error_code"] == 0
    assert Uuid.parse(body["client_instance_id"]) != Uuid(0, 0)
    assert body["accepted_compression_types"] == [4, 3, 1, 2]
    assert server.manager.instance_count == 1


async def test_a_cancelled_push_still_completes_in_the_manager(server: HttpServer) -> None:
    """The outcome of the append reaches the manager even when nobody waits for it.

    A terminating push whose handler is cancelled while the log writes it
    (a client gone, a server stopping) is in the log, so its instance must be
    terminating, as after any accepted terminating push: the next push is
    INVALID_REQUEST.
    """
    manager, now_ms = server.manager, server.ingest.clock()
    context = RequestContext(client_id="gone", client_source_address=LOOPBACK, client_source_port=1)
    sub = manager.get_telemetry_subscriptions(None, context, now_ms)
    accepted = manager.validate_push(
        client_instance_id=sub.client_instance_id,
        subscription_id=sub.subscription_id,
        terminating=True,
        compression_type=0,
        metrics=PAYLOAD,
        context=context,
        now_ms=now_ms,
    )
    assert isinstance(accepted, AcceptedPush)
    waiting = asyncio.ensure_future(PushHandler(server.ingest).log_push(accepted))
    await asyncio.sleep(0)  # now waiting for the fsync
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    logged = await server.kafka.wait_for_pushes(lambda pushes: len(pushes) == 1, 5.0)
    assert [p.terminating for p in logged] == [True]
    instance = manager.client_instance(sub.client_instance_id)
    assert instance is not None and instance.terminating
    assert manager.stats.push_responses[ErrorCode.NONE] == 1
    after = manager.validate_push(
        client_instance_id=sub.client_instance_id,
        subscription_id=sub.subscription_id,
        terminating=False,
        compression_type=0,
        metrics=PAYLOAD,
        context=context,
        now_ms=now_ms + INTERVAL_MS,
    )
    assert isinstance(after, PushTelemetryResponse)
    assert after.error_code == ErrorCode.INVALID_REQUEST


async def test_a_push_expanding_past_the_inline_limit_is_decompressed_off_the_loop(
    tmp_path: Path,
) -> None:
    """HTTP defers large decompressions as the Kafka listener does, with the same outcome."""
    telemetry = TelemetryConfig(max_bytes=1024 * 1024, max_decompressed_bytes=4 * 1024 * 1024)
    large = otlp_payload("org.apache.kafka.producer.large", points=20_000)
    assert len(large) > INLINE_DECOMPRESSED_BYTES
    too_large = large * ((telemetry.max_decompressed_bytes // len(large)) + 1)
    clock = ManualClock()
    async with (
        running_server(tmp_path, telemetry=telemetry, clock=clock) as kafka,
        running_http(kafka) as server,
    ):
        client = await server.connect()
        sub = await client.subscribe()
        accepted = await client.push(
            sub.client_instance_id,
            sub.subscription_id,
            gzip.compress(large),
            int(CompressionType.GZIP),
        )
        clock.advance(INTERVAL_MS)
        refused = await client.push(
            sub.client_instance_id,
            sub.subscription_id,
            gzip.compress(too_large),
            int(CompressionType.GZIP),
        )
        logged = await server.pushes()
        deferred = server.manager.stats.deferred_decompressions

    assert (accepted.error_code, accepted.throttle_time_ms) == (ErrorCode.NONE, 0)
    assert refused.error_code == ErrorCode.TELEMETRY_TOO_LARGE
    assert [push.payload for push in logged] == [large]
    assert deferred == 2
