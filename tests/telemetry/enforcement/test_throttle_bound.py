"""The throttle tracker is bounded by a count, not by time: made-up client ids cannot grow it."""

from __future__ import annotations

from quotas import ClientQuotaManager, MetricName, QuotaType
from telemetry.enforcement import ClientEntity
from telemetry.enforcement.throttles import ThrottleReason, ThrottleTracker


def test_a_flood_of_throttled_entities_is_counted_but_tracked_only_to_the_bound() -> None:
    manager = ClientQuotaManager(11, 1, QuotaType.PRODUCE)
    tracker = ThrottleTracker(max_tracked=100)
    for i in range(10_000):
        entity = ClientEntity("ANONYMOUS", f"made-up-{i}")
        tracker.throttle(ThrottleReason.PUSH_BYTE_RATE, entity, 60_000, 0, manager)
    queue_size = manager.metrics.metric(MetricName("queue-size", "Produce"))
    assert queue_size is not None
    assert tracker.counts[ThrottleReason.PUSH_BYTE_RATE] == 10_000
    assert tracker.throttled_entities == 100
    assert tracker.untracked == 9_900
    assert queue_size.measurable_value(0) == 100  # only what will be released is queued
    assert tracker.release_expired(60_000) == 100
    assert tracker.throttled_entities == 0
    assert queue_size.measurable_value(60_000) == 0
    tracker.throttle(ThrottleReason.PUSH_BYTE_RATE, ClientEntity("a", "b"), 10, 60_000, manager)
    assert tracker.throttled_entities == 1  # room again once throttles end
