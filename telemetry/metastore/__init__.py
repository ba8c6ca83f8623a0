"""The metadata store: dynamic subscriptions, client quotas and SCRAM credentials, durably.

An append-only, checksummed log of KRaft-shaped records under
``<data_dir>/meta/`` with periodic snapshots, replayed into an in-memory
image at open; and the pure rules that turn Kafka admin requests into
records (validation with Kafka's error codes and messages) and that merge
the static TOML subscriptions with the dynamic ones. Not yet reached from
the listener. Depends on the standard library, ``crc32c``, ``telemetry.wire``
primitives, ``telemetry.security`` and ``telemetry.core.subscriptions``.
"""

from __future__ import annotations

from telemetry.metastore.image import CLIENT_METRICS_RESOURCE, MetadataImage, QuotaEntity
from telemetry.metastore.records import (
    ClientQuotaRecord,
    ConfigRecord,
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from telemetry.metastore.store import (
    META_DIR,
    MetadataCorruptionError,
    MetadataStore,
    MetadataStoreClosedError,
    MetadataStoreError,
    MetadataStoreFailedError,
)

__all__ = [
    "CLIENT_METRICS_RESOURCE",
    "META_DIR",
    "ClientQuotaRecord",
    "ConfigRecord",
    "MetadataCorruptionError",
    "MetadataImage",
    "MetadataRecord",
    "MetadataStore",
    "MetadataStoreClosedError",
    "MetadataStoreError",
    "MetadataStoreFailedError",
    "QuotaEntity",
    "RemoveUserScramCredentialRecord",
    "UserScramCredentialRecord",
]
