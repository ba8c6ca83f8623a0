"""The metadata store: dynamic subscriptions, client quotas and SCRAM credentials, durably.

An append-only, checksummed log of KRaft-shaped records under
``<data_dir>/meta/`` with periodic snapshots, replayed into an in-memory
image at open, or (``[meta] store = "kafka"``, ``kafka_log.py``) the same
image in a compacted Kafka topic that several nodes share: records, image
and stores only. The rules that turn Kafka admin requests into records,
and the precedence of the static TOML subscriptions over the dynamic ones,
are the admin plane's (``telemetry.admin``). Depends on the standard
library, ``crc32c``, ``durable``, ``confluent-kafka`` (the shared store
only), ``telemetry.wire`` primitives and ``telemetry.security``.
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
