"""Whole frames: dispatch on the header, decode the body, encode with the size prefix.

This is the codec's entry point for the listener. A Kafka frame is an INT32
size followed by that many bytes of header and body; the listener reads the
prefix with :func:`parse_size_prefix` (which enforces the configured frame
limit before any allocation, like Kafka's ``InvalidReceiveException``) and
hands the rest to :func:`decode_request`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final
from uuid import UUID

from telemetry.wire.api_versions import ApiVersionsRequest, ApiVersionsResponse
from telemetry.wire.apis import SUPPORTED_VERSIONS, ApiKey
from telemetry.wire.coordinator_messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from telemetry.wire.errors import MalformedFrameError
from telemetry.wire.headers import (
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    read_request_header_prefix,
    read_response_header,
    response_header_version,
    write_request_header,
    write_response_header,
)
from telemetry.wire.metadata import MetadataRequest, MetadataResponse
from telemetry.wire.primitives import Reader, Writer
from telemetry.wire.telemetry_messages import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)

if TYPE_CHECKING:
    from collections.abc import Callable

Request = (
    ApiVersionsRequest
    | MetadataRequest
    | GetTelemetrySubscriptionsRequest
    | PushTelemetryRequest
    | FindCoordinatorRequest
    | InitProducerIdRequest
)
Response = (
    ApiVersionsResponse
    | MetadataResponse
    | GetTelemetrySubscriptionsResponse
    | PushTelemetryResponse
    | FindCoordinatorResponse
    | InitProducerIdResponse
)

SIZE_PREFIX: Final = struct.Struct(">i")
"""The INT32 length that precedes every request and response."""


@dataclass(frozen=True, slots=True)
class _Codec:
    read_request: Callable[[Reader, int], Request]
    request_type: type[Request]
    read_response: Callable[[Reader, int], Response]
    response_type: type[Response]


_CODECS: Final = MappingProxyType(
    {
        int(ApiKey.API_VERSIONS): _Codec(
            ApiVersionsRequest.read,
            ApiVersionsRequest,
            ApiVersionsResponse.read,
            ApiVersionsResponse,
        ),
        int(ApiKey.METADATA): _Codec(
            MetadataRequest.read, MetadataRequest, MetadataResponse.read, MetadataResponse
        ),
        int(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS): _Codec(
            GetTelemetrySubscriptionsRequest.read,
            GetTelemetrySubscriptionsRequest,
            GetTelemetrySubscriptionsResponse.read,
            GetTelemetrySubscriptionsResponse,
        ),
        int(ApiKey.PUSH_TELEMETRY): _Codec(
            PushTelemetryRequest.read,
            PushTelemetryRequest,
            PushTelemetryResponse.read,
            PushTelemetryResponse,
        ),
        int(ApiKey.FIND_COORDINATOR): _Codec(
            FindCoordinatorRequest.read,
            FindCoordinatorRequest,
            FindCoordinatorResponse.read,
            FindCoordinatorResponse,
        ),
        int(ApiKey.INIT_PRODUCER_ID): _Codec(
            InitProducerIdRequest.read,
            InitProducerIdRequest,
            InitProducerIdResponse.read,
            InitProducerIdResponse,
        ),
    }
)


def parse_size_prefix(prefix: bytes, max_frame_bytes: int) -> int:
    """The size of the frame that follows, refusing negative and oversized ones.

    Checked before reading the frame so a hostile length cannot make the
    listener buffer gigabytes.
    """
    if len(prefix) != SIZE_PREFIX.size:
        raise MalformedFrameError(f"size prefix must be 4 bytes, got {len(prefix)}")
    (size,) = SIZE_PREFIX.unpack(prefix)
    if size < 0:
        raise MalformedFrameError(f"negative frame size {size}")
    if size > max_frame_bytes:
        raise MalformedFrameError(f"frame of {size} bytes exceeds the limit of {max_frame_bytes}")
    return int(size)


_PUSH_V0_PREFIX: Final = b"\x00\x48\x00\x00"  # api key 72 (PushTelemetry), version 0
_CORRELATION_AND_CLIENT_ID_LENGTH: Final = struct.Struct(">ih")
_PUSH_BODY_HEAD: Final = struct.Struct(">16sibb")


#: A PushTelemetry v0 request's fields, as :func:`push_v0_fields` reads them: correlation id,
#: client id, the instance id's 16 bytes, subscription id, terminating, compression type, metrics.
PushV0Fields = tuple[int, str, bytes, int, bool, int, bytes]


def push_v0_fields(frame: bytes) -> PushV0Fields | None:
    """PushTelemetry v0 in its common shape, in one pass: the hottest request by far.

    Plain values, no message objects: the Kafka listener hands them to the
    ingress flow as they are. Returns ``None`` for anything unusual (another
    key or version, tagged fields, null or bad client id, a multi-byte length
    quirk, trailing bytes), which the generic reader then decodes or refuses
    with the precise error; the two agree on every frame
    (``tests/telemetry/wire/test_push_fast_path.py``).
    """
    size = len(frame)
    if size < 10 or frame[:4] != _PUSH_V0_PREFIX:
        return None
    correlation_id, client_id_length = _CORRELATION_AND_CLIENT_ID_LENGTH.unpack_from(frame, 4)
    position = 10 + client_id_length
    if (
        client_id_length < 0
        or position + 1 + _PUSH_BODY_HEAD.size >= size
        or frame[position] != 0  # header tagged fields (KIP-482): only the empty case here
    ):
        return None
    try:
        client_id = frame[10:position].decode("utf-8")
    except UnicodeDecodeError:
        return None
    instance, subscription_id, terminating, compression_type = _PUSH_BODY_HEAD.unpack_from(
        frame, position + 1
    )
    position += 1 + _PUSH_BODY_HEAD.size
    # Metrics: compact bytes, length + 1 as an unsigned varint of one or two bytes.
    first = frame[position]
    if first < 0x80:
        length_plus_one, position = first, position + 1
    elif position + 1 < size and frame[position + 1] < 0x80:
        length_plus_one, position = (first & 0x7F) | (frame[position + 1] << 7), position + 2
    else:
        return None
    if length_plus_one == 0 or position + length_plus_one != size or frame[size - 1] != 0:
        return None  # null metrics, or body tagged fields / trailing bytes: the generic path
    metrics = frame[position : size - 1]
    flag = terminating != 0
    return correlation_id, client_id, instance, subscription_id, flag, compression_type, metrics


def _decode_push_v0(frame: bytes) -> tuple[RequestHeader, PushTelemetryRequest] | None:
    """:func:`push_v0_fields` as the generic reader's messages."""
    fields = push_v0_fields(frame)
    if fields is None:
        return None
    correlation_id, client_id, instance, subscription_id, terminating, compression, metrics = fields
    header = RequestHeader(
        api_key=ApiKey.PUSH_TELEMETRY,
        api_version=0,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    request = PushTelemetryRequest(
        client_instance_id=UUID(bytes=instance),
        subscription_id=subscription_id,
        terminating=terminating,
        compression_type=compression,
        metrics=metrics,
    )
    return header, request


#: PushTelemetry v0's whole response: size, correlation id, the response header's empty
#: tagged fields (v1, flexible), throttle time, error code, the body's empty tagged fields.
_PUSH_RESPONSE_V0: Final = struct.Struct(">iibihb")
_PUSH_RESPONSE_V0_SIZE: Final = _PUSH_RESPONSE_V0.size - SIZE_PREFIX.size


def encode_push_response_v0(correlation_id: int, throttle_time_ms: int, error_code: int) -> bytes:
    """``encode_response`` of a PushTelemetry v0 response, in one ``pack`` (the hot path)."""
    return _PUSH_RESPONSE_V0.pack(
        _PUSH_RESPONSE_V0_SIZE, correlation_id, 0, throttle_time_ms, error_code, 0
    )


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Request]:
    """Decode one request frame (the bytes after the size prefix).

    Raises:
        MalformedFrameError: the bytes are not a well-formed request.
        UnsupportedApiKeyError: the api key is not one of :class:`ApiKey`.
        UnsupportedVersionError: a known key at a version kip714 does not
            advertise; for ApiVersions, answer with
            :func:`unsupported_api_versions_response` encoded as v0.
    """
    data = frame if isinstance(frame, bytes) else bytes(frame)
    if data[:4] == _PUSH_V0_PREFIX:
        decoded = _decode_push_v0(data)
        if decoded is not None:
            return decoded
    reader = Reader(data)
    header = read_request_header_prefix(reader)
    codec = _CODECS.get(header.api_key)
    if codec is None:
        raise UnsupportedApiKeyError(header)
    supported = SUPPORTED_VERSIONS[header.api_key]
    version = header.api_version
    if not supported.min_version <= version <= supported.max_version:
        raise UnsupportedVersionError(header)
    if version >= supported.flexible_since:
        reader.tagged_fields()  # request header v2 (KIP-482)
    request = codec.read_request(reader, version)
    reader.expect_end()
    return header, request


