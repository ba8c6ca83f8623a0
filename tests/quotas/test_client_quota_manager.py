"""Ported from Kafka's ClientQuotaManagerTest, plus the fixed bugs KAFKA-9658 and KAFKA-19282."""

from __future__ import annotations

import sys

import pytest

from quotas import (
    DEFAULT,
    ClientQuotaManager,
    MetricName,
    Quota,
    QuotaType,
    QuotaTypes,
)
from tests.quotas.conftest import T0

SAMPLES = 11
WINDOW_S = 1
UNLIMITED = float(2**63 - 1)


def check_quota(
    manager: ClientQuotaManager,
    user: str,
    client_id: str,
    expected_bound: float,
    value: float,
    expect_throttle: bool,
    now_ms: int = T0,
) -> None:
    """Kafka's ``checkQuota``: bound, max value in the window, and a record of value × samples."""
    assert manager.quota(user, client_id).bound == expected_bound
    expected_max = (
        WINDOW_S * (SAMPLES - 1) * expected_bound
        if expected_bound < UNLIMITED
        else sys.float_info.max
    )
    assert manager.max_value_in_quota_window(user, client_id) == pytest.approx(expected_max)
    throttle = manager.maybe_record_and_get_throttle_time_ms(
        user, client_id, value * SAMPLES, now_ms
    )
    if expect_throttle:
        assert throttle > 0
    else:
        assert throttle == 0


def test_quota_config_precedence() -> None:
    manager = ClientQuotaManager()
    manager.update_quota(DEFAULT, None, Quota(1000))
    manager.update_quota(None, DEFAULT, Quota(2000))
    manager.update_quota(DEFAULT, DEFAULT, Quota(3000))
    manager.update_quota("userA", None, Quota(4000))
    manager.update_quota("userA", "client1", Quota(5000))
    manager.update_quota("userB", None, Quota(6000))
    manager.update_quota("userB", "client1", Quota(7000))
    manager.update_quota("userB", DEFAULT, Quota(8000))
    manager.update_quota("userC", None, Quota(10000))
    manager.update_quota(None, "client1", Quota(9000))

    check_quota(manager, "userA", "client1", 5000, 4500, False)  # <user, client> over <user>
    check_quota(manager, "userA", "client2", 4000, 4500, True)  # <user> over <client> and defaults
    check_quota(manager, "userA", "client3", 4000, 0, True)  # <user> shared across its clients
    check_quota(manager, "userA", "client1", 5000, 0, False)  # <user, client> is exclusive

    check_quota(manager, "userB", "client1", 7000, 8000, True)
    check_quota(manager, "userB", "client2", 8000, 7000, False)  # default per-client of a user
    check_quota(manager, "userB", "client3", 8000, 7000, False)

    check_quota(manager, "userD", "client1", 3000, 3500, True)  # default <user, client>
    check_quota(manager, "userD", "client2", 3000, 2500, False)
    check_quota(manager, "userE", "client1", 3000, 2500, False)

    # Remove the default <user, client> quota: back to the <user> default.
    manager.update_quota(DEFAULT, DEFAULT, None)
    check_quota(manager, "userD", "client1", 1000, 0, False)  # tags changed: a new sensor
    check_quota(manager, "userE", "client4", 1000, 1500, True)
    check_quota(manager, "userF", "client4", 1000, 800, False)  # <user> default shared
    check_quota(manager, "userF", "client5", 1000, 800, True)

    # Remove the default <user> quota: back to the <client-id> default.
    manager.update_quota(DEFAULT, None, None)
    check_quota(manager, "userF", "client4", 2000, 0, False)  # shared across users
    check_quota(manager, "userF", "client5", 2000, 0, False)
    check_quota(manager, "userF", "client5", 2000, 2500, True)
    check_quota(manager, "userG", "client5", 2000, 0, True)

    # Updates change the bound and keep the usage.
    manager.update_quota("userA", None, Quota(8000))
    manager.update_quota("userA", "client1", Quota(10000))
    check_quota(manager, "userA", "client2", 8000, 0, False)
    check_quota(manager, "userA", "client2", 8000, 4500, True)  # sum of new and earlier values
    check_quota(manager, "userA", "client1", 10000, 0, False)
    check_quota(manager, "userA", "client1", 10000, 6000, True)
    manager.update_quota("userA", "client1", None)
    check_quota(manager, "userA", "client6", 8000, 0, True)  # shared user quota
    manager.update_quota("userA", "client6", Quota(11000))
    check_quota(manager, "userA", "client6", 11000, 8500, False)
    manager.update_quota("userA", DEFAULT, Quota(12000))
    manager.update_quota("userA", "client6", None)
    check_quota(manager, "userA", "client6", 12000, 4000, True)


