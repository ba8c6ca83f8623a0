"""``TokenBucket``: the bursty-workload stat of KIP-599.

A sampled ``Rate`` keeps one large burst in its average for samples × window,
throttling far longer than the burst deserves. The bucket instead holds up to
``burst = samples × window (in the unit) × quota`` tokens, refills at ``quota``
per unit, and is spent by every record. Tokens may go arbitrarily negative:
the throttle time is the time to refill the deficit back to zero.
"""

from __future__ import annotations

from quotas.config import UNLIMITED, MetricConfig, TimeUnit


class TokenBucket:
    """Kafka's ``TokenBucket``; measure returns the tokens left after a refill."""

    __slots__ = ("_unit_ms", "last_update_ms", "tokens", "unit")

    def __init__(self, unit: TimeUnit = TimeUnit.SECONDS) -> None:
        self.unit = unit
        # The member's own int, shared (int(unit) would make one per stat): enum
        # attribute access is slow on the hot path.
        self._unit_ms = unit.value
        # Kafka starts at 0 tokens last updated at epoch 0: the first refill at
        # a real clock time fills the bucket to its burst.
        self.tokens = 0.0
        self.last_update_ms = 0

    def burst(self, config: MetricConfig) -> float:
        if config.quota is None:
            return UNLIMITED
        return config.samples * (config.time_window_ms / self._unit_ms) * config.quota.bound

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        if config.quota is None:
            return UNLIMITED
        self._refill(config.quota.bound, self.burst(config), now_ms)
        return self.tokens

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        if config.quota is None:
            return
        burst = self.burst(config)
        self._refill(config.quota.bound, burst, now_ms)
        # A negative value (an "unrecord") refunds tokens, still capped at the burst.
        self.tokens = min(burst, self.tokens - value)

    def _refill(self, quota: float, burst: float, now_ms: int) -> None:
        self.tokens = min(
            burst, self.tokens + quota * ((now_ms - self.last_update_ms) / self._unit_ms)
        )
        self.last_update_ms = now_ms

    def __repr__(self) -> str:
        return f"TokenBucket(tokens={self.tokens}, last_update_ms={self.last_update_ms})"
