"""Sampled statistics and ``Rate``: Kafka's ``SampledStat`` family, to the millisecond.

A sampled stat keeps up to ``samples + 1`` windows. The extra slot (Kafka
#15889, "Fix rate metric spikes") keeps the window that overlaps the start of
the monitored span, so a rate does not jump when the oldest window is
recycled. A sample whose last event is ``samples × window`` old is reset
("purged") when measured.

The windows live in one flat ``array('d')`` per stat rather than one object
per window: a server keeps two sampled stats for every client, and twelve
window objects each (with their boxed floats and ints) cost about four times
the memory of twelve rows of four doubles. Millisecond timestamps are exact as
doubles (up to 2⁵³ ms), so the arithmetic is Kafka's to the bit.
"""

from __future__ import annotations

import math
import sys
from array import array
from typing import TYPE_CHECKING, Protocol

from quotas.config import MAX_EVENT_WINDOW, MetricConfig, TimeUnit
from quotas.errors import QuotaError

if TYPE_CHECKING:
    from quotas.metric_name import MetricName

#: The ring's header: the earliest window start, and a floor under the last events.
_OLDEST_START = 0
_LAST_FLOOR = 1
_HEADER = 2
#: Numbers per window after the header: value, event count, start, last event.
_FIELDS = 4
#: Whether the builtin ``sum`` of floats is plain left-to-right double addition,
#: Kafka's loop to the bit (it compensates rounding errors since Python 3.12).
_PLAIN_SUM = sys.version_info < (3, 12)
#: The ring of a stat that has recorded nothing; shared, never written (a ring
#: grows by replacement).
_NO_RING: array[float] = array("d")


class MeasurableStat(Protocol):
    """What a sensor can record into and a metric can measure."""

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None: ...

    def measure(self, config: MetricConfig, now_ms: int) -> float: ...


