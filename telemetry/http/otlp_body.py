"""One OTLP/HTTP request body: decoded, walked down to its resources, grouped, answered.

The steps of ``POST /v1/metrics`` that need no server state
(:mod:`telemetry.http.otlp` holds the route, its threads and its quotas):
the body's decoding within ``max_decompressed_bytes``, the wire walk with
the request's bounds, grouping the resources by identity, what is logged of
each group, and the ``google.rpc.Status`` answers in the request's content
type. Each function either returns or raises :class:`RefusedError`, the one
thing the route turns into an error response.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from aiohttp import hdrs, web
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from telemetry.errors import InvalidRecordError, TelemetryTooLargeError
from telemetry.http.content import (
    BodyTooLargeError,
    UnsupportedEncodingError,
    decode_content,
    read_body,
    sent_codec,
)
from telemetry.http.identity import IdentityCache, InvalidResourceError, OtlpIdentity
from telemetry.http.otlp_json import OtlpJsonError, message_to_json, parse_json
from telemetry.http.otlp_wire import (
    ResourceBoundError,
    WireDecodeError,
    WireLimits,
    WireResourceMetrics,
    encode_request,
    parse_request,
    resource_bytes,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from google.protobuf.message import Message
    from opentelemetry.proto.metrics.v1.metrics_pb2 import ResourceMetrics

__all__ = [
    "INVALID_ARGUMENT",
    "JSON",
    "PROTOBUF",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "DecodedBody",
    "Groups",
    "Logged",
    "RefusedError",
    "accepted_response",
    "count_data_points",
    "count_encoded_data_points",
    "decode_body",
    "decode_parse_group",
    "group_by_identity",
    "group_parsed",
    "logged_payloads",
    "message_response",
    "parse_body",
    "read_request_body",
    "status_response",
]

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"

#: A payload as the log takes it: its bytes, their Kafka compression id, their decoded size.
Logged = tuple[bytes, int, int]
#: The resources of a request by identity, in the order each identity first appears.
Groups = list[tuple[OtlpIdentity, list[WireResourceMetrics]]]


def uncompressed_payload(encoded: bytes) -> Logged:
    """Decoded OTLP bytes as the log takes them: codec 0, their own length."""
    return encoded, 0, len(encoded)


# google.rpc.Code values, as the Collector pairs them with HTTP statuses.
INVALID_ARGUMENT: Final = 3
RESOURCE_EXHAUSTED: Final = 8
UNIMPLEMENTED: Final = 12
UNAVAILABLE: Final = 14


class RefusedError(Exception):
    """Control flow to the one place that writes error responses."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        retry_after: int | None = None,
        bound: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after
        #: The ``[telemetry]`` key of the bound that refused the request, if one did.
        self.bound = bound


def count_data_points(resources: Sequence[ResourceMetrics]) -> int:
    total = 0
    for resource in resources:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                if kind is not None:
                    total += len(getattr(metric, kind).data_points)
    return total


class DecodedBody:
    """A body decoded: ``data`` as decoded, ``encoded`` its protobuf form, and its resources.

    ``encoded`` is ``data`` itself for a protobuf body, the re-encoded
    request for a JSON one. A plain class: compiled code evaluates a
    dataclass's annotations at import, and ``Sequence`` is imported for
    type checking only.
    """

    def __init__(
        self, data: bytes, encoded: bytes, resources: Sequence[WireResourceMetrics]
    ) -> None:
        self.data = data
        self.encoded = encoded
        self.resources = resources


def logged_payloads(
    groups: Groups, decoded: DecodedBody, encoding: str, body: bytes, is_json: bool
) -> list[Logged]:
    """What is logged of a request: one payload per identity."""
    codec = sent_codec(encoding, body)
    if len(groups) == 1 and not is_json and codec is not None:
        # Every SDK request: log the body as sent, compressed as it came
        # (the log decompresses on read), not its decoded copy.
        return [(body, codec, len(decoded.encoded))]
    if len(groups) == 1:
        # The JSON form re-encoded, or a body in an encoding Kafka has no id for.
        return [uncompressed_payload(decoded.encoded)]
    return [uncompressed_payload(encode_request(resources)) for _, resources in groups]


def parse_body(data: bytes, is_json: bool, limits: WireLimits) -> DecodedBody:
    """The body's resources: a protobuf body walked down to them, a JSON body parsed whole.

    A 400 for a body over one of ``limits``, found before anything past the
    bound is built; its refusal names the bound's key.
    """
    encoded = data
    if is_json:
        export = ExportMetricsServiceRequest()
        try:
            parse_json(data, export, limits.max_resources, limits.max_scopes)
        # One name per except clause: compiled code types each by its first use.
        except ResourceBoundError as too_many:
            raise bound_refusal(too_many) from None
        except OtlpJsonError as error:
            raise RefusedError(400, INVALID_ARGUMENT, f"invalid OTLP/JSON: {error}") from None
        encoded = export.SerializeToString()
    try:
        resources = parse_request(encoded, limits)
    except ResourceBoundError as over:
        raise bound_refusal(over) from None
    except WireDecodeError as undecodable:
        message = f"invalid OTLP protobuf: {undecodable}"
        raise RefusedError(400, INVALID_ARGUMENT, message) from None
    return DecodedBody(data, encoded, resources)


