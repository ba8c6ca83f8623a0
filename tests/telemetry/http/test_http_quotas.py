"""Client quotas on the HTTP routes over real HTTP: accepted with a throttle, then 429 while muted.

The server's quota clock is a :class:`ManualClock`, so every throttle time
and every ``Retry-After`` is Kafka's exact number, and the per-entity mute
(Kafka's muted channel, emulated) ends exactly when the clock says.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from typing import TYPE_CHECKING

from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)

from telemetry.enforcement import (
    ClientEntity,
    ClientQuotaSettings,
    Enforcement,
    QuotaSettings,
    ThrottleReason,
)
from telemetry.errors import ErrorCode
from tests.telemetry.http.test_http_otlp import (
    PROTOBUF,
    ROUTE,
    SDK_BODY,
    SDK_RESOURCE,
    otlp_request,
    post,
    resource_metrics,
)
from tests.telemetry.http_support import kafka_uuid, running_http
from tests.telemetry.kafka_wire_client import ZERO_ID, ManualClock, otlp_payload, running_server

if TYPE_CHECKING:
    from pathlib import Path

    from tests.telemetry.http_support import HttpServer

CHECKOUT = ClientEntity("ANONYMOUS", "checkout")
OTHER_BODY = otlp_request(
    resource_metrics({**SDK_RESOURCE, "service.name": "payments"}, "app.requests")
)


def enforcement(**quota: float | str) -> Enforcement:
    return Enforcement(QuotaSettings(clients=(ClientQuotaSettings(**quota),)))  # type: ignore[arg-type]


def byte_rate(enforcer: Enforcement, client_id: str, now_ms: int) -> float:
    """The recorded push byte rate of ``client_id``'s own sensor, measured at ``now_ms``."""
    sensor = enforcer.metrics.get_sensor(f"Produce-:{client_id}")
    assert sensor is not None
    return float(sensor.metrics[0].measurable_value(now_ms))


async def test_an_otlp_sender_over_its_byte_rate_is_429_until_its_throttle_has_elapsed(
    tmp_path: Path,
) -> None:
    clock = ClockAt()
    # Every service its own quota of P / 12.5 B/s: one request of P bytes on a
    # fresh 11 x 1 s rate measures P / 10 s, 25 % over: X = 0.25 * 10 s = 2500 ms.
    enforcer = enforcement(client_id="<default>", push_byte_rate=len(SDK_BODY) / 12.5)
    async with (
        running_server(tmp_path, clock=clock, enforcement=enforcer) as kafka,
        running_http(kafka) as server,
    ):
        first = await post(server, SDK_BODY, PROTOBUF)
        mute_ms = server.ingest.quotas.muted_ms(CHECKOUT, clock.now_ms)
        recorded = byte_rate(enforcer, "checkout", clock.t0_ms)
        muted = [await post(server, SDK_BODY, PROTOBUF)]
        clock.advance(1000)
        muted.append(await post(server, SDK_BODY, PROTOBUF))
        clock.advance(1499)
        muted.append(await post(server, SDK_BODY, PROTOBUF))
        unrecorded = byte_rate(enforcer, "checkout", clock.t0_ms)
        other = await post(server, OTHER_BODY, PROTOBUF)  # another service is not muted
        clock.advance(1)
        again = await post(server, SDK_BODY, PROTOBUF)
        logged = await server.pushes()
        responses = server.ingest.stats.responses

    assert first[0] == 200
    assert ExportMetricsServiceResponse.FromString(first[2]) == ExportMetricsServiceResponse()
    assert mute_ms == 2500
    assert [(status, headers["Retry-After"]) for status, headers, _ in muted] == [
        (429, "3"),
        (429, "2"),
        (429, "1"),
    ]
    assert all(Status.FromString(body).code == 8 for _, _, body in muted)  # RESOURCE_EXHAUSTED
    assert unrecorded == recorded  # a muted request is not recorded
    assert (other[0], again[0]) == (200, 200)
    # Nothing of the muted requests was logged.
    assert [push.client_id for push in logged] == ["checkout", "payments", "checkout"]
    assert responses[(ROUTE, 429)] == 3
    assert enforcer.tracker.counts[ThrottleReason.PUSH_BYTE_RATE] >= 1


