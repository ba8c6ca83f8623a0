"""An OTLP metrics request as the door reads it: each resource's bytes, its metrics left encoded.

The landing decodes every data point when it flattens a push; decoding them
on the request path as well cost the event loop about 10 µs of upb's parse
per SDK-sized request, a tenth of its work per request. So the door reads the
request against a schema of its own that has the OTLP field numbers and wire
types and stops at the resources: ``ResourceMetrics.resource`` and
``ResourceMetrics.scope_metrics`` are declared ``bytes``. upb still checks the
wire format of the request and of every ``ResourceMetrics`` (tags, wire types,
lengths, UTF-8 of ``schema_url``), and the resource is decoded in full when its
identity is derived (:mod:`telemetry.http.identity`). What a scope holds is
the landing's to decode, as a PushTelemetry payload is on the Kafka listener
(Kafka's broker never parses one): a request whose metrics do not decode is
logged, and the landing skips and counts it (``kip714_landing_undecodable``).

The schema keeps protobuf's merge rule. A message field sent twice is merged,
which is what decoding the two encodings one after the other does, so
``resource`` is ``repeated bytes`` and :func:`resource_bytes` joins its parts.
Re-encoding parsed resources keeps every field they were sent with, unknown
ones included (upb writes those last), so a regrouped request
(:func:`encode_request`) decodes as its parts did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol, cast

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["WireResourceMetrics", "encode_request", "parse_request", "resource_bytes"]


class WireResourceMetrics(Protocol):
    """One ``ResourceMetrics`` as :func:`parse_request` gives it."""

    @property
    def resource(self) -> Sequence[bytes]:
        """The ``Resource`` field's encodings, in the order sent (usually one)."""


class _WireRequest(Protocol):
    def __init__(self, *, resource_metrics: Iterable[WireResourceMetrics] = ()) -> None: ...

    @property
    def resource_metrics(self) -> Sequence[WireResourceMetrics]: ...

    def ParseFromString(self, data: bytes) -> int: ...  # noqa: N802 (protobuf's name)

    def SerializeToString(self) -> bytes: ...  # noqa: N802 (protobuf's name)


def _schema() -> descriptor_pb2.FileDescriptorProto:
    """``ExportMetricsServiceRequest`` (also ``MetricsData``) down to its resources."""
    field = descriptor_pb2.FieldDescriptorProto
    schema = descriptor_pb2.FileDescriptorProto(
        name="kip714/otlp_wire.proto", package="kip714.otlp_wire", syntax="proto3"
    )
    request = schema.message_type.add(name="Request")
    request.field.add(
        name="resource_metrics",
        number=1,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_REPEATED,
        type_name=".kip714.otlp_wire.ResourceMetrics",
    )
    resource_metrics = schema.message_type.add(name="ResourceMetrics")
    for name, number in (("resource", 1), ("scope_metrics", 2)):
        resource_metrics.field.add(
            name=name, number=number, type=field.TYPE_BYTES, label=field.LABEL_REPEATED
        )
    resource_metrics.field.add(
        name="schema_url", number=3, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL
    )
    return schema


def _request_class() -> type[_WireRequest]:
    # A pool of its own: the shared one holds the real OTLP messages.
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_schema())
    found = message_factory.GetMessageClass(pool.FindMessageTypeByName("kip714.otlp_wire.Request"))
    return cast("type[_WireRequest]", found)


_REQUEST: Final = _request_class()


def parse_request(data: bytes) -> Sequence[WireResourceMetrics]:
    """The resources of an encoded ``ExportMetricsServiceRequest``.

    Raises:
        google.protobuf.message.DecodeError: the request's or a
            ``ResourceMetrics``' wire format is broken.
    """
    request = _REQUEST()
    request.ParseFromString(data)
    return request.resource_metrics


def encode_request(resources: Iterable[WireResourceMetrics]) -> bytes:
    """The ``MetricsData`` (or request) encoding of ``resources``, from what they were sent as."""
    request = _REQUEST(resource_metrics=resources)
    return request.SerializeToString()


def resource_bytes(resources: WireResourceMetrics) -> bytes:
    """The encoding of the resource, merged as protobuf merges a field sent twice."""
    parts = resources.resource
    return parts[0] if len(parts) == 1 else b"".join(parts)
