"""Who is being throttled, why, and until when: counters, the delay queue, start/stop logs.

Kafka keeps throttled channels in a delay queue (``ThrottledChannel``) that a
reaper thread empties as their throttle elapses, counting them in each
quota type's ``queue-size`` metric. Here the queue is a heap of release
times emptied by :meth:`ThrottleTracker.release_expired`, called with
``now_ms`` by the listener's periodic sweep; it also logs, at debug level,
when an entity's throttling starts and when it stops, so an operator can
follow one tenant without a line per request.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
from collections import Counter
from typing import TYPE_CHECKING, Final

from telemetry.enforcement.entity import ClientEntity

if TYPE_CHECKING:
    from quotas import ClientQuotaManager

__all__ = ["ThrottleReason", "ThrottleTracker"]

_log = logging.getLogger(__name__)


class ThrottleReason(enum.StrEnum):
    """Why a request or connection was throttled, refused or closed: the configured key."""

    PUSH_BYTE_RATE = "push_byte_rate"
    PUSH_DECODED_BYTE_RATE = "push_decoded_byte_rate"
    REQUEST_PERCENTAGE = "request_percentage"
    CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
    CONNECTION_CREATION_RATE = "connection_creation_rate"
    MAX_CONNECTION_CREATION_RATE = "max_connection_creation_rate"
    MAX_CONNECTIONS = "max_connections"
    MAX_CONNECTIONS_PER_IP = "max_connections_per_ip"
    QUEUED_MAX_REQUEST_BYTES = "queued_max_request_bytes"
    CONNECTIONS_MAX_IDLE_MS = "connections_max_idle_ms"


MAX_TRACKED_THROTTLES: Final = 100_000
"""Throttled responses tracked at once (Kafka's delay queue is bounded by its channels)."""


class ThrottleTracker:
    """Counts throttles per reason and tracks each throttled entity until its throttle ends.

    ``entity`` is any printable key: (user, client id) for client quotas, an
    address for connection quotas. Memory is one heap entry per throttled
    response whose delay has not elapsed, plus one entry per entity currently
    throttled (never more than the heap's): at most ``max_tracked`` of them,
    whatever the traffic or the number of client ids a sender makes up. A
    throttle beyond that bound is counted (``counts``, ``untracked``) but not
    tracked, and not added to the managers' ``queue-size``.
    """

    def __init__(self, max_tracked: int = MAX_TRACKED_THROTTLES) -> None:
        self.max_tracked = max_tracked
        #: Throttles counted but not tracked: the bound was reached.
        self.untracked = 0
        self.counts: Counter[ThrottleReason] = Counter()
        self._until_ms: dict[tuple[ThrottleReason, object], int] = {}
        self._queue: list[tuple[int, int, ThrottleReason, object, ClientQuotaManager | None]] = []
        self._sequence = itertools.count()

    @property
    def throttled_entities(self) -> int:
        return len(self._until_ms)

    def count(self, reason: ThrottleReason) -> None:
        """A refusal or close that has no duration (a connection limit, an idle close)."""
        self.counts[reason] += 1

    def throttle(
        self,
        reason: ThrottleReason,
        entity: object,
        throttle_time_ms: int,
        now_ms: int,
        manager: ClientQuotaManager | None = None,
    ) -> None:
        """``entity`` is throttled for ``throttle_time_ms`` from ``now_ms``.

        With a ``manager``, its ``throttle-time`` and ``queue-size`` metrics
        record the throttle, as Kafka's ``ClientQuotaManager.throttle`` does;
        ``queue-size`` goes down again when the delay has elapsed.
        """
        if throttle_time_ms <= 0:
            return
        self.counts[reason] += 1
        if len(self._queue) >= self.max_tracked:
            self.untracked += 1
            return
        release_ms = now_ms + throttle_time_ms
        key = (reason, entity)
        previous = self._until_ms.get(key)
        if previous is None:
            _log.debug("throttling starts: %s for %s (%d ms)", entity, reason, throttle_time_ms)
        if previous is None or release_ms > previous:
            self._until_ms[key] = release_ms
        if manager is not None and isinstance(entity, ClientEntity):
            manager.throttle(entity.user, entity.client_id, throttle_time_ms, now_ms)
        heapq.heappush(self._queue, (release_ms, next(self._sequence), reason, entity, manager))

    def release_expired(self, now_ms: int) -> int:
        """Empty the delay queue up to ``now_ms``; returns how many throttles ended."""
        released = 0
        queue = self._queue
        while queue and queue[0][0] <= now_ms:
            _, _, reason, entity, manager = heapq.heappop(queue)
            released += 1
            if manager is not None:
                manager.throttled_channel_released(now_ms)
            key = (reason, entity)
            until = self._until_ms.get(key)
            if until is not None and until <= now_ms:
                del self._until_ms[key]
                _log.debug("throttling stops: %s for %s", entity, reason)
        return released
