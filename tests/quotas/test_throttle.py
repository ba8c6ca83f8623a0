from __future__ import annotations

import math

import pytest

from quotas import (
    Avg,
    MetricConfig,
    Quota,
    QuotaViolationError,
    Rate,
    TokenBucket,
    bounded_throttle_time_ms,
    java_round,
    throttle_time_ms,
    token_bucket_throttle_time_ms,
)
from tests.quotas.conftest import T0


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (0.5, 1),
        (1.5, 2),
        (2.5, 3),  # Python's round() says 2
        (-0.5, 0),
        (-1.5, -1),
        (-2.5, -2),
        (0.49999999999999994, 0),  # floor(x + 0.5) would say 1
        (2.4, 2),
        (-2.6, -3),
        (math.nan, 0),
        (math.inf, 2**63 - 1),
        (-math.inf, -(2**63)),
        (1e300, 2**63 - 1),
    ],
)
def test_java_round_is_half_up(x: float, expected: int) -> None:
    assert java_round(x) == expected


def _rate_window_10ms() -> tuple[Rate, MetricConfig]:
    config = MetricConfig(samples=1, time_window_ms=1000)
    rate = Rate()
    rate.record(config, 1.0, T0)
    assert rate.window_size(config, T0 + 10) == 10
    return rate, config


def test_throttle_is_observed_minus_target_over_target_times_window() -> None:
    rate, config = _rate_window_10ms()
    violation = QuotaViolationError("m", 1250.0, 1000.0, rate, config)
    # (1250 − 1000) / 1000 × 10 = 2.5 -> 3 (half up, never banker's 2)
    assert throttle_time_ms(violation, T0 + 10) == 3
    assert bounded_throttle_time_ms(violation, 2, T0 + 10) == 2
    assert throttle_time_ms(QuotaViolationError("m", 1000.0, 1000.0, rate, config), T0 + 10) == 0
    assert throttle_time_ms(QuotaViolationError("m", 500.0, 1000.0, rate, config), T0 + 10) == -5


def test_throttle_without_a_config_uses_the_rates_last_config() -> None:
    rate, _ = _rate_window_10ms()
    assert throttle_time_ms(QuotaViolationError("m", 1250.0, 1000.0, rate), T0 + 10) == 3


def test_throttle_is_capped_to_int32() -> None:
    rate, config = _rate_window_10ms()
    assert throttle_time_ms(QuotaViolationError("m", 1e30, 1.0, rate, config), T0) == 2**31 - 1
    # A zero bound divides as Java's doubles do: +∞, capped.
    assert throttle_time_ms(QuotaViolationError("m", 5.0, 0.0, rate, config), T0) == 2**31 - 1


def test_throttle_of_a_stat_that_is_not_a_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a Rate metric"):
        throttle_time_ms(QuotaViolationError("m", 2.0, 1.0, Avg()), T0)
    with pytest.raises(ValueError, match="is not a TokenBucket metric"):
        token_bucket_throttle_time_ms(QuotaViolationError("m", -2.0, 1.0, Rate()))


def test_token_bucket_throttle_is_the_time_to_refill_the_deficit() -> None:
    # KIP-599: -(-60) / 5 = 12 s.
    violation = QuotaViolationError("tokens", -60.0, 5.0, TokenBucket())
    assert token_bucket_throttle_time_ms(violation) == 12_000
    assert token_bucket_throttle_time_ms(QuotaViolationError("t", -1e12, 1e-3, TokenBucket())) == (
        2**31 - 1
    )


def test_kip599_sampled_rate_throttles_13_s_and_stays_over_quota_for_100_s() -> None:
    """The reason KIP-599 added the token bucket, reproduced on the sampled rate."""
    config = MetricConfig(samples=100, time_window_ms=1000, quota=Quota.upper_bound(5.0))
    rate = Rate()
    rate.record(config, 560.0, T0)
    value = rate.measure(config, T0)
    assert value == pytest.approx(560 / 99)  # window padded to 99 full windows
    violation = QuotaViolationError("rate", value, 5.0, rate, config)
    assert throttle_time_ms(violation, T0) == 13_000
    # Waiting the throttle does not help: the one big sample pins the average.
    assert rate.measure(config, T0 + 13_000) > 5.0
    assert rate.measure(config, T0 + 99_999) > 5.0
    assert rate.measure(config, T0 + 100_000) == 0.0
