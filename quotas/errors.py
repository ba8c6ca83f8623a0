"""Errors raised by the quota core.

    QuotaError
     ├── InvalidQuotaConfigError (also a ValueError)
     ├── QuotaViolationError          a recorded value broke a metric's quota (in
     │                                ``stats``, beside the stats it names)
     ├── ThrottlingQuotaExceededError a strict mutation quota refused a request (Kafka error 89)
     ├── TooManyConnectionsError      max.connections / max.connections.per.ip reached
     └── ConnectionThrottledError     a per-IP connection creation rate was exceeded

The hot paths return throttle times instead of raising; the exceptions are
Kafka's control flow where Kafka itself uses them (``Sensor.record`` with
quota checks, strict mutation quotas, connection admission). This module
imports nothing of the quota core, so every other module may import it.
"""

from __future__ import annotations


class QuotaError(Exception):
    """Base of every error the quota core raises."""


class InvalidQuotaConfigError(QuotaError, ValueError):
    """A quota, window or sample count that Kafka would refuse."""


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
