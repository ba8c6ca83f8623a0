"""Connection quotas: counts per IP and connection-creation rates (KIP-402, KIP-612).

Kafka's acceptor does three things for each new connection, in this order:

1. records it in the broker-wide and listener rate sensors and *waits* for
   the throttle time (the larger of the two, at most one quota window) and
   for a free connection slot — here ``inc`` returns that wait and the
   server sleeps, since this library never blocks;
2. records it in the per-IP rate sensor (only when an IP rate quota is set);
   a violation un-records the connection from the IP, broker and listener
   sensors and refuses it (``ConnectionThrottledError``);
3. counts it for its IP and refuses it when the IP already had
   ``max.connections.per.ip`` (``TooManyConnectionsError``) — the refused
   connection stays counted until the server calls ``dec`` on close.

A *protected* listener (Kafka's inter-broker listener; here, say, an admin
listener) bypasses the broker-wide limits while other listeners exist, so
operators can still get in when clients exhaust the broker.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from quotas.config import MetricConfig, Quota
from quotas.errors import ConnectionThrottledError, TooManyConnectionsError
from quotas.metric_name import MetricName
from quotas.registry import Metrics
from quotas.sensor import Sensor
from quotas.stats import Avg, QuotaViolationError, Rate
from quotas.throttle import bounded_throttle_time_ms

#: Kafka's ``Int.MaxValue`` "no limit" for counts and rates.
INT_MAX = 2**31 - 1
METRICS_GROUP = "socket-server-metrics"
_RATE_SENSOR = "Connection-Accept-Rate"
_RATE_METRIC = "connection-accept-rate"
_IP_SENSOR_EXPIRATION_MS = 3600 * 1000


def normalize_ip(ip: str) -> str:
    """The canonical text of an IP address (what ``InetAddress.getHostAddress`` prints)."""
    try:
        return ipaddress.ip_address(ip).compressed
    except ValueError:
        return ip


@dataclass(slots=True)
class _ListenerQuota:
    max_connections: int
    connection_rate_sensor: Sensor
    listener_throttle_sensor: Sensor
    ip_throttle_sensor: Sensor
    count: int = 0


class ConnectionQuotas:
    """Admission control for new connections, per broker, listener and IP."""

    def __init__(
        self,
        samples: int = 11,
        window_size_seconds: int = 1,
        max_connections: int = INT_MAX,
        max_connections_per_ip: int = INT_MAX,
        max_connections_per_ip_overrides: Mapping[str, int] | None = None,
        max_connection_creation_rate: int = INT_MAX,
        protected_listener: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.samples = samples
        self.window_size_ms = window_size_seconds * 1000
        self.metrics = metrics if metrics is not None else Metrics()
        self.max_connections = max_connections
        self.protected_listener = protected_listener
        self._default_max_per_ip = max_connections_per_ip
        self._max_per_ip_overrides = self._normalize_overrides(max_connections_per_ip_overrides)
        self._default_rate_per_ip = INT_MAX
        self._rate_per_ip: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._total_count = 0
        self._listeners: dict[str, _ListenerQuota] = {}
        self._lock = threading.RLock()
        self._broker_rate_sensor = self._rate_sensor(
            _RATE_SENSOR, MetricName(f"broker-{_RATE_METRIC}", METRICS_GROUP),
            max_connection_creation_rate, None, 0,
        )  # fmt: skip

    # -- listeners ---------------------------------------------------------------------------

    def add_listener(
        self,
        listener: str,
        max_connections: int = INT_MAX,
        max_connection_creation_rate: int = INT_MAX,
    ) -> None:
        with self._lock:
            if listener in self._listeners:
                return
            tags = (("listener", listener),)
            rate_sensor = self._rate_sensor(
                f"{_RATE_SENSOR}-{listener}", MetricName(_RATE_METRIC, METRICS_GROUP, tags),
                max_connection_creation_rate, None, 0,
            )  # fmt: skip
            self._listeners[listener] = _ListenerQuota(
                max_connections,
                rate_sensor,
                self._throttle_sensor("", listener),
                self._throttle_sensor("ip-", listener),
            )

    def remove_listener(self, listener: str) -> None:
        with self._lock:
            quota = self._listeners.pop(listener, None)
            if quota is None:
                return
            for sensor in (
                quota.connection_rate_sensor,
                quota.listener_throttle_sensor,
                quota.ip_throttle_sensor,
            ):
                self.metrics.remove_sensor(sensor.name)

    def update_listener(
        self, listener: str, max_connections: int, max_connection_creation_rate: int
    ) -> None:
        with self._lock:
            quota = self._listeners[listener]
            quota.max_connections = max_connections
            self._set_rate_quota(quota.connection_rate_sensor, max_connection_creation_rate)

    # -- admission ---------------------------------------------------------------------------

    def inc(self, listener: str, ip: str, now_ms: int) -> int:
        """Admit a new connection; return how long the acceptor must wait first (ms).

        Raises ``ConnectionThrottledError`` (IP creation rate; nothing is
        counted) or ``TooManyConnectionsError`` (per-IP count; the connection
        *is* counted until ``dec``).
        """
        address = normalize_ip(ip)
        with self._lock:
            if listener not in self._listeners:
                # Kafka registers every listener at start-up; here the first
                # connection does, with no listener-level limits.
                self.add_listener(listener)
            wait_ms = max(self._record_connection_and_get_throttle_ms(listener, now_ms), 0)
            self._record_ip_connection_maybe_throttle(listener, address, now_ms)
            count = self._counts.get(address, 0)
            self._counts[address] = count + 1
            self._total_count += 1
            listener_quota = self._listeners.get(listener)
            if listener_quota is not None:
                listener_quota.count += 1
            limit = self._max_per_ip_overrides.get(address, self._default_max_per_ip)
            if count >= limit:
                raise TooManyConnectionsError(address, limit)
            return wait_ms

    def dec(self, listener: str, ip: str) -> None:
        address = normalize_ip(ip)
        with self._lock:
            count = self._counts.get(address)
            if count is None:
                raise ValueError(
                    f"Attempted to decrease connection count for address with no connections, "
                    f"address: {address}"
                )
            if count == 1:
                del self._counts[address]
            else:
                self._counts[address] = count - 1
            self._total_count -= 1
            listener_quota = self._listeners.get(listener)
            if listener_quota is not None and listener_quota.count > 0:
                listener_quota.count -= 1

    def get(self, ip: str) -> int:
        with self._lock:
            return self._counts.get(normalize_ip(ip), 0)

    @property
    def total_count(self) -> int:
        return self._total_count

    def listener_count(self, listener: str) -> int:
        quota = self._listeners.get(listener)
        return quota.count if quota is not None else 0

    def connection_slot_available(self, listener: str) -> bool:
        """Whether the acceptor of ``listener`` may take another connection now."""
        with self._lock:
            quota = self._listeners.get(listener)
            if quota is not None and quota.count >= quota.max_connections:
                return False
            if self._is_protected(listener):
                return True
            return self._total_count < self.max_connections

    def max_connections_exceeded(self, listener: str) -> bool:
        """Whether the server should close a least-recently-used connection of ``listener``."""
        return self._total_count > self.max_connections and not self._is_protected(listener)

    # -- configuration -----------------------------------------------------------------------

    def update_max_connections_per_ip(
        self, max_connections_per_ip: int, overrides: Mapping[str, int] | None = None
    ) -> None:
        with self._lock:
            self._default_max_per_ip = max_connections_per_ip
            self._max_per_ip_overrides = self._normalize_overrides(overrides)

    def update_broker_max_connections(self, max_connections: int) -> None:
        self.max_connections = max_connections

    def update_broker_max_connection_rate(self, rate: int) -> None:
        with self._lock:
            self._set_rate_quota(self._broker_rate_sensor, rate)

    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None:
        """Set the creation rate of ``ip`` (the default if ``None``); ``rate=None`` resets."""
        with self._lock:
            if ip is not None:
                address = normalize_ip(ip)
                if rate is None:
                    self._rate_per_ip.pop(address, None)
                else:
                    self._rate_per_ip[address] = rate
                sensor = self.metrics.get_sensor(f"{_RATE_SENSOR}-{address}")
                if sensor is not None:
                    self._set_rate_quota(sensor, self.connection_rate_for_ip(address))
                return
            self._default_rate_per_ip = rate if rate is not None else INT_MAX
            for metric_name, metric in self.metrics.metrics.items():
                tags = metric_name.tag_map
                if metric_name.name != _RATE_METRIC or "ip" not in tags:
                    continue
                limit = self.connection_rate_for_ip(tags["ip"])
                quota = metric.config.quota
                if quota is None or quota.bound != limit:
                    metric.config = self._rate_config(limit)

    def connection_rate_for_ip(self, ip: str) -> int:
        return self._rate_per_ip.get(normalize_ip(ip), self._default_rate_per_ip)

    # -- internals ---------------------------------------------------------------------------

    def _is_protected(self, listener: str) -> bool:
        return listener == self.protected_listener and len(self._listeners) > 1

    def _record_connection_and_get_throttle_ms(self, listener: str, now_ms: int) -> int:
        """Broker and listener rates; the wait is the longer of their throttles."""
        throttle_ms = 0
        if not self._is_protected(listener):
            throttle_ms = self._record_and_get_throttle_ms(self._broker_rate_sensor, now_ms)
        listener_quota = self._listeners[listener]
        listener_throttle_ms = self._record_and_get_throttle_ms(
            listener_quota.connection_rate_sensor, now_ms
        )
        throttle_ms = max(throttle_ms, listener_throttle_ms)
        if throttle_ms > 0:
            listener_quota.listener_throttle_sensor.record(throttle_ms, now_ms)
        return throttle_ms

    def _record_ip_connection_maybe_throttle(
        self, listener: str, address: str, now_ms: int
    ) -> None:
        rate = self.connection_rate_for_ip(address)
        if rate == INT_MAX:
            return
        sensor = self.metrics.get_sensor(f"{_RATE_SENSOR}-{address}") or self._rate_sensor(
            f"{_RATE_SENSOR}-{address}",
            MetricName(_RATE_METRIC, METRICS_GROUP, (("ip", address),)),
            rate,
            _IP_SENSOR_EXPIRATION_MS,
            now_ms,
        )
        throttle_ms = self._record_and_get_throttle_ms(sensor, now_ms)
        if throttle_ms > 0:
            # The connection is refused: take it back out of every rate it was counted in.
            sensor.record(-1.0, now_ms, False)
            if not self._is_protected(listener):
                self._broker_rate_sensor.record(-1.0, now_ms, False)
            listener_quota = self._listeners.get(listener)
            if listener_quota is not None:
                listener_quota.ip_throttle_sensor.record(throttle_ms, now_ms)
                listener_quota.connection_rate_sensor.record(-1.0, now_ms, False)
            raise ConnectionThrottledError(address, now_ms, throttle_ms)

    def _record_and_get_throttle_ms(self, sensor: Sensor, now_ms: int) -> int:
        try:
            sensor.record(1.0, now_ms)
        except QuotaViolationError as violation:
            return bounded_throttle_time_ms(violation, self.window_size_ms, now_ms)
        return 0

    def _rate_config(self, limit: int) -> MetricConfig:
        return MetricConfig(
            samples=self.samples,
            time_window_ms=self.window_size_ms,
            quota=Quota.upper_bound(float(limit)),
        )

    def _rate_sensor(
        self,
        name: str,
        metric_name: MetricName,
        limit: int,
        expiration_ms: int | None,
        now_ms: int,
    ) -> Sensor:
        sensor = self.metrics.sensor(name, now_ms, self._rate_config(limit), (), expiration_ms)
        sensor.add(metric_name, Rate())
        return sensor

    def _set_rate_quota(self, sensor: Sensor, limit: int) -> None:
        for metric in sensor.metrics:
            metric.config = self._rate_config(limit)

    def _throttle_sensor(self, prefix: str, listener: str) -> Sensor:
        sensor = self.metrics.sensor(f"{prefix}ConnectionRateThrottleTime-{listener}", 0)
        sensor.add(
            MetricName(
                f"{prefix}connection-accept-throttle-time", METRICS_GROUP, (("listener", listener),)
            ),
            Avg(),
        )
        return sensor

    @staticmethod
    def _normalize_overrides(overrides: Mapping[str, int] | None) -> dict[str, int]:
        return {normalize_ip(host): count for host, count in (overrides or {}).items()}
