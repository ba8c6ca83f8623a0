"""The admin-plane api keys: known to the codec, not served by the listener yet.

ApiVersions must advertise exactly what the listener serves, so these keys
are kept out of :data:`telemetry.wire.apis.SUPPORTED_VERSIONS` (which feeds
ApiVersions and :func:`telemetry.wire.decode_request`). This module is their
own table and frame codec; serving one of them means moving its entry into
``SUPPORTED_VERSIONS`` and its codec into ``frames._CODECS`` once the listener
has a handler for it.

The ranges are the ones the admin-plane reference settles on: DescribeConfigs
v1–4 (Kafka 4.0 removed v0), IncrementalAlterConfigs v0–1, ListConfigResources
v0–1, Describe/AlterClientQuotas v0–1, SaslHandshake v0–1, SaslAuthenticate
v0–2, Describe/AlterUserScramCredentials v0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from telemetry.wire.apis import VersionRange
from telemetry.wire.config_messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from telemetry.wire.headers import (
    RequestHeader,
    UnsupportedApiKeyError,
    UnsupportedVersionError,
    read_request_header_prefix,
    read_response_header,
    write_response_header,
)
from telemetry.wire.primitives import Reader, Writer
from telemetry.wire.quota_messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from telemetry.wire.sasl_messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from telemetry.wire.scram_messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class AdminApiKey(enum.IntEnum):
    """Kafka's ``ApiKeys`` ids of the admin-plane APIs."""

    SASL_HANDSHAKE = 17
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    LIST_CONFIG_RESOURCES = 74  # ListClientMetricsResources before KIP-1142


# SaslHandshake is never flexible: flexible_since past its max keeps header v1.
ADMIN_VERSIONS: Final[Mapping[int, VersionRange]] = MappingProxyType(
    {
        AdminApiKey.SASL_HANDSHAKE: VersionRange(min_version=0, max_version=1, flexible_since=2),
        AdminApiKey.DESCRIBE_CONFIGS: VersionRange(min_version=1, max_version=4, flexible_since=4),
        AdminApiKey.SASL_AUTHENTICATE: VersionRange(min_version=0, max_version=2, flexible_since=2),
        AdminApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(
            min_version=0, max_version=1, flexible_since=1
        ),
        AdminApiKey.DESCRIBE_CLIENT_QUOTAS: VersionRange(
            min_version=0, max_version=1, flexible_since=1
        ),
        AdminApiKey.ALTER_CLIENT_QUOTAS: VersionRange(
            min_version=0, max_version=1, flexible_since=1
        ),
        AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VersionRange(
            min_version=0, max_version=0, flexible_since=0
        ),
        AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS: VersionRange(
            min_version=0, max_version=0, flexible_since=0
        ),
        AdminApiKey.LIST_CONFIG_RESOURCES: VersionRange(
            min_version=0, max_version=1, flexible_since=0
        ),
    }
)
"""Known but not served: never advertised in ApiVersions while the listener lacks handlers."""

AdminRequest = (
    SaslHandshakeRequest
    | DescribeConfigsRequest
    | SaslAuthenticateRequest
    | IncrementalAlterConfigsRequest
    | DescribeClientQuotasRequest
    | AlterClientQuotasRequest
    | DescribeUserScramCredentialsRequest
    | AlterUserScramCredentialsRequest
    | ListConfigResourcesRequest
)
AdminResponse = (
    SaslHandshakeResponse
    | DescribeConfigsResponse
    | SaslAuthenticateResponse
    | IncrementalAlterConfigsResponse
    | DescribeClientQuotasResponse
    | AlterClientQuotasResponse
    | DescribeUserScramCredentialsResponse
    | AlterUserScramCredentialsResponse
    | ListConfigResourcesResponse
)


@dataclass(frozen=True, slots=True)
class _Codec:
    read_request: Callable[[Reader, int], AdminRequest]
    request_type: type[AdminRequest]
    read_response: Callable[[Reader, int], AdminResponse]
    response_type: type[AdminResponse]


def _codec(request: type[AdminRequest], response: type[AdminResponse]) -> _Codec:
    return _Codec(request.read, request, response.read, response)