@pytest.mark.parametrize(
    ("config_user", "config_client", "user1", "client1", "default_user", "default_client"),
    [
        (None, "p1", "User1", "p1", None, DEFAULT),  # client-id quotas
        ("User1", None, "User1", "p1", DEFAULT, None),  # user quotas
        ("User1", "p1", "User1", "p1", DEFAULT, DEFAULT),  # <user, client-id> quotas
    ],
)
def test_quota_parsing(
    config_user: str | None,
    config_client: str | None,
    user1: str,
    client1: str,
    default_user: str | None,
    default_client: str | None,
) -> None:
    manager = ClientQuotaManager()
    manager.update_quota(config_user, config_client, Quota(2000))
    assert manager.quota("RandomUser", "random-client-id").bound == UNLIMITED
    assert manager.quota(user1, client1).bound == 2000

    def record(value: float) -> int:
        return manager.maybe_record_and_get_throttle_time_ms(user1, client1, value, T0)

    assert record(2500 * SAMPLES) > 0
    manager.update_quota(config_user, config_client, Quota(3000))
    assert manager.quota(user1, client1).bound == 3000
    assert record(0) == 0
    manager.update_quota(config_user, config_client, Quota(500))
    assert record(0) > 0
    manager.update_quota(config_user, config_client, None)
    manager.update_quota(default_user, default_client, Quota(4000))
    assert manager.quota(user1, client1).bound == 4000
    assert record(1000 * SAMPLES) == 0


def test_quota_violation_spike_throttles_2100_ms_and_rolls_over() -> None:
    manager = ClientQuotaManager()
    queue_size = manager.metrics.metric(MetricName("queue-size", "Produce"))
    assert queue_size is not None
    manager.update_quota(None, DEFAULT, Quota(500))
    now = T0
    for _ in range(10):
        assert manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, now) == 0
        now += 1000
    assert queue_size.measurable_value(now) == 0
    # 400 × 10 + 2300 = 6300 over 10.5 s = 600/s: (600 − 500) / 500 × 10.5 s = 2100 ms.
    now += 500
    throttle = manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 2300, now)
    assert throttle == 2100
    manager.throttle("ANONYMOUS", "unknown", throttle, now)
    assert queue_size.measurable_value(now) == 1
    throttle_sensor = manager.metrics.get_sensor("ProduceThrottleTime-:unknown")
    assert throttle_sensor is not None
    assert throttle_sensor.metrics[0].measurable_value(now) == 2100
    now += throttle
    manager.throttled_channel_released(now)
    assert queue_size.measurable_value(now) == 0
    for _ in range(10):
        manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, now)
        now += 1000
    assert manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 0, now) == 0


def test_throttle_time_is_capped_to_int_range() -> None:
    manager = ClientQuotaManager()
    manager.update_quota(None, DEFAULT, Quota(1))
    assert manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 1e9, T0) == (
        2**31 - 1
    )


def test_expired_or_removed_sensors_are_recreated() -> None:
    manager = ClientQuotaManager()
    manager.update_quota(None, DEFAULT, Quota(500))
    manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 100, T0)
    manager.metrics.remove_sensor("ProduceThrottleTime-:client1")
    manager.metrics.remove_sensor("Produce-:client1")
    assert manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 10000, T0) > 0
    assert manager.metrics.get_sensor("ProduceThrottleTime-:client1") is not None
    assert manager.metrics.get_sensor("Produce-:client1") is not None


