"""``RequestQuotaManager``: request-thread time as a percentage of one thread (KIP-124).

A client at ``request_percentage = 50`` may keep half of one request thread
busy. Time is recorded in nanoseconds and stored as a percentage per second
(``nanos × 100 / 1e9``), and a throttle never exceeds one quota window: a
request-time violation is short by nature, and a long mute would starve the
client of its own responses.
"""

from __future__ import annotations

from quotas.client_quota_manager import ClientQuotaManager, ClientSensors, QuotaType
from quotas.metric_name import MetricName
from quotas.registry import Metrics
from quotas.stats import QuotaViolationError, Rate
from quotas.throttle import bounded_throttle_time_ms

#: ``NanosToPercentagePerSecond``.
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9


def nanos_to_percentage(nanos: float) -> float:
    return nanos * NANOS_TO_PERCENTAGE_PER_SECOND


class RequestQuotaManager(ClientQuotaManager):
    """Request-time quotas; recorded values are thread time in nanoseconds."""

    quota_metric = "request-time"

    def __init__(
        self, samples: int = 11, window_size_seconds: int = 1, metrics: Metrics | None = None
    ) -> None:
        super().__init__(samples, window_size_seconds, QuotaType.REQUEST, metrics)
        group = QuotaType.REQUEST.value
        # Exempt requests (health, metrics scrapes; Kafka: inter-broker) are
        # measured but never throttled; the sensor never expires.
        self.exempt_sensor = self.metrics.sensor(f"exempt-{group}", 0)
        self.exempt_sensor.add(MetricName("exempt-request-time", group), Rate())

    def record_and_get_throttle_time_ms(
        self, user: str | None, client_id: str | None, value: float, now_ms: int
    ) -> int:
        """Record ``value`` ns of request-thread time; return the throttle (≤ one window)."""
        return super().record_and_get_throttle_time_ms(
            user, client_id, nanos_to_percentage(value), now_ms
        )

    def record_nanos_on(self, sensors: ClientSensors, nanos: float, now_ms: int) -> int:
        """``record_on`` of ``nanos`` of request-thread time (sensors from ``resolve``)."""
        return self.record_on(sensors, nanos * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms)

    def record_no_throttle(
        self, user: str | None, client_id: str | None, value: float, now_ms: int
    ) -> None:
        super().record_no_throttle(user, client_id, nanos_to_percentage(value), now_ms)

    def record_exempt(self, nanos: float, now_ms: int) -> None:
        self.exempt_sensor.record(nanos_to_percentage(nanos), now_ms, False)

    def _throttle_time(self, violation: QuotaViolationError, now_ms: int) -> int:
        return bounded_throttle_time_ms(violation, self.window_size_ms, now_ms)
