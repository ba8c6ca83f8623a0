from __future__ import annotations

import pytest

from quotas import MetricName, Quota, RequestQuotaManager, nanos_to_percentage
from tests.quotas.conftest import T0


def test_nanos_are_stored_as_a_percentage_of_one_second() -> None:
    assert nanos_to_percentage(1e9) == 100.0
    assert nanos_to_percentage(5e6) == pytest.approx(0.5)


def test_request_time_is_throttled_at_most_one_window() -> None:
    manager = RequestQuotaManager()
    manager.update_quota(None, "busy", Quota(1.0))  # 1 % of one request thread
    # 0.05 s of thread time = 5 % over the padded 10 s window = 0.5 %/s: within quota.
    assert manager.record_and_get_throttle_time_ms(None, "busy", 5e7, T0) == 0
    # 1 s more: 105 % / 10 s = 10.5 %/s; unbounded (10.5 − 1) / 1 × 10 s = 95 s, bounded to 1 s.
    assert manager.record_and_get_throttle_time_ms(None, "busy", 1e9, T0) == 1000
    metric = manager.metrics.metric(
        MetricName("request-time", "Request", (("user", ""), ("client-id", "busy")))
    )
    assert metric is not None
    assert metric.measurable_value(T0) == pytest.approx(10.5)
    assert manager.metrics.get_sensor("Request-:busy") is not None


def test_a_small_overshoot_is_throttled_by_the_formula() -> None:
    manager = RequestQuotaManager()
    manager.update_quota("u", None, Quota(10.0))
    # 1.05 s = 105 % over 10 s = 10.5 %/s: (10.5 − 10) / 10 × 10 000 ms = 500 ms (< one window).
    assert manager.record_and_get_throttle_time_ms("u", "c", 1.05e9, T0) == 500


def test_exempt_time_is_measured_and_never_throttled_or_expired() -> None:
    manager = RequestQuotaManager()
    manager.update_quota(None, "c", Quota(1.0))
    for _ in range(100):
        manager.record_exempt(1e9, T0)
    metric = manager.metrics.metric(MetricName("exempt-request-time", "Request"))
    assert metric is not None
    # Kafka gives the exempt sensor the registry default config (2 × 30 s): 10 000 % / 30 s.
    assert metric.measurable_value(T0) == pytest.approx(10_000 / 30)
    assert manager.exempt_sensor.name == "exempt-Request"
    assert "exempt-Request" not in manager.expire_sensors(T0 + 10**10)
    # The exempt time counts against no client's quota.
    assert manager.record_and_get_throttle_time_ms(None, "c", 0, T0) == 0