_CODECS: Final = MappingProxyType(
    {
        int(AdminApiKey.SASL_HANDSHAKE): _codec(SaslHandshakeRequest, SaslHandshakeResponse),
        int(AdminApiKey.DESCRIBE_CONFIGS): _codec(DescribeConfigsRequest, DescribeConfigsResponse),
        int(AdminApiKey.SASL_AUTHENTICATE): _codec(
            SaslAuthenticateRequest, SaslAuthenticateResponse
        ),
        int(AdminApiKey.INCREMENTAL_ALTER_CONFIGS): _codec(
            IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
        ),
        int(AdminApiKey.DESCRIBE_CLIENT_QUOTAS): _codec(
            DescribeClientQuotasRequest, DescribeClientQuotasResponse
        ),
        int(AdminApiKey.ALTER_CLIENT_QUOTAS): _codec(
            AlterClientQuotasRequest, AlterClientQuotasResponse
        ),
        int(AdminApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS): _codec(
            DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse
        ),
        int(AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS): _codec(
            AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse
        ),
        int(AdminApiKey.LIST_CONFIG_RESOURCES): _codec(
            ListConfigResourcesRequest, ListConfigResourcesResponse
        ),
    }
)


def is_admin_flexible(api_key: int, api_version: int) -> bool:
    """Whether an admin api version uses KIP-482 compact encodings and header v2 / v1."""
    supported = ADMIN_VERSIONS.get(api_key)
    return supported is not None and api_version >= supported.flexible_since


def _codec_for(api_key: int, version: int) -> _Codec:
    codec = _CODECS.get(api_key)
    if codec is None:
        raise ValueError(f"not an admin api key: {api_key}")
    if version not in ADMIN_VERSIONS[api_key]:
        raise ValueError(f"unsupported version {version} of admin api key {api_key}")
    return codec


def decode_admin_request(frame: bytes) -> tuple[RequestHeader, AdminRequest]:
    """Decode one admin request frame (the bytes after the size prefix).

    Raises:
        MalformedFrameError: the bytes are not a well-formed request.
        UnsupportedApiKeyError: the key is not an admin api key.
        UnsupportedVersionError: an admin key at a version outside its range.
    """
    reader = Reader(frame)
    header = read_request_header_prefix(reader)
    codec = _CODECS.get(header.api_key)
    if codec is None:
        raise UnsupportedApiKeyError(header)
    if header.api_version not in ADMIN_VERSIONS[header.api_key]:
        raise UnsupportedVersionError(header)
    if is_admin_flexible(header.api_key, header.api_version):
        reader.tagged_fields()  # request header v2 (KIP-482)
    request = codec.read_request(reader, header.api_version)
    reader.expect_end()
    return header, request


def encode_admin_request(header: RequestHeader, request: AdminRequest) -> bytes:
    """The full request frame, size prefix included (tests, tools)."""
    codec = _codec_for(header.api_key, header.api_version)
    if not isinstance(request, codec.request_type):
        raise TypeError(f"{type(request).__name__} is not a request for api key {header.api_key}")
    writer = Writer()
    writer.reserve_size_prefix()
    writer.int16(header.api_key)
    writer.int16(header.api_version)
    writer.int32(header.correlation_id)
    writer.nullable_string(header.client_id, compact=False)
    if is_admin_flexible(header.api_key, header.api_version):
        writer.tagged_fields()
    request.write(writer, header.api_version)
    return writer.size_prefixed()


def encode_admin_response(
    correlation_id: int, api_key: int, version: int, response: AdminResponse
) -> bytes:
    """The full response frame, size prefix included; header v1 for flexible versions."""
    codec = _codec_for(api_key, version)
    if not isinstance(response, codec.response_type):
        raise TypeError(f"{type(response).__name__} is not a response for api key {api_key}")
    writer = Writer()
    writer.reserve_size_prefix()
    write_response_header(writer, correlation_id, 1 if is_admin_flexible(api_key, version) else 0)
    response.write(writer, version)
    return writer.size_prefixed()


def decode_admin_response(frame: bytes, api_key: int, version: int) -> tuple[int, AdminResponse]:
    """Decode a response frame (after the size prefix) into its correlation id and body."""
    codec = _codec_for(api_key, version)
    reader = Reader(frame)
    correlation_id = read_response_header(reader, 1 if is_admin_flexible(api_key, version) else 0)
    response = codec.read_response(reader, version)
    reader.expect_end()
    return correlation_id, response
