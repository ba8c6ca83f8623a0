"""The OTLP identity rule (docs/http.md), computed independently of the server's code."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from telemetry.core.client_uuid import Uuid
from telemetry.http.identity import IdentityCache, InvalidResourceError, derive_identity

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
