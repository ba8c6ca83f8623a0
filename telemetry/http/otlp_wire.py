"""An OTLP metrics request as the door reads it: each resource's bytes, its metrics left encoded.

The landing decodes every data point when it flattens a push; decoding them
on the request path as well cost the event loop about 10 µs of upb's parse
per SDK-sized request, a tenth of its work per request. So the door walks
the request's wire format itself and stops at the resources: it checks the
wire format of the request and of every ``ResourceMetrics`` (tags, wire
types, lengths, groups closed, UTF-8 of ``schema_url``) as upb would, and the
resource is decoded in full when its identity is derived
(:mod:`telemetry.http.identity`). What a scope holds is the landing's to
decode, as a PushTelemetry payload is on the Kafka listener (Kafka's broker
never parses one): a request whose metrics do not decode is logged, and the
landing skips and counts it (``kip714_landing_undecodable``).

The walk is also where the request's bounds are checked (:class:`WireLimits`,
``[telemetry]`` keys), while it goes, so a body over one is refused before
anything is built past the bound: an empty ``ResourceMetrics`` is 2 bytes,
and upb's parse of a 16 MiB body of them built 8 million messages (4.85 GiB)
before any count could be looked at. The walk stops at the first
``ResourceMetrics`` over ``max_resources_per_request``, at the first scope
over ``max_scopes_per_resource``, at the resource part that takes a
resource past ``max_resource_bytes``; a resource longer than
``max_attribute_value_bytes`` has its attributes' keys and values measured
(an SDK's resource, a few hundred bytes, never is).

Protobuf's merge rule is kept: a message field sent twice is merged, which
is what decoding the two encodings one after the other does, so a
``resource`` sent in parts is their concatenation. A regrouped request
(:func:`encode_request`) is the ``ResourceMetrics`` encodings as sent, each
with every field it was sent with, unknown ones included, so it decodes as
its parts did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "ResourceBoundError",
    "WireDecodeError",
    "WireLimits",
    "WireResourceMetrics",
    "encode_request",
    "parse_request",
    "resource_bytes",
    "structure_bytes",
]

#: What one :class:`WireResourceMetrics` costs besides its resource's bytes (object, list slot).
RESOURCE_OVERHEAD_BYTES: Final = 160
#: Groups nested deeper than this are refused, as upb refuses messages nested past 100.
_MAX_DEPTH: Final = 100
_MAX_FIELD_NUMBER: Final = (1 << 29) - 1
_VARINT: Final = 0
_FIXED64: Final = 1
_LEN: Final = 2
_START_GROUP: Final = 3
_END_GROUP: Final = 4
_FIXED32: Final = 5


class WireDecodeError(ValueError):
    """The request's, or a ``ResourceMetrics``', wire format is broken."""


class ResourceBoundError(Exception):
    """The request passes one of the OTLP door's bounds; ``key`` is its ``[telemetry]`` key."""

    def __init__(self, key: str, limit: int, message: str) -> None:
        super().__init__(f"{message} (telemetry.{key} = {limit})")
        self.key = key
        self.limit = limit


class WireLimits:
    """The ``[telemetry]`` bounds the walk checks (defaults as documented)."""

    __slots__ = ("max_attribute_value_bytes", "max_resource_bytes", "max_resources", "max_scopes")

    def __init__(
        self,
        max_resources: int = 1000,
        max_scopes: int = 1000,
        max_resource_bytes: int = 64 * 1024,
        max_attribute_value_bytes: int = 16 * 1024,
    ) -> None:
        self.max_resources = max_resources
        self.max_scopes = max_scopes
        self.max_resource_bytes = max_resource_bytes
        self.max_attribute_value_bytes = max_attribute_value_bytes


class WireResourceMetrics:
    """One ``ResourceMetrics`` of a request: where its encoding is, and its resource's bytes.

    ``data[start:end]`` is its encoding (without its tag and length); the
    request's bytes are shared, not copied, by every resource of it.
    """

    __slots__ = ("data", "end", "resource", "start")

    def __init__(self, data: bytes, start: int, end: int, resource: bytes) -> None:
        self.data = data
        self.start = start
        self.end = end
        #: The ``Resource`` field's encoding, its parts joined (usually one part).
        self.resource = resource


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise WireDecodeError("a varint runs past the end of its message")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireDecodeError("a varint longer than 10 bytes")