async def test_an_otlp_retry_after_stays_below_ten_seconds(tmp_path: Path) -> None:
    clock = ClockAt()
    enforcer = enforcement(client_id="checkout", push_byte_rate=1.0)  # a throttle of hours
    async with (
        running_server(tmp_path, clock=clock, enforcement=enforcer) as kafka,
        running_http(kafka) as server,
    ):
        first = await post(server, SDK_BODY, PROTOBUF)
        mute_ms = server.ingest.quotas.muted_ms(CHECKOUT, clock.now_ms)
        status, headers, _ = await post(server, SDK_BODY, PROTOBUF)
    assert first[0] == 200
    assert mute_ms > 60_000
    # The OpenTelemetry SDKs give an export 10 s and drop it rather than wait longer.
    assert (status, headers["Retry-After"]) == (429, "9")


async def test_a_kip714_push_over_its_byte_rate_is_200_with_its_throttle_then_429(
    tmp_path: Path,
) -> None:
    clock = ClockAt()
    payload = otlp_payload("org.apache.kafka.producer.bytes", points=40)
    # P / 10 s against P / 10.5: 5 % over, Kafka's X = 0.05 * 10 s = 500 ms.
    enforcer = enforcement(client_id="noisy", push_byte_rate=len(payload) / 10.5)
    async with (
        running_server(tmp_path, clock=clock, enforcement=enforcer) as kafka,
        running_http(kafka) as server,
    ):
        client = await server.connect("noisy")
        sub = await client.subscribe()
        ids = (sub.client_instance_id, sub.subscription_id)
        accepted = await client.push(*ids, payload)
        muted = [await client.push(*ids, payload)]
        clock.advance(499)
        muted.append(await client.push(*ids, payload))
        quiet = await server.connect("quiet")  # another client id: no quota, no mute
        quiet_sub = await quiet.subscribe()
        unaffected = await quiet.push(quiet_sub.client_instance_id, quiet_sub.subscription_id, b"")
        clock.advance(1)
        after = await client.push(*ids, payload)
        logged = await server.pushes()
        pushes_seen = dict(server.manager.stats.push_responses)

    # Accepted (produce semantics), the throttle in the body, HTTP 200.
    assert (accepted.error_code, accepted.throttle_time_ms) == (ErrorCode.NONE, 500)
    assert [(m.error_code, m.throttle_time_ms) for m in muted] == [
        (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 500),
        (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 1),
    ]
    assert (unaffected.error_code, unaffected.throttle_time_ms) == (ErrorCode.NONE, 0)
    assert after.error_code == ErrorCode.NONE
    statuses = [(a.status, a.retry_after) for a in server.answers]
    assert statuses == [
        (200, None),  # GET
        (200, None),  # the push over quota
        (429, "1"),
        (429, "1"),
        (200, None),  # quiet's GET
        (200, None),  # quiet's push
        (200, None),  # after the throttle
    ]
    # The muted pushes never reached the manager, nor the log.
    assert pushes_seen == {ErrorCode.NONE: 3}
    assert [push.payload for push in logged] == [payload, payload]
    assert enforcer.tracker.counts[ThrottleReason.PUSH_BYTE_RATE] >= 1


async def test_instance_creation_beyond_the_mutation_rate_is_429_and_creates_nothing(
    tmp_path: Path,
) -> None:
    # 1 creation/s, 11 windows of 1 s: a full bucket holds 11 tokens, and a
    # request is accepted while the bucket is not in deficit before it (KIP-599).
    clock = ClockAt()
    enforcer = enforcement(client_id="creator", controller_mutation_rate=1.0)
    async with (
        running_server(tmp_path, clock=clock, enforcement=enforcer) as kafka,
        running_http(kafka) as server,
    ):
        client = await server.connect("creator")
        accepted = [await client.get_subscriptions(ZERO_ID) for _ in range(12)]
        refused = await client.get_subscriptions(ZERO_ID)
        instances = server.manager.instance_count
        # The refusal's throttle mutes the entity: even a known instance waits.
        muted = await client.get_subscriptions(accepted[0].client_instance_id)
        clock.advance(1000)
        known = await client.get_subscriptions(accepted[0].client_instance_id)
        created = server.manager.stats.instances_created

    assert all(a.error_code == ErrorCode.NONE and a.throttle_time_ms == 0 for a in accepted)
    assert instances == created == 12
    assert (refused.error_code, refused.throttle_time_ms) == (
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        1000,  # -1 token at 1 token/s
    )
    assert refused.client_instance_id == ZERO_ID  # nothing created, nothing named
    assert (muted.error_code, muted.throttle_time_ms) == (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 1000)
    assert [(a.status, a.retry_after) for a in server.answers[12:14]] == [(429, "1"), (429, "1")]
    assert (known.error_code, known.client_instance_id) == (
        ErrorCode.NONE,
        accepted[0].client_instance_id,
    )
    assert enforcer.tracker.counts[ThrottleReason.CONTROLLER_MUTATION_RATE] == 1


