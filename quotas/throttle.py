"""Throttle-time math: how long a violating client must wait.

For a sampled ``Rate`` (Kafka's ``QuotaUtils.throttleTime``): with observed
rate O over window W and quota T, waiting X ms brings the rate to the quota
when O·W / (W + X) = T, so X = (O − T) / T · W. For a ``TokenBucket``
(KIP-599) the wait is the time to refill the deficit at the quota rate:
X = −tokens / T · 1000.

Java rounds with ``Math.round`` (half up, toward +∞), never Python's
banker's rounding, and the result is capped to an int32 as a throttle time
travels in an int32 field (Kafka's ``testThrottleTimeCappedToIntRange``).
"""

from __future__ import annotations

import math

from quotas.config import MetricConfig
from quotas.stats import QuotaViolationError, Rate
from quotas.token_bucket import TokenBucket

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)


def java_round(x: float) -> int:
    """``Math.round(double)``: floor(x + 0.5) without its float error; NaN → 0, saturating."""
    if math.isnan(x):
        return 0
    if x >= _LONG_MAX:
        return _LONG_MAX
    if x <= _LONG_MIN:
        return _LONG_MIN
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


def _java_divide(numerator: float, denominator: float) -> float:
    """IEEE division as Java does it: x/0 is ±∞ (or NaN for 0/0) instead of an exception."""
    if denominator == 0.0:
        if numerator == 0.0 or math.isnan(numerator):
            return math.nan
        return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)
    return numerator / denominator


def _cap_int32(x: int) -> int:
    return INT32_MAX if x > INT32_MAX else (INT32_MIN if x < INT32_MIN else x)


def _violation_config(violation: QuotaViolationError, rate: Rate) -> MetricConfig:
    return violation.config or rate.last_config or MetricConfig()


def throttle_time_ms(violation: QuotaViolationError, now_ms: int) -> int:
    """(O − T) / T · W over the violating ``Rate``'s window; 0 or negative when within quota."""
    stat = violation.stat
    if not isinstance(stat, Rate):
        raise ValueError(
            f"Metric {violation.metric_name} is not a Rate metric, value {violation.value}"
        )
    window_ms = stat.window_size(_violation_config(violation, stat), now_ms)
    difference = violation.value - violation.bound
    return _cap_int32(java_round(_java_divide(difference, violation.bound) * window_ms))


def bounded_throttle_time_ms(violation: QuotaViolationError, max_ms: int, now_ms: int) -> int:
    """``throttle_time_ms`` capped at ``max_ms`` (request and connection quotas: one window)."""
    return min(throttle_time_ms(violation, now_ms), max_ms)


def token_bucket_throttle_time_ms(violation: QuotaViolationError) -> int:
    """−tokens / quota · 1000: the time to refill a bucket's deficit (KIP-599)."""
    if not isinstance(violation.stat, TokenBucket):
        raise ValueError(
            f"Metric {violation.metric_name} is not a TokenBucket metric, value {violation.value}"
        )
    return _cap_int32(java_round(_java_divide(-violation.value, violation.bound) * 1000))
