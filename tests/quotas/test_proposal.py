"""quotas.proposal: KIP-599's method as arithmetic."""

from __future__ import annotations

import pytest

from quotas.proposal import headroom_quotas, split_budget


def test_without_a_budget_a_quota_is_the_peak_times_the_headroom() -> None:
    assert headroom_quotas({"a": 100.0, "b": 40.0}, 1.5) == {"a": 150.0, "b": 60.0}
    with pytest.raises(ValueError, match="at least 1"):
        headroom_quotas({"a": 1.0}, 0.9)


def test_a_budget_is_divided_by_the_peaks_and_over_allocated_by_how_rarely_they_coincide() -> None:
    # a peaks at 100 while b runs at 20; b peaks at 60 while a runs at 40: P = 120 of 160.
    split = split_budget({"a": 100.0, "b": 60.0}, concurrent_peak=120.0, budget=300.0)
    assert split.scale == pytest.approx(2.5)
    assert split.quotas == pytest.approx({"a": 250.0, "b": 150.0})
    assert split.over_allocation == pytest.approx(160 / 120)
    assert sum(split.quotas.values()) == pytest.approx(split.budget * split.over_allocation)


def test_tenants_that_always_peak_together_get_exactly_the_budget() -> None:
    split = split_budget({"a": 30.0, "b": 10.0}, concurrent_peak=40.0, budget=80.0)
    assert split.over_allocation == pytest.approx(1.0)
    assert sum(split.quotas.values()) == pytest.approx(80.0)


def test_impossible_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        split_budget({"a": 1.0}, 1.0, 0.0)
    with pytest.raises(ValueError, match="nothing to divide"):
        split_budget({"a": 0.0}, 0.0, 10.0)
    with pytest.raises(ValueError, match="exceeds the sum"):
        split_budget({"a": 1.0, "b": 1.0}, 3.0, 10.0)
