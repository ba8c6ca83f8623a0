"""The Kafka wire-protocol codec for kip714's Kafka listener: bytes in, typed messages out.

Pure code, no I/O: the asyncio listener reads size-prefixed frames and calls
:func:`decode_request` / :func:`encode_response`. It covers ApiVersions (v0-v4),
Metadata (v0-v12), GetTelemetrySubscriptions v0 and PushTelemetry v0, plus
FindCoordinator (v0-v6) and InitProducerId (v0-v5) for Apache Kafka's Java
clients, and raises one of three :class:`WireError` subclasses for anything else. Depends on
the standard library and ``telemetry.errors`` only.
"""

from __future__ import annotations

from telemetry.wire.api_versions import (
    SUPPORTED_API_VERSIONS,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    api_versions_response,
    unsupported_api_versions_response,
)
from telemetry.wire.apis import SUPPORTED_VERSIONS, ApiKey, VersionRange, is_flexible
from telemetry.wire.coordinator_messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    coordinator_not_available,
    init_producer_id_response,
)
from telemetry.wire.errors import MalformedFrameError, WireError
from telemetry.wire.frames import (
    SIZE_PREFIX,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_push_response_v0,
    encode_request,
    encode_response,
    parse_size_prefix,
    push_v0_fields,
)
from telemetry.wire.headers import (
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    request_header_version,
    response_header_version,
)
from telemetry.wire.metadata import (
    AUTHORIZED_OPERATIONS_OMITTED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataTopic,
    build_metadata_response,
)
from telemetry.wire.primitives import ZERO_UUID, Reader, Writer
from telemetry.wire.telemetry_messages import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)

__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "SIZE_PREFIX",
    "SUPPORTED_API_VERSIONS",
    "SUPPORTED_VERSIONS",
    "UNKNOWN_TOPIC_ID",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "ZERO_UUID",
    "ApiKey",
    "ApiVersion",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "MalformedFrameError",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataRequest",
    "MetadataRequestTopic",
    "MetadataResponse",
    "MetadataTopic",
    "PushTelemetryRequest",
    "PushTelemetryResponse",
    "Reader",
    "Request",
    "RequestHeader",
    "Response",
    "UnsupportedApiKeyError",
    "UnsupportedVersionError",
    "VersionRange",
    "WireError",
    "Writer",
    "api_versions_response",
    "build_metadata_response",
    "coordinator_not_available",
    "decode_request",
    "decode_response",
    "encode_push_response_v0",
    "encode_request",
    "encode_response",
    "init_producer_id_response",
    "is_flexible",
    "parse_size_prefix",
    "push_v0_fields",
    "request_header_version",
    "response_header_version",
    "unsupported_api_versions_response",
]
