"""The OTLP identity rule (docs/http.md), computed independently of the server's code."""

from __future__ import annotations

import gc
import threading
import tracemalloc
import uuid
from typing import TYPE_CHECKING

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from telemetry.core.client_uuid import Uuid
from telemetry.http.identity import (
    IdentityCache,
    InvalidResourceError,
    derive_identity,
    entry_bytes,
)

if TYPE_CHECKING:
    from collections.abc import Callable

NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:kip714:otlp")


def attributes(**values: str | int) -> list[KeyValue]:
    return [
        KeyValue(
            key=key.replace("_", "."),
            value=AnyValue(string_value=v) if isinstance(v, str) else AnyValue(int_value=v),
        )
        for key, v in values.items()
    ]


def kafka_text(seed: str) -> str:
    return str(Uuid.from_bytes(uuid.uuid5(NAMESPACE, seed).bytes))


def test_an_id_whose_text_would_start_with_a_dash_is_re_derived() -> None:
    # Find a service name whose first derivation starts with "-" (1 in 64).
    name = next(
        f"svc-{index}"
        for index in range(5000)
        if kafka_text(f"service.instance.id\x00\x00svc-{index}\x00i").startswith("-")
    )
    identity = derive_identity(attributes(service_name=name, service_instance_id="i"), "10.0.0.1")
    text = str(identity.client_instance_id)
    assert not text.startswith("-")
    assert text == kafka_text(f"service.instance.id\x00\x00{name}\x00i\x001")


def test_only_string_attributes_count_and_absent_ones_stay_null() -> None:
    identity = derive_identity(
        attributes(service_name=7, telemetry_sdk_name="opentelemetry"), "192.0.2.7"
    )
    assert identity.client_id is None  # an int service.name is not a name
    assert (identity.client_software_name, identity.client_software_version) == (
        "opentelemetry",
        None,
    )
    assert str(identity.client_instance_id) == kafka_text("source.address\x00\x00\x00192.0.2.7")


def encoded(**values: str | int) -> bytes:
    return bytes(Resource(attributes=attributes(**values)).SerializeToString())


def test_the_cache_gives_the_derived_identity_per_resource_and_address() -> None:
    cache = IdentityCache(maxsize=2)
    one, two = encoded(service_name="a"), encoded(service_name="b")
    assert cache.identity(one, "10.0.0.1") == derive_identity(
        attributes(service_name="a"), "10.0.0.1"
    )
    assert cache.identity(one, "10.0.0.2") != cache.identity(one, "10.0.0.1")
    assert cache.identity(two, "10.0.0.1").client_id == "b"


def test_the_cache_keeps_its_bound_and_drops_the_least_recently_used() -> None:
    cache = IdentityCache(maxsize=2)
    one, two, three = (encoded(service_name=n) for n in "abc")
    cache.identity(one, "10.0.0.1")
    cache.identity(two, "10.0.0.1")
    cache.identity(one, "10.0.0.1")  # one is now the most recently used
    cache.identity(three, "10.0.0.1")
    assert len(cache) == 2
    assert cache.holds(one, "10.0.0.1")
    assert not cache.holds(two, "10.0.0.1")
    assert cache.holds(three, "10.0.0.1")


def test_a_resource_sent_in_two_parts_has_the_identity_of_the_two_merged() -> None:
    """Protobuf merges a message field sent twice; the encodings joined decode as that merge."""
    merged = encoded(service_name="a", service_instance_id="i")
    parts = encoded(service_name="a") + encoded(service_instance_id="i")
    assert IdentityCache().identity(parts, "10.0.0.1") == derive_identity(
        Resource.FromString(merged).attributes, "10.0.0.1"
    )


@pytest.mark.parametrize(
    "resource",
    [
        b"\x0a\x05\x0a\x03a",  # an attribute cut short
        # service.name's key as invalid UTF-8: upb checks proto3 strings
        bytes(Resource(attributes=attributes(service_name="a")).SerializeToString()).replace(
            b"service", b"servic\xff"
        ),
        b"\x0b",  # a group start, never closed
    ],
    ids=["truncated", "invalid-utf8", "open-group"],
)
def test_a_resource_that_does_not_decode_is_refused_and_not_cached(resource: bytes) -> None:
    cache = IdentityCache()
    with pytest.raises(InvalidResourceError):
        cache.identity(resource, "10.0.0.1")
    assert len(cache) == 0


def test_the_cache_keeps_its_byte_bound_under_big_distinct_identities() -> None:
    """Entries are counted by the bytes they hold: 10 KiB names fill 200 KB at about 19."""
    cache = IdentityCache(max_bytes=200_000)
    names = [f"{index:05d}" + "n" * 10_000 for index in range(100)]
    for name in names:
        cache.identity(encoded(service_name=name, service_instance_id="i"), "10.0.0.1")
        assert cache.held_bytes <= 200_000
    assert 10 <= len(cache) < 20
    assert cache.holds(encoded(service_name=names[-1], service_instance_id="i"), "10.0.0.1")
    assert not cache.holds(encoded(service_name=names[0], service_instance_id="i"), "10.0.0.1")
    # An identity larger than the whole budget is derived, not kept.
    small = IdentityCache(max_bytes=5_000)
    assert small.identity(encoded(service_name="n" * 10_000), "10.0.0.1").client_id == "n" * 10_000
    assert (len(small), small.held_bytes) == (0, 0)


def _retained(fill: Callable[[], object]) -> tuple[int, object]:
    """The bytes still allocated after ``fill()`` (its result kept), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = fill()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        tracemalloc.stop()


def test_the_cache_holds_a_digest_not_the_resource() -> None:
    """100 resources with a 100 KiB attribute each: the cache keeps none of those bytes."""
    resources = [
        encoded(service_name="svc", service_instance_id=str(n), host_description="d" * 100_000)
        for n in range(100)
    ]

    def fill() -> IdentityCache:
        cache = IdentityCache()
        for resource in resources:
            # A copy, as each request's resource is: bytes of its own body.
            cache.identity(bytes(bytearray(resource)), "10.0.0.1")
        return cache

    retained, cache = _retained(fill)
    assert isinstance(cache, IdentityCache) and len(cache) == 100
    assert retained < 100 * 2_000  # was 10 MB: the resources themselves were the keys
    assert retained <= cache.held_bytes  # the accounting does not undercount


@pytest.mark.parametrize("name_bytes", [10, 5_000])
def test_the_byte_accounting_covers_what_an_entry_holds(name_bytes: int) -> None:
    resources = [encoded(service_name=f"{n:05d}" + "s" * name_bytes) for n in range(2000)]

    def fill() -> IdentityCache:
        cache = IdentityCache(maxsize=10_000, max_bytes=10**9)
        for resource in resources:
            cache.identity(resource, "10.0.0.1")
        return cache

    retained, cache = _retained(fill)
    assert isinstance(cache, IdentityCache)
    assert retained <= cache.held_bytes <= 2 * retained + 2000 * 640


def test_threads_deriving_at_once_keep_the_total_exact() -> None:
    cache = IdentityCache(maxsize=300, max_bytes=10**9)
    resources = [encoded(service_name=f"svc-{n}") for n in range(1000)]

    def derive(offset: int) -> None:
        for index in range(1000):
            cache.identity(resources[(index + offset) % 1000], "10.0.0.1")

    threads = [threading.Thread(target=derive, args=(n * 250,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(cache) == 300
    cached = [r for r in resources if cache.holds(r, "10.0.0.1")]
    assert len(cached) == 300
    expected = sum(entry_bytes(cache.identity(r, "10.0.0.1")) for r in cached)
    assert cache.held_bytes == expected
