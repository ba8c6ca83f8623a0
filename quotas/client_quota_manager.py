"""``ClientQuotaManager``: per-(user, client-id) rate quotas, Kafka's produce/fetch model.

Each client records into the sensor its resolved metric tags name; a
violation is answered with a throttle time, never an error, and the value
stays recorded (Kafka's permissive enforcement). The delay queue of throttled
channels is the server's job: this manager returns throttle times and keeps
the ``throttle-time`` and ``queue-size`` sensors.

Two Kafka bugs are fixed the way upstream fixed them: removing a quota resets
the metric to unlimited so the client is really unthrottled (KAFKA-9658), and
``quota_types_enabled`` counts active entities per level so it shrinks again
when the last quota of a level is removed (KAFKA-19282).
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from quotas.config import MAX_DOUBLE, UNLIMITED, MetricConfig, Quota
from quotas.entity import (
    QuotaEntity,
    QuotaTypes,
    quota_limit,
    quota_metric_tags,
    sanitize_user,
)
from quotas.metric_name import MetricName
from quotas.registry import Metrics
from quotas.sensor import Sensor
from quotas.stats import Avg, CumulativeSum, QuotaViolationError, Rate
from quotas.throttle import throttle_time_ms

#: Kafka's ``InactiveSensorExpirationTimeSeconds``: idle client sensors are dropped after an hour.
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
#: The empty tags of the level a quota is not set at, shared by every client's metric names.
_NO_USER_TAG = ("user", "")
_NO_CLIENT_ID_TAG = ("client-id", "")


class QuotaType(enum.Enum):
    """Kafka's quota types; the value is the metric group and sensor-name prefix."""

    FETCH = "Fetch"
    PRODUCE = "Produce"
    REQUEST = "Request"
    CONTROLLER_MUTATION = "ControllerMutation"
    LEADER_REPLICATION = "LeaderReplication"
    FOLLOWER_REPLICATION = "FollowerReplication"
    ALTER_LOG_DIRS_REPLICATION = "AlterLogDirsReplication"
    RLM_COPY = "RLMCopy"
    RLM_FETCH = "RLMFetch"


@dataclass(frozen=True, slots=True)
class ClientSensors:
    """The two sensors of one resolved entity."""

    metric_tags: tuple[str, str]
    quota_sensor: Sensor
    throttle_time_sensor: Sensor


