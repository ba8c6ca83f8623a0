from __future__ import annotations

import math

from quotas import (
    Avg,
    CumulativeSum,
    Max,
    MetricConfig,
    Min,
    Rate,
    TimeUnit,
    WindowedCount,
    WindowedSum,
)
from tests.quotas.conftest import T0

QUOTA_CONFIG = MetricConfig(samples=11, time_window_ms=1000)


def test_empty_avg_max_min_are_nan() -> None:
    config = MetricConfig()
    for stat in (Avg(), Max(), Min()):
        assert math.isnan(stat.measure(config, T0))


def test_avg_max_min_windowed_sum_and_count() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    stats = {
        "avg": Avg(),
        "max": Max(),
        "min": Min(),
        "sum": WindowedSum(),
        "count": WindowedCount(),
    }
    for value in (4.0, 10.0, 1.0):
        for stat in stats.values():
            stat.record(config, value, T0)
    assert stats["avg"].measure(config, T0) == 5.0
    assert stats["max"].measure(config, T0) == 10.0
    assert stats["min"].measure(config, T0) == 1.0
    assert stats["sum"].measure(config, T0) == 15.0
    assert stats["count"].measure(config, T0) == 3.0


def test_samples_expire_after_samples_times_window_of_no_events() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    total = WindowedSum()
    total.record(config, 5.0, T0)
    assert total.measure(config, T0 + 1999) == 5.0
    # expire age = samples × window = 2000 ms since the sample's last event.
    assert total.measure(config, T0 + 2000) == 0.0
    avg = Avg()
    avg.record(config, 5.0, T0)
    assert math.isnan(avg.measure(config, T0 + 2000))


def test_ring_keeps_samples_plus_one_slots() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    total = WindowedSum()
    for second in range(10):
        total.record(config, 1.0, T0 + second * 1000)
    assert len(total.samples) == 3


def test_event_window_completes_a_sample() -> None:
    config = MetricConfig(samples=3, time_window_ms=60_000, event_window=2)
    count = WindowedCount()
    for _ in range(5):
        count.record(config, 1.0, T0)
    assert [s.event_count for s in count.samples] == [2, 2, 1]
    assert count.measure(config, T0) == 5.0


def test_cumulative_sum_never_forgets() -> None:
    config = MetricConfig(samples=1, time_window_ms=1)
    queue = CumulativeSum()
    queue.record(config, 1.0, T0)
    queue.record(config, 1.0, T0 + 10**9)
    queue.record(config, -1.0, T0 + 2 * 10**9)
    assert queue.measure(config, T0 + 3 * 10**9) == 1.0


def test_rate_first_window_is_padded_to_samples_minus_one_windows() -> None:
    rate = Rate()
    rate.record(QUOTA_CONFIG, 100.0, T0)
    # No elapsed time: assume 10 complete prior windows -> 10 000 ms.
    assert rate.window_size(QUOTA_CONFIG, T0) == 10_000
    assert rate.measure(QUOTA_CONFIG, T0) == 10.0


def test_rate_window_counts_elapsed_time_plus_missing_full_windows() -> None:
    rate = Rate()
    rate.record(QUOTA_CONFIG, 100.0, T0)
    rate.record(QUOTA_CONFIG, 110.0, T0 + 3500)
    # 3 full windows elapsed, 7 missing: 3500 + 7 × 1000.
    assert rate.window_size(QUOTA_CONFIG, T0 + 3500) == 10_500
    assert rate.measure(QUOTA_CONFIG, T0 + 3500) == 210.0 / 10.5


def test_rate_window_is_never_zero() -> None:
    config = MetricConfig(samples=1, time_window_ms=1000)
    rate = Rate()
    rate.record(config, 7.0, T0)
    assert rate.window_size(config, T0) == 1
    assert rate.measure(config, T0) == 7000.0


def test_rate_keeps_a_sample_that_started_before_the_window_but_saw_events_in_it() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    rate = Rate()
    rate.record(config, 1.0, T0)
    rate.record(config, 1.0, T0 + 999)  # same sample, last event at +999
    # 1501 ms since its last event < 2000: kept, so the window spans 2500 ms.
    assert rate.window_size(config, T0 + 2500) == 2500
    assert rate.measure(config, T0 + 2500) == 2.0 / 2.5


def test_rate_purges_then_uses_the_oldest_live_sample() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    rate = Rate()
    rate.record(config, 1.0, T0)
    rate.record(config, 2.0, T0 + 1000)
    rate.record(config, 4.0, T0 + 2000)
    # At +2500 the sample of T0 is obsolete (2500 ≥ 2000); the oldest live one
    # started at +1000: 1500 ms, already ≥ samples − 1 full windows.
    assert rate.window_size(config, T0 + 2500) == 1500
    assert rate.measure(config, T0 + 2500) == 6.0 / 1.5


def test_rate_of_occurrences_and_other_units() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    per_second = Rate(stat=WindowedCount())
    per_ms = Rate(unit=TimeUnit.MILLISECONDS)
    for _ in range(4):
        per_second.record(config, 123.0, T0)
        per_ms.record(config, 10.0, T0)
    assert per_second.measure(config, T0) == 4.0  # 4 events over the padded 1 s
    assert per_ms.measure(config, T0) == 40.0 / 1000


def test_rate_sums_its_windows_left_to_right_as_kafka_does() -> None:
    # Java adds the windows' doubles in ring order: 1e16 + 1.0 rounds back to
    # 1e16, so the total is 0.0. A compensated sum (Python 3.12's builtin
    # sum) would find 1.0 and a different rate.
    rate = Rate()
    for window, value in enumerate((1e16, 1.0, -1e16)):
        rate.record(QUOTA_CONFIG, value, T0 + window * 1000)
    assert rate.measure(QUOTA_CONFIG, T0 + 2500) == 0.0
