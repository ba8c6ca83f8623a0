"""Replay observed demand through Kafka's own quota algorithm: how a proposed quota would bite.

KIP-599's "How to Define the Quota?" gives a method, not a formula: choose
the quota on the worst case and check it against the load. The check here is
the enforcement itself: each demand event is recorded on a
``ClientQuotaManager`` (the sampled ``Rate`` and the throttle-time formula a
broker and kip714's doors use), and every throttle it answers is kept.

The replay is open loop: the demand is replayed at the times it was
observed, not delayed by the throttles it earns (a throttled Kafka client
waits, so its real demand would shift later). "Throttled N % of the time"
is the share of the period covered by the union of the throttle intervals
``[t, t + throttle_ms)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from quotas.client_quota_manager import ClientQuotaManager
from quotas.config import Quota

__all__ = ["DemandEvent", "ReplayResult", "replay"]


@dataclass(frozen=True, slots=True)
class DemandEvent:
    """``value`` (bytes, or the quota's unit) recorded at ``at_ms``."""

    at_ms: int
    value: float


@dataclass(frozen=True, slots=True)
class ReplayResult:
    events: int
    throttled_events: int
    throttled_ms: int
    """The union of the throttle intervals, clipped to the period."""
    period_ms: int
    max_throttle_ms: int

    @property
    def throttled_fraction(self) -> float:
        return self.throttled_ms / self.period_ms if self.period_ms > 0 else 0.0


def replay(
    events: Iterable[DemandEvent],
    quota: float,
    *,
    start_ms: int,
    end_ms: int,
    samples: int = 11,
    window_size_seconds: int = 1,
) -> ReplayResult:
    """Record ``events`` (in time order) against an upper-bound ``quota`` over ``[start, end)``.

    ``samples`` and ``window_size_seconds`` are the broker's
    ``quota.window.num`` and ``quota.window.size.seconds`` (Kafka's defaults:
    11 and 1).
    """
    if end_ms <= start_ms:
        raise ValueError(f"the period must end after it starts: {start_ms} .. {end_ms}")
    manager = ClientQuotaManager(samples=samples, window_size_seconds=window_size_seconds)
    manager.update_quota("replay", None, Quota.upper_bound(quota))
    count = throttled = covered = longest = 0
    covered_until = start_ms
    last_ms = start_ms
    for event in events:
        if event.at_ms < last_ms:
            raise ValueError(f"events out of time order at {event.at_ms} ms (after {last_ms})")
        last_ms = event.at_ms
        count += 1
        throttle_ms = manager.record_and_get_throttle_time_ms("replay", None, event.value, last_ms)
        if throttle_ms <= 0:
            continue
        throttled += 1
        longest = max(longest, throttle_ms)
        begin = max(last_ms, covered_until)
        until = min(last_ms + throttle_ms, end_ms)
        if until > begin:
            covered += until - begin
            covered_until = until
    return ReplayResult(count, throttled, covered, end_ms - start_ms, longest)
