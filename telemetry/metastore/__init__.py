"""The metadata store: dynamic subscriptions, client quotas and SCRAM credentials, durably.

An append-only, checksummed log of KRaft-shaped records under
``<data_dir>/meta/`` with periodic snapshots, replayed into an in-memory
image at open, or (``[meta] store = "kafka"``, ``kafka_log.py``) the same
image in a compacted Kafka topic that several nodes share; and the pure
rules that turn Kafka admin requests into records (validation with Kafka's
error codes and messages) and that merge the static TOML subscriptions with
the dynamic ones. Depends on the standard library, ``crc32c``,
``confluent-kafka`` (the shared store only), ``telemetry.wire`` primitives,
``telemetry.security`` and ``telemetry.subscriptions``.
"""

from __future__ import annotations

from telemetry.metastore.client_metrics_alter import (
    DUPLICATE_RESOURCE_MESSAGE,
    ClientMetricsAlteration,
    alter_client_metrics,
    apply_ops,
    duplicate_resources,
)
from telemetry.metastore.image import CLIENT_METRICS_RESOURCE, MetadataImage, QuotaEntity
from telemetry.metastore.precedence import (
    CLIENT_METRICS_KEYS,
    EMPTY_NAME_MESSAGE,
    client_metrics_names,
    describe_client_metrics,
    merge_subscriptions,
    static_config,
)
from telemetry.metastore.quota_alter import (
    KEY_ALIASES,
    PUSH_BYTE_RATE,
    UnsupportedEntityTypeError,
    alter_client_quotas,
    describe_client_quotas,
    with_kafka_key_names,
)
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
    "CLIENT_METRICS_KEYS",
    "CLIENT_METRICS_RESOURCE",
    "DUPLICATE_RESOURCE_MESSAGE",
    "EMPTY_NAME_MESSAGE",
    "KEY_ALIASES",
    "META_DIR",
    "PUSH_BYTE_RATE",
    "ClientMetricsAlteration",
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
    "UnsupportedEntityTypeError",
    "UserScramCredentialRecord",
    "alter_client_metrics",
    "alter_client_quotas",
    "apply_ops",
    "client_metrics_names",
    "describe_client_metrics",
    "describe_client_quotas",
    "duplicate_resources",
    "merge_subscriptions",
    "static_config",
    "with_kafka_key_names",
]
