"""The bounded cache of client instances: LRU by size, expiry by time, drop on disconnect.

Kafka keeps instances in an access-ordered ``LRUCache(16384)`` and arms a
timer per instance on every GET/PUSH that fires after
``max(cacheExpiryMs, 3 × pushIntervalMs)``; a closed connection removes its
instance at once (KAFKA-17778). Memory stays bounded by configuration, not
by how many clients come and go.

Time is injected. Expiry is checked lazily on lookup, and :meth:`expire`
sweeps in O(expired + distinct delays): instances are bucketed by their
delay, and within one delay re-arming moves an instance to the back, so each
bucket stays ordered by deadline as long as ``now_ms`` never goes backwards.
A timer wheel or heap would do the same with more memory per re-arm.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from telemetry.core.client_instance import ClientInstance
from telemetry.core.client_uuid import Uuid

__all__ = ["DEFAULT_CACHE_EXPIRY_MS", "DEFAULT_CACHE_SIZE", "InstanceCache"]

DEFAULT_CACHE_SIZE: Final = 16384
DEFAULT_CACHE_EXPIRY_MS: Final = 60_000


class _Entry:
    __slots__ = ("connection_id", "deadline_ms", "delay_ms", "instance")

    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance
        self.deadline_ms = 0
        self.delay_ms = 0
        self.connection_id: str | None = None


_NO_DEADLINE = 2**63  # later than any deadline


class InstanceCache:
    """Client instances by id; see the module docstring for the eviction rules."""

    __slots__ = (
        "_by_connection",
        "_by_delay",
        "_entries",
        "_expiry_ms",
        "_max_size",
        "earliest_deadline_ms",
    )

    def __init__(
        self, max_size: int = DEFAULT_CACHE_SIZE, expiry_ms: int = DEFAULT_CACHE_EXPIRY_MS
    ) -> None:
        if max_size < 1:
            raise ValueError(f"instance cache size must be at least 1, got {max_size}")
        if expiry_ms < 0:
            raise ValueError(f"instance cache expiry must not be negative, got {expiry_ms}")
        self._max_size = max_size
        self._expiry_ms = expiry_ms
        self._entries: OrderedDict[Uuid, _Entry] = OrderedDict()  # eldest access first
        self._by_delay: dict[int, OrderedDict[Uuid, None]] = {}  # earliest deadline first
        self._by_connection: dict[str, set[Uuid]] = {}
        #: A lower bound on every deadline: expire() is due on every request
        #: and usually has nothing to do; a caller compares with this first.
        self.earliest_deadline_ms = _NO_DEADLINE

    def __len__(self) -> int:
        return len(self._entries)

    def expiry_delay_ms(self, instance: ClientInstance) -> int:
        """``max(cacheExpiryMs, 3 × pushIntervalMs)``: three missed pushes before forgetting."""
        return max(self._expiry_ms, 3 * instance.push_interval_ms)

    def deadline_ms(self, client_instance_id: Uuid) -> int | None:
        """When the instance expires (it is gone at this instant), if cached."""
        entry = self._entries.get(client_instance_id)
        return None if entry is None else entry.deadline_ms

    def peek(self, client_instance_id: Uuid) -> ClientInstance | None:
        """The cached instance, without touching LRU order or expiring it."""
        entry = self._entries.get(client_instance_id)
        return None if entry is None else entry.instance

    def contains(self, client_instance_id: Uuid, now_ms: int) -> bool:
        """Membership without touching LRU order; an expired instance is absent."""
        entry = self._entries.get(client_instance_id)
        return entry is not None and now_ms < entry.deadline_ms

    def get(self, client_instance_id: Uuid, now_ms: int) -> ClientInstance | None:
        """Look up and mark as most recently used; expired instances are dropped here."""
        entry = self._entries.get(client_instance_id)
        if entry is None:
            return None
        if now_ms >= entry.deadline_ms:
            self._drop(client_instance_id)
            return None
        self._entries.move_to_end(client_instance_id)
        return entry.instance

    def touch(
        self, client_instance_id: Uuid, now_ms: int, connection_id: str | None, version: int
    ) -> ClientInstance | None:
        """:meth:`get` then :meth:`arm` in one step: what every request of a known instance does.

        ``None`` when the instance is absent, expired (dropped, as by
        :meth:`get`), or evaluated before subscription ``version`` (left
        untouched, for the caller to re-create).
        """
        entry = self._entries.get(client_instance_id)
        if entry is None or entry.instance.subscription_version < version:
            return None
        if now_ms >= entry.deadline_ms:
            self._drop(client_instance_id)
            return None
        self._entries.move_to_end(client_instance_id)
        delay_ms = entry.delay_ms
        if delay_ms and delay_ms == max(self._expiry_ms, 3 * entry.instance.push_interval_ms):
            # The usual request: same delay, so only its place in the bucket moves.
            self._by_delay[delay_ms].move_to_end(client_instance_id)
            deadline_ms = entry.deadline_ms = now_ms + delay_ms
            self.earliest_deadline_ms = min(self.earliest_deadline_ms, deadline_ms)
            if connection_id is None or connection_id == entry.connection_id:
                return entry.instance
        self.arm(client_instance_id, now_ms, connection_id)
        return entry.instance

    def put(
        self, instance: ClientInstance, now_ms: int, connection_id: str | None = None
    ) -> list[ClientInstance]:
        """Insert or replace, arm its expiry, and return the instances evicted for room."""
        client_instance_id = instance.client_instance_id
        entry = self._entries.get(client_instance_id)
        if entry is None:
            entry = _Entry(instance)
            self._entries[client_instance_id] = entry
        else:
            entry.instance = instance
            self._entries.move_to_end(client_instance_id)
        self.arm(client_instance_id, now_ms, connection_id)
        evicted: list[ClientInstance] = []
        while len(self._entries) > self._max_size:
            eldest = next(iter(self._entries))
            evicted.append(self._entries[eldest].instance)
            self._drop(eldest)
        return evicted

    def arm(self, client_instance_id: Uuid, now_ms: int, connection_id: str | None = None) -> None:
        """Restart the expiry countdown (every GET/PUSH does) and follow the connection.

        Kafka maps a connection to the instance only when the instance is
        created; following the latest connection instead means a client that
        reconnected is not dropped when its old connection finally closes.
        """
        entry = self._entries[client_instance_id]
        delay_ms = max(self._expiry_ms, 3 * entry.instance.push_interval_ms)  # expiry_delay_ms
        if delay_ms and delay_ms == entry.delay_ms:
            # The usual push: same delay, so only its place in the bucket moves.
            self._by_delay[delay_ms].move_to_end(client_instance_id)
        else:
            if entry.delay_ms:
                self._by_delay[entry.delay_ms].pop(client_instance_id, None)
            entry.delay_ms = delay_ms
            self._by_delay.setdefault(delay_ms, OrderedDict())[client_instance_id] = None
        deadline_ms = entry.deadline_ms = now_ms + delay_ms
        self.earliest_deadline_ms = min(self.earliest_deadline_ms, deadline_ms)
        if connection_id is not None and connection_id != entry.connection_id:
            self._unlink_connection(client_instance_id, entry.connection_id)
            entry.connection_id = connection_id
            self._by_connection.setdefault(connection_id, set()).add(client_instance_id)

    def remove(self, client_instance_id: Uuid) -> ClientInstance | None:
        entry = self._entries.get(client_instance_id)
        if entry is None:
            return None
        self._drop(client_instance_id)
        return entry.instance

    def disconnect(self, connection_id: str) -> list[Uuid]:
        """Drop the instances last seen on a closed connection (KAFKA-17778)."""
        removed = sorted(self._by_connection.pop(connection_id, ()))
        for client_instance_id in removed:
            entry = self._entries[client_instance_id]
            entry.connection_id = None  # already unlinked above
            self._drop(client_instance_id)
        return removed

    def expire(self, now_ms: int) -> list[Uuid]:
        """Drop every instance whose deadline is at or before ``now_ms``."""
        if now_ms < self.earliest_deadline_ms:
            return []
        expired: list[Uuid] = []
        earliest = _NO_DEADLINE
        for bucket in list(self._by_delay.values()):
            while bucket:
                client_instance_id = next(iter(bucket))
                deadline_ms = self._entries[client_instance_id].deadline_ms
                if deadline_ms > now_ms:
                    earliest = min(earliest, deadline_ms)
                    break
                expired.append(client_instance_id)
                self._drop(client_instance_id)
        # Re-arming only moves deadlines later, and removals never earlier, so
        # the heads' minimum stays a valid lower bound until the next arm().
        self.earliest_deadline_ms = earliest
        return expired

    def _drop(self, client_instance_id: Uuid) -> None:
        entry = self._entries.pop(client_instance_id)
        bucket = self._by_delay.get(entry.delay_ms)
        if bucket is not None:
            bucket.pop(client_instance_id, None)
            if not bucket:
                del self._by_delay[entry.delay_ms]
        self._unlink_connection(client_instance_id, entry.connection_id)

    def _unlink_connection(self, client_instance_id: Uuid, connection_id: str | None) -> None:
        if connection_id is None:
            return
        ids = self._by_connection.get(connection_id)
        if ids is not None:
            ids.discard(client_instance_id)
            if not ids:
                del self._by_connection[connection_id]
