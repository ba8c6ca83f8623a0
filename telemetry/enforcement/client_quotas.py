"""Client quotas per (user, client id): push bytes, request time, instance creations.

The three quota kinds of a Kafka broker, with Kafka's managers from ``quotas``:

* ``push_byte_rate`` — :class:`quotas.ClientQuotaManager` of type Produce over
  the bytes of each PushTelemetry payload as received. Permissive, like a
  produce quota: the push is accepted and the client is throttled.
* ``push_decoded_byte_rate`` — the same over each payload's decoded size
  (decompressed), which every door knows before logging it: a small
  compressed push that decodes huge costs the landing what it decodes to,
  so it is charged that. Its sensors live in a registry of their own
  (``decoded_metrics``): Kafka's sensor names are per quota type, and this is
  a second Produce-style quota.
* ``request_percentage`` — :class:`quotas.RequestQuotaManager` over the time
  spent handling the client's requests (KIP-124), throttle bounded to one
  window.
* ``controller_mutation_rate`` — :class:`quotas.ControllerMutationQuotaManager`,
  strict as CreateTopics v6+ (KIP-599): a client instance creation (a GET
  with the zero id, or an id the server does not know) draws one token; in
  deficit the GET is refused with THROTTLING_QUOTA_EXCEEDED and nothing is
  created.

A response carries the larger of the throttle times, and the larger one's
manager records the throttle (``throttle-time``, ``queue-size``), as
Kafka's ``KafkaApis`` does. Nothing here knows a transport: every call takes
the entity and ``now_ms``, so the Kafka listener mutes its channel for the
returned time and an HTTP listener can answer 429 with ``Retry-After``.

Following Kafka, nothing is recorded while no quota of a kind is configured
(``quotasEnabled``), so an unconfigured server pays almost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from quotas import (
    NANOS_TO_PERCENTAGE_PER_SECOND,
    ClientQuotaManager,
    ClientSensors,
    ControllerMutationQuotaManager,
    Metrics,
    Quota,
    QuotaType,
    QuotaViolationError,
    RequestQuotaManager,
    ThrottlingQuotaExceededError,
)
from telemetry.enforcement.throttles import ThrottleReason, ThrottleTracker

if TYPE_CHECKING:
    from telemetry.enforcement.entity import ClientEntity
    from telemetry.enforcement.settings import ClientQuotaSettings, QuotaSettings

__all__ = ["ClientQuotas", "EntitySensors", "Throttle"]

#: How often idle per-client sensors are looked for (Kafka's ``ExpireSensorTask`` period).
SENSOR_EXPIRY_PERIOD_MS = 30_000


@dataclass(frozen=True, slots=True)
class Throttle:
    """The throttle of one response: how long, and which quota set it (``None`` if 0)."""

    time_ms: int = 0
    reason: ThrottleReason | None = None


NO_THROTTLE = Throttle()


@dataclass(slots=True)
class EntitySensors:
    """One entity's push-byte and request-time sensors, resolved once for its connection.

    ``None`` for a kind with no quota configured (nothing is recorded, as
    with Kafka's ``quotasEnabled``). Valid while ``validity`` (sensor
    removals, quota changes) is what :meth:`ClientQuotas.sensors` finds.
    """

    entity: ClientEntity
    validity: int
    push: ClientSensors | None
    request: ClientSensors | None
    decoded: ClientSensors | None = None


class ClientQuotas:
    """The client quota managers of one server, shared by every listener."""

    def __init__(
        self,
        settings: QuotaSettings,
        tracker: ThrottleTracker | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.samples = settings.window_num
        self.window_size_s = settings.window_size_s
        self.metrics = metrics if metrics is not None else Metrics()
        self.tracker = tracker if tracker is not None else ThrottleTracker()
        self.push_bytes = ClientQuotaManager(
            self.samples, self.window_size_s, QuotaType.PRODUCE, self.metrics
        )
        self.decoded_metrics = Metrics()
        self.decoded_bytes = ClientQuotaManager(
            self.samples, self.window_size_s, QuotaType.PRODUCE, self.decoded_metrics
        )
        self.request_time = RequestQuotaManager(self.samples, self.window_size_s, self.metrics)
        self.mutations = ControllerMutationQuotaManager(
            self.samples, self.window_size_s, self.metrics
        )
        self._configured: dict[tuple[str | None, str | None], ClientQuotaSettings] = {}
        self._next_sensor_expiry_ms = 0
        self.apply(settings)

    def apply(self, settings: QuotaSettings) -> None:
        """Make the configured entities those of ``settings``; recorded usage is kept.

        ``update_quota`` only changes the bound of an entity's existing
        metric, so a changed or removed quota never resets what a client has
        used. The windows cannot change on live sensors (Kafka reads
        ``quota.window.*`` at start-up too); a different window is refused.
        """
        if (settings.window_num, settings.window_size_s) != (self.samples, self.window_size_s):
            raise ValueError(
                "quotas.window_num and quotas.window_size_s take effect only at start-up "
                f"(running with {self.samples} x {self.window_size_s} s)"
            )
        wanted = {entry.entity: entry for entry in settings.clients}
        for entity in set(self._configured) | set(wanted):
            old = self._configured.get(entity)
            new = wanted.get(entity)
            for manager, name in (
                (self.push_bytes, "push_byte_rate"),
                (self.decoded_bytes, "push_decoded_byte_rate"),
                (self.request_time, "request_percentage"),
                (self.mutations, "controller_mutation_rate"),
            ):
                old_value = getattr(old, name) if old is not None else None
                new_value = getattr(new, name) if new is not None else None
                if old_value != new_value:
                    quota = None if new_value is None else Quota.upper_bound(new_value)
                    manager.update_quota(entity[0], entity[1], quota)
        self._configured = wanted

    # -- per request -------------------------------------------------------------------------

    def admit_instance_creation(self, entity: ClientEntity, now_ms: int) -> int:
        """Draw one token for a new client instance; the throttle if refused, else 0.

        Strict (KIP-599, CreateTopics v6+): a bucket in deficit refuses and
        records nothing; a bucket with any tokens left accepts.
        """
        quota = self.mutations.new_quota_for(entity.user, entity.client_id, True, now_ms)
        try:
            quota.record(1.0, now_ms)
        except ThrottlingQuotaExceededError as refused:
            return refused.throttle_time_ms
        return 0

    def draw_mutations(self, entity: ClientEntity, count: int, now_ms: int) -> tuple[int, int]:
        """Strict KIP-599 draws for an admin change, one per resource or entity it touches.

        Returns how many were admitted (the first ones) and the throttle time
        of the first refused (0 when all were admitted). Every front door of
        the admin plane (Kafka admin APIs, SCRAM credentials, HTTP) draws here.
        """
        quota = self.mutations.new_quota_for(entity.user, entity.client_id, True, now_ms)
        for admitted in range(count):
            try:
                quota.record(1.0, now_ms)
            except ThrottlingQuotaExceededError as refused:
                return admitted, refused.throttle_time_ms
        return count, 0

    def sensors(
        self, entity: ClientEntity, held: EntitySensors | None, now_ms: int
    ) -> EntitySensors:
        """``held`` while still valid for ``entity``, else the entity's sensors resolved anew."""
        # The counters only grow, so their sum changes whenever one does.
        validity = (
            self.metrics.removals
            + self.push_bytes.epoch
            + self.request_time.epoch
            + self.decoded_metrics.removals
            + self.decoded_bytes.epoch
        )
        if (
            held is not None
            and held.validity == validity
            and (held.entity is entity or held.entity == entity)
        ):
            return held
        user, client_id = entity
        return EntitySensors(
            entity,
            validity,
            self.push_bytes.resolve(user, client_id, now_ms),
            self.request_time.resolve(user, client_id, now_ms),
            self.decoded_bytes.resolve(user, client_id, now_ms),
        )

    def finish_request(
        self,
        entity: ClientEntity,
        request_nanos: int,
        now_ms: int,
        *,
        push_bytes: int | None = None,
        mutation_throttle_ms: int = 0,
        sensors: EntitySensors | None = None,
        decoded_bytes: int | None = None,
    ) -> Throttle:
        """Record a handled request's time (and a push's bytes); return its throttle.

        ``push_bytes`` are the payload's bytes as sent (``push_byte_rate``),
        ``decoded_bytes`` its size decoded (``push_decoded_byte_rate``).

        ``sensors`` (from :meth:`sensors`, for ``entity``) skips resolving the
        entity's sensors on every request.

        ``mutation_throttle_ms`` is what :meth:`admit_instance_creation`
        returned for this request. The throttle returned is the largest of
        the three, and is recorded against its quota (Kafka's
        ``sendResponseMaybeThrottle``): the caller only applies it.
        """
        byte_ms = request_ms = decoded_ms = 0
        if decoded_bytes is not None:
            decoded = (
                sensors.decoded
                if sensors is not None
                else self.decoded_bytes.resolve(entity.user, entity.client_id, now_ms)
            )
            if decoded is not None:
                try:
                    decoded.quota_sensor.record(decoded_bytes, now_ms, True)
                except QuotaViolationError as violation:
                    decoded_ms = self.decoded_bytes.throttle_time_of(violation, now_ms)
        if sensors is not None:
            # The connection's resolved sensors (see sensors()): no lookups per
            # request, and record_on / record_nanos_on inlined (every request).
            push = sensors.push
            if push_bytes is not None and push is not None:
                try:
                    push.quota_sensor.record(push_bytes, now_ms, True)
                except QuotaViolationError as violation:
                    byte_ms = self.push_bytes.throttle_time_of(violation, now_ms)
            request = sensors.request
            if request is not None:
                try:
                    request.quota_sensor.record(
                        request_nanos * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms, True
                    )
                except QuotaViolationError as violation:
                    request_ms = self.request_time.throttle_time_of(violation, now_ms)
        else:
            user, client_id = entity
            if push_bytes is not None:
                byte_ms = self.push_bytes.maybe_record_and_get_throttle_time_ms(
                    user, client_id, push_bytes, now_ms
                )
            request_ms = self.request_time.maybe_record_and_get_throttle_time_ms(
                user, client_id, request_nanos, now_ms
            )
        if byte_ms <= 0 and request_ms <= 0 and mutation_throttle_ms <= 0 and decoded_ms <= 0:
            return NO_THROTTLE
        throttle_ms, reason, manager = max(
            (mutation_throttle_ms, ThrottleReason.CONTROLLER_MUTATION_RATE, self.mutations),
            (byte_ms, ThrottleReason.PUSH_BYTE_RATE, self.push_bytes),
            (decoded_ms, ThrottleReason.PUSH_DECODED_BYTE_RATE, self.decoded_bytes),
            (request_ms, ThrottleReason.REQUEST_PERCENTAGE, self.request_time),
            key=lambda candidate: candidate[0],
        )
        self.tracker.throttle(reason, entity, throttle_ms, now_ms, manager)
        return Throttle(throttle_ms, reason)

    # -- housekeeping ------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """End elapsed throttles; now and then drop sensors idle for an hour."""
        self.tracker.release_expired(now_ms)
        if now_ms >= self._next_sensor_expiry_ms:
            self._next_sensor_expiry_ms = now_ms + SENSOR_EXPIRY_PERIOD_MS
            self.metrics.expire_sensors(now_ms)
            self.decoded_metrics.expire_sensors(now_ms)
