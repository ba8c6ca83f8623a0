from __future__ import annotations

from typing import Any

import pytest

from quotas import InvalidQuotaConfigError, MetricConfig, Quota, TimeUnit


def test_quota_equality_is_by_bound_and_direction() -> None:
    # MetricsTest.testQuotasEquality
    assert Quota.upper_bound(10.5) != Quota.lower_bound(10.5)
    assert Quota.lower_bound(10.5) == Quota.lower_bound(10.5)
    assert Quota(10.5) == Quota.upper_bound(10.5)
    assert hash(Quota.upper_bound(3.0)) == hash(Quota(3.0, True))


def test_quota_bound_itself_is_acceptable() -> None:
    upper = Quota.upper_bound(100.0)
    assert upper.acceptable(100.0)
    assert upper.acceptable(99.9)
    assert not upper.acceptable(100.0001)
    lower = Quota.lower_bound(100.0)
    assert lower.acceptable(100.0)
    assert lower.acceptable(100.1)
    assert not lower.acceptable(99.99)


def test_metric_config_defaults_are_kafkas() -> None:
    config = MetricConfig()
    assert config.samples == 2
    assert config.time_window_ms == 30_000
    assert config.quota is None
    assert config.event_window == 2**63 - 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"samples": 0}, "The number of samples must be at least 1."),
        ({"time_window_ms": 0}, "time window"),
        ({"event_window": 0}, "event window"),
    ],
)
def test_metric_config_refuses_what_kafka_refuses(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidQuotaConfigError, match=message):
        MetricConfig(**kwargs)
    with pytest.raises(ValueError, match=message):
        MetricConfig(**kwargs)


def test_time_unit_conversion() -> None:
    assert TimeUnit.SECONDS.convert_ms(1500) == 1.5
    assert TimeUnit.MILLISECONDS.convert_ms(1500) == 1500
    assert TimeUnit.MINUTES.convert_ms(90_000) == 1.5
