"""``Metrics``: the registry that creates, finds and expires sensors.

Quota managers create a sensor per entity on demand and rely on expiry to
forget idle ones (Kafka's ``ExpireSensorTask``); here expiry is an explicit
call with ``now_ms``, which the server makes periodically. The registry is
guarded by a lock because the server records from worker threads as well as
from its event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from quotas.config import MetricConfig
from quotas.metric_name import MetricName
from quotas.sensor import Metric, Sensor


class Metrics:
    """Sensors by name and metrics by ``MetricName``."""

    def __init__(self, config: MetricConfig | None = None) -> None:
        #: The config of sensors created without one (Kafka's ``Metrics`` default).
        self.config = config or MetricConfig()
        self._sensors: dict[str, Sensor] = {}
        self._metrics: dict[MetricName, Metric] = {}
        self._children: dict[str, list[Sensor]] = {}
        self._lock = threading.RLock()
        self._record_lock = threading.Lock()
        #: Counts sensor removals, so holders of sensor references know to look again.
        self.removals = 0
        # One bound method for every sensor: binding it per sensor costs an
        # object per client.
        self._on_add = self._register_metric

    def sensor(
        self,
        name: str,
        now_ms: int,
        config: MetricConfig | None = None,
        parents: Iterable[Sensor] = (),
        inactive_expiration_ms: int | None = None,
    ) -> Sensor:
        """The sensor called ``name``, created (stamped ``now_ms``) if absent."""
        existing = self._sensors.get(name)
        if existing is not None:
            return existing
        with self._lock:
            existing = self._sensors.get(name)
            if existing is not None:
                return existing
            parent_tuple = tuple(parents)
            created = Sensor(
                name,
                config or self.config,
                parent_tuple,
                inactive_expiration_ms,
                created_ms=now_ms,
                on_add=self._on_add,
                lock=self._record_lock,
            )
            self._sensors[name] = created
            for parent in parent_tuple:
                self._children.setdefault(parent.name, []).append(created)
            return created

    def get_sensor(self, name: str) -> Sensor | None:
        return self._sensors.get(name)

    def metric(self, metric_name: MetricName) -> Metric | None:
        return self._metrics.get(metric_name)

    @property
    def metrics(self) -> dict[MetricName, Metric]:
        with self._lock:
            return dict(self._metrics)

    @property
    def sensor_names(self) -> list[str]:
        with self._lock:
            return list(self._sensors)

    def remove_sensor(self, name: str) -> None:
        """Remove a sensor, its metrics and, recursively, its children."""
        with self._lock:
            sensor = self._sensors.pop(name, None)
            if sensor is None:
                return
            self.removals += 1
            for metric in sensor.metrics:
                self._metrics.pop(metric.metric_name, None)
            for child in self._children.pop(name, []):
                self.remove_sensor(child.name)
            for parent in sensor.parents:
                siblings = self._children.get(parent.name)
                if siblings is not None and sensor in siblings:
                    siblings.remove(sensor)

    def expire_sensors(self, now_ms: int) -> list[str]:
        """Remove every sensor inactive for longer than its expiration; return their names."""
        with self._lock:
            expired = [s.name for s in self._sensors.values() if s.has_expired(now_ms)]
            for name in expired:
                self.remove_sensor(name)
            return expired

    def _register_metric(self, metric: Metric) -> None:
        with self._lock:
            if metric.metric_name in self._metrics:
                raise ValueError(
                    f"A metric named '{metric.metric_name}' already exists, "
                    "can't register another one."
                )
            self._metrics[metric.metric_name] = metric
