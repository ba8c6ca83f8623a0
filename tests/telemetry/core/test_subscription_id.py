"""Subscription ids and Java collection order.

The pinned strings and ids were printed by JDK 17 running the same
expressions as ``ClientMetricsManager.createClientInstance`` /
``computeSubscriptionId`` (a ConcurrentHashMap of ``new HashSet<>(list)``
unioned into ``new HashSet<>()``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.core.client_uuid import Uuid
from telemetry.core.subscription_id import (
    JavaConcurrentHashMapKeys,
    compute_subscription_id,
    java_hash_set_order,
    java_hash_set_to_string,
    java_string_hash,
)

ID_1_2 = Uuid(1, 2)
ID_M_L = Uuid(0x0123456789ABCDEF, 0x7766554433221100)
ID_NEG = Uuid.from_signed(-1, -2)
QUEUE = "org.apache.kafka.client.producer.partition.queue."
LATENCY = "org.apache.kafka.client.producer.partition.latency"


def union_order(subscriptions: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """Kafka's union: subscriptions in CHM order, each a presized HashSet."""
    names = JavaConcurrentHashMapKeys()
    by_name = dict(subscriptions)
    for name, _ in subscriptions:
        names.put(name)
    collected: list[str] = []
    for name in names:
        collected.extend(java_hash_set_order(by_name[name], presized_from_collection=True))
    return java_hash_set_order(collected)


def test_java_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("org.apache.kafka.producer.") == -672233538
    # A character outside the BMP hashes as its two UTF-16 surrogates.
    assert java_string_hash("\U0001f600x") == 54959989


def test_to_string_is_abstract_collection_format() -> None:
    assert java_hash_set_to_string([]) == "[]"
    assert java_hash_set_to_string(["a"]) == "[a]"
    assert java_hash_set_to_string(["a", "b"]) == "[a, b]"


@pytest.mark.parametrize(
    ("subscriptions", "interval_ms", "uuid", "expected_order", "expected_id"),
    [
        ([("sub-1", [QUEUE, LATENCY])], 30000, ID_1_2, [LATENCY, QUEUE], -1942855636),
        ([("sub-1", [LATENCY, QUEUE])], 30000, ID_1_2, [LATENCY, QUEUE], -1942855636),
        ([], 300000, ID_1_2, [], -725132323),
        (
            [("s", ["org.apache.kafka.consumer.", "org.apache.kafka.producer."])],
            60000,
            ID_M_L,
            ["org.apache.kafka.producer.", "org.apache.kafka.consumer."],
            188528756,
        ),
        # Colliding metric names: their order follows the subscriptions'
        # ConcurrentHashMap order, which for colliding names is insertion order.
        ([("Aa", ["BB"]), ("BB", ["Aa"])], 1000, ID_M_L, ["BB", "Aa"], -504612612),
        ([("BB", ["Aa"]), ("Aa", ["BB"])], 1000, ID_M_L, ["Aa", "BB"], 307158678),
        # ... and for names in different buckets, bucket order, not insertion order.
        ([("b", ["BB"]), ("a", ["Aa"])], 1000, ID_M_L, ["Aa", "BB"], 307158678),
    ],
)
def test_pinned_against_jdk(
    subscriptions: list[tuple[str, list[str]]],
    interval_ms: int,
    uuid: Uuid,
    expected_order: list[str],
    expected_id: int,
) -> None:
    order = union_order(subscriptions)
    assert order == expected_order
    assert compute_subscription_id(order, interval_ms, uuid) == expected_id


def test_all_metrics_id_pinned_against_jdk() -> None:
    assert compute_subscription_id(["*"], 30000, ID_1_2) == -668342516


def test_thirty_prefixes_cross_two_resizes() -> None:
    many = [f"org.apache.kafka.m{i}." for i in range(30)]
    order = union_order([("big", many)])
    assert order[:4] == [
        "org.apache.kafka.m16.",
        "org.apache.kafka.m26.",
        "org.apache.kafka.m18.",
        "org.apache.kafka.m28.",
    ]
    assert order[-3:] == ["org.apache.kafka.m8.", "org.apache.kafka.m10.", "org.apache.kafka.m20."]
    assert compute_subscription_id(order, 100, ID_M_L) == -2021832993