def _tag(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """The field number and wire type of the tag at ``pos``, and the position after it."""
    key, pos = _varint(data, pos, end)
    number = key >> 3
    if number == 0 or number > _MAX_FIELD_NUMBER:
        raise WireDecodeError(f"invalid field number {number}")
    return number, key & 7, pos


def _length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A length-delimited field's length and where its bytes start; they must fit."""
    length, pos = _varint(data, pos, end)
    if length > end - pos:
        raise WireDecodeError("a length-delimited field runs past the end of its message")
    return length, pos


def _skip(data: bytes, number: int, wire_type: int, pos: int, end: int) -> int:
    """The position after the value of a field not read (unknown, or of another wire type)."""
    if wire_type == _VARINT:
        return _varint(data, pos, end)[1]
    if wire_type == _LEN:
        length, pos = _length(data, pos, end)
        return pos + length
    if wire_type in (_FIXED64, _FIXED32):
        pos += 8 if wire_type == _FIXED64 else 4
        if pos > end:
            raise WireDecodeError("a fixed-size field runs past the end of its message")
        return pos
    if wire_type == _START_GROUP:
        return _skip_group(data, number, pos, end)
    if wire_type == _END_GROUP:
        raise WireDecodeError("a group ends that was not started")
    raise WireDecodeError(f"invalid wire type {wire_type}")


def _skip_group(data: bytes, number: int, pos: int, end: int) -> int:
    """The position after the end of the group ``number`` started before ``pos``."""
    open_groups = [number]
    while open_groups:
        if pos >= end:
            raise WireDecodeError("a group is not closed")
        inner, wire_type, pos = _tag(data, pos, end)
        if wire_type == _END_GROUP:
            if inner != open_groups.pop():
                raise WireDecodeError("a group is closed by another's end")
        elif wire_type == _START_GROUP:
            if len(open_groups) >= _MAX_DEPTH:
                raise WireDecodeError("groups nested too deep")
            open_groups.append(inner)
        else:
            pos = _skip(data, inner, wire_type, pos, end)
    return pos


def parse_request(data: bytes, limits: WireLimits | None = None) -> list[WireResourceMetrics]:
    """The resources of an encoded ``ExportMetricsServiceRequest`` (or ``MetricsData``).

    Raises:
        WireDecodeError: the request's or a ``ResourceMetrics``' wire format is broken.
        ResourceBoundError: the request passes one of ``limits``, found
            before anything past that bound is read or built.
    """
    bounds = limits if limits is not None else WireLimits()
    resources: list[WireResourceMetrics] = []
    pos = 0
    end = len(data)
    while pos < end:
        number, wire_type, pos = _tag(data, pos, end)
        if number != 1 or wire_type != _LEN:
            pos = _skip(data, number, wire_type, pos, end)
            continue
        if len(resources) >= bounds.max_resources:
            raise ResourceBoundError(
                "max_resources_per_request",
                bounds.max_resources,
                f"more than {bounds.max_resources} resources in one request",
            )
        length, pos = _length(data, pos, end)
        resources.append(_resource_metrics(data, pos, pos + length, bounds))
        pos += length
    return resources


def _resource_metrics(data: bytes, start: int, end: int, bounds: WireLimits) -> WireResourceMetrics:
    """One ``ResourceMetrics`` at ``data[start:end]``, walked and checked against ``bounds``."""
    parts: list[bytes] = []
    resource_length = 0
    scopes = 0
    pos = start
    while pos < end:
        number, wire_type, pos = _tag(data, pos, end)
        if wire_type != _LEN or number > 3:
            pos = _skip(data, number, wire_type, pos, end)
            continue
        length, pos = _length(data, pos, end)
        stop = pos + length
        if number == 1:  # resource
            resource_length += length
            if resource_length > bounds.max_resource_bytes:
                raise ResourceBoundError(
                    "max_resource_bytes",
                    bounds.max_resource_bytes,
                    f"a resource of more than {bounds.max_resource_bytes} bytes",
                )
            parts.append(data[pos:stop])
        elif number == 2:  # scope_metrics
            scopes += 1
            if scopes > bounds.max_scopes:
                raise ResourceBoundError(
                    "max_scopes_per_resource",
                    bounds.max_scopes,
                    f"more than {bounds.max_scopes} scopes in one resource",
                )
        else:  # schema_url, a proto3 string: UTF-8, as upb checks
            try:
                data[pos:stop].decode("utf-8")
            except UnicodeDecodeError:
                raise WireDecodeError("a schema_url that is not UTF-8") from None
        pos = stop
    resource = parts[0] if len(parts) == 1 else b"".join(parts)
    if resource_length > bounds.max_attribute_value_bytes:
        for part in parts:
            _check_attributes(part, bounds.max_attribute_value_bytes)
    return WireResourceMetrics(data, start, end, resource)


def _check_attributes(resource: bytes, limit: int) -> None:
    """Refuse a ``Resource`` part with an attribute whose key or value encodes past ``limit``.

    Only the lengths are read; a part that does not decode is left to the
    identity's decode, which refuses it.
    """
    pos = 0
    end = len(resource)
    try:
        while pos < end:
            number, wire_type, pos = _tag(resource, pos, end)
            if number != 1 or wire_type != _LEN:  # not an attribute (KeyValue)
                pos = _skip(resource, number, wire_type, pos, end)
                continue
            length, pos = _length(resource, pos, end)
            stop = pos + length
            if length > limit:
                _check_key_value(resource, pos, stop, limit)
            pos = stop
    except WireDecodeError:
        return


def _check_key_value(data: bytes, pos: int, end: int, limit: int) -> None:
    while pos < end:
        number, wire_type, pos = _tag(data, pos, end)
        if wire_type != _LEN:
            pos = _skip(data, number, wire_type, pos, end)
            continue
        length, pos = _length(data, pos, end)
        if length > limit and number in (1, 2):  # key, value
            raise ResourceBoundError(
                "max_attribute_value_bytes",
                limit,
                f"a resource attribute {'key' if number == 1 else 'value'} of more than "
                f"{limit} bytes",
            )
        pos += length


def structure_bytes(resources: Sequence[WireResourceMetrics]) -> int:
    """What the walk's result holds besides the request's bytes, for the request-memory pool."""
    total = len(resources) * RESOURCE_OVERHEAD_BYTES
    for resources_metrics in resources:
        total += len(resources_metrics.resource)
    return total


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_request(resources: Iterable[WireResourceMetrics]) -> bytes:
    """The ``MetricsData`` (or request) encoding of ``resources``, each as it was sent."""
    parts: list[bytes] = []
    for resource_metrics in resources:
        parts.append(b"\x0a")  # field 1, length-delimited
        parts.append(_uvarint(resource_metrics.end - resource_metrics.start))
        parts.append(resource_metrics.data[resource_metrics.start : resource_metrics.end])
    return b"".join(parts)


def resource_bytes(resources: WireResourceMetrics) -> bytes:
    """The encoding of the resource, merged as protobuf merges a field sent twice."""
    return resources.resource