def bound_refusal(bound: ResourceBoundError) -> RefusedError:
    return RefusedError(400, INVALID_ARGUMENT, f"refused: {bound}", bound=bound.key)


def group_by_identity(
    identities: IdentityCache, resources: Sequence[WireResourceMetrics], address: str
) -> Groups:
    """The resources by identity, in the order each identity first appears.

    A 400 for a resource that does not decode (the rest of the request has
    been read as wire format only: :mod:`telemetry.http.otlp_wire`).
    """
    try:
        if len(resources) == 1:  # every SDK request: nothing to group
            only = resources[0]
            return [(identities.identity(resource_bytes(only), address), [only])]
        groups: dict[OtlpIdentity, list[WireResourceMetrics]] = {}
        for resource in resources:
            identity = identities.identity(resource_bytes(resource), address)
            groups.setdefault(identity, []).append(resource)
    except InvalidResourceError as invalid:
        message = f"invalid OTLP protobuf: a resource does not decode: {invalid}"
        raise RefusedError(400, INVALID_ARGUMENT, message) from None
    return list(groups.items())


def count_encoded_data_points(encoded: bytes) -> int:
    """The data points of an encoded ``MetricsData``; 0 if its metrics do not decode."""
    data = MetricsData()
    try:
        data.ParseFromString(encoded)
    except Exception:  # upb raises DecodeError: nothing in it can be counted
        return 0
    return count_data_points(data.resource_metrics)


async def read_request_body(request: web.Request, max_bytes: int) -> bytes:
    try:
        return await read_body(request, max_bytes)
    except BodyTooLargeError as error:
        raise RefusedError(413, RESOURCE_EXHAUSTED, str(error)) from None


def decode_body(encoding: str, body: bytes, max_decompressed: int) -> bytes:
    try:
        return decode_content(encoding, body, max_decompressed)
    # One name per except clause: compiled code types each by its first use.
    except UnsupportedEncodingError as unsupported:
        raise RefusedError(415, UNIMPLEMENTED, str(unsupported)) from None
    except TelemetryTooLargeError as too_large:
        raise RefusedError(413, RESOURCE_EXHAUSTED, str(too_large)) from None
    except InvalidRecordError as invalid:
        raise RefusedError(400, INVALID_ARGUMENT, str(invalid)) from None


def decode_parse_group(
    encoding: str,
    body: bytes,
    decoded_body: bytes | None,
    max_decompressed: int,
    is_json: bool,
    limits: WireLimits,
    identities: IdentityCache,
    address: str,
) -> tuple[DecodedBody, Groups] | RefusedError:
    """On a decoding thread: decode (unless the loop did), parse and group one body.

    A refusal is returned, not raised, and detached from the exceptions it
    was raised from: their frames hold the decoded buffer, which must go as
    soon as the thread is done with it.
    """
    try:
        data = (
            decoded_body
            if decoded_body is not None
            else decode_body(encoding, body, max_decompressed)
        )
        decoded = parse_body(data, is_json, limits)
        return decoded, group_by_identity(identities, decoded.resources, address)
    except RefusedError as refusal:
        return detached(refusal)


def detached(refusal: RefusedError) -> RefusedError:
    """``refusal`` without its traceback or context, whose frames hold the decoded buffers."""
    return RefusedError(
        refusal.status, refusal.code, refusal.message, refusal.retry_after_s, refusal.bound
    )


def group_parsed(
    parsed: DecodedBody, identities: IdentityCache, address: str
) -> tuple[DecodedBody, Groups] | RefusedError:
    """On a decoding thread: group a body the loop read (a refusal returned, as above)."""
    try:
        return parsed, group_by_identity(identities, parsed.resources, address)
    except RefusedError as refusal:
        return detached(refusal)


def encode_message(message: Message, is_json: bool) -> tuple[bytes, str]:
    if is_json:
        return message_to_json(message), JSON
    return message.SerializeToString(), PROTOBUF


def message_response(message: Message, is_json: bool, status: int = 200) -> web.Response:
    body, content_type = encode_message(message, is_json)
    return web.Response(status=status, body=body, content_type=content_type)


#: The success answer's body per content type (JSON?), encoded once: every accepted request's.
ACCEPTED: Final = {
    is_json: encode_message(ExportMetricsServiceResponse(), is_json) for is_json in (False, True)
}


def accepted_response(is_json: bool) -> web.Response:
    body, content_type = ACCEPTED[is_json]
    return web.Response(body=body, content_type=content_type)


def status_response(refusal: RefusedError, is_json: bool) -> web.Response:
    response = message_response(
        Status(code=refusal.code, message=refusal.message), is_json, refusal.status
    )
    if refusal.retry_after_s is not None:
        response.headers[hdrs.RETRY_AFTER] = str(refusal.retry_after_s)
    return response