def _codec_for(api_key: int, version: int) -> _Codec:
    codec = _CODECS.get(api_key)
    if codec is None:
        raise ValueError(f"unsupported api key {api_key}")
    if version not in SUPPORTED_VERSIONS[api_key]:
        raise ValueError(f"unsupported version {version} of api key {api_key}")
    return codec


def encode_response(
    header_or_correlation_id: RequestHeader | int,
    api_key: int,
    version: int,
    response: Response,
) -> bytes:
    """The full response frame, size prefix included, ready for the socket.

    ``version`` is the version to encode, normally the request's; the answer to
    an unsupported ApiVersions version is encoded as v0. ApiVersions always gets
    response header v0, every other flexible response header v1.
    """
    codec = _codec_for(api_key, version)
    if not isinstance(response, codec.response_type):
        raise TypeError(f"{type(response).__name__} is not a response for api key {api_key}")
    correlation_id = (
        header_or_correlation_id.correlation_id
        if isinstance(header_or_correlation_id, RequestHeader)
        else header_or_correlation_id
    )
    writer = Writer()
    writer.reserve_size_prefix()
    write_response_header(writer, correlation_id, response_header_version(api_key, version))
    response.write(writer, version)
    return writer.size_prefixed()


def encode_request(header: RequestHeader, request: Request) -> bytes:
    """The full request frame, size prefix included (tests, load generators)."""
    codec = _codec_for(header.api_key, header.api_version)
    if not isinstance(request, codec.request_type):
        raise TypeError(f"{type(request).__name__} is not a request for api key {header.api_key}")
    writer = Writer()
    writer.reserve_size_prefix()
    write_request_header(writer, header)
    request.write(writer, header.api_version)
    return writer.size_prefixed()


def decode_response(
    frame: bytes | bytearray | memoryview, api_key: int, version: int
) -> tuple[int, Response]:
    """Decode a response frame (after the size prefix) into its correlation id and body.

    The caller names the key and version, as a client does from the request it
    sent: a response header does not say what it answers.
    """
    codec = _codec_for(api_key, version)
    reader = Reader(frame if isinstance(frame, bytes) else bytes(frame))
    correlation_id = read_response_header(reader, response_header_version(api_key, version))
    response = codec.read_response(reader, version)
    reader.expect_end()
    return correlation_id, response
