"""The three ways a Kafka request frame can be refused before any handler sees it.

The listener reacts differently to each, so they are siblings rather than one
class with a flag:

    WireError(ValueError)
     ├── MalformedFrameError      garbage: close the connection, log, keep serving
     ├── UnsupportedApiKeyError   an api key kip714 does not implement: close, log
     └── UnsupportedVersionError  a known key at a version outside the advertised
                                  range: ApiVersions is still answered (KIP-511),
                                  any other key closes the connection

The last two carry the request header, which is readable in both cases, so the
caller can log the correlation id and client id (and answer ApiVersions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from telemetry.wire.headers import RequestHeader


class WireError(ValueError):
    """Base of every error the codec raises for bytes that came off the network."""


class MalformedFrameError(WireError):
    """Truncated, lying or otherwise undecodable bytes.

    Every low-level failure (short buffer, negative or oversized length, bad
    UTF-8, over-long varint, trailing bytes) ends up here, so the listener has
    exactly one exception to catch for hostile input.
    """


class TooManyElementsError(MalformedFrameError):
    """An array counts more elements than the request may carry, refused at the count.

    A subclass of :class:`MalformedFrameError`, so the listener closes the
    connection without decoding the elements (as Kafka does for a request it
    cannot read).
    """


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
