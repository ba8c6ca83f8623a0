"""Client-chosen instance ids cannot be crafted to collide in the instance cache.

CPython hashes ints without a secret and combines a tuple's hashes with a
fixed xxHash-style function, so a client that knows the formula can pick
thousands of ids with one ``hash((msb, lsb))``; every dict lookup among them
then compares against each colliding entry (quadratic GETs). The cache keys
are hashed with a per-process secret instead; these tests craft such ids and
check the keyed hashes spread them, and count the comparisons a lookup costs.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest

from telemetry.core.client_instance import ClientInstance, ClientInstanceMetadata
from telemetry.core.client_uuid import Uuid
from telemetry.core.instance_cache import InstanceCache

T0 = 1_700_000_000_000
CRAFTED = 1500
_M64 = (1 << 64) - 1
_PRIME_1 = 11400714785074694791
_PRIME_2 = 14029467366897019727
_PRIME_5 = 2870177450012600261
_INT_HASH_MODULUS = (1 << 61) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _rotr(x: int, r: int) -> int:
    return ((x >> r) | (x << (64 - r))) & _M64


def colliding_pairs(count: int) -> list[tuple[int, int]]:
    """``(msb, lsb)`` pairs whose Python tuple hash is identical (CPython's xxHash tuple hash).

    For each msb the lsb is solved so the accumulator after the second lane
    equals the one of ``(0, 0)``; a solution is usable when it is below the
    int-hash modulus (then ``hash(lsb) == lsb``), one time in eight.
    """

    def after_first(lane: int) -> int:
        return (_rotl((_PRIME_5 + lane * _PRIME_2) & _M64, 31) * _PRIME_1) & _M64

    target = (_rotl((after_first(0) + 0) & _M64, 31) * _PRIME_1) & _M64
    # acc1 + lsb * P2 must equal X for the second round to land on target.
    x = _rotr((target * pow(_PRIME_1, -1, 1 << 64)) & _M64, 31)
    inverse_2 = pow(_PRIME_2, -1, 1 << 64)
    pairs: list[tuple[int, int]] = []
    msb = 1
    while len(pairs) < count:
        lsb = ((x - after_first(msb)) * inverse_2) & _M64
        if lsb < _INT_HASH_MODULUS:
            pairs.append((msb, lsb))
        msb += 1
    return pairs


@pytest.fixture(scope="module")
def crafted() -> list[tuple[int, int]]:
    pairs = colliding_pairs(CRAFTED)
    # The premise: all of them collide under the unkeyed hash.
    assert len({hash(pair) for pair in pairs}) == 1
    return pairs


def test_crafted_ids_do_not_collide_under_the_keyed_hash(crafted: list[tuple[int, int]]) -> None:
    ids = [Uuid(msb, lsb) for msb, lsb in crafted]
    assert len({hash(u) for u in ids}) == len(ids)
    # The wire path (from_bytes) hashes the same way as the constructor.
    assert all(hash(Uuid.from_bytes(u.to_bytes())) == hash(u) for u in ids[:50])


def test_the_keyed_hash_differs_between_processes_even_with_a_pinned_hash_seed() -> None:
    script = "from telemetry.core.client_uuid import Uuid; print(hash(Uuid(12345, 67890)))"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(3)
    }
    assert len(outputs) == 3


def _instance(client_instance_id: Uuid) -> ClientInstance:
    return ClientInstance(
        metadata=ClientInstanceMetadata(
            client_instance_id=client_instance_id,
            client_id="crafted",
            client_software_name=None,
            client_software_version=None,
            client_source_address="127.0.0.1",
            client_source_port=1,
        ),
        subscription_id=0,
        subscription_version=0,
        metrics=(),
        push_interval_ms=1000,
    )


def test_cache_lookups_of_crafted_ids_cost_one_comparison_each(
    crafted: list[tuple[int, int]],
) -> None:
    """Counts the key comparisons a GET's lookup makes: the cost, without a clock.

    CPython's dict compares a looked-up key (``==``) only with the stored keys
    of the same full hash, so a lookup costs as many comparisons as stored
    keys share its hash. They are counted from the hashes: ``Uuid`` is
    compiled, and its ``__eq__`` cannot be patched to count calls.
    """
    stored = [Uuid(msb, lsb) for msb, lsb in crafted]
    cache = InstanceCache(max_size=2 * CRAFTED)
    for client_instance_id in stored:
        cache.put(_instance(client_instance_id), T0)
    sharing_a_hash = collections.Counter(hash(u) for u in stored)
    # Fresh objects, as every request decodes its own id from the wire.
    fresh = [Uuid.from_bytes(u.to_bytes()) for u in stored]
    assert all(cache.get(u, T0 + 1) is not None for u in fresh)
    comparisons = sum(sharing_a_hash[hash(u)] for u in fresh)
    # One per lookup, the hit; with the unkeyed tuple hash all CRAFTED ids
    # share one hash and every lookup would compare with each of them.
    assert comparisons == CRAFTED
