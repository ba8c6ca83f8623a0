"""Quota sensors resolved once per connection charge exactly as resolving them per request."""

from __future__ import annotations

from telemetry.enforcement.client_quotas import ClientQuotas, EntitySensors
from telemetry.enforcement.entity import ClientEntity
from telemetry.enforcement.settings import ClientQuotaSettings, QuotaSettings

ALICE = ClientEntity("alice", "producer-1")
BOB = ClientEntity("bob", "producer-2")


def _settings(push_byte_rate: float, request_percentage: float) -> QuotaSettings:
    return QuotaSettings(
        clients=(
            ClientQuotaSettings(
                client_id="<default>",
                push_byte_rate=push_byte_rate,
                request_percentage=request_percentage,
            ),
        )
    )


def _charge_both(
    held: ClientQuotas, plain: ClientQuotas, sensors: EntitySensors | None, now_ms: int
) -> tuple[EntitySensors, int]:
    entity = ALICE if now_ms % 3 else BOB
    sensors = held.sensors(entity, sensors, now_ms)  # another entity: resolved anew
    with_held = held.finish_request(entity, 400_000, now_ms, push_bytes=3_000, sensors=sensors)
    resolved = plain.finish_request(entity, 400_000, now_ms, push_bytes=3_000)
    assert with_held == resolved
    return sensors, with_held.time_ms


def test_held_sensors_throttle_as_per_request_resolution() -> None:
    held, plain = ClientQuotas(_settings(20_000, 5)), ClientQuotas(_settings(20_000, 5))
    sensors: EntitySensors | None = None
    throttled = 0
    for step in range(400):
        sensors, throttle_ms = _charge_both(held, plain, sensors, 1_000_000 + step * 7)
        throttled += throttle_ms > 0
    assert throttled > 0  # the quota was reached, so both paths throttled alike


def test_a_quota_change_is_seen_through_held_sensors() -> None:
    held, plain = ClientQuotas(_settings(1e12, 1e9)), ClientQuotas(_settings(1e12, 1e9))
    now_ms = 5_000_000
    sensors = held.sensors(ALICE, None, now_ms)
    assert held.sensors(ALICE, sensors, now_ms) is sensors
    for quotas in (held, plain):
        quotas.apply(_settings(1_000, 1))
    renewed = held.sensors(ALICE, sensors, now_ms)
    assert renewed is not sensors
    throttles = []
    for step in range(50):
        renewed, throttle_ms = _charge_both(held, plain, renewed, now_ms + step)
        throttles.append(throttle_ms)
    assert max(throttles) > 0


def test_no_quota_configured_records_nothing() -> None:
    quotas = ClientQuotas(QuotaSettings())
    sensors = quotas.sensors(ALICE, None, 0)
    assert sensors.push is None and sensors.request is None
    assert quotas.finish_request(ALICE, 10**12, 0, push_bytes=10**9, sensors=sensors).time_ms == 0
    assert quotas.sensors(BOB, sensors, 0).entity == BOB
