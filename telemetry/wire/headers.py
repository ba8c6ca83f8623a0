"""Request and response headers, whose version follows from the api key and version.

Two rules that are easy to get wrong:

* ``client_id`` is a classic INT16-length nullable string even in request
  header v2; only the tagged-field section is new (``RequestHeader.json``:
  ``"flexibleVersions": "none"`` on ClientId, so that any broker can read the
  header of an ApiVersions request of a version it does not know).
* ApiVersions responses always use response header v0, even for flexible
  versions (``ApiVersionsResponse.json``: "Tagged fields are only supported in
  the body but not in the header"), so a client can parse the answer before it
  knows which versions the broker speaks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from telemetry.wire.apis import ApiKey, is_flexible
from telemetry.wire.errors import WireError

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer

_PREFIX: Final = struct.Struct(">hhi")  # RequestApiKey, RequestApiVersion, CorrelationId


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    """A request header (v1 or v2); ``client_id`` may be null on the wire."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def request_header_version(api_key: int, api_version: int) -> int:
    """2 (with tagged fields) for flexible request versions, else 1."""
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 (with tagged fields) for flexible responses, else 0; ApiVersions is always 0."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def read_request_header_prefix(reader: Reader) -> RequestHeader:
    """Read the part every request header v1+ shares, whatever the key or version.

    Stopping before the tagged fields lets the caller report an unknown key or
    an unsupported version with its correlation id, without guessing the
    header version of a message it does not know.
    """
    api_key, api_version, correlation_id = reader.unpack(_PREFIX)
    client_id = reader.nullable_string(compact=False)
    return RequestHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )


def read_request_header(reader: Reader) -> RequestHeader:
    """Read a whole request header of a supported key, tagged fields included."""
    header = read_request_header_prefix(reader)
    if is_flexible(header.api_key, header.api_version):
        reader.tagged_fields()
    return header


def write_request_header(writer: Writer, header: RequestHeader) -> None:
    writer.int16(header.api_key)
    writer.int16(header.api_version)
    writer.int32(header.correlation_id)
    writer.nullable_string(header.client_id, compact=False)
    if is_flexible(header.api_key, header.api_version):
        writer.tagged_fields()


def write_response_header(writer: Writer, correlation_id: int, header_version: int) -> None:
    writer.int32(correlation_id)
    if header_version >= 1:
        writer.tagged_fields()


def read_response_header(reader: Reader, header_version: int) -> int:
    """Return the correlation id of a response header."""
    correlation_id = reader.int32()
    if header_version >= 1:
        reader.tagged_fields()
    return correlation_id


class UnsupportedApiKeyError(WireError):
    """The header names an api key that kip714 does not implement."""

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(
            f"unsupported api key {header.api_key} (version {header.api_version}, "
            f"correlation id {header.correlation_id})"
        )
        self.header = header


class UnsupportedVersionError(WireError):
    """A known api key at a version outside the range kip714 advertises.

    Kafka answers an unsupported ApiVersions version with a v0 response carrying
    UNSUPPORTED_VERSION (KIP-511), so the client can retry with a version it
    shares with the broker; the header is kept for that answer.
    """

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(
            f"unsupported version {header.api_version} of api key {header.api_key} "
            f"(correlation id {header.correlation_id})"
        )
        self.header = header