class Sample:
    """A snapshot of one window of a sampled stat (Kafka's ``SampledStat.Sample``).

    The stat's ring holds the numbers; a ``Sample`` is a read-only copy, made
    for inspection (``SampledStat.samples``), never on the recording path.
    """

    __slots__ = ("event_count", "last_event_ms", "start_time_ms", "value")

    def __init__(self, value: float, event_count: int, start_time_ms: int, last_event_ms: int):
        self.value = value
        self.event_count = event_count
        self.start_time_ms = start_time_ms
        self.last_event_ms = last_event_ms

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
    """A value measured over a ring of ``samples + 1`` windows; subclasses say how to combine.

    The ring is a header of two numbers, then four numbers per window:
    ``ring[0]`` is the earliest start of any window (kept exact, it is the
    rate's window), ``ring[1]`` a floor under every window's last event and
    under the current window's start (a purge is due only once
    ``now − floor`` reaches the expiry age); window ``i``'s value, event
    count, start and last event (milliseconds) follow at ``2 + 4i`` .. ``2 + 4i + 3``.
    Recording touches one window's four numbers; a measure reads every
    fourth. The ring grows one window at a time, as Kafka's list of samples
    does, and each growth makes an exactly sized array, so a full ring holds
    no spare capacity.
    """

    __slots__ = ("_current", "_initial_value", "_ring")

    def __init__(self, initial_value: float) -> None:
        self._initial_value = initial_value
        self._current = 0
        self._ring = _NO_RING

    @property
    def samples(self) -> list[Sample]:
        """The windows in ring order, as snapshots."""
        ring = self._ring
        return [_snapshot(ring, slot) for slot in range(_slots(ring))]

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        ring = self._ring
        if not ring:
            ring = self._add_slot(now_ms)
        at = _HEADER + _FIELDS * self._current  # value; count, start, last event after it
        # Sample.is_complete, inlined: this is the hot path of every quota check.
        # No count reaches the default event window (a double stops counting
        # at 2**53), so that comparison is skipped for it.
        event_window = config.event_window
        elapsed_ms = now_ms - ring[at + 2]
        if elapsed_ms >= config.time_window_ms or (
            event_window is not MAX_EVENT_WINDOW and ring[at + 1] >= event_window
        ):
            at = _HEADER + _FIELDS * self._advance(config, now_ms)
            ring = self._ring
        elif elapsed_ms < 0 and now_ms < ring[_LAST_FLOOR]:
            # A clock gone back before the current window's start: the floor
            # is at most that start, so only then can it be above `now_ms`.
            ring[_LAST_FLOOR] = now_ms
        ring[at] = self.update(ring[at], value)
        ring[at + 1] += 1.0
        ring[at + 3] = now_ms

    def _advance(self, config: MetricConfig, now_ms: int) -> int:
        # One slot more than `samples`: see purge_obsolete_samples.
        current = (self._current + 1) % (config.samples + 1)
        self._current = current
        ring = self._ring
        if current >= _slots(ring):
            self._add_slot(now_ms)
        else:
            self._reset(ring, current, now_ms)
            _refresh_oldest_start(ring)
        return current

    def _add_slot(self, now_ms: int) -> array[float]:
        """Replace the ring by one a window longer, the new last window fresh at ``now_ms``."""
        old = self._ring
        fresh = array("d", (self._initial_value, 0.0, now_ms, now_ms))
        if old:
            ring = old + fresh  # a new array of exactly the two sizes
            ring[_OLDEST_START] = min(ring[_OLDEST_START], now_ms)
            ring[_LAST_FLOOR] = min(ring[_LAST_FLOOR], now_ms)
        else:
            ring = array("d", (now_ms, now_ms)) + fresh
        self._ring = ring
        return ring

    def _reset(self, ring: array[float], slot: int, now_ms: int) -> None:
        """Start window ``slot`` afresh; the caller refreshes the oldest start."""
        at = _HEADER + _FIELDS * slot
        ring[at] = self._initial_value
        ring[at + 1] = 0.0
        ring[at + 2] = now_ms
        ring[at + 3] = now_ms
        ring[_LAST_FLOOR] = min(ring[_LAST_FLOOR], now_ms)

    def current(self, now_ms: int) -> Sample:
        """The window being recorded into (created at ``now_ms`` if there is none yet)."""
        if not self._ring:
            self._add_slot(now_ms)
        return _snapshot(self._ring, self._current)

    def oldest(self, now_ms: int) -> Sample:
        """The sample that started first (the first one wins a tie)."""
        if not self._ring:
            self._add_slot(now_ms)
        ring = self._ring
        return _snapshot(ring, ring[_HEADER + 2 :: _FIELDS].index(ring[_OLDEST_START]))

    def _oldest_start_ms(self, now_ms: int) -> float:
        """When the oldest window started (``oldest(now_ms).start_time_ms``, without the copy)."""
        if not self._ring:
            self._add_slot(now_ms)
        return self._ring[_OLDEST_START]

    def purge_obsolete_samples(self, config: MetricConfig, now_ms: int) -> None:
        """Reset samples with no event inside the monitored span.

        A sample that started before the span but saw an event inside it is
        kept: that is what lets a rate cover more than ``samples`` windows.
        """
        expire_age = config.samples * config.time_window_ms
        ring = self._ring
        if not ring or now_ms - ring[_LAST_FLOOR] < expire_age:
            return  # every last event is at or after the floor: none is that old
        purged = False
        for slot in range(_slots(ring)):
            if now_ms - ring[_HEADER + _FIELDS * slot + 3] >= expire_age:
                self._reset(ring, slot, now_ms)
                purged = True
        if purged:
            _refresh_oldest_start(ring)
        # Exact again until the next window; never above the current window's
        # start, which lets `record` skip the floor unless the clock went back.
        current_start = ring[_HEADER + _FIELDS * self._current + 2]
        ring[_LAST_FLOOR] = min(*ring[_HEADER + 3 :: _FIELDS], current_start)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.purge_obsolete_samples(config, now_ms)
        return self.combine(config, now_ms)

    def update(self, current: float, value: float) -> float:
        """The window's new value after recording ``value`` into it."""
        raise NotImplementedError

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        raise NotImplementedError

    def _values(self) -> array[float]:
        return self._ring[_HEADER::_FIELDS]

    def _event_count(self) -> float:
        return sum(self._ring[_HEADER + 1 :: _FIELDS])  # whole numbers: exact in any order

    def __repr__(self) -> str:
        return f"{type(self).__name__}(current={self._current}, samples={self.samples})"


