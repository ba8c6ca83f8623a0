from __future__ import annotations

import threading

import pytest

from quotas import (
    Avg,
    MetricConfig,
    MetricName,
    Metrics,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
    TokenBucket,
    WindowedCount,
    WindowedSum,
)
from tests.quotas.conftest import T0

LIMITED = MetricConfig(samples=2, time_window_ms=1000, quota=Quota.upper_bound(10.0))


def _value(sensor: Sensor, name: str, now_ms: int) -> float:
    for metric in sensor.metrics:
        if metric.metric_name.name == name:
            return metric.measurable_value(now_ms)
    raise AssertionError(name)


def test_record_feeds_every_stat_and_the_parents() -> None:
    parent = Sensor("parent")
    parent.add("parent.count", WindowedCount())
    child = Sensor("child", parents=[parent])
    child.add("child.sum", WindowedSum())
    child.add("child.avg", Avg())
    child.record(4.0, T0)
    child.record(6.0, T0)
    assert _value(child, "child.sum", T0) == 10.0
    assert _value(child, "child.avg", T0) == 5.0
    assert _value(parent, "parent.count", T0) == 2.0


def test_a_violation_keeps_the_value_in_the_child_but_not_in_the_parents() -> None:
    parent = Sensor("parent")
    parent.add("parent.sum", WindowedSum())
    child = Sensor("child", parents=[parent])
    child.add("child.rate", Rate(), LIMITED)
    child.record(5.0, T0)  # 5 / 1 s padded window = 5/s
    with pytest.raises(QuotaViolationError) as caught:
        child.record(10.0, T0)
    assert caught.value.value == 15.0
    assert caught.value.bound == 10.0
    assert isinstance(caught.value.stat, Rate)
    assert caught.value.metric_name == MetricName("child.rate")
    assert _value(child, "child.rate", T0) == 15.0  # recorded anyway: permissive
    assert _value(parent, "parent.sum", T0) == 5.0  # the parent missed the violating value


def test_strict_record_checks_first_and_records_nothing_when_exhausted() -> None:
    sensor = Sensor("strict")
    sensor.add("rate", Rate(), LIMITED)
    sensor.strict_record(11.0, T0)  # checked before: 0 ≤ 10, then recorded
    with pytest.raises(QuotaViolationError):
        sensor.strict_record(1.0, T0)
    assert _value(sensor, "rate", T0) == 11.0


def test_record_without_quota_check_never_raises() -> None:
    sensor = Sensor("s")
    sensor.add("rate", Rate(), LIMITED)
    sensor.record(1000.0, T0, check_quotas=False)
    with pytest.raises(QuotaViolationError):
        sensor.check_quotas(T0)


def test_token_bucket_is_in_quota_down_to_exactly_zero_tokens() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000, quota=Quota.upper_bound(5.0))  # burst 10
    sensor = Sensor("bucket")
    sensor.add("tokens", TokenBucket(), config)
    sensor.record(10.0, T0)  # tokens 0: not a violation, although 0 < bound
    with pytest.raises(QuotaViolationError) as caught:
        sensor.record(0.5, T0)
    assert caught.value.value == -0.5


def test_other_stats_use_the_quota_direction() -> None:
    sensor = Sensor("lower")
    sensor.add("avg", Avg(), MetricConfig(quota=Quota.lower_bound(3.0)))
    sensor.record(3.0, T0)
    with pytest.raises(QuotaViolationError):
        sensor.record(1.0, T0)


def test_stat_config_falls_back_to_the_sensors_then_to_the_default() -> None:
    sensor_config = MetricConfig(samples=5, time_window_ms=100)
    with_config = Sensor("a", config=sensor_config)
    own = MetricConfig(samples=7)
    assert with_config.add("own", WindowedSum(), own).config is own
    assert with_config.add("inherited", WindowedSum()).config is sensor_config
    assert Sensor("b").add("default", WindowedSum()).config == MetricConfig()


def test_adding_a_name_twice_returns_the_first_metric() -> None:
    sensor = Sensor("s")
    first = sensor.add("m", WindowedSum())
    assert sensor.add("m", Avg()) is first
    assert len(sensor.metrics) == 1


def test_expiry_after_inactivity_is_strictly_greater() -> None:
    sensor = Sensor("idle", inactive_expiration_ms=1000, created_ms=T0)
    assert not sensor.has_expired(T0 + 1000)
    assert sensor.has_expired(T0 + 1001)
    sensor.record(1.0, T0 + 500)
    assert not sensor.has_expired(T0 + 1500)
    assert sensor.has_expired(T0 + 1501)
    assert not Sensor("forever", created_ms=T0).has_expired(T0 + 10**12)


def test_registry_creates_finds_and_expires_sensors_with_their_metrics_and_children() -> None:
    metrics = Metrics()
    parent = metrics.sensor("parent", T0, inactive_expiration_ms=1000)
    parent.add(MetricName("p", "g"), WindowedSum())
    child = metrics.sensor("child", T0, parents=[parent])
    child.add(MetricName("c", "g"), WindowedSum())
    keeper = metrics.sensor("keeper", T0)
    assert metrics.sensor("parent", T0 + 5) is parent
    assert metrics.get_sensor("child") is child
    assert metrics.metric(MetricName("c", "g")) is not None
    assert metrics.expire_sensors(T0 + 1000) == []
    assert metrics.expire_sensors(T0 + 1001) == ["parent"]
    assert metrics.get_sensor("parent") is None
    assert metrics.get_sensor("child") is None  # removed with its parent
    assert metrics.metric(MetricName("c", "g")) is None
    assert metrics.get_sensor("keeper") is keeper
    assert metrics.removals == 2


def test_registry_default_config_is_used_by_sensors_without_one() -> None:
    default = MetricConfig(samples=3, time_window_ms=10)
    metrics = Metrics(default)
    assert metrics.sensor("s", T0).add("m", WindowedSum()).config is default


def test_registry_refuses_two_metrics_with_one_name() -> None:
    metrics = Metrics()
    metrics.sensor("a", T0).add(MetricName("same", "g"), WindowedSum())
    with pytest.raises(ValueError, match="already exists"):
        metrics.sensor("b", T0).add(MetricName("same", "g"), WindowedSum())


def test_concurrent_records_from_threads_lose_nothing() -> None:
    metrics = Metrics()
    sensor = metrics.sensor("shared", T0)
    sensor.add("count", WindowedCount(), MetricConfig(samples=2, time_window_ms=60_000))
    per_thread = 5_000

    def work() -> None:
        for _ in range(per_thread):
            sensor.record(1.0, T0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert _value(sensor, "count", T0) == 4 * per_thread
