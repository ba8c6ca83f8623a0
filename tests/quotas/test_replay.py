"""quotas.replay: demand run through ClientQuotaManager, checked against Kafka's formulas.

With one record a second of ``D`` bytes, Kafka's ``Rate`` over 11 one-second
samples measures ``(k + 1) * D / 10`` at second ``k < 10`` (the window is at
least ``samples - 1`` full windows) and ``11 * D / 10`` from second 10 on
(11 samples over 10 s elapsed); a violation throttles
``(rate - quota) / quota * 10,000 ms`` (``ClientQuotaManager.throttleTime``).
"""

from __future__ import annotations

import pytest

from quotas.replay import DemandEvent, replay

SECONDS = 60
END_MS = SECONDS * 1000


def _steady(per_second: float) -> list[DemandEvent]:
    return [DemandEvent(k * 1000, per_second) for k in range(SECONDS)]


def test_demand_at_the_quota_is_throttled_from_the_eleventh_second_for_one_second_each() -> None:
    result = replay(_steady(1000.0), 1000.0, start_ms=0, end_ms=END_MS)
    # k < 10: (k + 1) * 100 <= 1000, never throttled; k >= 10: 1,100 B/s -> 0.1 * 10 s.
    assert result.events == SECONDS
    assert result.throttled_events == SECONDS - 10
    assert result.max_throttle_ms == 1000
    assert result.throttled_ms == (SECONDS - 10) * 1000
    assert result.throttled_fraction == pytest.approx((SECONDS - 10) / SECONDS)


def test_twice_the_quota_is_throttled_from_the_sixth_second_on() -> None:
    result = replay(_steady(2000.0), 1000.0, start_ms=0, end_ms=END_MS)
    # k = 5..9: ((k + 1) * 0.2 - 1) * 10 s = 2, 4, 6, 8, 10 s; k >= 10: 1.2 * 10 s = 12 s.
    assert result.throttled_events == SECONDS - 5
    assert result.max_throttle_ms == 12_000
    assert result.throttled_ms == END_MS - 5000  # covered from 5 s to the period's end
    assert result.throttled_fraction == pytest.approx(55 / 60)


def test_a_quota_above_the_measured_rate_never_throttles() -> None:
    result = replay(_steady(1000.0), 1100.0, start_ms=0, end_ms=END_MS)
    assert (result.throttled_events, result.throttled_ms, result.max_throttle_ms) == (0, 0, 0)


def test_events_out_of_order_and_an_empty_period_are_refused() -> None:
    with pytest.raises(ValueError, match="out of time order"):
        replay([DemandEvent(1000, 1.0), DemandEvent(0, 1.0)], 1.0, start_ms=0, end_ms=2000)
    with pytest.raises(ValueError, match="must end after"):
        replay([], 1.0, start_ms=5, end_ms=5)
