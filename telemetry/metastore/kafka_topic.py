"""The metadata topic itself, and what its librdkafka clients log.

``ensure_topic`` creates the topic a shared store needs if it is missing:
one partition (one order for every change), compacted (the last message of
each entity is kept), replicated as the cluster allows.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from telemetry.metastore.store import MetadataStoreError

if TYPE_CHECKING:
    from telemetry.metastore.settings import MetaSettings

_log = logging.getLogger(__name__)

PARTITION: Final = 0


class MetadataLogTimeoutError(MetadataStoreError):
    """The topic could not be read to its end (or a change confirmed) in time."""


class ClientLog:
    """librdkafka's log lines and errors, quiet (debug) until the store is open.

    A start that fails must end with its one error line, not the client's
    connection attempts before it.
    """

    def __init__(self) -> None:
        self.opened = False
        self.fatal: KafkaError | None = None
        self._logger = logging.getLogger("telemetry.metastore.kafka_log.client")

    def log(self, level: int, message: str, *args: object) -> None:
        """librdkafka's ``logger`` callback (served by poll / flush).

        At most a warning: the client retries what it logs as an error (a
        broker down), and what does fail reaches the appends as their error.
        """
        shown = min(level, logging.WARNING) if self.opened else logging.DEBUG
        self._logger.log(shown, message, *args)

    def error(self, error: KafkaError) -> None:
        """librdkafka's ``error_cb``: most are transient (a broker down, a timeout)."""
        if error.fatal():
            self.fatal = error
            self._logger.error("metadata log client: fatal error: %s", error)
            return
        self._logger.log(
            logging.WARNING if self.opened else logging.DEBUG, "metadata log client: %s", error
        )


def ensure_topic(settings: MetaSettings, client_log: ClientLog, deadline: float) -> None:
    """Create the topic (one partition, compacted, replicated as the cluster allows) if missing.

    Raises:
        MetadataLogTimeoutError: the cluster did not answer in time.
        MetadataStoreError: the topic exists with another partition count, or creation failed.
    """
    config: dict[str, Any] = {
        **settings.client_config(),
        "logger": client_log,
        "error_cb": client_log.error,
    }
    admin = AdminClient(config)
    topic = settings.topic
    where = f"topic {topic} at {settings.bootstrap_servers}"

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise MetadataLogTimeoutError(
                f"{where}: the cluster did not answer within {settings.startup_timeout_s:g} s"
            )
        return left

    while True:
        try:
            metadata = admin.list_topics(timeout=remaining())  # all topics: never auto-creates
        except KafkaException:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            continue
        existing = metadata.topics.get(topic)
        if existing is not None and existing.error is None:
            if len(existing.partitions) != 1:
                raise MetadataStoreError(
                    f"{where} has {len(existing.partitions)} partitions: one partition keeps "
                    "every change in one order"
                )
            _refuse_expiry(admin, topic, where, remaining())
            return
        replicas = min(3, max(1, len(metadata.brokers)))
        configs: dict[str, Any] = {
            "cleanup.policy": "compact",
            # With three replicas an acknowledged change is on at least two.
            "min.insync.replicas": "2" if replicas >= 3 else "1",
        }
        created = admin.create_topics(
            [NewTopic(topic, num_partitions=1, replication_factor=replicas, config=configs)],
            request_timeout=min(remaining(), 15.0),
        )
        try:
            created[topic].result(timeout=remaining())
        except KafkaException as error:
            kafka_error = error.args[0] if error.args else None
            if isinstance(kafka_error, KafkaError) and kafka_error.code() in (
                KafkaError.TOPIC_ALREADY_EXISTS,
                KafkaError.REQUEST_TIMED_OUT,
                KafkaError._TIMED_OUT,
            ):
                continue  # another node created it meanwhile, or ask again
            raise MetadataStoreError(f"{where}: cannot create it: {kafka_error or error}") from None
        _log.info(
            "created metadata topic %s (1 partition, replication %d, compacted)", topic, replicas
        )
        return


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
