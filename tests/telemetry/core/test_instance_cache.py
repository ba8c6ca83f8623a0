"""Instance cache: LRU by size, expiry to the millisecond, drop on disconnect."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.core.client_instance import ClientInstance, ClientInstanceMetadata
from telemetry.core.client_uuid import Uuid
from telemetry.core.instance_cache import InstanceCache

T0 = 1_700_000_000_000


def instance(n: int, push_interval_ms: int = 100) -> ClientInstance:
    return ClientInstance(
        metadata=ClientInstanceMetadata(
            client_instance_id=Uuid(7, n),
            client_id=f"client-{n}",
            client_software_name=None,
            client_software_version=None,
            client_source_address="127.0.0.1",
            client_source_port=40000 + n,
        ),
        subscription_id=n,
        subscription_version=0,
        metrics=(),
        push_interval_ms=push_interval_ms,
    )


def test_defaults_are_kafkas() -> None:
    cache = InstanceCache()
    assert cache.expiry_delay_ms(instance(1, 100)) == 60_000
    assert cache.expiry_delay_ms(instance(1, 300_000)) == 900_000


def test_lru_evicts_the_least_recently_used() -> None:
    cache = InstanceCache(max_size=3)
    for n in (1, 2, 3):
        assert cache.put(instance(n), T0) == []
    assert cache.get(Uuid(7, 1), T0) is not None  # 1 is now the most recent
    evicted = cache.put(instance(4), T0)
    assert [i.client_instance_id for i in evicted] == [Uuid(7, 2)]
    assert len(cache) == 3
    assert cache.peek(Uuid(7, 2)) is None
    assert cache.peek(Uuid(7, 1)) is not None


def test_peek_and_contains_do_not_touch_lru_order() -> None:
    cache = InstanceCache(max_size=2)
    cache.put(instance(1), T0)
    cache.put(instance(2), T0)
    assert cache.peek(Uuid(7, 1)) is not None
    assert cache.contains(Uuid(7, 1), T0)
    cache.put(instance(3), T0)
    assert cache.peek(Uuid(7, 1)) is None


def test_expiry_to_the_millisecond_default_60s() -> None:
    cache = InstanceCache(expiry_ms=60_000)
    cache.put(instance(1, push_interval_ms=100), T0)
    assert cache.deadline_ms(Uuid(7, 1)) == T0 + 60_000
    assert cache.get(Uuid(7, 1), T0 + 59_999) is not None  # a get is not a re-arm
    assert cache.get(Uuid(7, 1), T0 + 60_000) is None
    assert len(cache) == 0


def test_expiry_is_three_intervals_when_longer() -> None:
    # Kafka's test setting: cacheExpiryMs 100 with interval 100 gives 300 ms.
    cache = InstanceCache(expiry_ms=100)
    cache.put(instance(1, push_interval_ms=100), T0)
    assert cache.contains(Uuid(7, 1), T0 + 299)
    assert not cache.contains(Uuid(7, 1), T0 + 300)
    assert cache.expire(T0 + 299) == []
    assert cache.expire(T0 + 300) == [Uuid(7, 1)]


def test_arm_restarts_the_countdown() -> None:
    cache = InstanceCache(expiry_ms=1000)
    cache.put(instance(1, push_interval_ms=100), T0)
    cache.arm(Uuid(7, 1), T0 + 900)
    assert cache.expire(T0 + 1000) == []
    assert cache.expire(T0 + 1899) == []
    assert cache.expire(T0 + 1900) == [Uuid(7, 1)]


def test_sweep_handles_several_delays_in_deadline_order() -> None:
    cache = InstanceCache(expiry_ms=1000)
    cache.put(instance(1, push_interval_ms=100), T0)  # deadline T0+1000
    cache.put(instance(2, push_interval_ms=500), T0)  # deadline T0+1500
    cache.put(instance(3, push_interval_ms=100), T0 + 200)  # deadline T0+1200
    assert cache.expire(T0 + 1199) == [Uuid(7, 1)]
    assert sorted(cache.expire(T0 + 1500)) == [Uuid(7, 2), Uuid(7, 3)]
    assert len(cache) == 0


def test_replacing_an_instance_moves_it_to_its_new_delay() -> None:
    cache = InstanceCache(expiry_ms=1000)
    cache.put(instance(1, push_interval_ms=100), T0)
    cache.put(instance(1, push_interval_ms=1000), T0 + 10)  # re-created, 3 s now
    assert len(cache) == 1
    assert cache.expire(T0 + 1010) == []
    assert cache.deadline_ms(Uuid(7, 1)) == T0 + 3010


def test_disconnect_drops_the_instances_of_that_connection() -> None:
    cache = InstanceCache()
    cache.put(instance(1), T0, "conn-1")
    cache.put(instance(2), T0, "conn-2")
    assert cache.disconnect("conn-1") == [Uuid(7, 1)]
    assert cache.peek(Uuid(7, 1)) is None
    assert cache.peek(Uuid(7, 2)) is not None
    assert cache.disconnect("conn-1") == []
    assert cache.disconnect("never-seen") == []


def test_instance_follows_its_latest_connection() -> None:
    cache = InstanceCache()
    cache.put(instance(1), T0, "old")
    cache.arm(Uuid(7, 1), T0 + 1, "new")
    assert cache.disconnect("old") == []
    assert cache.peek(Uuid(7, 1)) is not None
    cache.arm(Uuid(7, 1), T0 + 2, None)  # no connection info: keep following "new"
    assert cache.disconnect("new") == [Uuid(7, 1)]


def test_evicted_and_expired_instances_leave_no_connection_behind() -> None:
    cache = InstanceCache(max_size=1, expiry_ms=1000)
    cache.put(instance(1), T0, "c")
    cache.put(instance(2), T0, "d")  # evicts 1
    assert cache.disconnect("c") == []
    cache.expire(T0 + 1000)
    assert cache.disconnect("d") == []


def test_remove() -> None:
    cache = InstanceCache()
    cache.put(instance(1), T0, "c")
    removed = cache.remove(Uuid(7, 1))
    assert removed is not None
    assert removed.client_instance_id == Uuid(7, 1)
    assert cache.remove(Uuid(7, 1)) is None
    assert cache.expire(T0 + 10**9) == []


def test_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="size"):
        InstanceCache(max_size=0)
    with pytest.raises(ValueError, match="expiry"):
        InstanceCache(expiry_ms=-1)


operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "get", "arm", "expire", "disconnect"]),
        st.integers(min_value=0, max_value=5),  # instance number
        st.integers(min_value=0, max_value=700),  # time step
        st.sampled_from([100, 200, 400]),  # push interval
        st.sampled_from(["a", "b", None]),  # connection
    ),
    max_size=60,
)


class NaiveCache:
    """Reference model: full scans, lists, no cleverness."""

    def __init__(self, max_size: int, expiry_ms: int) -> None:
        self.max_size = max_size
        self.expiry_ms = expiry_ms
        self.deadlines: dict[int, int] = {}
        self.intervals: dict[int, int] = {}
        self.lru: list[int] = []
        self.connection: dict[int, str | None] = {}

    def alive(self, n: int, now: int) -> bool:
        return n in self.deadlines and now < self.deadlines[n]

    def drop(self, n: int) -> None:
        self.lru.remove(n)
        del self.deadlines[n], self.intervals[n], self.connection[n]

    def put(self, n: int, interval: int, now: int, conn: str | None) -> None:
        if n in self.lru:
            self.lru.remove(n)
        else:
            self.connection[n] = None
        self.lru.append(n)
        self.intervals[n] = interval
        self.arm(n, now, conn)
        while len(self.lru) > self.max_size:
            self.drop(self.lru[0])

    def arm(self, n: int, now: int, conn: str | None) -> None:
        self.deadlines[n] = now + max(self.expiry_ms, 3 * self.intervals[n])
        if conn is not None:
            self.connection[n] = conn

    def get(self, n: int, now: int) -> bool:
        if self.alive(n, now):
            self.lru.remove(n)
            self.lru.append(n)
            return True
        if n in self.deadlines:
            self.drop(n)
        return False

    def expire(self, now: int) -> list[int]:
        expired = sorted(k for k, d in self.deadlines.items() if d <= now)
        for k in expired:
            self.drop(k)
        return expired

    def disconnect(self, conn: str) -> list[int]:
        dropped = sorted(k for k, c in self.connection.items() if c == conn)
        for k in dropped:
            self.drop(k)
        return dropped


@given(operations)
@settings(max_examples=150, deadline=None)
def test_matches_a_naive_model(ops: list[tuple[str, int, int, int, str | None]]) -> None:
    """Every observable result equals a full-scan reference implementation."""
    cache = InstanceCache(max_size=4, expiry_ms=500)
    model = NaiveCache(max_size=4, expiry_ms=500)
    now = T0
    for op, n, step, interval, conn in ops:
        now += step
        uuid = Uuid(7, n)
        if op == "put":
            cache.put(instance(n, interval), now, conn)
            model.put(n, interval, now, conn)
        elif op == "get":
            assert (cache.get(uuid, now) is not None) == model.get(n, now)
        elif op == "arm" and model.alive(n, now):
            cache.arm(uuid, now, conn)
            model.arm(n, now, conn)
        elif op == "expire":
            expired = sorted(u.least_significant_bits for u in cache.expire(now))
            assert expired == model.expire(now)
        elif op == "disconnect" and conn is not None:
            dropped = sorted(u.least_significant_bits for u in cache.disconnect(conn))
            assert dropped == model.disconnect(conn)
        assert len(cache) == len(model.lru)
        for k, deadline in model.deadlines.items():
            assert cache.deadline_ms(Uuid(7, k)) == deadline
