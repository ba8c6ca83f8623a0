"""Client quotas on the HTTP routes: the one place their decisions are made.

A Kafka broker records a request, returns the throttle in the response and
mutes the channel, so the client's next request waits (KIP-219). HTTP has
no channel to mute, so :class:`HttpQuotas` mutes the *entity* (user, client
id): a request from an entity whose previous response carried a throttle
that has not elapsed is refused (HTTP 429, ``Retry-After``) before it is
processed and is not recorded, as a muted channel is not read. Any other
request is processed and recorded with the same
:class:`~telemetry.enforcement.ClientQuotas` as the Kafka listener's, and a
throttle it earns mutes the entity from then on.

The mute table is bounded: an entry goes when its deadline passes, and past
:data:`MAX_MUTED_ENTITIES` the least recently used goes first (an entity
dropped early is served early, recorded, and throttled again: its quota
still holds on average), so hostile client ids cannot grow it.

``Retry-After`` is in whole seconds (RFC 9110 §10.2.3), rounded up so a
client never retries early. For OTLP it is also capped below 10 s: the
OpenTelemetry SDKs give a request 10 s in total and drop it rather than
wait past that.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from cachetools import TLRUCache

if TYPE_CHECKING:
    from telemetry.enforcement import ClientEntity, ClientQuotas

__all__ = ["MAX_MUTED_ENTITIES", "OTLP_MAX_RETRY_AFTER_S", "HttpQuotas", "retry_after_s"]

#: The longest ``Retry-After`` an OTLP response carries.
OTLP_MAX_RETRY_AFTER_S: Final = 9
#: At most this many entities are muted at once (about 300 bytes each, the key included).
MAX_MUTED_ENTITIES: Final = 10_000


def _deadline(entity: ClientEntity, deadline_ms: int, now_ms: float) -> float:
    """An entry's time to use is its own value, the deadline."""
    return deadline_ms


class HttpQuotas:
    """The client quotas of the HTTP routes, with Kafka's muted channel kept per entity.

    Every method takes ``now_ms``; the mute table expires entries at the
    latest time it was given, so an injected clock drives it exactly.
    """

    def __init__(self, clients: ClientQuotas, max_muted: int = MAX_MUTED_ENTITIES) -> None:
        self.clients = clients
        self._now_ms = 0
        #: The latest deadline ever set: from then on no entity is muted.
        self._last_deadline_ms = 0
        self._muted: TLRUCache[ClientEntity, int] = TLRUCache(max_muted, _deadline, self._time)

    @property
    def muted_entities(self) -> int:
        """Entities muted now, and those whose mute ended but are not purged yet."""
        return len(self._muted)

    def muted_ms(self, entity: ClientEntity, now_ms: int) -> int:
        """How long ``entity`` stays muted from ``now_ms``; 0 to serve its request."""
        if now_ms >= self._last_deadline_ms:
            return 0  # every request while no mute runs: no walk of the table
        self._advance(now_ms)
        deadline_ms = self._muted.get(entity)
        return 0 if deadline_ms is None else max(0, deadline_ms - now_ms)

    def admit_instance_creation(self, entity: ClientEntity, now_ms: int) -> int:
        """Draw one token for a new client instance (KIP-599, strict); the throttle if refused."""
        return self.clients.admit_instance_creation(entity, now_ms)

    def finish_request(
        self,
        entity: ClientEntity,
        request_nanos: int,
        now_ms: int,
        *,
        push_bytes: int | None = None,
        mutation_throttle_ms: int = 0,
        decoded_bytes: int | None = None,
    ) -> int:
        """Record a served request; the throttle its response carries, for which it is muted."""
        throttle = self.clients.finish_request(
            entity,
            request_nanos,
            now_ms,
            push_bytes=push_bytes,
            mutation_throttle_ms=mutation_throttle_ms,
            decoded_bytes=decoded_bytes,
        )
        if throttle.time_ms > 0:
            self._advance(now_ms)
            deadline_ms = now_ms + throttle.time_ms
            self._last_deadline_ms = max(self._last_deadline_ms, deadline_ms)
            # Requests of one entity may overlap: the longest mute wins.
            self._muted[entity] = max(deadline_ms, self._muted.get(entity, deadline_ms))
        return throttle.time_ms

    def _time(self) -> float:
        return self._now_ms

    def _advance(self, now_ms: int) -> None:
        self._now_ms = max(self._now_ms, now_ms)
        self._muted.expire()


def retry_after_s(throttle_time_ms: int, cap_s: int | None = None) -> int:
    """``ceil(ms / 1000)``, at least 1, and at most ``cap_s`` when given."""
    seconds = max(1, math.ceil(throttle_time_ms / 1000))
    return seconds if cap_s is None else min(seconds, cap_s)