async def test_a_push_with_a_made_up_instance_id_draws_from_the_mutation_bucket(
    tmp_path: Path,
) -> None:
    """A push with an unknown id would create an instance, so it is charged like a GET."""
    clock = ClockAt()
    enforcer = enforcement(client_id="inventor", controller_mutation_rate=1.0)
    payload = otlp_payload("org.apache.kafka.producer.made.up", points=2)
    async with (
        running_server(tmp_path, clock=clock, enforcement=enforcer) as kafka,
        running_http(kafka) as server,
    ):
        client = await server.connect("inventor")
        for _ in range(12):  # drain the bucket (11 tokens) into deficit
            await client.get_subscriptions(ZERO_ID)
        created = server.manager.stats.instances_created
        refused = await client.push(uuid.uuid4(), 1234, payload)
        after = server.manager.stats.instances_created
        logged = await server.pushes()

    assert created == 12
    assert (refused.error_code, refused.throttle_time_ms) == (
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        1000,
    )
    assert (server.answers[-1].status, server.answers[-1].retry_after) == (429, "1")
    assert after == created  # nothing was created for the made-up id
    assert logged == []  # and nothing was logged


HOSTILE_IDS = 10_000
MAX_MUTED = 1_000
IN_FLIGHT = 32


async def _push_as(server: HttpServer, client_id: str) -> int:
    headers = {
        "Kip714-Client-Instance-Id": kafka_uuid(ZERO_ID),  # reserved: refused, nothing created
        "Kip714-Subscription-Id": "1",
        "Kip714-Client-Id": client_id,
    }
    async with server.session.post(server.url + "/v1/telemetry/push", headers=headers) as answer:
        body = await answer.json()
        assert body["throttle_time_ms"] == 1000, body
        return answer.status


async def test_hostile_client_ids_leave_the_mute_table_bounded(tmp_path: Path) -> None:
    clock = ClockAt()
    # A user-level quota no request can meet: every request of every client id
    # is throttled one window (KIP-124's bound), so every one of them is muted.
    enforcer = enforcement(user="ANONYMOUS", request_percentage=1e-9)
    async with (
        running_server(tmp_path, clock=clock, enforcement=enforcer) as kafka,
        running_http(kafka, max_muted=MAX_MUTED) as server,
    ):
        quotas = server.ingest.quotas
        statuses: collections.Counter[int] = collections.Counter()
        peak = 0
        for start in range(0, HOSTILE_IDS, IN_FLIGHT):
            batch = [f"hostile-{n}" for n in range(start, min(start + IN_FLIGHT, HOSTILE_IDS))]
            statuses.update(await asyncio.gather(*(_push_as(server, c) for c in batch)))
            peak = max(peak, quotas.muted_entities)
        at_cap = quotas.muted_entities
        # The last ones are still muted; the earliest were evicted (least recently used).
        last_muted = quotas.muted_ms(
            ClientEntity("ANONYMOUS", f"hostile-{HOSTILE_IDS - 1}"), clock.now_ms
        )
        clock.advance(1000)
        statuses[await _push_as(server, "late")] += 1
        after_expiry = quotas.muted_entities
        instances = server.manager.instance_count

    # 42 INVALID_REQUEST with a throttle: HTTP 200; the table never passed its bound.
    assert statuses == {200: HOSTILE_IDS + 1}
    assert peak == at_cap == MAX_MUTED
    assert last_muted == 1000
    assert after_expiry == 1  # every earlier mute ended and was purged; only "late" is muted
    assert instances == 0


class ClockAt(ManualClock):
    """A :class:`ManualClock` that remembers where it started."""

    def __init__(self) -> None:
        super().__init__()
        self.t0_ms = self.now_ms
