"""Sampled statistics and ``Rate``: Kafka's ``SampledStat`` family, to the millisecond.

A sampled stat keeps up to ``samples + 1`` windows. The extra slot (Kafka
#15889, "Fix rate metric spikes") keeps the window that overlaps the start of
the monitored span, so a rate does not jump when the oldest window is
recycled. A sample whose last event is ``samples × window`` old is reset
("purged") when measured.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from quotas.config import MetricConfig, TimeUnit

_NO_START = 2**63  # later than any sample's start


@runtime_checkable
class MeasurableStat(Protocol):
    """What a sensor can record into and a metric can measure."""

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None: ...

    def measure(self, config: MetricConfig, now_ms: int) -> float: ...


class Sample:
    """One window of a sampled stat."""

    __slots__ = ("event_count", "initial_value", "last_event_ms", "start_time_ms", "value")

    def __init__(self, initial_value: float, now_ms: int) -> None:
        self.initial_value = initial_value
        self.event_count = 0
        self.start_time_ms = now_ms
        self.last_event_ms = now_ms
        self.value = initial_value

    def reset(self, now_ms: int) -> None:
        self.event_count = 0
        self.start_time_ms = now_ms
        self.last_event_ms = now_ms
        self.value = self.initial_value

    def is_complete(self, now_ms: int, config: MetricConfig) -> bool:
        return (
            now_ms - self.start_time_ms >= config.time_window_ms
            or self.event_count >= config.event_window
        )

    def __repr__(self) -> str:
        return (
            f"Sample(value={self.value}, event_count={self.event_count}, "
            f"start_time_ms={self.start_time_ms}, last_event_ms={self.last_event_ms})"
        )


class SampledStat:
    """A value measured over a ring of ``samples + 1`` windows; subclasses say how to combine."""

    __slots__ = ("_current", "_initial_value", "samples")

    def __init__(self, initial_value: float) -> None:
        self._initial_value = initial_value
        self._current = 0
        self.samples: list[Sample] = []

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        samples = self.samples
        if not samples:
            sample = Sample(self._initial_value, now_ms)
            samples.append(sample)
        else:
            sample = samples[self._current]
        # Sample.is_complete, inlined: this is the hot path of every quota check.
        if (
            now_ms - sample.start_time_ms >= config.time_window_ms
            or sample.event_count >= config.event_window
        ):
            sample = self._advance(config, now_ms)
        self.update(sample, value)
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def _advance(self, config: MetricConfig, now_ms: int) -> Sample:
        # One slot more than `samples`: see purge_obsolete_samples.
        self._current = (self._current + 1) % (config.samples + 1)
        if self._current >= len(self.samples):
            sample = Sample(self._initial_value, now_ms)
            self.samples.append(sample)
            return sample
        sample = self.samples[self._current]
        sample.reset(now_ms)
        return sample

    def current(self, now_ms: int) -> Sample:
        if not self.samples:
            self.samples.append(Sample(self._initial_value, now_ms))
        return self.samples[self._current]

    def oldest(self, now_ms: int) -> Sample:
        """The sample that started first (the first one wins a tie)."""
        if not self.samples:
            self.samples.append(Sample(self._initial_value, now_ms))
        oldest = self.samples[0]
        for sample in self.samples:
            if sample.start_time_ms < oldest.start_time_ms:
                oldest = sample
        return oldest

    def purge_obsolete_samples(self, config: MetricConfig, now_ms: int) -> None:
        """Reset samples with no event inside the monitored span.

        A sample that started before the span but saw an event inside it is
        kept: that is what lets a rate cover more than ``samples`` windows.
        """
        expire_age = config.samples * config.time_window_ms
        for sample in self.samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.purge_obsolete_samples(config, now_ms)
        return self.combine(config, now_ms)

    def update(self, sample: Sample, value: float) -> None:
        raise NotImplementedError

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(current={self._current}, samples={self.samples})"


class WindowedSum(SampledStat):
    """The sum of the values recorded in the live windows."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def update(self, sample: Sample, value: float) -> None:
        sample.value += value

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        # Left-to-right double addition, as Kafka's loop: deterministic to the last bit.
        total = 0.0
        for sample in self.samples:
            total += sample.value
        return total


class WindowedCount(WindowedSum):
    """The number of events in the live windows (Kafka's ``WindowedCount``)."""

    __slots__ = ()

    def update(self, sample: Sample, value: float) -> None:
        sample.value += 1.0


