"""Errors raised by the quota core.

    QuotaError
     ├── InvalidQuotaConfigError (also a ValueError)
     ├── QuotaViolationError          a recorded value broke a metric's quota
     ├── ThrottlingQuotaExceededError a strict mutation quota refused a request (Kafka error 89)
     ├── TooManyConnectionsError      max.connections / max.connections.per.ip reached
     └── ConnectionThrottledError     a per-IP connection creation rate was exceeded

The hot paths return throttle times instead of raising; the exceptions are
Kafka's control flow where Kafka itself uses them (``Sensor.record`` with
quota checks, strict mutation quotas, connection admission).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quotas.config import MetricConfig
    from quotas.metric_name import MetricName
    from quotas.stats import MeasurableStat


class QuotaError(Exception):
    """Base of every error the quota core raises."""


class InvalidQuotaConfigError(QuotaError, ValueError):
    """A quota, window or sample count that Kafka would refuse."""


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


class ThrottlingQuotaExceededError(QuotaError):
    """A strict controller-mutation quota refused the request (THROTTLING_QUOTA_EXCEEDED)."""

    def __init__(self, throttle_time_ms: int) -> None:
        super().__init__(f"The throttling quota has been exceeded; retry in {throttle_time_ms} ms.")
        self.throttle_time_ms = throttle_time_ms


class TooManyConnectionsError(QuotaError):
    """``max.connections.per.ip`` (or its override) is reached for ``ip``."""

    def __init__(self, ip: str, count: int) -> None:
        super().__init__(f"Too many connections from {ip} (maximum = {count})")
        self.ip = ip
        self.count = count


class ConnectionThrottledError(QuotaError):
    """The per-IP connection creation rate of ``ip`` is exceeded; retry after the throttle."""

    def __init__(self, ip: str, start_throttle_time_ms: int, throttle_time_ms: int) -> None:
        super().__init__(f"{ip} throttled for {throttle_time_ms} ms from {start_throttle_time_ms}")
        self.ip = ip
        self.start_throttle_time_ms = start_throttle_time_ms
        self.throttle_time_ms = throttle_time_ms
