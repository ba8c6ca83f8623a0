"""The api keys kip714 speaks and the version ranges it advertises in ApiVersions.

A telemetry-only broker needs four APIs: a
client that does not see key 71 at v0 in ApiVersions never sends telemetry, and
Metadata must be answered so the client learns the broker it pushes to.
Apache Kafka's Java clients need two more to keep running undisturbed:
FindCoordinator (a group consumer) and InitProducerId (the idempotent producer).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping


class ApiKey(enum.IntEnum):
    """Kafka's ``ApiKeys`` ids for the APIs kip714 implements."""

    METADATA = 3
    FIND_COORDINATOR = 10
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionRange:
    """Inclusive version range, plus the first flexible (KIP-482) version.

    ``flexible_since`` comes from each message's ``flexibleVersions`` in Kafka's
    JSON schemas; it decides the request header version (v2 with tagged fields)
    and the compact encodings of the body.
    """

    min_version: int
    max_version: int
    flexible_since: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


# Order matters: ApiVersions lists the keys in this order, matching the frames
# captured from librdkafka (18, 3, 71, 72). Metadata stops at v12: v13 adds a
# top-level error code (KIP-1102) that no client needs from kip714.
SUPPORTED_VERSIONS: Final[Mapping[int, VersionRange]] = MappingProxyType(
    {
        ApiKey.API_VERSIONS: VersionRange(min_version=0, max_version=4, flexible_since=3),
        ApiKey.METADATA: VersionRange(min_version=0, max_version=12, flexible_since=9),
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: VersionRange(
            min_version=0, max_version=0, flexible_since=0
        ),
        ApiKey.PUSH_TELEMETRY: VersionRange(min_version=0, max_version=0, flexible_since=0),
        # For Apache Kafka's Java clients (telemetry.wire.coordinator_messages).
        ApiKey.FIND_COORDINATOR: VersionRange(min_version=0, max_version=6, flexible_since=3),
        ApiKey.INIT_PRODUCER_ID: VersionRange(min_version=0, max_version=5, flexible_since=2),
    }
)


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether ``api_version`` of ``api_key`` uses KIP-482 compact/tagged encodings.

    Unknown keys count as non-flexible: only their v1 header prefix is ever read.
    """
    supported = SUPPORTED_VERSIONS.get(api_key)
    return supported is not None and api_version >= supported.flexible_since