class Avg(SampledStat):
    """Mean of the recorded values; NaN when nothing was recorded (as Kafka)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def update(self, sample: Sample, value: float) -> None:
        sample.value += value

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        total = 0.0
        count = 0
        for sample in self.samples:
            total += sample.value
            count += sample.event_count
        return math.nan if count == 0 else total / count


class Max(SampledStat):
    """Largest recorded value; NaN when nothing was recorded."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(-math.inf)

    def update(self, sample: Sample, value: float) -> None:
        sample.value = max(sample.value, value)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        if sum(s.event_count for s in self.samples) == 0:
            return math.nan
        return max(s.value for s in self.samples)


class Min(SampledStat):
    """Smallest recorded value; NaN when nothing was recorded."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(math.inf)

    def update(self, sample: Sample, value: float) -> None:
        sample.value = min(sample.value, value)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        if sum(s.event_count for s in self.samples) == 0:
            return math.nan
        return min(s.value for s in self.samples)


class CumulativeSum:
    """A running total that never forgets (Kafka's ``CumulativeSum``; ``queue-size`` uses it)."""

    __slots__ = ("total",)

    def __init__(self, initial_value: float = 0.0) -> None:
        self.total = initial_value

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.total += value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.total


class Rate:
    """A sampled quantity per unit of time, over Kafka's window-size rule.

    The window is the time since the oldest live sample started, padded to at
    least ``samples - 1`` full windows ("assume N-1 complete prior windows",
    Kafka #12184) and never below 1 ms. So a first burst is spread over the
    whole quota window instead of being measured over a few milliseconds.
    """

    __slots__ = ("_last_config", "_unit_ms", "stat", "unit")

    def __init__(self, unit: TimeUnit = TimeUnit.SECONDS, stat: SampledStat | None = None) -> None:
        self.unit = unit
        self._unit_ms = int(unit)  # enum attribute access is slow on the hot path
        self.stat: SampledStat = stat if stat is not None else WindowedSum()
        self._last_config: MetricConfig | None = None

    @property
    def last_config(self) -> MetricConfig | None:
        """The config this rate was last recorded or measured with."""
        return self._last_config

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self._last_config = config
        self.stat.record(config, value, now_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self._last_config = config
        stat = self.stat
        if type(stat) is WindowedSum or type(stat) is WindowedCount:
            return self._measure_sum(stat, config, now_ms)
        return self._measure_general(stat, config, now_ms)

    def _measure_sum(self, stat: SampledStat, config: MetricConfig, now_ms: int) -> float:
        """Purge, sum and find the oldest start in one pass: Kafka's numbers, less work."""
        samples = stat.samples
        if not samples:
            return self._measure_general(stat, config, now_ms)
        expire_age = config.samples * config.time_window_ms
        total = 0.0
        oldest_start = _NO_START
        for sample in samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)
            total += sample.value
            if sample.start_time_ms < oldest_start:  # noqa: PLR1730 - min() costs a call per sample
                oldest_start = sample.start_time_ms
        window_ms = config.time_window_ms
        total_elapsed_ms = now_ms - oldest_start
        full_windows = (
            total_elapsed_ms // window_ms
            if total_elapsed_ms >= 0
            else -(-total_elapsed_ms // window_ms)
        )
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            total_elapsed_ms += (min_full_windows - full_windows) * window_ms
        return total / (max(total_elapsed_ms, 1) / self._unit_ms)

    def _measure_general(self, stat: SampledStat, config: MetricConfig, now_ms: int) -> float:
        """Kafka's steps; it purges twice (stat measure, windowSize), the second changes nothing."""
        stat.purge_obsolete_samples(config, now_ms)
        value = stat.combine(config, now_ms)
        return value / (self._window_size_after_purge(config, now_ms) / self._unit_ms)

    def window_size(self, config: MetricConfig, now_ms: int) -> int:
        """Milliseconds the measured value is spread over (Kafka's ``Rate.windowSize``)."""
        self.stat.purge_obsolete_samples(config, now_ms)
        return self._window_size_after_purge(config, now_ms)

    def _window_size_after_purge(self, config: MetricConfig, now_ms: int) -> int:
        total_elapsed_ms = now_ms - self.stat.oldest(now_ms).start_time_ms
        window_ms = config.time_window_ms
        # Java's long division truncates toward zero (only differs for a clock
        # that went backwards).
        full_windows = (
            total_elapsed_ms // window_ms
            if total_elapsed_ms >= 0
            else -(-total_elapsed_ms // window_ms)
        )
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            total_elapsed_ms += (min_full_windows - full_windows) * window_ms
        return max(total_elapsed_ms, 1)

    def __repr__(self) -> str:
        return f"Rate(unit={self.unit.name}, stat={self.stat!r})"
