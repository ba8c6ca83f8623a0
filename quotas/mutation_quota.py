"""Controller-mutation quotas (KIP-599): a token bucket per (user, client-id).

Topic and partition mutations arrive in bursts; a sampled rate would keep
one burst in its average for samples × window and throttle it far too long.
A token bucket of ``burst = samples × window × quota`` tokens accepts a
request whenever the bucket is not in deficit *before* it, however large the
request, and then throttles for exactly the time to refill the deficit.

Strict quotas (newer request versions) refuse a request while in deficit and
record nothing; permissive quotas (older versions, whose clients cannot
retry) accept, record, and only report the throttle time. A quota object's
throttle time decays with the time elapsed since it was computed.
"""

from __future__ import annotations

from typing import Protocol

from quotas.client_quota_manager import ClientQuotaManager, QuotaType
from quotas.errors import ThrottlingQuotaExceededError
from quotas.metric_name import MetricName
from quotas.registry import Metrics
from quotas.sensor import Sensor
from quotas.stats import QuotaViolationError, Rate
from quotas.throttle import token_bucket_throttle_time_ms
from quotas.token_bucket import TokenBucket


class ControllerMutationQuota(Protocol):
    """What a request handler holds while it performs mutations."""

    @property
    def is_exceeded(self) -> bool: ...

    def record(self, permits: float, now_ms: int) -> None: ...

    def throttle_time_ms(self, now_ms: int) -> int: ...


class UnboundedControllerMutationQuota:
    """Used while no mutation quota is configured: never exceeded, records nothing."""

    __slots__ = ()

    @property
    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, now_ms: int) -> None:
        return None

    def throttle_time_ms(self, now_ms: int) -> int:
        return 0


UNBOUNDED_CONTROLLER_MUTATION_QUOTA = UnboundedControllerMutationQuota()


class _AbstractControllerMutationQuota:
    __slots__ = ("_last_recorded_time_ms", "_last_throttle_time_ms", "_sensor")

    def __init__(self, sensor: Sensor) -> None:
        self._sensor = sensor
        self._last_throttle_time_ms = 0
        self._last_recorded_time_ms = 0

    def _update_throttle_time(self, violation: QuotaViolationError, now_ms: int) -> None:
        self._last_throttle_time_ms = token_bucket_throttle_time_ms(violation)
        self._last_recorded_time_ms = now_ms

    def throttle_time_ms(self, now_ms: int) -> int:
        """The throttle still owed: the computed time less what has elapsed since."""
        if self._last_throttle_time_ms == 0:
            return 0
        return max(0, self._last_throttle_time_ms - (now_ms - self._last_recorded_time_ms))


class StrictControllerMutationQuota(_AbstractControllerMutationQuota):
    """Refuses a mutation while the bucket is in deficit (``ThrottlingQuotaExceededError``)."""

    __slots__ = ()

    @property
    def is_exceeded(self) -> bool:
        return self._last_throttle_time_ms > 0

    def record(self, permits: float, now_ms: int) -> None:
        try:
            self._sensor.strict_record(permits, now_ms)
        except QuotaViolationError as violation:
            self._update_throttle_time(violation, now_ms)
            raise ThrottlingQuotaExceededError(self._last_throttle_time_ms) from violation


class PermissiveControllerMutationQuota(_AbstractControllerMutationQuota):
    """Accepts and records every mutation; only reports the throttle time."""

    __slots__ = ()

    @property
    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, now_ms: int) -> None:
        try:
            self._sensor.record(permits, now_ms, True)
        except QuotaViolationError as violation:
            self._update_throttle_time(violation, now_ms)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """Token-bucket quotas over mutations (``controller_mutation_rate``), strict by default."""

    quota_metric = "tokens"

    def __init__(
        self, samples: int = 11, window_size_seconds: int = 1, metrics: Metrics | None = None
    ) -> None:
        super().__init__(samples, window_size_seconds, QuotaType.CONTROLLER_MUTATION, metrics)

    def record_and_get_throttle_time_ms(
        self, user: str | None, client_id: str | None, value: float, now_ms: int
    ) -> int:
        """Strict: check, then record only within quota; on violation return the refill time."""
        sensors = self.get_or_create_quota_sensors(user, client_id, now_ms)
        try:
            sensors.quota_sensor.strict_record(value, now_ms)
        except QuotaViolationError as violation:
            return token_bucket_throttle_time_ms(violation)
        return 0

    def new_quota_for(
        self, user: str | None, client_id: str | None, strict: bool, now_ms: int = 0
    ) -> ControllerMutationQuota:
        """A per-request quota; strict for request versions whose clients handle error 89.

        ``now_ms`` stamps the entity's sensors if this call creates them.
        """
        if not self.quotas_enabled:
            return UNBOUNDED_CONTROLLER_MUTATION_QUOTA
        sensor = self.get_or_create_quota_sensors(user, client_id, now_ms).quota_sensor
        if strict:
            return StrictControllerMutationQuota(sensor)
        return PermissiveControllerMutationQuota(sensor)

    def _register_quota_metrics(self, sensor: Sensor, tags: tuple[str, str]) -> None:
        group = self.quota_type.value
        # mutation-rate has no quota: it takes the registry's default config.
        sensor.add(MetricName("mutation-rate", group, self._tag_pairs(tags)), Rate())
        sensor.add(self._quota_metric_name(tags), TokenBucket(), self._quota_metric_config(tags))

    def _throttle_time(self, violation: QuotaViolationError, now_ms: int) -> int:
        return token_bucket_throttle_time_ms(violation)
