"""The OTLP door's wire walk (telemetry.http.otlp_wire): upb's verdicts, and the bounds on the way.

The walk replaces upb's parse of the request down to its resources, so it is
checked against upb itself: a schema with the OTLP field numbers and the
resource and scopes as bytes, parsed by upb, must accept and refuse the same
bodies and find the same resources.
"""

from __future__ import annotations

import random
from typing import Any, cast

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData, ResourceMetrics
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from telemetry.http.otlp_wire import (
    ResourceBoundError,
    WireDecodeError,
    WireLimits,
    encode_request,
    parse_request,
)
from tests.telemetry.http.test_http_otlp import (
    SDK_BODY,
    SDK_RESOURCE,
    length_delimited,
    otlp_request,
    resource_metrics,
)


def _upb_request_class() -> Any:
    """``ExportMetricsServiceRequest`` down to its resources, as upb reads it."""
    field = descriptor_pb2.FieldDescriptorProto
    schema = descriptor_pb2.FileDescriptorProto(
        name="test/otlp_wire.proto", package="test.otlp_wire", syntax="proto3"
    )
    request = schema.message_type.add(name="Request")
    request.field.add(
        name="resource_metrics",
        number=1,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_REPEATED,
        type_name=".test.otlp_wire.ResourceMetrics",
    )
    resource_metrics = schema.message_type.add(name="ResourceMetrics")
    for name, number in (("resource", 1), ("scope_metrics", 2)):
        resource_metrics.field.add(
            name=name, number=number, type=field.TYPE_BYTES, label=field.LABEL_REPEATED
        )
    resource_metrics.field.add(
        name="schema_url", number=3, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("test.otlp_wire.Request"))


UPB_REQUEST = _upb_request_class()


def upb_view(data: bytes) -> list[tuple[bytes, int]] | None:
    """Each resource's bytes and scope count as upb reads them; ``None`` if upb refuses."""
    request = UPB_REQUEST()
    try:
        request.ParseFromString(data)
    except Exception:  # upb's DecodeError
        return None
    return [(b"".join(r.resource), len(r.scope_metrics)) for r in request.resource_metrics]


def walk_view(data: bytes) -> list[tuple[bytes, int]] | None:
    try:
        resources = parse_request(data, WireLimits(10**6, 10**6, 10**9, 10**9))
    except WireDecodeError:
        return None
    return [(r.resource, _scopes(r.data, r.start, r.end)) for r in resources]


def _scopes(data: bytes, start: int, end: int) -> int:
    view = upb_view(length_delimited(1, data[start:end]))
    assert view is not None
    return view[0][1]


def collector_body() -> bytes:
    """Three resources, a split resource, a schema URL, unknown fields of every wire type."""
    split = length_delimited(
        1,
        length_delimited(1, resource_with(**{"service.name": "split"}))
        + length_delimited(1, resource_with(**{"service.instance.id": "7"}))
        + length_delimited(3, b"https://opentelemetry.io/schemas/1.24.0")
        + b"\x20\x05"  # field 4, varint (unknown)
        + b"\x29" + bytes(8)  # field 5, fixed64
        + b"\x35" + bytes(4)  # field 6, fixed32
        + b"\x3b\x08\x01\x3c",  # field 7, a group holding a varint
    )  # fmt: skip
    return (
        otlp_request(resource_metrics(SDK_RESOURCE, "a", 2), resource_metrics({}, "b", 1))
        + split
        + b"\x10\x01"  # field 2 of the request, varint (unknown)
    )


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def test_the_walk_reads_what_upb_reads() -> None:
    body = collector_body()
    view = walk_view(body)
    assert view is not None
    assert view == upb_view(body)
    assert len(view) == 3
    assert view[2][0] == resource_with(**{"service.name": "split"}) + resource_with(
        **{"service.instance.id": "7"}
    )