def _slots(ring: array[float]) -> int:
    return (len(ring) - _HEADER) // _FIELDS if ring else 0


def _snapshot(ring: array[float], slot: int) -> Sample:
    at = _HEADER + _FIELDS * slot
    return Sample(ring[at], int(ring[at + 1]), int(ring[at + 2]), int(ring[at + 3]))


def _refresh_oldest_start(ring: array[float]) -> None:
    ring[_OLDEST_START] = min(ring[_HEADER + 2 :: _FIELDS])


class WindowedSum(SampledStat):
    """The sum of the values recorded in the live windows."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def update(self, current: float, value: float) -> float:
        return current + value

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        # Left-to-right double addition, as Kafka's loop: deterministic to the
        # last bit (the builtin sum() compensates since Python 3.12).
        total = 0.0
        for value in self._values():
            total += value
        return total


class WindowedCount(WindowedSum):
    """The number of events in the live windows (Kafka's ``WindowedCount``)."""

    __slots__ = ()

    def update(self, current: float, value: float) -> float:
        return current + 1.0


class Avg(SampledStat):
    """Mean of the recorded values; NaN when nothing was recorded (as Kafka)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def update(self, current: float, value: float) -> float:
        return current + value

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        total = 0.0
        for value in self._values():
            total += value
        count = self._event_count()
        return math.nan if count == 0 else total / count


class Max(SampledStat):
    """Largest recorded value; NaN when nothing was recorded."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(-math.inf)

    def update(self, current: float, value: float) -> float:
        return max(current, value)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        if self._event_count() == 0:
            return math.nan
        return max(self._values())


class Min(SampledStat):
    """Smallest recorded value; NaN when nothing was recorded."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(math.inf)

    def update(self, current: float, value: float) -> float:
        return min(current, value)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        if self._event_count() == 0:
            return math.nan
        return min(self._values())


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
        # The member's own int, shared (int(unit) would make one per stat): enum
        # attribute access is slow on the hot path.
        self._unit_ms = unit.value
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
        ring = stat._ring  # Rate and its stat are one measurement
        if not ring or (type(stat) is not WindowedSum and type(stat) is not WindowedCount):
            return self._measure_general(stat, config, now_ms)
        # A sum's rate, on the ring's columns (every quota check comes here):
        # Kafka's steps, the purge only when due, the window from the cached
        # oldest start.
        window_ms = config.time_window_ms
        samples = config.samples
        if now_ms - ring[_LAST_FLOOR] >= samples * window_ms:
            stat.purge_obsolete_samples(config, now_ms)
        if _PLAIN_SUM:
            total = sum(ring[_HEADER::_FIELDS], 0.0)
        else:
            total = 0.0
            for value in ring[_HEADER::_FIELDS]:
                total += value  # left to right, as Kafka's loop
        total_elapsed_ms = now_ms - ring[_OLDEST_START]
        full_windows = (
            total_elapsed_ms // window_ms
            if total_elapsed_ms >= 0
            else -(-total_elapsed_ms // window_ms)
        )
        min_full_windows = samples - 1
        if full_windows < min_full_windows:
            total_elapsed_ms += (min_full_windows - full_windows) * window_ms
        # max(total_elapsed_ms, 1), without the builtin's call (NaN kept as max keeps it).
        return total / ((1 if total_elapsed_ms < 1 else total_elapsed_ms) / self._unit_ms)

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
        total_elapsed_ms = int(now_ms - self.stat._oldest_start_ms(now_ms))
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


class QuotaViolationError(QuotaError):
    """``value`` measured by ``stat`` broke ``bound`` (Kafka's ``QuotaViolationException``).

    ``config`` is the violating metric's config: the throttle formula needs
    its window, as Kafka reads it from the ``KafkaMetric`` it carries.
    """

    def __init__(
        self,
        metric_name: MetricName | str,
        value: float,
        bound: float,
        stat: MeasurableStat,
        config: MetricConfig | None = None,
    ) -> None:
        super().__init__(f"'{metric_name}' violated quota. Actual: {value}, Threshold: {bound}")
        self.metric_name = metric_name
        self.value = value
        self.bound = bound
        self.stat = stat
        self.config = config
