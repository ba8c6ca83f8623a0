"""Controller-mutation quotas (KIP-599) with the KIP's worked example: R = 5/s, B = 500."""

from __future__ import annotations

import pytest

from quotas import (
    UNBOUNDED_CONTROLLER_MUTATION_QUOTA,
    ControllerMutationQuotaManager,
    MetricName,
    PermissiveControllerMutationQuota,
    Quota,
    StrictControllerMutationQuota,
    ThrottlingQuotaExceededError,
)
from tests.quotas.conftest import T0


def kip599_manager() -> ControllerMutationQuotaManager:
    manager = ControllerMutationQuotaManager(samples=100, window_size_seconds=1)
    manager.update_quota("alice", None, Quota(5.0))
    return manager


def test_a_burst_of_560_is_accepted_then_throttled_12_s_not_100_s() -> None:
    manager = kip599_manager()
    # Accepted: the bucket was not in deficit before the request, however large.
    assert manager.record_and_get_throttle_time_ms("alice", "admin", 560, T0) == 0
    tokens = manager.metrics.metric(
        MetricName("tokens", "ControllerMutation", (("user", "alice"), ("client-id", "")))
    )
    assert tokens is not None and tokens.measurable_value(T0) == -60.0
    # Now in deficit: refused and not recorded; -(-60) / 5 = 12 s.
    assert manager.record_and_get_throttle_time_ms("alice", "admin", 1, T0) == 12_000
    assert tokens.measurable_value(T0) == -60.0
    assert manager.record_and_get_throttle_time_ms("alice", "admin", 1, T0 + 11_999) == 1
    assert manager.record_and_get_throttle_time_ms("alice", "admin", 1, T0 + 12_000) == 0


def test_mutation_rate_is_observed_beside_the_bucket() -> None:
    manager = kip599_manager()
    manager.record_and_get_throttle_time_ms("alice", "admin", 560, T0)
    rate = manager.metrics.metric(
        MetricName("mutation-rate", "ControllerMutation", (("user", "alice"), ("client-id", "")))
    )
    assert rate is not None
    assert rate.config.quota is None  # observability only; the bucket enforces
    # The registry's default config (2 × 30 s) spreads it over 30 s.
    assert rate.measurable_value(T0) == pytest.approx(560 / 30)


def test_strict_quota_refuses_with_the_decaying_throttle_time() -> None:
    manager = kip599_manager()
    quota = manager.new_quota_for("alice", "admin", strict=True, now_ms=T0)
    assert isinstance(quota, StrictControllerMutationQuota)
    quota.record(560, T0)
    exceeded_before = quota.is_exceeded
    with pytest.raises(ThrottlingQuotaExceededError) as caught:
        quota.record(10, T0 + 2000)  # tokens -50 after 2 s of refill
    exceeded_after = quota.is_exceeded
    assert not exceeded_before
    assert exceeded_after
    assert caught.value.throttle_time_ms == 10_000
    assert quota.throttle_time_ms(T0 + 2000) == 10_000
    assert quota.throttle_time_ms(T0 + 7000) == 5_000
    assert quota.throttle_time_ms(T0 + 20_000) == 0


def test_permissive_quota_records_and_only_reports() -> None:
    manager = kip599_manager()
    quota = manager.new_quota_for("alice", "old-client", strict=False, now_ms=T0)
    assert isinstance(quota, PermissiveControllerMutationQuota)
    assert quota.throttle_time_ms(T0) == 0
    quota.record(560, T0)  # record then check: -60 is a violation, recorded anyway
    assert quota.throttle_time_ms(T0) == 12_000
    quota.record(40, T0)
    assert not quota.is_exceeded
    assert quota.throttle_time_ms(T0) == 20_000


def test_no_quota_configured_gives_the_unbounded_quota() -> None:
    manager = ControllerMutationQuotaManager()
    quota = manager.new_quota_for("bob", "c", strict=True)
    assert quota is UNBOUNDED_CONTROLLER_MUTATION_QUOTA
    quota.record(10**9, T0)
    assert not quota.is_exceeded
    assert quota.throttle_time_ms(T0) == 0
