"""The metadata topic itself: one partition, compacted, replicated as the cluster allows.

``ensure_topic`` creates the topic a shared store needs if it is missing
(``telemetry.cluster.topics`` does the asking and creating; this module says
what the metadata topic must be).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from confluent_kafka import KafkaException
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType

from telemetry.cluster import topics as cluster_topics
from telemetry.cluster.topics import ClientLog, ClusterError, ClusterTimeoutError, TopicLayout
from telemetry.metastore.store import MetadataStoreError

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._metadata import TopicMetadata

    from telemetry.metastore.settings import MetaSettings

__all__ = ["PARTITION", "ClientLog", "MetadataLogTimeoutError", "client_log", "ensure_topic"]

_log = logging.getLogger(__name__)

PARTITION: Final = 0


class MetadataLogTimeoutError(MetadataStoreError):
    """The topic could not be read to its end (or a change confirmed) in time."""


def client_log() -> ClientLog:
    """The log of the metadata store's clients (``telemetry.cluster.topics.ClientLog``)."""
    return ClientLog("metadata log", "telemetry.metastore.kafka_log.client")


def ensure_topic(settings: MetaSettings, log: ClientLog, deadline: float) -> None:
    """Create the topic (one partition, compacted, replicated as the cluster allows) if missing.

    Raises:
        MetadataLogTimeoutError: the cluster did not answer in time.
        MetadataStoreError: the topic exists with another partition count, or creation failed.
    """
    where = f"topic {settings.topic} at {settings.bootstrap_servers}"

    def check(admin: AdminClient, existing: TopicMetadata, timeout_s: float) -> None:
        if len(existing.partitions) != 1:
            raise MetadataStoreError(
                f"{where} has {len(existing.partitions)} partitions: one partition keeps "
                "every change in one order"
            )
        _refuse_expiry(admin, settings.topic, where, timeout_s)

    layout = TopicLayout(
        partitions=1,
        # With three replicas an acknowledged change is on at least two.
        configs=lambda replicas: {
            "cleanup.policy": "compact",
            "min.insync.replicas": "2" if replicas >= 3 else "1",
        },
        check=check,
    )
    try:
        ready = cluster_topics.ensure_topic(settings, settings.topic, layout, log, deadline)
    except ClusterTimeoutError as error:
        raise MetadataLogTimeoutError(str(error)) from None
    except ClusterError as error:
        raise MetadataStoreError(str(error)) from None
    if ready.created_replicas is not None:
        _log.info(
            "created metadata topic %s (1 partition, replication %d, compacted)",
            settings.topic,
            ready.created_replicas,
        )


def _refuse_expiry(admin: AdminClient, topic: str, where: str, timeout_s: float) -> None:
    """A topic that deletes by age would lose changes nobody made again: refuse it."""
    described = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, topic)], request_timeout=timeout_s
    )
    try:
        [entries] = [future.result(timeout=timeout_s) for future in described.values()]
    except KafkaException as error:
        raise MetadataStoreError(f"{where}: cannot describe its configuration: {error}") from None
    entry = entries.get("cleanup.policy")
    policy = entry.value if entry is not None else "delete"  # Kafka's default
    if "compact" not in str(policy).split(",") or "delete" in str(policy).split(","):
        raise MetadataStoreError(
            f"{where} has cleanup.policy={policy}: changes would expire with its retention; "
            "it needs cleanup.policy=compact"
        )