def test_twelve_prefixes_presized_subscription_set() -> None:
    twelve = [f"org.apache.kafka.m{i}." for i in range(12)]
    order = union_order([("t", twelve)])
    assert order == [
        "org.apache.kafka.m0.",
        "org.apache.kafka.m1.",
        "org.apache.kafka.m2.",
        "org.apache.kafka.m11.",
        "org.apache.kafka.m3.",
        "org.apache.kafka.m4.",
        "org.apache.kafka.m5.",
        "org.apache.kafka.m6.",
        "org.apache.kafka.m7.",
        "org.apache.kafka.m8.",
        "org.apache.kafka.m10.",
        "org.apache.kafka.m9.",
    ]
    assert compute_subscription_id(order, 3_600_000, ID_NEG) == -26576513


def test_id_is_int32_and_depends_on_every_input() -> None:
    base = compute_subscription_id(["a", "b"], 1000, ID_M_L)
    assert -(2**31) <= base < 2**31
    assert compute_subscription_id(["a", "b"], 1001, ID_M_L) != base
    assert compute_subscription_id(["b", "a"], 1000, ID_M_L) != base
    assert compute_subscription_id(["a", "b"], 1000, ID_1_2) != base


def test_lone_surrogate_is_hashed_as_question_mark_like_java() -> None:
    assert compute_subscription_id(["\ud800"], 100, ID_1_2) == compute_subscription_id(
        ["?"], 100, ID_1_2
    )


def test_nine_colliding_keys_resize_a_small_table() -> None:
    # "", "\0", "\0\0", ... all hash to 0, and "\x10" (hash 16) shares their
    # bucket in a 16-slot table. The 9th key in one bucket makes HashMap
    # resize to 32 slots (treeifyBin on a table < 64), moving "\x10" to
    # bucket 16 behind the zeros. Eight keys leave it in front. (JDK 17.)
    zeros = ["\0" * n for n in range(9)]
    assert java_hash_set_order(["\x10", *zeros[:7]]) == ["\x10", *zeros[:7]]
    assert java_hash_set_order(["\x10", *zeros[:8]]) == [*zeros[:8], "\x10"]
    assert java_hash_set_order(["\x10", *zeros]) == [*zeros, "\x10"]


metric_names = st.text(alphabet=st.sampled_from("abcAB.xyz_-*\u00e9\u4e2d"), max_size=12)


def _bucket(name: str, capacity: int) -> int:
    h = java_string_hash(name) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


@given(st.lists(metric_names, max_size=24, unique=True), st.randoms(use_true_random=False))
@settings(max_examples=150, deadline=None)
def test_equal_sets_give_equal_ids_when_java_would(names: list[str], rng: Random) -> None:
    shuffled = list(names)
    rng.shuffle(shuffled)
    first, second = java_hash_set_order(names), java_hash_set_order(shuffled)
    assert sorted(first) == sorted(second) == sorted(names)
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2
    buckets = [_bucket(name, capacity) for name in second]
    # Keys come out in ascending bucket order, ties in insertion order, unless
    # 9 keys ever shared a bucket (an early resize; at 16 slots is the worst).
    if max(Counter(_bucket(name, 16) for name in names).values(), default=0) <= 8:
        assert buckets == sorted(buckets)
        inserted_at = {name: index for index, name in enumerate(shuffled)}
        for (left, left_bucket), (right, right_bucket) in pairwise(
            zip(second, buckets, strict=True)
        ):
            if left_bucket == right_bucket:
                assert inserted_at[left] < inserted_at[right]
    # With no two keys sharing a bucket, insertion order cannot matter, so
    # equal sets print the same string and get the same id, as in Java.
    if len(set(buckets)) == len(buckets):
        assert first == second
        assert compute_subscription_id(first, 1000, ID_M_L) == compute_subscription_id(
            second, 1000, ID_M_L
        )


def test_concurrent_hash_map_keys_keep_place_on_update_and_forget_on_remove() -> None:
    keys = JavaConcurrentHashMapKeys()
    for name in ["b", "a", "c"]:
        keys.put(name)
    assert list(keys) == ["a", "b", "c"]
    keys.put("a")
    assert list(keys) == ["a", "b", "c"]
    keys.remove("b")
    keys.remove("missing")
    assert list(keys) == ["a", "c"]
    assert len(keys) == 2


def test_concurrent_hash_map_transfer_reverses_keys_before_the_last_run() -> None:
    # "\x00", " ", "\x10", "0", "@" share bucket 0 of 16 slots. The 12th key
    # doubles the table; ConcurrentHashMap.transfer reuses the trailing run
    # ("@") and prepends the others that stay low, reversing them. (JDK 17.)
    keys = JavaConcurrentHashMapKeys()
    for name in ["\x00", " ", "\x10", "0", "@", *[chr(c) for c in range(1, 8)]]:
        keys.put(name)
    assert list(keys) == [" ", "\x00", "@", *[chr(c) for c in range(1, 8)], "0", "\x10"]
