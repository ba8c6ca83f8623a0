"""Admission of new connections: Kafka's ``ConnectionQuotas`` with the ``[limits]`` numbers.

For each new connection, in Kafka's order (``SocketServer.Acceptor``):

1. ``max_connections``: the server is full — Kafka's acceptor waits for a
   slot; an event-loop server cannot hold a connection without serving it,
   so the connection is closed at once (and not counted);
2. the broker-wide ``max_connection_creation_rate``: the connection is
   recorded; over the rate, accepting is *delayed* by the throttle (at most
   one window), as Kafka's acceptor sleeps;
3. the per-IP ``connection_creation_rate`` (``[[quotas.ips]]``): over it the
   connection is un-recorded and closed *after* the throttle delay
   (Kafka's ``DelayedCloseSocket``), so a reconnect loop slows down;
4. ``max_connections_per_ip``: the connection is closed at once; it stays
   counted until the listener releases it on close, as in Kafka.

A closed connection releases its slot (``release``, Kafka's ``dec``).
Transport-independent: the listener applies the delays and closes.

Every listener (the Kafka listener, the HTTP listener) counts against the one
``max_connections``, counted at accept, before any authentication; so that a
flood of one listener cannot refuse every new connection of the other, each
listener registered with :meth:`ConnectionLimits.add_listener` keeps a
reserve of ``max_connections // 10`` slots the others may not take (as
Kafka's per-listener ``listener.name.X.max.connections`` partitions a
broker's connections): a listener is full at ``max_connections`` minus the
part of the other listeners' reserves they do not use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from quotas import (
    DEFAULT,
    ConnectionQuotas,
    ConnectionThrottledError,
    Metrics,
    TooManyConnectionsError,
)
from telemetry.enforcement.throttles import ThrottleReason, ThrottleTracker

if TYPE_CHECKING:
    from telemetry.enforcement.settings import LimitSettings, QuotaSettings

__all__ = ["LISTENER_RESERVE_DIVISOR", "Admission", "AdmissionOutcome", "ConnectionLimits"]

#: Each listener keeps ``max_connections // 10`` slots the other listeners cannot take.
LISTENER_RESERVE_DIVISOR: Final = 10


class AdmissionOutcome(enum.Enum):
    ADMITTED = "admitted"  # serve it, after ``wait_ms`` if that is not 0
    REFUSED = "refused"  # close it now
    THROTTLED = "throttled"  # close it after ``wait_ms`` without serving it


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with a new connection; ``counted`` ones must be released on close."""

    outcome: AdmissionOutcome
    wait_ms: int = 0
    counted: bool = False
    reason: ThrottleReason | None = None


class ConnectionLimits:
    """Counts, rates and per-IP quotas of new connections, for every listener."""

    def __init__(
        self,
        quotas: QuotaSettings,
        limits: LimitSettings,
        tracker: ThrottleTracker | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.tracker = tracker if tracker is not None else ThrottleTracker()
        self.quotas = ConnectionQuotas(
            samples=quotas.window_num,
            window_size_seconds=quotas.window_size_s,
            max_connections=limits.max_connections,
            max_connections_per_ip=limits.max_connections_per_ip,
            max_connection_creation_rate=limits.max_connection_creation_rate,
            metrics=metrics,
        )
        self._ip_rates: dict[str | None, int] = {}
        self._listeners: list[str] = []
        self.apply(quotas, limits)

    def add_listener(self, listener: str) -> None:
        """A listener that keeps its reserve of slots (see the module docstring)."""
        if listener not in self._listeners:
            self._listeners.append(listener)
            self.quotas.add_listener(listener)

    def reserved_for_others(self, listener: str) -> int:
        """Slots ``listener`` may not take: the other listeners' unused reserves."""
        connection_quotas = self.quotas
        reserve = connection_quotas.max_connections // LISTENER_RESERVE_DIVISOR
        reserved = 0
        if reserve:
            for other in self._listeners:
                if other != listener:
                    reserved += max(0, reserve - connection_quotas.listener_count(other))
        return reserved

    def apply(self, quotas: QuotaSettings, limits: LimitSettings) -> None:
        """Take new limits and per-IP rates; counts and recorded rates are kept."""
        connection_quotas = self.quotas
        connection_quotas.update_broker_max_connections(limits.max_connections)
        connection_quotas.update_max_connections_per_ip(limits.max_connections_per_ip)
        connection_quotas.update_broker_max_connection_rate(limits.max_connection_creation_rate)
        wanted: dict[str | None, int] = {
            (None if entry.ip == DEFAULT else entry.ip): entry.connection_creation_rate
            for entry in quotas.ips
        }
        for ip in set(self._ip_rates) | set(wanted):
            if self._ip_rates.get(ip) != wanted.get(ip):
                connection_quotas.update_ip_connection_rate_quota(ip, wanted.get(ip))
        self._ip_rates = wanted

    def admit(self, listener: str, ip: str, now_ms: int, waiting: int = 0) -> Admission:
        """Admit a connection from ``ip``; ``waiting`` connections are not yet admitted."""
        connection_quotas = self.quotas
        if (
            not connection_quotas.connection_slot_available(listener)
            or connection_quotas.total_count + waiting + self.reserved_for_others(listener)
            >= connection_quotas.max_connections
        ):
            self.tracker.count(ThrottleReason.MAX_CONNECTIONS)
            return Admission(AdmissionOutcome.REFUSED, reason=ThrottleReason.MAX_CONNECTIONS)
        try:
            wait_ms = connection_quotas.inc(listener, ip, now_ms)
        except ConnectionThrottledError as throttled:
            self.tracker.throttle(
                ThrottleReason.CONNECTION_CREATION_RATE, ip, throttled.throttle_time_ms, now_ms
            )
            return Admission(
                AdmissionOutcome.THROTTLED,
                wait_ms=throttled.throttle_time_ms,
                reason=ThrottleReason.CONNECTION_CREATION_RATE,
            )
        except TooManyConnectionsError:
            self.tracker.count(ThrottleReason.MAX_CONNECTIONS_PER_IP)
            return Admission(
                AdmissionOutcome.REFUSED,
                counted=True,
                reason=ThrottleReason.MAX_CONNECTIONS_PER_IP,
            )
        if wait_ms > 0:
            self.tracker.throttle(
                ThrottleReason.MAX_CONNECTION_CREATION_RATE, listener, wait_ms, now_ms
            )
            return Admission(
                AdmissionOutcome.ADMITTED,
                wait_ms=wait_ms,
                counted=True,
                reason=ThrottleReason.MAX_CONNECTION_CREATION_RATE,
            )
        return Admission(AdmissionOutcome.ADMITTED, counted=True)

    def release(self, listener: str, ip: str) -> None:
        """A counted connection closed (Kafka's ``dec``)."""
        self.quotas.dec(listener, ip)
