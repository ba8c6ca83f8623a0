"""Client quotas over a real socket: throttle times in responses, muting, strict instance creation.

The listener's quota clock is a :class:`ManualClock`, so every throttle time
is Kafka's exact number; the mute runs on the event loop's real clock, so it
is checked with a monotonic lower bound only: a response to a request sent
after (or pipelined behind) a throttled one never arrives before the throttle
has elapsed since the throttled request was sent.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING

import pytest

from telemetry.enforcement import (
    ClientEntity,
    ClientQuotaSettings,
    Enforcement,
    QuotaSettings,
    ThrottleReason,
)
from telemetry.errors import ErrorCode
from telemetry.wire import ApiKey, ApiVersionsRequest, ApiVersionsResponse, PushTelemetryResponse
from tests.telemetry.kafka_wire_client import (
    ZERO_ID,
    ManualClock,
    otlp_payload,
    running_server,
)

if TYPE_CHECKING:
    from pathlib import Path


#: The event loop schedules a mute or a delay on its own clock, in whole
#: milliseconds, so it can end a tick before ``time.monotonic`` says it should.
TIMER_SLACK_S = 0.05


def enforcement(**quota: float | str) -> Enforcement:
    return Enforcement(QuotaSettings(clients=(ClientQuotaSettings(**quota),)))  # type: ignore[arg-type]


async def test_push_over_its_byte_rate_is_accepted_throttled_and_muted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="telemetry.enforcement.throttles")
    clock = ManualClock()
    payload = otlp_payload("org.apache.kafka.producer.bytes", points=40)
    # One push of P bytes on a fresh 11 x 1 s rate measures P / 10 s; at a quota
    # of P / 10.5 that is 5 % over: Kafka's X = (O - T) / T * W = 0.05 * 10 s.
    quota = len(payload) / 10.5
    enforcer = enforcement(client_id="noisy", push_byte_rate=quota)
    async with running_server(tmp_path, clock=clock, enforcement=enforcer) as server:
        client = await server.connect("noisy")
        subscription = await client.subscribe()
        assert subscription.throttle_time_ms == 0
        sent_at = time.monotonic()
        pushed = await client.push(
            subscription.client_instance_id, subscription.subscription_id, payload
        )
        # Pipelined right behind the push's response: read only after the mute.
        versions = await client.api_versions()
        answered_after_s = time.monotonic() - sent_at
        await client.close()
        logged = await server.pushes()
        queue_size = enforcer.clients.push_bytes.metrics.get_sensor("Produce-delayQueue")
        assert queue_size is not None
        assert queue_size.metrics[0].measurable_value(clock.now_ms) == 1
        clock.advance(500)
        enforcer.tick(clock.now_ms)
        assert queue_size.metrics[0].measurable_value(clock.now_ms) == 0

    starts = [r.getMessage() for r in caplog.records if "throttling starts" in r.getMessage()]
    stops = [r.getMessage() for r in caplog.records if "throttling stops" in r.getMessage()]
    assert starts == [
        "throttling starts: user='ANONYMOUS' client_id='noisy' for push_byte_rate (500 ms)"
    ]
    assert stops == ["throttling stops: user='ANONYMOUS' client_id='noisy' for push_byte_rate"]
    assert pushed.error_code == ErrorCode.NONE  # over quota, still accepted (produce semantics)
    assert pushed.throttle_time_ms == 500
    assert [p.payload for p in logged] == [payload]
    assert answered_after_s >= 0.5 - TIMER_SLACK_S
    assert versions.error_code == ErrorCode.NONE
    assert enforcer.tracker.counts[ThrottleReason.PUSH_BYTE_RATE] == 1
    byte_rate = enforcer.metrics.get_sensor("Produce-:noisy")
    assert byte_rate is not None
    # The throttled channel was counted in the delay queue and its throttle recorded.
    throttle_time = enforcer.metrics.get_sensor("ProduceThrottleTime-:noisy")
    assert throttle_time is not None
    assert throttle_time.metrics[0].measurable_value(ManualClock().now_ms) == 500


async def test_a_throttle_holds_every_connection_of_the_entity(tmp_path: Path) -> None:
    """A client on many connections cannot keep sending on the ones the throttle did not mute."""
    clock = ManualClock()
    payload = otlp_payload("org.apache.kafka.producer.bytes", points=40)
    quota = len(payload) / 10.5  # one push is 5 % over: X = 0.05 * 10 s = 500 ms
    enforcer = enforcement(client_id="noisy", push_byte_rate=quota)
    async with running_server(tmp_path, clock=clock, enforcement=enforcer) as server:
        pushing = await server.connect("noisy")
        other = await server.connect("noisy")
        elsewhere = await server.connect("quiet")
        # Each connection names its client first (a connection is known by its requests).
        for client in (other, elsewhere):
            assert (await client.api_versions()).throttle_time_ms == 0
        subscription = await pushing.subscribe()
        sent_at = time.monotonic()
        pushed = await pushing.push(
            subscription.client_instance_id, subscription.subscription_id, payload
        )
        quiet_versions = await elsewhere.api_versions()
        held_versions = await other.api_versions()
        held_after_s = time.monotonic() - sent_at
        for client in (pushing, other, elsewhere):
            await client.close()

    assert pushed.throttle_time_ms == 500
    # The same entity's other connection was held for the throttle, though not throttled itself;
    assert (held_versions.error_code, held_versions.throttle_time_ms) == (ErrorCode.NONE, 0)
    assert held_after_s >= 0.5 - TIMER_SLACK_S
    # another client id was neither throttled nor counted.
    assert (quiet_versions.error_code, quiet_versions.throttle_time_ms) == (ErrorCode.NONE, 0)
    assert enforcer.tracker.counts[ThrottleReason.PUSH_BYTE_RATE] == 1


async def test_an_unnamed_client_is_held_on_its_own_connection_only(tmp_path: Path) -> None:
    """Every connection is (ANONYMOUS, "") before its first request: that entity is never held."""
    async with running_server(tmp_path, clock=ManualClock()) as server:
        apis = server.listener.apis
        apis.mute(ClientEntity("ANONYMOUS", ""), 1000)
        apis.mute(ClientEntity("ANONYMOUS", "noisy"), 1000)
        apis.mute(ClientEntity("alice", ""), 1000)
        held = set(apis.muted)
    assert held == {ClientEntity("ANONYMOUS", "noisy"), ClientEntity("alice", "")}


async def test_other_clients_are_not_throttled_by_a_quota_they_do_not_match(
    tmp_path: Path,
) -> None:
    payload = otlp_payload("org.apache.kafka.producer.bytes", points=40)
    enforcer = enforcement(client_id="noisy", push_byte_rate=1.0)
    async with running_server(tmp_path, clock=ManualClock(), enforcement=enforcer) as server:
        client = await server.connect("quiet")
        subscription = await client.subscribe()
        pushed = await client.push(
            subscription.client_instance_id, subscription.subscription_id, payload
        )
        await client.close()
    assert (pushed.error_code, pushed.throttle_time_ms) == (ErrorCode.NONE, 0)
    assert enforcer.tracker.counts[ThrottleReason.PUSH_BYTE_RATE] == 0


async def test_request_time_quota_throttles_every_api_bounded_to_one_window(
    tmp_path: Path,
) -> None:
    # 1e-9 % of a thread: any real request is far over; KIP-124 bounds the throttle to one window.
    enforcer = enforcement(user="ANONYMOUS", request_percentage=1e-9)
    async with running_server(tmp_path, clock=ManualClock(), enforcement=enforcer) as server:
        client = await server.connect("busy")
        sent_at = time.monotonic()
        correlation, frame = client.frame(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="x", client_software_version="1"),
        )
        await client.write(frame)
        second, again = client.frame(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="x", client_software_version="1"),
        )
        await client.write(again)
        first_id, first = await client.receive(ApiKey.API_VERSIONS, 3, ApiVersionsResponse)
        second_id, later = await client.receive(ApiKey.API_VERSIONS, 3, ApiVersionsResponse)
        answered_after_s = time.monotonic() - sent_at
        await client.close()

    assert (first_id, second_id) == (correlation, second)
    assert first.throttle_time_ms == 1000
    assert later.throttle_time_ms == 1000
    assert (
        answered_after_s >= 1.0 - TIMER_SLACK_S
    )  # the pipelined second request waited out the first mute
    assert enforcer.tracker.counts[ThrottleReason.REQUEST_PERCENTAGE] == 2


async def test_instance_creation_is_strict_on_the_mutation_bucket(tmp_path: Path) -> None:
    # 1 creation/s, 11 windows of 1 s: a full bucket holds 11 tokens, and a
    # request is accepted while the bucket is not in deficit before it (KIP-599).
    clock = ManualClock()
    enforcer = enforcement(client_id="creator", controller_mutation_rate=1.0)
    async with running_server(tmp_path, clock=clock, enforcement=enforcer) as server:
        client = await server.connect("creator")
        accepted = [await client.get_subscriptions(ZERO_ID) for _ in range(12)]
        created = server.manager.stats.instances_created
        refused = await client.get_subscriptions(ZERO_ID)
        assert server.manager.instance_count == created
        assert server.manager.stats.instances_created == created
        # A known instance costs nothing, even in deficit; an unknown id does.
        clock.advance(300)  # past the push interval; refills 0.3 tokens: still in deficit
        known = await client.get_subscriptions(accepted[0].client_instance_id)
        unknown = await client.get_subscriptions(ZERO_ID)
        await client.close()

    assert all(a.error_code == ErrorCode.NONE and a.throttle_time_ms == 0 for a in accepted)
    assert created == 12
    assert refused.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert refused.throttle_time_ms == 1000  # -1 token at 1 token/s
    assert refused.client_instance_id == ZERO_ID  # nothing created, nothing named
    assert known.error_code == ErrorCode.NONE
    assert known.client_instance_id == accepted[0].client_instance_id
    assert unknown.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert unknown.throttle_time_ms == 700
    assert enforcer.tracker.counts[ThrottleReason.CONTROLLER_MUTATION_RATE] == 2


async def test_push_refused_by_the_gate_still_counts_its_bytes(tmp_path: Path) -> None:
    payload = otlp_payload("org.apache.kafka.producer.bytes", points=40)
    enforcer = enforcement(client_id="eager", push_byte_rate=len(payload) / 10.5 * 2)
    async with running_server(tmp_path, clock=ManualClock(), enforcement=enforcer) as server:
        client = await server.connect("eager")
        subscription = await client.subscribe()
        ids = (subscription.client_instance_id, subscription.subscription_id)
        first = await client.push(*ids, payload)
        early = await client.push(*ids, payload)  # inside the push interval: 89
        await client.close()

    assert (first.error_code, first.throttle_time_ms) == (ErrorCode.NONE, 0)
    assert early.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    # 2P over 10 s against a quota of 2P / 10.5: 5 % over, 500 ms.
    assert early.throttle_time_ms == 500
    assert isinstance(early, PushTelemetryResponse)


async def test_a_push_with_a_made_up_instance_id_draws_from_the_mutation_bucket(
    tmp_path: Path,
) -> None:
    """A push with an unknown id would create an instance, so it is charged like a GET."""
    clock = ManualClock()
    enforcer = enforcement(client_id="inventor", controller_mutation_rate=1.0)
    payload = otlp_payload("org.apache.kafka.producer.made.up", points=2)
    async with running_server(tmp_path, clock=clock, enforcement=enforcer) as server:
        client = await server.connect("inventor")
        for _ in range(12):  # drain the bucket (11 tokens) into deficit
            await client.get_subscriptions(ZERO_ID)
        created = server.manager.stats.instances_created
        refused = await client.push(uuid.uuid4(), 1234, payload)
        after = server.manager.stats.instances_created
        await client.close()

    assert created == 12
    assert refused.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert refused.throttle_time_ms == 1000
    assert after == created  # nothing was created for the made-up id
    assert server.log.log_end == 0  # and nothing was logged
