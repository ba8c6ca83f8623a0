"""The sample ring at steady state: its shape, its size, and Kafka's numbers from it.

A quota server keeps two sampled stats per client for as long as the client
is active, so the ring must stop growing once full (``samples + 1`` windows,
Kafka #15889), hold no spare capacity, and keep no object per window. The
rate it measures, with its cached oldest start and purge floor, must equal
Kafka's algorithm recomputed from scratch.
"""

from __future__ import annotations

import gc
import sys
from array import array
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas import (
    DEFAULT,
    Avg,
    ClientQuotaManager,
    Max,
    MetricConfig,
    Min,
    Quota,
    Rate,
    RequestQuotaManager,
    SampledStat,
    WindowedCount,
    WindowedSum,
)
from tests.quotas.conftest import T0


def _ring_of(stat: SampledStat) -> array[float]:
    """The one array the stat keeps its windows in (what it references, not a private name)."""
    rings = [held for held in gc.get_referents(stat) if isinstance(held, array)]
    assert len(rings) == 1
    return rings[0]


@pytest.mark.parametrize("stat_type", [WindowedSum, WindowedCount, Avg, Max, Min])
def test_a_full_ring_holds_samples_plus_one_windows_and_never_grows(
    stat_type: Callable[[], SampledStat],
) -> None:
    config = MetricConfig(samples=11, time_window_ms=1000)
    stat = stat_type()
    shapes = set()
    for window in range(10 * (config.samples + 1)):
        for offset in (0, 400, 999):  # three records per window
            stat.record(config, 5.0, T0 + window * 1000 + offset)
        stat.measure(config, T0 + window * 1000 + 999)
        if window >= config.samples:
            ring = _ring_of(stat)
            shapes.add((len(stat.samples), len(ring), sys.getsizeof(ring)))
    assert len(shapes) == 1
    ((windows, items, size),) = shapes
    assert windows == config.samples + 1
    # Exactly sized: the array holds no spare capacity.
    assert size == sys.getsizeof(array("d")) + items * array("d").itemsize
    # No object per window: everything the stat references is a handful of
    # scalars and the one ring, however many windows it has seen.
    assert len(gc.get_referents(stat)) <= 4


def test_the_ring_keeps_the_latest_windows_in_ring_order() -> None:
    config = MetricConfig(samples=3, time_window_ms=1000)
    total = WindowedSum()
    for window in range(10):
        total.record(config, float(window), T0 + window * 1000)
    # Windows 6..9 in a 4-slot ring that has wrapped twice: slot = window % 4.
    assert [(s.start_time_ms - T0) // 1000 for s in total.samples] == [8, 9, 6, 7]
    assert [s.value for s in total.samples] == [8.0, 9.0, 6.0, 7.0]
    assert [s.event_count for s in total.samples] == [1, 1, 1, 1]
    assert total.current(T0 + 9000).start_time_ms == T0 + 9000
    assert total.oldest(T0 + 9000).start_time_ms == T0 + 6000


@pytest.mark.parametrize(
    ("manager_type", "value"), [(ClientQuotaManager, 1e3), (RequestQuotaManager, 1e6)]
)
def test_every_client_ring_is_full_and_stays_full_at_steady_state(
    manager_type: type[ClientQuotaManager], value: float
) -> None:
    manager = manager_type()
    manager.update_quota(None, DEFAULT, Quota.upper_bound(1e-6))  # every record throttles
    default = manager.metrics.config  # the throttle-time sensor's windows
    clients = [f"client-{i}" for i in range(3)]
    now = T0
    shapes = []
    for step in range(2 * (default.samples + 1) * default.time_window_ms // 1000):
        now = T0 + step * 1000
        for client in clients:
            throttle_ms = manager.record_and_get_throttle_time_ms(None, client, value, now)
            assert throttle_ms > 0
            manager.throttle(None, client, throttle_ms, now)
        sensors = manager.get_or_create_quota_sensors(None, clients[0], now)
        rate = sensors.quota_sensor.metrics[0].stat
        average = sensors.throttle_time_sensor.metrics[0].stat
        assert isinstance(rate, Rate)
        assert isinstance(average, Avg)
        shapes.append((len(rate.stat.samples), len(average.samples)))
    assert shapes[-1] == (manager.samples + 1, default.samples + 1)
    # Full rings stay full: once a ring reaches its size it never changes.
    full_from = shapes.index(shapes[-1])
    assert set(shapes[full_from:]) == {shapes[-1]}
    assert full_from <= (default.samples + 1) * default.time_window_ms // 1000


def _kafka_rate(
    samples_before: list[tuple[float, int, int, int]], config: MetricConfig, now: int
) -> float:
    """Kafka's ``Rate.measure`` over ``WindowedSum``, from the samples as they were."""
    expire_age = config.samples * config.time_window_ms
    total = 0.0
    oldest_start: int | None = None
    for value, _count, start, last in samples_before:
        purged = now - last >= expire_age  # reset to a fresh window at `now`
        total += 0.0 if purged else value
        begun = now if purged else start
        oldest_start = begun if oldest_start is None else min(oldest_start, begun)
    assert oldest_start is not None
    elapsed = now - oldest_start
    window_ms = config.time_window_ms
    full_windows = elapsed // window_ms if elapsed >= 0 else -(-elapsed // window_ms)
    if full_windows < config.samples - 1:
        elapsed += (config.samples - 1 - full_windows) * window_ms
    return total / (max(elapsed, 1) / 1000)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=1, max_value=12),
    st.sampled_from([1, 10, 1000, 30_000]),
    st.lists(
        st.tuples(
            st.integers(min_value=-2_000, max_value=60_000),  # steps; negative: clock went back
            st.floats(min_value=-1e6, max_value=1e9, allow_nan=False, allow_infinity=False),
            st.booleans(),  # record, or only measure
        ),
        min_size=1,
        max_size=60,
    ),
)
def test_rate_equals_kafkas_algorithm_recomputed_from_the_samples(
    samples: int, window_ms: int, events: list[tuple[int, float, bool]]
) -> None:
    config = MetricConfig(samples=samples, time_window_ms=window_ms)
    rate = Rate()
    now = T0
    for step, value, record in events:
        now += step
        if record:
            rate.record(config, value, now)
        before = [
            (s.value, s.event_count, s.start_time_ms, s.last_event_ms) for s in rate.stat.samples
        ]
        measured = rate.measure(config, now)
        if before:
            assert measured == _kafka_rate(before, config, now)
        assert len(rate.stat.samples) <= samples + 1