def test_the_walk_refuses_what_upb_refuses_and_reads_the_rest_alike() -> None:
    """Truncations and byte flips of real bodies: the same verdict and resources as upb."""
    rng = random.Random(714)
    bodies = [SDK_BODY, collector_body()]
    disagreements = []
    for index in range(3000):
        body = bytearray(bodies[index % 2])
        kind = index % 3
        if kind == 0:
            body = body[: rng.randrange(len(body))]
        elif kind == 1:
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        else:
            position = rng.randrange(len(body))
            body[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        mutated = bytes(body)
        if walk_view(mutated) != upb_view(mutated):
            disagreements.append(mutated)
    assert disagreements == []


@pytest.mark.parametrize(
    "body",
    [
        b"\x0b",  # a group never closed
        b"\x0c",  # a group closed that was not started
        b"\x0e",  # wire type 6
        b"\x00\x00",  # field number 0
        b"\x0a\x05\x0a",  # a length past the end
        b"\x0a\x02\x1a\x01",  # schema_url's length past its message's end
        length_delimited(1, length_delimited(3, b"\xff\xfe")),  # schema_url not UTF-8
        b"\x08" + b"\xff" * 11,  # a varint of 11 bytes
    ],
)
def test_broken_wire_format_is_refused_like_upb(body: bytes) -> None:
    assert upb_view(body) is None
    with pytest.raises(WireDecodeError):
        parse_request(body)


EMPTY_RESOURCE = length_delimited(1, b"")
#: Field 2 of the request (not a resource), its length past the end.
BROKEN_TAIL = b"\x12\x7f broken"


def test_the_walk_stops_at_the_first_resource_over_the_bound() -> None:
    """1,001 empty ResourceMetrics then a broken tail: refused at the 1,001st, tail unread."""
    body = EMPTY_RESOURCE * 1001 + BROKEN_TAIL
    with pytest.raises(ResourceBoundError) as refused:
        parse_request(body, WireLimits(max_resources=1000))
    assert refused.value.key == "max_resources_per_request"
    assert "telemetry.max_resources_per_request = 1000" in str(refused.value)
    assert len(parse_request(EMPTY_RESOURCE * 1000, WireLimits(max_resources=1000))) == 1000
    with pytest.raises(WireDecodeError):  # the tail, had it been read
        parse_request(EMPTY_RESOURCE * 1000 + BROKEN_TAIL, WireLimits(max_resources=1000))


def resource_with(**attributes: str) -> bytes:
    return bytes(
        Resource(attributes=[_kv(k, v) for k, v in attributes.items()]).SerializeToString()
    )


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (length_delimited(1, length_delimited(2, b"") * 1001 + b"\xff"), "max_scopes_per_resource"),
        (
            length_delimited(1, length_delimited(1, resource_with(a="x" * 40_000, b="y" * 30_000))),
            "max_resource_bytes",
        ),
        (  # in two parts, each under the bound
            length_delimited(
                1,
                length_delimited(1, resource_with(a="x" * 40_000))
                + length_delimited(1, resource_with(b="y" * 30_000)),
            ),
            "max_resource_bytes",
        ),
        (
            length_delimited(1, length_delimited(1, resource_with(big="v" * (16 * 1024 + 1)))),
            "max_attribute_value_bytes",
        ),
        (
            length_delimited(1, length_delimited(1, resource_with(**{"k" * 17_000: "v"}))),
            "max_attribute_value_bytes",
        ),
    ],
    ids=["scopes", "resource-bytes", "resource-bytes-in-parts", "attribute-value", "attribute-key"],
)
def test_each_bound_is_refused_with_its_key(body: bytes, key: str) -> None:
    assert upb_view(body) is not None or key == "max_scopes_per_resource"
    with pytest.raises(ResourceBoundError) as refused:
        parse_request(body)
    assert refused.value.key == key


def test_values_at_the_bounds_pass() -> None:
    at_bound = resource_with(big="v" * (16 * 1024 - 16))
    body = length_delimited(1, length_delimited(1, at_bound) + length_delimited(2, b"") * 1000)
    [resource] = parse_request(body)
    assert resource.resource == at_bound


def test_regrouped_resources_decode_as_their_parts() -> None:
    body = collector_body()
    resources = parse_request(body)
    regrouped = MetricsData.FromString(encode_request([resources[2], resources[0]]))
    original = MetricsData.FromString(body).resource_metrics
    assert list(regrouped.resource_metrics) == [original[2], original[0]]
    assert cast("ResourceMetrics", regrouped.resource_metrics[0]).resource.attributes[0].key == (
        "service.name"
    )
