"""``Sensor``: one recording point feeding several stats, checked against their quotas.

Kafka's order is kept exactly, because quota behaviour depends on it: record
into every stat, then check the quotas (so a violating value stays recorded:
"permissive"), then record into the parents. If the check fails, the parents
are not recorded. ``strict_record`` checks first and records only within
quota, the way controller-mutation quotas refuse a request outright.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from quotas.config import MetricConfig
from quotas.metric_name import MetricName
from quotas.stats import MeasurableStat, QuotaViolationError, Rate
from quotas.token_bucket import TokenBucket


class Metric:
    """A named stat with its (replaceable) config: Kafka's ``KafkaMetric``.

    Quota managers change a limit by assigning a new ``config``; the stat and
    its samples stay, so changing a limit never resets usage.
    """

    __slots__ = ("config", "metric_name", "stat")

    def __init__(self, metric_name: MetricName, stat: MeasurableStat, config: MetricConfig) -> None:
        self.metric_name = metric_name
        self.stat = stat
        self.config = config

    def measurable_value(self, now_ms: int) -> float:
        return self.stat.measure(self.config, now_ms)

    def __repr__(self) -> str:
        return f"Metric({self.metric_name}, {self.stat!r})"


class Sensor:
    """Records values into its stats and enforces the quotas set on their configs."""

    __slots__ = (
        "_last_record_ms",
        "_lock",
        "_metrics",
        "_on_add",
        "config",
        "inactive_expiration_ms",
        "name",
        "parents",
    )

    def __init__(
        self,
        name: str,
        config: MetricConfig | None = None,
        parents: Iterable[Sensor] = (),
        inactive_expiration_ms: int | None = None,
        *,
        created_ms: int = 0,
        on_add: Callable[[Metric], None] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.parents: tuple[Sensor, ...] = tuple(parents)
        #: ``None`` means the sensor never expires (Kafka's ``Long.MAX_VALUE`` seconds).
        self.inactive_expiration_ms = inactive_expiration_ms
        # Kafka stamps a new sensor with the clock at creation; without a clock
        # here, the creator passes it (the registry does).
        self._last_record_ms = created_ms
        # A tuple, replaced on add: a sensor rarely holds more than one metric,
        # and a list costs a second allocation per sensor.
        self._metrics: tuple[Metric, ...] = ()
        # A registry hands all its sensors one lock: under the GIL recording
        # is serialized anyway, and a lock per sensor costs memory per client.
        self._lock = lock if lock is not None else threading.Lock()
        self._on_add = on_add

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return self._metrics

    @property
    def last_record_ms(self) -> int:
        return self._last_record_ms

    def add(
        self,
        metric_name: MetricName | str,
        stat: MeasurableStat,
        config: MetricConfig | None = None,
    ) -> Metric:
        """Attach ``stat``; its config is ``config``, else the sensor's, else ``MetricConfig()``.

        Adding a name the sensor already has returns the existing metric, as
        Kafka's ``Sensor.add`` does.
        """
        name = metric_name if isinstance(metric_name, MetricName) else MetricName(metric_name)
        with self._lock:
            for existing in self._metrics:
                if existing.metric_name == name:
                    return existing
            metric = Metric(name, stat, config or self.config or MetricConfig())
            if self._on_add is not None:
                self._on_add(metric)
            self._metrics = (*self._metrics, metric)
            return metric

    def record(self, value: float, now_ms: int, check_quotas: bool = True) -> None:
        """Record, then check quotas (raises ``QuotaViolationError``), then the parents."""
        with self._lock:
            # _record_locked, inlined: every quota check of every request comes here.
            self._last_record_ms = now_ms
            metrics = self._metrics
            rate = metrics[0].stat if len(metrics) == 1 else None
            if check_quotas and type(rate) is Rate:
                # A client's quota sensor: one rate. Record, then check it, as
                # below, in two calls instead of four (Rate.record and the
                # check loop inlined; recording into every stat before checking
                # any is the same thing for one stat).
                metric = metrics[0]
                config = metric.config
                rate._last_config = config
                rate.stat.record(config, value, now_ms)
                quota = config.quota
                if quota is not None:
                    measured = rate.measure(config, now_ms)
                    if not (measured <= quota.bound if quota.upper else measured >= quota.bound):
                        raise QuotaViolationError(
                            metric.metric_name, measured, quota.bound, rate, config
                        )
            else:
                for metric in metrics:
                    metric.stat.record(metric.config, value, now_ms)
                if check_quotas:
                    self._check_quotas_locked(now_ms)
        for parent in self.parents:
            parent.record(value, now_ms, check_quotas)

    def strict_record(self, value: float, now_ms: int) -> None:
        """Check first; record only if every quota holds (raises ``QuotaViolationError``)."""
        with self._lock:
            self._check_quotas_locked(now_ms)
            self._record_locked(value, now_ms)
        for parent in self.parents:
            parent.record(value, now_ms, False)

    def check_quotas(self, now_ms: int) -> None:
        with self._lock:
            self._check_quotas_locked(now_ms)

    def has_expired(self, now_ms: int) -> bool:
        expiration = self.inactive_expiration_ms
        return expiration is not None and now_ms - self._last_record_ms > expiration

    def _record_locked(self, value: float, now_ms: int) -> None:
        self._last_record_ms = now_ms
        for metric in self._metrics:
            metric.stat.record(metric.config, value, now_ms)

    def _check_quotas_locked(self, now_ms: int) -> None:
        for metric in self._metrics:
            config = metric.config
            quota = config.quota
            if quota is None:
                continue
            stat = metric.stat
            value = stat.measure(config, now_ms)
            # A token bucket is in quota down to exactly zero tokens; otherwise
            # Quota.acceptable, inlined (equality is within quota).
            if isinstance(stat, TokenBucket):
                violated = value < 0
            elif quota.upper:
                violated = not value <= quota.bound
            else:
                violated = not value >= quota.bound
            if violated:
                raise QuotaViolationError(metric.metric_name, value, quota.bound, stat, config)

    def __repr__(self) -> str:
        return f"Sensor({self.name!r}, metrics={[str(m.metric_name) for m in self._metrics]})"
