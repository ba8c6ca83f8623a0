"""Properties of the quota core that must hold for every input, not just the worked examples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas import (
    DEFAULT,
    ClientQuotaManager,
    MetricConfig,
    Quota,
    QuotaViolationError,
    Rate,
    Sensor,
    TokenBucket,
    WindowedSum,
    throttle_time_ms,
    token_bucket_throttle_time_ms,
)
from tests.quotas.conftest import T0

samples_st = st.integers(min_value=1, max_value=20)
window_st = st.integers(min_value=1, max_value=5_000)
quota_st = st.floats(min_value=0.01, max_value=1e6, allow_nan=False, allow_infinity=False)
value_st = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
step_st = st.integers(min_value=0, max_value=10_000)


@settings(max_examples=200, deadline=None)
@given(samples_st, window_st, quota_st, st.lists(st.tuples(step_st, value_st), max_size=40))
def test_tokens_never_exceed_the_burst(
    samples: int, window_ms: int, quota: float, events: list[tuple[int, float]]
) -> None:
    config = MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota(quota))
    bucket = TokenBucket()
    burst = bucket.burst(config)
    now = T0
    for step, value in events:
        now += step
        bucket.record(config, value, now)
        assert bucket.tokens <= burst
        assert bucket.measure(config, now) <= burst


@settings(max_examples=200, deadline=None)
@given(
    samples_st,
    st.integers(min_value=100, max_value=5_000),
    st.floats(min_value=0.5, max_value=1e4),
    st.lists(st.floats(min_value=0.0, max_value=1e5), min_size=1, max_size=20),
)
def test_waiting_the_bucket_throttle_refills_it_and_2_ms_less_does_not(
    samples: int, window_ms: int, quota: float, requests: list[float]
) -> None:
    config = MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota(quota))
    sensor = Sensor("bucket")
    bucket = TokenBucket()
    sensor.add("tokens", bucket, config)
    violation = None
    for permits in requests:
        try:
            sensor.strict_record(permits, T0)
        except QuotaViolationError as error:
            violation = error
            break
    if violation is None:
        sensor.record(bucket.burst(config) + 1.0, T0, check_quotas=False)
        with pytest.raises(QuotaViolationError) as caught:
            sensor.check_quotas(T0)
        violation = caught.value
    throttle = token_bucket_throttle_time_ms(violation)
    assert throttle >= 0
    probe = TokenBucket()
    probe.tokens = violation.value
    probe.last_update_ms = T0
    after = probe.measure(config, T0 + throttle + 1)
    assert after >= 0
    if throttle >= 2:
        early = TokenBucket()
        early.tokens = violation.value
        early.last_update_ms = T0
        assert early.measure(config, T0 + throttle - 2) < 0


@settings(max_examples=200, deadline=None)
@given(samples_st, window_st, st.lists(step_st, min_size=1, max_size=40), step_st)
def test_a_rate_window_never_falls_below_samples_minus_one_windows(
    samples: int, window_ms: int, steps: list[int], wait_ms: int
) -> None:
    config = MetricConfig(samples=samples, time_window_ms=window_ms)
    rate = Rate()
    now = T0
    for step in steps:
        now += step
        rate.record(config, 1.0, now)
    window = rate.window_size(config, now + wait_ms)
    assert window >= (samples - 1) * window_ms
    assert window >= 1


@settings(max_examples=200, deadline=None)
@given(
    quota_st,
    st.floats(min_value=0.0, max_value=1e7),
    st.floats(min_value=0.0, max_value=1e7),
    st.integers(min_value=1, max_value=20),
)
def test_throttle_is_monotone_in_the_observed_value_and_zero_at_the_bound(
    bound: float, a: float, b: float, samples: int
) -> None:
    config = MetricConfig(samples=samples, time_window_ms=1000)
    rate = Rate()
    rate.record(config, 1.0, T0)
    low, high = sorted((a, b))

    def throttle(value: float) -> int:
        return throttle_time_ms(QuotaViolationError("m", value, bound, rate, config), T0)

    assert throttle(low) <= throttle(high)
    assert throttle(bound) == 0
    if low <= bound:
        assert throttle(low) <= 0


@settings(max_examples=100, deadline=None)
@given(
    st.floats(min_value=1.0, max_value=1e6),
    st.lists(st.floats(min_value=0.0, max_value=1e5), max_size=10),
)
def test_a_client_within_quota_is_never_throttled(bound: float, values: list[float]) -> None:
    manager = ClientQuotaManager()
    manager.update_quota(None, "c", Quota(bound))
    total = 0.0
    for value in values:
        throttle = manager.record_and_get_throttle_time_ms(None, "c", value, T0)
        total += value
        if total / 10 <= bound:  # 11 samples × 1 s: a fresh window is 10 s
            assert throttle == 0
        else:
            assert throttle > 0


@settings(max_examples=200, deadline=None)
@given(samples_st, window_st, quota_st, step_st, value_st, value_st)
def test_recording_v_then_minus_v_restores_the_measure(
    samples: int, window_ms: int, quota: float, step: int, first: float, value: float
) -> None:
    config = MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota(quota))
    for stat in (WindowedSum(), Rate(), TokenBucket()):
        stat.record(config, first, T0)
        now = T0 + step
        before = stat.measure(config, now)
        stat.record(config, value, now)
        stat.record(config, -value, now)
        after = stat.measure(config, now)
        tolerance = 1e-9 * max(1.0, abs(first), abs(value), abs(before))
        if isinstance(stat, TokenBucket):
            # v then −v is exact unless the refund of −v is capped at the burst.
            assert after <= before + tolerance
            if before - value <= stat.burst(config):
                assert math.isclose(after, before, abs_tol=tolerance)
        else:
            assert math.isclose(after, before, abs_tol=tolerance)


LEVELS: list[tuple[str | None, str | None]] = [
    ("alice", "app"),
    ("alice", DEFAULT),
    ("alice", None),
    (DEFAULT, "app"),
    (DEFAULT, DEFAULT),
    (DEFAULT, None),
    (None, "app"),
    (None, DEFAULT),
]


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(min_value=0, max_value=7)))
def test_resolution_picks_the_most_specific_configured_entity(configured: set[int]) -> None:
    manager = ClientQuotaManager()
    for index in configured:
        user, client = LEVELS[index]
        manager.update_quota(user, client, Quota(100.0 + index))
    expected = 100.0 + min(configured) if configured else float(2**63 - 1)
    assert manager.quota("alice", "app").bound == expected
