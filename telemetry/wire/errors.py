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
caller can log the correlation id and client id (and answer ApiVersions); they
live beside ``RequestHeader`` in ``headers.py``, so this module needs nothing of
the codec.
"""

from __future__ import annotations


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
