"""The KIP-714 subscription id, computed exactly as Kafka's broker does.

``ClientMetricsManager.computeSubscriptionId`` hashes the *string form of a
java.util.HashSet*: ``CRC32C(UTF8(metrics.toString() + pushIntervalMs))``,
cast to int32, XOR the instance id's ``hashCode``. A client keeps the id it got
from one broker and may push it to another, so the string must come out in
the same order as Java would print it. Java prints a HashSet in bucket order,
and the buckets depend on ``String.hashCode``, the table capacity (which grows
with the set) and, within a bucket, on insertion order. The insertion order
in turn follows the iteration order of each subscription's own HashSet and of
the ``ConcurrentHashMap`` of subscriptions. This module models those three
collections closely enough to reproduce the order.

What is modelled: ``String.hashCode`` over UTF-16 code units, HashMap's
spreading ``h ^ (h >>> 16)``, growth at load factor 0.75, the early resize a
bin of 9 colliding keys causes while the table is smaller than 64, the
presized table of ``new HashSet<>(collection)`` (JDK 17 formula), and
ConcurrentHashMap's growth at 0.75 with its transfer order (checked against
JDK 17 on thousands of random sets). What is not: bins of 9+ colliding keys in
tables of 64 or more, which Java turns into red-black trees whose iteration
order depends on the tree's shape. Such a set needs 25+ prefixes with 9 of
them in one bucket; its bucket is kept in insertion order, so at worst a
client moving from a Java broker gets one UNKNOWN_SUBSCRIPTION_ID and re-GETs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Final

import crc32c

from telemetry.core.client_uuid import Uuid

__all__ = [
    "JavaConcurrentHashMapKeys",
    "compute_subscription_id",
    "java_hash_set_order",
    "java_hash_set_to_string",
    "java_string_hash",
]

_DEFAULT_CAPACITY: Final = 16
_TREEIFY_BIN_SIZE: Final = 9  # TREEIFY_THRESHOLD (8) nodes already in the bin, plus the new one
_MIN_TREEIFY_CAPACITY: Final = 64


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 units, int32."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def _spread(text: str) -> int:
    h = java_string_hash(text) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _table_size_for(capacity: int) -> int:
    n = 1
    while n < capacity:
        n <<= 1
    return n


def _jdk17_presized_capacity(size: int) -> int:
    """Capacity of ``new HashSet<>(c)`` on JDK 17: ``max((int)(size/.75f) + 1, 16)``.

    JDK 19+ presizes with ``ceil(size / 0.75)`` instead; the two differ only
    for sizes 12, 24, 48, ... and only change tie order inside a bucket.
    """
    as_float = struct.unpack("f", struct.pack("f", size / 0.75))[0]
    return _table_size_for(max(int(as_float) + 1, _DEFAULT_CAPACITY))


class _JavaHashSet:
    """Just enough of ``java.util.HashMap`` keys to know their iteration order."""

    __slots__ = ("_bins", "_size")

    def __init__(self, capacity: int = _DEFAULT_CAPACITY) -> None:
        self._bins: list[list[str]] = [[] for _ in range(capacity)]
        self._size = 0

    def add(self, key: str) -> None:
        bin_ = self._bins[_spread(key) & (len(self._bins) - 1)]
        if key in bin_:
            return
        bin_.append(key)
        if len(bin_) >= _TREEIFY_BIN_SIZE and len(self._bins) < _MIN_TREEIFY_CAPACITY:
            # HashMap.treeifyBin resizes instead of treeifying small tables.
            self._resize()
        self._size += 1
        if self._size > len(self._bins) * 3 // 4:
            self._resize()

    def _resize(self) -> None:
        # Splitting keeps the relative order of the keys that stay together,
        # so re-adding in iteration order reproduces Java's lo/hi split.
        old = self._bins
        self._bins = [[] for _ in range(2 * len(old))]
        mask = len(self._bins) - 1
        for bin_ in old:
            for key in bin_:
                self._bins[_spread(key) & mask].append(key)

    def __iter__(self) -> Iterator[str]:
        for bin_ in self._bins:
            yield from bin_


def java_hash_set_order(
    elements: Iterable[str], *, presized_from_collection: bool = False
) -> list[str]:
    """The iteration order of a Java HashSet the elements were added to, in order.

    Args:
        elements: the insertion sequence (duplicates are ignored, as ``add`` does).
        presized_from_collection: model ``new HashSet<>(list)`` (a presized
            table) instead of ``new HashSet<>()`` followed by ``add``/``addAll``.
    """
    items = list(elements)
    capacity = _DEFAULT_CAPACITY
    if presized_from_collection:
        capacity = _jdk17_presized_capacity(len(items))
    table = _JavaHashSet(capacity)
    for item in items:
        table.add(item)
    return list(table)


def java_hash_set_to_string(ordered: Iterable[str]) -> str:
    """``AbstractCollection.toString()``: ``[a, b]``, ``[]`` when empty."""
    return "[" + ", ".join(ordered) + "]"


def compute_subscription_id(
    ordered_metrics: Iterable[str], push_interval_ms: int, client_instance_id: Uuid
) -> int:
    """Kafka's ``computeSubscriptionId``, as a signed int32.

    ``ordered_metrics`` must already be in Java HashSet iteration order (see
    :func:`java_hash_set_order`); the subscription registry keeps it that way.
    """
    text = java_hash_set_to_string(ordered_metrics) + str(push_interval_ms)
    # String.getBytes(UTF_8) replaces unpaired surrogates with '?', as 'replace' does.
    crc = crc32c.crc32c(text.encode("utf-8", "replace"))
    return _int32(_int32(crc) ^ client_instance_id.java_hash_code())


class JavaConcurrentHashMapKeys:
    """Iteration order of the keys of a ``java.util.concurrent.ConcurrentHashMap``.

    Kafka keeps subscriptions in one and unions their metrics in its iteration
    order, which decides the order of colliding prefixes in the final set.
    Differences from HashMap that matter here: it grows when the size
    *reaches* 0.75 × capacity, and its transfer rebuilds each bin by reusing
    the trailing run of keys that go to the same half and prepending the
    others, which reverses them. Bins of 9+ colliding names (which Java would
    presize or treeify) are not modelled; 9 subscription names sharing a
    bucket are not a configuration anyone writes.
    """

    __slots__ = ("_bins", "_size")

    def __init__(self) -> None:
        self._bins: list[list[str]] = [[] for _ in range(_DEFAULT_CAPACITY)]
        self._size = 0

    def put(self, key: str) -> None:
        """Insert a key; an existing key keeps its place, as ``put`` does."""
        bin_ = self._bins[_spread(key) & (len(self._bins) - 1)]
        if key in bin_:
            return
        bin_.append(key)
        self._size += 1
        if self._size >= len(self._bins) - (len(self._bins) >> 2):
            self._transfer()

    def remove(self, key: str) -> None:
        bin_ = self._bins[_spread(key) & (len(self._bins) - 1)]
        if key in bin_:
            bin_.remove(key)
            self._size -= 1

    def _transfer(self) -> None:
        n = len(self._bins)
        new: list[list[str]] = [[] for _ in range(2 * n)]
        for index, bin_ in enumerate(self._bins):
            if not bin_:
                continue
            run_bit = _spread(bin_[0]) & n
            last_run = 0
            for position in range(1, len(bin_)):
                bit = _spread(bin_[position]) & n
                if bit != run_bit:
                    run_bit, last_run = bit, position
            low: list[str] = list(bin_[last_run:]) if run_bit == 0 else []
            high: list[str] = list(bin_[last_run:]) if run_bit != 0 else []
            for key in bin_[:last_run]:
                if _spread(key) & n == 0:
                    low.insert(0, key)
                else:
                    high.insert(0, key)
            new[index], new[index + n] = low, high
        self._bins = new

    def __iter__(self) -> Iterator[str]:
        for bin_ in self._bins:
            yield from bin_

    def __len__(self) -> int:
        return self._size