def test_idle_sensors_expire_after_an_hour() -> None:
    manager = ClientQuotaManager()
    manager.update_quota(None, DEFAULT, Quota(500))
    manager.maybe_record_and_get_throttle_time_ms("u", "idle", 100, T0)
    manager.maybe_record_and_get_throttle_time_ms("u", "busy", 100, T0 + 3_000_000)
    expired = manager.expire_sensors(T0 + 3_600_001)
    assert sorted(expired) == ["Produce-:idle", "ProduceThrottleTime-:idle"]
    assert manager.metrics.get_sensor("Produce-:busy") is not None
    # The next record creates a fresh sensor: the old usage is gone with it.
    throttle = manager.maybe_record_and_get_throttle_time_ms("u", "idle", 100, T0 + 3_600_002)
    assert throttle == 0


def test_client_id_is_not_sanitized_but_the_user_is() -> None:
    manager = ClientQuotaManager()
    manager.update_quota(None, DEFAULT, Quota(500))
    manager.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client@#$%", 100, T0)
    assert manager.metrics.get_sensor("ProduceThrottleTime-:client@#$%") is not None
    assert manager.metrics.get_sensor("Produce-:client@#$%") is not None

    manager.update_quota("CN=alice smith*~", None, Quota(500))
    assert manager.quota("CN=alice smith*~", "any").bound == 500
    manager.maybe_record_and_get_throttle_time_ms("CN=alice smith*~", "c", 100, T0)
    assert manager.metrics.get_sensor("Produce-CN%3Dalice%20smith%2A%7E:") is not None
    metric = manager.metrics.metric(
        MetricName(
            "byte-rate", "Produce", (("user", "CN%3Dalice%20smith%2A%7E"), ("client-id", ""))
        )
    )
    assert metric is not None


def test_quota_types_enabled_grows_and_shrinks() -> None:
    """KAFKA-19282: the bitmask follows the active entities, in both directions."""
    manager = ClientQuotaManager(quota_type=QuotaType.CONTROLLER_MUTATION)
    client, user, user_client = (
        QuotaTypes.CLIENT_ID_QUOTA_ENABLED,
        QuotaTypes.USER_QUOTA_ENABLED,
        QuotaTypes.USER_CLIENT_ID_QUOTA_ENABLED,
    )
    steps: list[tuple[str | None, str | None, float | None, int]] = [
        (None, "client1", 5, client),
        ("userA", None, 5, user | client),
        (None, "client2", 5, user | client),
        ("userB", None, 5, user | client),
        ("userA", "client1", 10, user_client | client | user),
        ("userA", "client1", 12, user_client | client | user),
        ("userA", None, None, user_client | client | user),
        ("userB", None, None, user_client | client),
        (None, "client1", None, user_client | client),
        (None, "client2", None, user_client),
        ("userA", "client1", None, QuotaTypes.NO_QUOTAS),
        ("userA", "client1", None, QuotaTypes.NO_QUOTAS),
    ]
    assert manager.quota_types_enabled == QuotaTypes.NO_QUOTAS
    assert not manager.quotas_enabled
    for user_name, client_id, bound, expected in steps:
        manager.update_quota(user_name, client_id, None if bound is None else Quota(bound))
        assert manager.quota_types_enabled == expected
        assert manager.quotas_enabled == (expected != 0)


def test_removing_the_only_quota_really_unthrottles() -> None:
    """KAFKA-9658: the removed limit must reach the existing sensor's metric."""
    manager = ClientQuotaManager()
    manager.update_quota("userA", "client1", Quota(10))
    assert manager.record_and_get_throttle_time_ms("userA", "client1", 1000, T0) > 0
    manager.update_quota("userA", "client1", None)
    # Record regardless of the disabled bitmask: the same sensor must now be unlimited.
    assert manager.record_and_get_throttle_time_ms("userA", "client1", 1000, T0) == 0
    metric = manager.metrics.metric(
        MetricName("byte-rate", "Produce", (("user", ""), ("client-id", "client1")))
    )
    assert metric is not None and metric.config.quota == Quota.upper_bound(UNLIMITED)


def test_changing_a_limit_never_resets_usage() -> None:
    manager = ClientQuotaManager()
    manager.update_quota(None, "c", Quota(1000))
    assert manager.record_and_get_throttle_time_ms(None, "c", 9000, T0) == 0  # 900/s
    manager.update_quota(None, "c", Quota(2000))
    manager.update_quota(None, "c", Quota(800))
    # The 9000 recorded before the updates still counts: 9000 + 100 = 910/s > 800.
    assert manager.record_and_get_throttle_time_ms(None, "c", 100, T0) == 1375


