"""A logged push as OTLP ``ResourceMetrics`` that carry the pusher's KIP-714 identity.

A client's payload names the client only as far as the client knows itself;
who it is to the server (instance id, authenticated principal, address) is
in the push context. Those are added as resource attributes, replacing any
same-named attribute the client sent, so a backend can tell instances apart.
Forwarded pushes already carry ``kafka.broker.id`` (and
``kafka.broker.listener``) in their payload, added by the forward route;
they are kept as they are.

``MetricsData`` and ``ExportMetricsServiceRequest`` are the same message on
the wire (``repeated ResourceMetrics resource_metrics = 1``), so the
encodings of several pushes concatenated are one request body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

if TYPE_CHECKING:
    from exporters.api import LoggedPush

__all__ = ["IDENTITY_ATTRIBUTES", "encode_push"]

#: Resource attribute name -> the ``LoggedPush`` field it is taken from.
IDENTITY_ATTRIBUTES: Final = {
    "kafka.client.instance.id": "client_instance_id",
    "kafka.client.id": "client_id",
    "kafka.client.software.name": "client_software_name",
    "kafka.client.software.version": "client_software_version",
    "kafka.client.source.address": "client_source_address",
    "kafka.client.source.port": "client_source_port",
    "kafka.principal": "principal",
}


def encode_push(push: LoggedPush) -> bytes | None:
    """The push's ``resource_metrics`` with identity attributes; ``None`` if undecodable."""
    data = MetricsData()
    try:
        data.ParseFromString(push.payload)
    except DecodeError:
        return None
    identity = _identity(push)
    for resource_metrics in data.resource_metrics:
        attributes = resource_metrics.resource.attributes
        kept = [kv for kv in attributes if kv.key not in IDENTITY_ATTRIBUTES]
        del attributes[:]
        attributes.extend(kept)
        attributes.extend(identity)
    encoded: bytes = data.SerializeToString()
    return encoded


def _identity(push: LoggedPush) -> list[KeyValue]:
    identity = []
    for key, field in IDENTITY_ATTRIBUTES.items():
        value = getattr(push, field)
        if isinstance(value, int):
            identity.append(KeyValue(key=key, value=AnyValue(int_value=value)))
        elif value is not None:
            identity.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    return identity
