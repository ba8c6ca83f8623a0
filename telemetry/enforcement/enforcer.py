"""``Enforcement``: every quota and limit of one server, shared by its listeners.

The composition root builds one from ``[quotas]`` and ``[limits]`` and hands
it to each listener; SIGHUP (and later the admin API) calls :meth:`apply`
with the new settings, which changes bounds on the live managers and never
resets recorded usage. One ``quotas.Metrics`` registry holds every sensor, so
``/metrics`` reads them all from one place.
"""

from __future__ import annotations

from quotas import Metrics
from telemetry.enforcement.client_quotas import ClientQuotas
from telemetry.enforcement.connection_limits import ConnectionLimits
from telemetry.enforcement.refusals import Refusals
from telemetry.enforcement.request_memory import RequestMemoryPool
from telemetry.enforcement.settings import LimitSettings, QuotaSettings
from telemetry.enforcement.throttles import ThrottleTracker

__all__ = ["Enforcement"]


class Enforcement:
    """Client quotas, connection limits and the request memory pool, configured together."""

    def __init__(
        self, quotas: QuotaSettings | None = None, limits: LimitSettings | None = None
    ) -> None:
        self.quota_settings = quotas if quotas is not None else QuotaSettings()
        self.limit_settings = limits if limits is not None else LimitSettings()
        self.metrics = Metrics()
        self.tracker = ThrottleTracker()
        self.clients = ClientQuotas(self.quota_settings, self.tracker, self.metrics)
        self.connections = ConnectionLimits(
            self.quota_settings, self.limit_settings, self.tracker, self.metrics
        )
        self.request_memory = RequestMemoryPool(self.limit_settings.queued_max_request_bytes)
        self.refusals = Refusals()

    @property
    def connections_max_idle_ms(self) -> int:
        return self.limit_settings.connections_max_idle_ms

    @property
    def partial_frame_timeout_ms(self) -> int:
        return self.limit_settings.partial_frame_timeout_ms

    def apply(self, quotas: QuotaSettings, limits: LimitSettings) -> None:
        """Take new settings at run time.

        Raises ``ValueError``, changing nothing, when the windows differ.
        """
        self.clients.apply(quotas)  # refuses a window change before anything is touched
        self.connections.apply(quotas, limits)
        self.request_memory.set_bound(limits.queued_max_request_bytes)
        self.quota_settings = quotas
        self.limit_settings = limits

    def tick(self, now_ms: int) -> None:
        """Periodic housekeeping: elapsed throttles end, idle sensors go."""
        self.clients.tick(now_ms)