class ClientQuotaManager:
    """Bandwidth-style quotas (bytes/s) per user and client-id, with defaults at each level."""

    #: The metric a quota is enforced on; subclasses name their own.
    quota_metric = "byte-rate"

    def __init__(
        self,
        samples: int = 11,
        window_size_seconds: int = 1,
        quota_type: QuotaType = QuotaType.PRODUCE,
        metrics: Metrics | None = None,
    ) -> None:
        if samples < 1 or window_size_seconds < 1:
            raise ValueError(
                f"quota.window.num and quota.window.size.seconds must be at least 1, "
                f"got {samples} and {window_size_seconds}"
            )
        self.samples = samples
        self.window_size_seconds = window_size_seconds
        self.window_size_ms = window_size_seconds * 1000
        self.quota_type = quota_type
        self.metrics = metrics if metrics is not None else Metrics()
        self._overrides: dict[QuotaEntity, Quota] = {}
        self._active_entities = {
            QuotaTypes.CLIENT_ID_QUOTA_ENABLED: 0,
            QuotaTypes.USER_QUOTA_ENABLED: 0,
            QuotaTypes.USER_CLIENT_ID_QUOTA_ENABLED: 0,
        }
        self._enabled = 0
        self._lock = threading.RLock()
        # (user, client_id) as callers pass them -> sensors. Valid while the
        # quota config and the registry's sensors are unchanged; saves the
        # resolution and the name formatting on every record.
        self._sensor_cache: dict[tuple[str, str], ClientSensors] = {}
        self._cache_generation = self.metrics.removals
        #: Counts quota changes: sensors a caller resolved (:meth:`resolve`) are
        #: valid while this and the registry's ``removals`` are unchanged.
        self.epoch = 0
        self._configs_by_bound: dict[float, MetricConfig] = {}
        group = quota_type.value
        self._delay_queue_sensor = self.metrics.sensor(f"{group}-delayQueue", 0)
        self._delay_queue_sensor.add(MetricName("queue-size", group), CumulativeSum())

    # -- configuration -----------------------------------------------------------------------

    @property
    def quota_types_enabled(self) -> int:
        return self._enabled

    @property
    def quotas_enabled(self) -> bool:
        # != QuotaTypes.NO_QUOTAS (0), without the enum member's lookup: asked on every request.
        return self._enabled != 0

    def update_quota(self, user: str | None, client_id: str | None, quota: Quota | None) -> None:
        """Set (or, with ``None``, remove) the quota of an entity.

        ``user`` and ``client_id`` are a name, ``DEFAULT``, or ``None`` for "not
        part of this entity". Existing sensors keep their samples: only the
        bound changes, so changing a limit never resets usage.
        """
        entity = QuotaEntity.of(user, client_id)
        kind = entity.quota_type
        with self._lock:
            present = entity in self._overrides
            if quota is None:
                if present:
                    del self._overrides[entity]
                    self._active_entities[kind] -= 1
                    if self._active_entities[kind] == 0:
                        self._enabled &= ~kind
            else:
                if not present:
                    self._active_entities[kind] += 1
                    self._enabled |= kind
                self._overrides[entity] = quota
            self._sensor_cache.clear()
            self.epoch += 1
            self._update_quota_metric_configs()

    def quota(self, user: str | None, client_id: str | None) -> Quota:
        """The quota that governs this client (unlimited when none is configured)."""
        limit = self._limit_for(self._tags_for(user, client_id))
        return Quota.upper_bound(limit.bound if limit is not None else UNLIMITED)

    def max_value_in_quota_window(self, user: str | None, client_id: str | None) -> float:
        """The most a client may use in ``samples − 1`` windows (caps a fetch response)."""
        if not self.quotas_enabled:
            return MAX_DOUBLE
        limit = self._limit_for(self._tags_for(user, client_id))
        if limit is None:
            return MAX_DOUBLE
        return limit.bound * (self.samples - 1) * self.window_size_seconds

    # -- recording ---------------------------------------------------------------------------

    def record_and_get_throttle_time_ms(
        self, user: str | None, client_id: str | None, value: float, now_ms: int
    ) -> int:
        """Record ``value``; return how long to throttle the client (0 within quota).

        The value stays recorded even when it violates the quota.
        """
        # get_or_create_quota_sensors' cache hit, inlined: this is the hot path.
        sensors = None
        if self._cache_generation == self.metrics.removals:
            sensors = self._sensor_cache.get((user or "", client_id or ""))
        if sensors is None:
            sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
        try:
            sensors.quota_sensor.record(value, now_ms, True)
        except QuotaViolationError as violation:
            return self._throttle_time(violation, now_ms)
        return 0

    def resolve(self, user: str | None, client_id: str | None, now_ms: int) -> ClientSensors | None:
        """The client's sensors for :meth:`record_on`; ``None`` while no quota is set.

        For a caller that records many times for one client (a connection):
        the sensors stay valid while ``epoch`` and ``metrics.removals`` are
        unchanged, so the resolution and cache lookup happen once, not per
        request.
        """
        if not self.quotas_enabled:
            return None
        return self.get_or_create_quota_sensors(user, client_id, now_ms)

    def record_on(self, sensors: ClientSensors, value: float, now_ms: int) -> int:
        """``record_and_get_throttle_time_ms`` on sensors from :meth:`resolve`."""
        try:
            sensors.quota_sensor.record(value, now_ms, True)
        except QuotaViolationError as violation:
            return self._throttle_time(violation, now_ms)
        return 0

    def maybe_record_and_get_throttle_time_ms(
        self, user: str | None, client_id: str | None, value: float, now_ms: int
    ) -> int:
        """As ``record_and_get_throttle_time_ms``, but records nothing while no quota is set."""
        if not self.quotas_enabled:
            return 0
        return self.record_and_get_throttle_time_ms(user, client_id, value, now_ms)

    def record_no_throttle(
        self, user: str | None, client_id: str | None, value: float, now_ms: int
    ) -> None:
        sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
        sensors.quota_sensor.record(value, now_ms, False)

    def unrecord(self, user: str | None, client_id: str | None, value: float, now_ms: int) -> None:
        """Take back a recorded value (Kafka's fetch path: a throttled response is sent empty)."""
        self.record_no_throttle(user, client_id, -value, now_ms)

    def throttle(
        self, user: str | None, client_id: str | None, throttle_time_ms: int, now_ms: int
    ) -> None:
        """Note that a channel is being throttled: ``throttle-time`` and ``queue-size`` +1."""
        if throttle_time_ms <= 0:
            return
        sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
        sensors.throttle_time_sensor.record(throttle_time_ms, now_ms)
        self._delay_queue_sensor.record(1.0, now_ms)

    def throttled_channel_released(self, now_ms: int) -> None:
        """A throttled channel's delay has elapsed: ``queue-size`` −1."""
        self._delay_queue_sensor.record(-1.0, now_ms)

    def expire_sensors(self, now_ms: int) -> list[str]:
        """Drop sensors idle for an hour (Kafka's ``ExpireSensorTask``)."""
        return self.metrics.expire_sensors(now_ms)

    # -- sensors -----------------------------------------------------------------------------

    def get_or_create_quota_sensors(
        self, user: str | None, client_id: str | None, now_ms: int
    ) -> ClientSensors:
        key = (user or "", client_id or "")
        if self._cache_generation == self.metrics.removals:
            cached = self._sensor_cache.get(key)
            if cached is not None:
                return cached
        with self._lock:
            if self._cache_generation != self.metrics.removals:
                self._sensor_cache.clear()
                self._cache_generation = self.metrics.removals
            tags = self._tags_for(user, client_id)
            if tags == key:
                tags = key  # one tuple per client, not two: clients are many
            user_tag, client_tag = tags
            group = self.quota_type.value
            quota_sensor = self.metrics.sensor(
                f"{group}-{user_tag}:{client_tag}",
                now_ms,
                inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
            )
            if not quota_sensor.metrics:
                self._register_quota_metrics(quota_sensor, tags)
            throttle_sensor = self.metrics.sensor(
                f"{group}ThrottleTime-{user_tag}:{client_tag}",
                now_ms,
                inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
            )
            if not throttle_sensor.metrics:
                throttle_sensor.add(
                    MetricName("throttle-time", group, quota_sensor.metrics[0].metric_name.tags),
                    Avg(),
                )
            sensors = ClientSensors(tags, quota_sensor, throttle_sensor)
            self._sensor_cache[key] = sensors
            return sensors

    def _register_quota_metrics(self, sensor: Sensor, tags: tuple[str, str]) -> None:
        sensor.add(self._quota_metric_name(tags), Rate(), self._quota_metric_config(tags))

    def _quota_metric_name(self, tags: tuple[str, str]) -> MetricName:
        return MetricName(self.quota_metric, self.quota_type.value, self._tag_pairs(tags))

    def _quota_metric_config(self, tags: tuple[str, str]) -> MetricConfig:
        limit = self._limit_for(tags)
        return self._metric_config(limit.bound if limit is not None else UNLIMITED)

    def _metric_config(self, bound: float) -> MetricConfig:
        """One shared (immutable) config per bound: thousands of clients share a few limits."""
        config = self._configs_by_bound.get(bound)
        if config is None:
            config = MetricConfig(
                samples=self.samples,
                time_window_ms=self.window_size_ms,
                quota=Quota.upper_bound(bound),
            )
            self._configs_by_bound[bound] = config
        return config

    def throttle_time_of(self, violation: QuotaViolationError, now_ms: int) -> int:
        """The throttle for a violation of this manager's quota (a caller recording itself)."""
        return self._throttle_time(violation, now_ms)

    def _throttle_time(self, violation: QuotaViolationError, now_ms: int) -> int:
        return throttle_time_ms(violation, now_ms)

    @staticmethod
    def _tag_pairs(tags: tuple[str, str]) -> tuple[tuple[str, str], tuple[str, str]]:
        user_tag, client_tag = tags
        return (
            ("user", user_tag) if user_tag else _NO_USER_TAG,
            ("client-id", client_tag) if client_tag else _NO_CLIENT_ID_TAG,
        )

    def _tags_for(self, user: str | None, client_id: str | None) -> tuple[str, str]:
        return quota_metric_tags(
            self._overrides, self._enabled, sanitize_user(user) or "", client_id or ""
        )

    def _limit_for(self, tags: tuple[str, str]) -> Quota | None:
        return quota_limit(self._overrides, tags[0], tags[1])

    def _update_quota_metric_configs(self) -> None:
        """Give every existing quota metric whose limit changed its new bound.

        A removed quota resolves to unlimited, not to "leave as is", so the
        client is really unthrottled (KAFKA-9658).
        """
        for metric_name, metric in self.metrics.metrics.items():
            if metric_name.name != self.quota_metric or metric_name.group != self.quota_type.value:
                continue
            tags = dict(metric_name.tags)
            limit = self._limit_for((tags.get("user", ""), tags.get("client-id", "")))
            bound = limit.bound if limit is not None else UNLIMITED
            current = metric.config.quota
            if current is None or current.bound != bound:
                metric.config = self._metric_config(bound)