def test_no_quota_records_nothing_with_maybe_record() -> None:
    manager = ClientQuotaManager()
    assert manager.maybe_record_and_get_throttle_time_ms("u", "c", 1e12, T0) == 0
    assert manager.metrics.get_sensor("Produce-:c") is None
    assert manager.max_value_in_quota_window("u", "c") == sys.float_info.max
    assert manager.quota("u", "c") == Quota.upper_bound(UNLIMITED)


def test_max_value_in_quota_window_with_a_non_default_window() -> None:
    manager = ClientQuotaManager(samples=4, quota_type=QuotaType.FETCH)
    assert manager.max_value_in_quota_window("userA", "client1") == sys.float_info.max
    manager.update_quota(DEFAULT, None, Quota(10))
    assert manager.max_value_in_quota_window("userA", "client1") == 30


def test_unrecord_takes_the_value_back() -> None:
    manager = ClientQuotaManager(quota_type=QuotaType.FETCH)
    manager.update_quota(None, "c", Quota(100))
    assert manager.record_and_get_throttle_time_ms(None, "c", 2000, T0) > 0
    manager.unrecord(None, "c", 2000, T0)
    assert manager.record_and_get_throttle_time_ms(None, "c", 1000, T0) == 0


# The 8-step resolution order, with every level configured except those named.
LEVELS: list[tuple[str | None, str | None]] = [
    ("alice", "app"),  # 1
    ("alice", DEFAULT),  # 2
    ("alice", None),  # 3
    (DEFAULT, "app"),  # 4
    (DEFAULT, DEFAULT),  # 5
    (DEFAULT, None),  # 6
    (None, "app"),  # 7
    (None, DEFAULT),  # 8
]
EXPECTED_TAGS = [
    ("alice", "app"),
    ("alice", "app"),
    ("alice", ""),
    ("alice", "app"),
    ("alice", "app"),
    ("alice", ""),
    ("", "app"),
    ("", "app"),
]


@pytest.mark.parametrize("most_specific", range(8))
def test_resolution_walks_kafkas_eight_steps(most_specific: int) -> None:
    manager = ClientQuotaManager()
    for index in range(most_specific, 8):
        user, client = LEVELS[index]
        manager.update_quota(user, client, Quota(1000.0 * (index + 1)))
    assert manager.quota("alice", "app").bound == 1000.0 * (most_specific + 1)
    sensors = manager.get_or_create_quota_sensors("alice", "app", T0)
    assert sensors.metric_tags == EXPECTED_TAGS[most_specific]
    user_tag, client_tag = EXPECTED_TAGS[most_specific]
    assert sensors.quota_sensor.name == f"Produce-{user_tag}:{client_tag}"
    assert sensors.throttle_time_sensor.name == f"ProduceThrottleTime-{user_tag}:{client_tag}"


def test_tags_decide_who_shares_a_sensor() -> None:
    manager = ClientQuotaManager()
    manager.update_quota("alice", None, Quota(100))
    manager.update_quota(None, "shared", Quota(100))
    manager.update_quota("bob", "own", Quota(100))
    alice_a = manager.get_or_create_quota_sensors("alice", "a", T0)
    alice_b = manager.get_or_create_quota_sensors("alice", "b", T0)
    carol = manager.get_or_create_quota_sensors("carol", "shared", T0)
    dave = manager.get_or_create_quota_sensors("dave", "shared", T0)
    bob = manager.get_or_create_quota_sensors("bob", "own", T0)
    assert alice_a.quota_sensor is alice_b.quota_sensor  # (alice, "")
    assert carol.quota_sensor is dave.quota_sensor  # ("", shared)
    assert bob.metric_tags == ("bob", "own")
    assert bob.quota_sensor is not carol.quota_sensor


def test_quota_entity_needs_a_user_or_a_client() -> None:
    with pytest.raises(ValueError, match="needs a user"):
        ClientQuotaManager().update_quota(None, None, Quota(1))


def test_window_config_is_validated() -> None:
    with pytest.raises(ValueError, match=r"quota\.window\.num"):
        ClientQuotaManager(samples=0)
