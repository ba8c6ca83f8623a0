"""Quota bounds and the sampling configuration every stat is measured with.

Mirrors Kafka's ``org.apache.kafka.common.metrics.Quota`` and ``MetricConfig``;
both are immutable here, so changing a limit means giving a metric a new
config (Kafka's ``KafkaMetric.config(...)``), never mutating one in place.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass

from quotas.errors import InvalidQuotaConfigError

#: Kafka's "unlimited": ``Long.MAX_VALUE`` as a double.
UNLIMITED = float(2**63 - 1)
#: Kafka's ``Long.MAX_VALUE`` event window: windows complete by time only.
MAX_EVENT_WINDOW = 2**63 - 1
#: ``Double.MAX_VALUE``, what ``max_value_in_quota_window`` answers with no limit.
MAX_DOUBLE = sys.float_info.max


class TimeUnit(enum.IntEnum):
    """The unit a rate is expressed in, as milliseconds per unit (Kafka's ``TimeUnit``)."""

    MILLISECONDS = 1
    SECONDS = 1_000
    MINUTES = 60_000
    HOURS = 3_600_000
    DAYS = 86_400_000

    def convert_ms(self, ms: float) -> float:
        """``MetricsUtils.convert``: a span in milliseconds expressed in this unit."""
        return ms / self.value


@dataclass(frozen=True, slots=True)
class Quota:
    """An upper or lower bound on a measured value.

    ``acceptable`` treats equality as within quota, as Kafka does: a client
    exactly at its limit is never throttled.
    """

    bound: float
    upper: bool = True

    @classmethod
    def upper_bound(cls, bound: float) -> Quota:
        return cls(bound, True)

    @classmethod
    def lower_bound(cls, bound: float) -> Quota:
        return cls(bound, False)

    def acceptable(self, value: float) -> bool:
        return (self.upper and value <= self.bound) or (not self.upper and value >= self.bound)


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """How a stat is sampled: ``samples`` windows of ``time_window_ms`` each.

    Kafka's defaults (2 samples of 30 s) are the registry default; quota
    managers use ``quota.window.num`` (11) windows of ``quota.window.size.seconds``
    (1 s).
    """

    samples: int = 2
    time_window_ms: int = 30_000
    quota: Quota | None = None
    event_window: int = MAX_EVENT_WINDOW

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise InvalidQuotaConfigError("The number of samples must be at least 1.")
        if self.time_window_ms < 1:
            raise InvalidQuotaConfigError(
                f"The time window must be at least 1 ms, got {self.time_window_ms}."
            )
        if self.event_window < 1:
            raise InvalidQuotaConfigError(
                f"The event window must be at least 1 event, got {self.event_window}."
            )
