from __future__ import annotations

from quotas import MetricConfig, Quota, TimeUnit, TokenBucket
from tests.quotas.conftest import T0

# KIP-599's worked example: R = 5 mutations/s, burst B = S × W × R = 100 × 1 s × 5 = 500.
KIP599 = MetricConfig(samples=100, time_window_ms=1000, quota=Quota.upper_bound(5.0))


def test_burst_is_samples_times_window_times_quota() -> None:
    bucket = TokenBucket()
    assert bucket.burst(KIP599) == 500.0
    assert bucket.burst(MetricConfig(samples=10, time_window_ms=2000, quota=Quota(5.0))) == 100.0


def test_first_refill_at_a_real_clock_fills_the_bucket() -> None:
    bucket = TokenBucket()
    assert bucket.measure(KIP599, T0) == 500.0
    # Kafka's pitfall: at t = 0 the bucket would start empty.
    assert TokenBucket().measure(KIP599, 0) == 0.0


def test_kip599_burst_of_560_leaves_a_deficit_of_60() -> None:
    bucket = TokenBucket()
    bucket.record(KIP599, 560.0, T0)
    assert bucket.measure(KIP599, T0) == -60.0
    # Refills at 5 tokens/s: back to 0 after 12 s, to the burst after 112 s.
    assert bucket.measure(KIP599, T0 + 12_000) == 0.0
    assert bucket.measure(KIP599, T0 + 200_000) == 500.0


def test_tokens_can_go_far_negative_and_an_unrecord_is_capped_at_the_burst() -> None:
    bucket = TokenBucket()
    bucket.record(KIP599, 10_000.0, T0)
    assert bucket.measure(KIP599, T0) == -9_500.0
    bucket.record(KIP599, -20_000.0, T0)
    assert bucket.measure(KIP599, T0) == 500.0


def test_no_quota_means_unlimited_and_no_recording() -> None:
    bucket = TokenBucket()
    config = MetricConfig()
    bucket.record(config, 1e9, T0)
    assert bucket.measure(config, T0) == float(2**63 - 1)
    assert bucket.tokens == 0.0


def test_minutes_unit_refills_per_minute() -> None:
    config = MetricConfig(samples=2, time_window_ms=60_000, quota=Quota(3.0))
    bucket = TokenBucket(unit=TimeUnit.MINUTES)
    assert bucket.burst(config) == 6.0
    bucket.record(config, 6.0, T0)
    assert bucket.measure(config, T0 + 20_000) == 1.0
