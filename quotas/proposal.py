"""KIP-599's method for choosing a quota, as arithmetic an operator can check.

"How to Define the Quota?" (KIP-599) gives a method: find the real limits,
choose the quota on the worst case and the extra load the cluster can
sustain, divide it among the tenants, and over-allocate, because tenants
rarely peak together. Here the worst case is each tenant's observed peak
rate; without a cluster budget a tenant's quota is that peak times the
headroom. With a budget ``B``, every peak is scaled by ``B / P``, where ``P``
is the fleet's peak of concurrent demand: if the tenants peak together as
they did, they stay within ``B``; the quotas add up to ``B * (sum of peaks) /
P``, which is the over-allocation the method asks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["BudgetSplit", "headroom_quotas", "split_budget"]


def headroom_quotas(peaks: Mapping[str, float], headroom: float) -> dict[str, float]:
    """Each tenant's observed peak times ``headroom`` (at least 1: a quota under the peak
    throttles what was observed)."""
    if headroom < 1:
        raise ValueError(f"headroom must be at least 1, got {headroom}")
    return {tenant: peak * headroom for tenant, peak in peaks.items()}


@dataclass(frozen=True, slots=True)
class BudgetSplit:
    budget: float
    concurrent_peak: float
    """``P``: the highest total demand of all tenants in one window."""
    sum_of_peaks: float
    quotas: dict[str, float]

    @property
    def scale(self) -> float:
        """``B / P``: what every tenant's peak is multiplied by."""
        return self.budget / self.concurrent_peak

    @property
    def over_allocation(self) -> float:
        """The quotas' sum over the budget: ``sum of peaks / P`` (1 when all peak together)."""
        return self.sum_of_peaks / self.concurrent_peak


def split_budget(peaks: Mapping[str, float], concurrent_peak: float, budget: float) -> BudgetSplit:
    """Divide ``budget`` among the tenants in proportion to their peaks, over-allocated by
    how rarely they peaked together."""
    if budget <= 0:
        raise ValueError(f"the budget must be positive, got {budget}")
    if concurrent_peak <= 0:
        raise ValueError("no observed demand: there is nothing to divide the budget by")
    total = sum(peaks.values())
    if concurrent_peak > total * (1 + 1e-9):
        raise ValueError(f"the concurrent peak {concurrent_peak} exceeds the sum of peaks {total}")
    scale = budget / concurrent_peak
    return BudgetSplit(
        budget, concurrent_peak, total, {tenant: peak * scale for tenant, peak in peaks.items()}
    )
