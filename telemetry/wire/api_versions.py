"""ApiVersions (key 18) v0–v4: the first request on every connection.

librdkafka sends v3 before it knows the broker's range,
and its v3 body is the only place the client names its software
(ClientSoftwareName / ClientSoftwareVersion, KIP-511), which KIP-714 needs as
client metadata for subscription matching.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from telemetry.errors import ErrorCode
from telemetry.wire.apis import SUPPORTED_VERSIONS, ApiKey

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer

_FLEXIBLE_SINCE = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequest:
    """v0–v2 have an empty body; v3+ names the client software.

    Kafka's default for the two absent string fields is the empty string.
    """

    client_software_name: str = ""
    client_software_version: str = ""

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        if version < _FLEXIBLE_SINCE:
            return cls()
        name = reader.string(compact=True)
        software_version = reader.string(compact=True)
        reader.tagged_fields()
        return cls(client_software_name=name, client_software_version=software_version)

    def write(self, writer: Writer, version: int) -> None:
        if version >= _FLEXIBLE_SINCE:
            writer.string(self.client_software_name, compact=True)
            writer.string(self.client_software_version, compact=True)
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersion:
    """One advertised api key and its inclusive version range."""

    api_key: int
    min_version: int
    max_version: int


def _read_api_version(reader: Reader, flexible: bool) -> ApiVersion:
    entry = ApiVersion(
        api_key=reader.int16(), min_version=reader.int16(), max_version=reader.int16()
    )
    if flexible:
        reader.tagged_fields()
    return entry


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponse:
    """The broker's api ranges; ``throttle_time_ms`` is on the wire from v1.

    The body's tagged fields (SupportedFeatures, FinalizedFeatures, ...) are
    never written: clients need none of them from a telemetry endpoint, and
    they are skipped when reading.
    """

    error_code: int
    api_keys: tuple[ApiVersion, ...]
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= _FLEXIBLE_SINCE
        error_code = reader.int16()
        api_keys = tuple(reader.array(lambda r: _read_api_version(r, flexible), flexible))
        throttle_time_ms = reader.int32() if version >= 1 else 0
        if flexible:
            reader.tagged_fields()
        return cls(error_code=error_code, api_keys=api_keys, throttle_time_ms=throttle_time_ms)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= _FLEXIBLE_SINCE
        writer.int16(self.error_code)
        writer.array_length(len(self.api_keys), flexible)
        for entry in self.api_keys:
            writer.int16(entry.api_key)
            writer.int16(entry.min_version)
            writer.int16(entry.max_version)
            if flexible:
                writer.tagged_fields()
        if version >= 1:
            writer.int32(self.throttle_time_ms)
        if flexible:
            writer.tagged_fields()


SUPPORTED_API_VERSIONS: tuple[ApiVersion, ...] = tuple(
    ApiVersion(api_key=int(key), min_version=r.min_version, max_version=r.max_version)
    for key, r in SUPPORTED_VERSIONS.items()
)
"""What kip714 advertises, in :data:`SUPPORTED_VERSIONS` order."""


def api_versions_response(throttle_time_ms: int = 0) -> ApiVersionsResponse:
    """The normal answer: no error, every supported api and its range."""
    return ApiVersionsResponse(
        error_code=int(ErrorCode.NONE),
        api_keys=SUPPORTED_API_VERSIONS,
        throttle_time_ms=throttle_time_ms,
    )


def unsupported_api_versions_response() -> ApiVersionsResponse:
    """The answer to an ApiVersions version above v4, to be encoded as v0.

    As Kafka's ``ApiVersionsRequest.getErrorResponse`` (KIP-511): error
    UNSUPPORTED_VERSION and, in ApiKeys, only ApiVersions' own range, which is
    all the client needs to retry with the highest version both sides know.
    v0 has no throttle field, so none is set.
    """
    own = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
    return ApiVersionsResponse(
        error_code=int(ErrorCode.UNSUPPORTED_VERSION),
        api_keys=(
            ApiVersion(
                api_key=int(ApiKey.API_VERSIONS),
                min_version=own.min_version,
                max_version=own.max_version,
            ),
        ),
    )
